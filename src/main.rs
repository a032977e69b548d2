use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand};

/// Serves the Kubeflow training APIs on JobSet.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller against the cluster of the current kubeconfig (or in-cluster config).
    Run {
        /// Address of the /metrics, /healthz and /readyz endpoints.
        #[arg(long, env = "TRAINSET_METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
        metrics_address: std::net::SocketAddr,
        /// Log format.
        #[arg(long, env = "TRAINSET_LOG_FORMAT", value_enum, default_value_t = trainset::telemetry::LogFormat::Text)]
        log_format: trainset::telemetry::LogFormat,
    },
    /// Compile training job manifests into the objects the controller would create.
    Render {
        /// The manifest file, or - for standard input.
        #[arg(short = 'f', long = "filename", env = "TRAINSET_RENDER_FILE")]
        file: PathBuf,
        /// Namespace for manifests that name none.
        #[arg(
            short = 'n',
            long,
            env = "TRAINSET_RENDER_NAMESPACE",
            default_value = "default"
        )]
        namespace: String,
        /// Output format.
        #[arg(short = 'o', long = "output", env = "TRAINSET_RENDER_OUTPUT", value_enum, default_value_t = Output::Yaml)]
        output: Output,
    },
    /// Print the CRDs of every training kind, or write one file each into a directory.
    Crds {
        /// Write `<group>_<plural>.yaml` files into this directory instead of printing.
        #[arg(long, env = "TRAINSET_CRDS_DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Output {
    Yaml,
    Json,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run {
            metrics_address,
            log_format,
        } => run(metrics_address, log_format),
        Command::Render {
            file,
            namespace,
            output,
        } => render(&file, &namespace, output),
        Command::Crds { dir } => print_crds(dir),
    }
}

fn run(
    metrics_address: std::net::SocketAddr,
    log_format: trainset::telemetry::LogFormat,
) -> anyhow::Result<()> {
    trainset::telemetry::init_logging(log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let client = kube::Client::try_default()
            .await
            .context("connecting to the cluster")?;
        let metrics = std::sync::Arc::new(trainset::telemetry::Metrics::default());
        let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let server = tokio::spawn(trainset::telemetry::serve(
            metrics_address,
            metrics.clone(),
            ready.clone(),
            wait(stopped.clone()),
        ));
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            let _ = stop.send(true);
        });
        tracing::info!(%metrics_address, "trainset starting");
        trainset::controller::run(client, metrics, ready, wait(stopped)).await?;
        server
            .await
            .context("metrics server")?
            .context("serving metrics")?;
        Ok(())
    })
}

/// SIGTERM (Kubernetes stopping the pod) or Ctrl-C.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

fn render(file: &Path, namespace: &str, output: Output) -> anyhow::Result<()> {
    let input = if file == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let format = match output {
        Output::Yaml => trainset::render::Format::Yaml,
        Output::Json => trainset::render::Format::Json,
    };
    match trainset::render::render(&input, namespace, format) {
        Ok(text) => {
            print!("{text}");
            Ok(())
        }
        Err(errors) => {
            for error in &errors {
                eprintln!("error: {error}");
            }
            std::process::exit(1);
        }
    }
}

fn print_crds(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let crds = trainset::crds::all()?;
    match dir {
        Some(dir) => {
            for crd in &crds {
                let path = dir.join(trainset::crds::file_name(crd));
                std::fs::write(&path, trainset::crds::to_yaml(crd)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        None => {
            for crd in &crds {
                print!("---\n{}", trainset::crds::to_yaml(crd)?);
            }
        }
    }
    Ok(())
}
