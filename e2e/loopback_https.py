"""What the loopback HTTPS servers of e2e/cluster share (kubelet-logs.py, external-metrics.py)."""

import ssl


def reply(handler, code, content_type, body):
    """Answers the request `handler` holds with `code` and the bytes `body`."""
    handler.send_response(code)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def serve_tls(server, cert, key):
    """Serves `server` over TLS with the certificate file `cert` and its key `key`, for ever."""
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(cert, key)
    server.socket = serving.wrap_socket(server.socket, server_side=True)
    server.serve_forever()
