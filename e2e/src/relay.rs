//! A TCP relay on loopback between one operator and the apiserver, whose link the chaos tests cut
//! as a network partition would: from [`Relay::cut`] on, nothing more is forwarded on any
//! connection, old or new, and the sockets stay open, so requests hang rather than fail fast.
//! [`Relay::restore`] forwards new connections again, as a healed partition would. The relay
//! connects from its own loopback address, so the apiserver's audit log tells its requests from
//! every other client's.

use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Bytes copied per read.
const CHUNK: usize = 16 * 1024;

pub struct Relay {
    address: SocketAddr,
    cut: watch::Sender<bool>,
    accepting: JoinHandle<()>,
}

impl Relay {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`, connecting from `source`.
    pub async fn start(upstream: SocketAddr, source: IpAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("relay: listening: {e}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("relay: {e}"));
        let (cut, link) = watch::channel(false);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, upstream, source, link.clone()));
            }
        });
        Self {
            address,
            cut,
            accepting,
        }
    }

    /// Where clients connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops forwarding on every connection, open or new.
    pub fn cut(&self) {
        let _ = self.cut.send(true);
    }

    /// Forwards new connections again (the ones open at the cut stay dead).
    pub fn restore(&self) {
        let _ = self.cut.send(false);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accepting.abort();
        // Every connection's task ends once it sees the sender gone.
    }
}

/// Forwards one client until either side closes, or holds it silent from a cut on.
async fn forward(
    client: TcpStream,
    upstream: SocketAddr,
    source: IpAddr,
    mut link: watch::Receiver<bool>,
) {
    // A connection that arrives during a cut is held, never answered.
    if link.wait_for(|cut| !*cut).await.is_err() {
        return;
    }
    let Ok(socket) = TcpSocket::new_v4() else {
        return;
    };
    if socket.bind(SocketAddr::new(source, 0)).is_err() {
        return;
    }
    let Ok(mut server) = socket.connect(upstream).await else {
        return;
    };
    let mut client = client;
    let cut = {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        tokio::select! {
            () = copy(&mut client_read, &mut server_write) => false,
            () = copy(&mut server_read, &mut client_write) => false,
            cut = link.wait_for(|cut| *cut) => cut.is_ok(),
        }
    };
    if cut {
        // Both sockets stay open, silent, until the relay goes.
        let _ = link.wait_for(|_| false).await;
    }
}

async fn copy(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin) {
    let mut buffer = vec![0; CHUNK];
    while let Ok(read) = from.read(&mut buffer).await {
        if read == 0 || to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
