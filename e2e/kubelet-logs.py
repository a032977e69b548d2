#!/usr/bin/env python3
"""Serves the kubelet's container-log endpoint for the KWOK nodes of e2e/cluster.

Usage: kubelet-logs.py PORT CERT KEY APISERVER CA CLIENT_CERT CLIENT_KEY

KWOK nodes have no kubelet, so `kubectl logs` (the apiserver dialling the node's kubelet port)
fails for every pod. KWOK can serve logs itself, but only from a file per pod named by a Logs
object per pod: two writes for every pod on the control plane the benchmarks measure. This
answers `GET /containerLogs/<namespace>/<pod>/<container>` instead, with a log made from the pod
as the apiserver has it: which pod and container it is, its replica type and index (v1's labels),
and its phase. Nothing is written per pod; a log costs one GET when someone reads it.

The KWOK nodes advertise this port (KwokConfiguration `nodePort`) at their address 127.0.0.1; the
apiserver connects over TLS (without checking the certificate, as it does for kubelets when no
--kubelet-certificate-authority is set). It listens on loopback only.
"""

import json
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loopback_https import reply, serve_tls

REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_ROLE = "training.kubeflow.org/job-role"
JOB_NAME = "training.kubeflow.org/job-name"


def log_lines(pod, container):
    meta = pod.get("metadata", {})
    labels = meta.get("labels") or {}
    status = pod.get("status", {})
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    replica_type = labels.get(REPLICA_TYPE, "-")
    index = labels.get(REPLICA_INDEX, "-")
    lines = [
        f"pod {name} container {container}: replica type {replica_type}, index {index}",
        f"job {labels.get(JOB_NAME, '-')}, role {labels.get(JOB_ROLE, '-')}, "
        f"node {pod.get('spec', {}).get('nodeName', '-')}, phase {status.get('phase', '-')}",
        "(served by e2e/kubelet-logs.py: KWOK runs no containers, so this log is made from the pod)",
    ]
    return lines


def select(lines, query):
    tail = query.get("tailLines", [None])[0]
    if tail is not None and tail.isdigit():
        lines = lines[len(lines) - min(int(tail), len(lines)):]
    body = "".join(line + "\n" for line in lines).encode()
    limit = query.get("limitBytes", [None])[0]
    if limit is not None and limit.isdigit():
        body = body[: int(limit)]
    return body


class Handler(BaseHTTPRequestHandler):
    server_version = "trainset-e2e-kubelet-logs"

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self.reply(404, b"only /containerLogs/<namespace>/<pod>/<container> is served\n")
        _, namespace, pod_name, container = (urllib.parse.unquote(p) for p in parts)
        try:
            pod = self.server.get_pod(namespace, pod_name)
        except urllib.error.HTTPError as error:
            return self.reply(error.code, f"pod {namespace}/{pod_name}: {error.reason}\n".encode())
        except (urllib.error.URLError, OSError) as error:
            return self.reply(503, f"apiserver unreachable: {error}\n".encode())
        containers = [c.get("name") for c in pod.get("spec", {}).get("containers", [])]
        containers += [c.get("name") for c in pod.get("spec", {}).get("initContainers", [])]
        if container not in containers:
            return self.reply(400, f"container {container} is not in pod {pod_name}\n".encode())
        query = urllib.parse.parse_qs(url.query)
        self.reply(200, select(log_lines(pod, container), query))

    def reply(self, code, body):
        reply(self, code, "text/plain; charset=utf-8", body)

    def log_message(self, format, *args):
        sys.stderr.write("%s %s\n" % (self.address_string(), format % args))


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port, apiserver, client_context):
        super().__init__(("127.0.0.1", port), Handler)
        self.apiserver = apiserver
        self.client_context = client_context

    def get_pod(self, namespace, name):
        path = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods/{urllib.parse.quote(name)}"
        with urllib.request.urlopen(
            self.apiserver + path, context=self.client_context, timeout=10
        ) as response:
            return json.load(response)


def main():
    if len(sys.argv) != 8 or not sys.argv[1].isdigit():
        raise SystemExit(__doc__)
    port, cert, key, apiserver, ca, client_cert, client_key = sys.argv[1:]
    client = ssl.create_default_context(cafile=ca)
    client.load_cert_chain(client_cert, client_key)
    serve_tls(Server(int(port), apiserver.rstrip("/"), client), cert, key)


if __name__ == "__main__":
    main()
