#!/usr/bin/env python3
"""Serves the external metrics API (external.metrics.k8s.io/v1beta1) for e2e/cluster, from files.

Usage: external-metrics.py PORT CERT KEY DIRECTORY

The HorizontalPodAutoscaler controller reads an External metric through the apiserver, which
proxies the request to the APIService's Service. e2e/cluster registers this server as that
APIService on an ExternalName Service `localhost`: the apiserver then dials localhost:PORT (no
pod, no kube-proxy). A test sets a metric by writing its value (a quantity, `4`, `500m`) to
DIRECTORY/<namespace>/<metric name>; a metric without a file is not found, and the HPA does
not scale on it. Labels and selectors are not looked at. It listens on loopback only.
"""

import json
import os
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loopback_https import reply, serve_tls

GROUP_VERSION = "external.metrics.k8s.io/v1beta1"
PREFIX = "/apis/" + GROUP_VERSION
METRIC = re.compile(r"^/namespaces/([a-z0-9.-]+)/([A-Za-z0-9_.:-]+)$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G)?$")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path in (PREFIX, PREFIX + "/"):
            # Discovery, and the aggregator's availability check: no listable resources.
            self.reply(200, {"kind": "APIResourceList", "apiVersion": "v1",
                             "groupVersion": GROUP_VERSION, "resources": []})
            return
        found = METRIC.match(path[len(PREFIX):]) if path.startswith(PREFIX) else None
        if not found:
            self.reply(404, status(404, f"{path} is not served here"))
            return
        namespace, name = found.groups()
        value = self.server.value(namespace, name)
        if value is None:
            self.reply(404, status(404, f"no value for metric {name} in namespace {namespace}"))
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.reply(200, {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION,
                         "metadata": {}, "items": [{"metricName": name, "metricLabels": {},
                                                    "timestamp": now, "value": value}]})

    def reply(self, code, body):
        reply(self, code, "application/json", json.dumps(body).encode())

    def log_request(self, code="-", size="-"):
        # Not the aggregator's availability checks, every few seconds: only the metrics read.
        if self.path.split("?", 1)[0].rstrip("/") != PREFIX:
            super().log_request(code, size)

    def log_message(self, format, *args):
        sys.stderr.write("external-metrics: " + (format % args) + "\n")


def status(code, message):
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": "NotFound", "message": message}


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port, directory):
        super().__init__(("127.0.0.1", port), Handler)
        self.directory = directory

    def value(self, namespace, name):
        try:
            with open(os.path.join(self.directory, namespace, name), encoding="utf-8") as f:
                value = f.read(64).strip()
        except OSError:
            return None
        return value if QUANTITY.match(value) else None


def main():
    if len(sys.argv) != 5 or not sys.argv[1].isdigit():
        raise SystemExit(__doc__)
    port, cert, key, directory = sys.argv[1:]
    os.makedirs(directory, exist_ok=True)
    serve_tls(Server(int(port), directory), cert, key)


if __name__ == "__main__":
    main()
