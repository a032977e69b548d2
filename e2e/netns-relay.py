#!/usr/bin/env python3
"""Relays byte streams between a listening endpoint and a connecting one.

Usage: netns-relay.py LISTEN=CONNECT ...   (each endpoint `tcp:127.0.0.1:PORT` or `unix:PATH`)

`e2e/cluster` runs the peer operators that bind wildcard addresses (training-operator's webhook
server, mpi-operator's health server) in a network namespace of their own, so nothing they open
is reachable beyond loopback. Two of these relays join that namespace to the host's loopback
through Unix sockets in the cluster's state directory (a path is reachable from any network
namespace): one outside (host port -> socket, socket -> host port), one inside (the reverse).
TLS passes through untouched, so certificates and hostnames are checked end to end.
"""

import asyncio
import os
import sys

CHUNK = 64 * 1024


def parse(endpoint):
    kind, _, rest = endpoint.partition(":")
    if kind == "unix" and rest:
        return ("unix", rest)
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if host in ("127.0.0.1", "localhost") and port.isdigit():
            return ("tcp", host, int(port))
    raise SystemExit(f"bad endpoint {endpoint!r}: use tcp:127.0.0.1:PORT or unix:PATH")


async def pipe(reader, writer):
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


async def connect(target):
    if target[0] == "unix":
        return await asyncio.open_unix_connection(target[1])
    return await asyncio.open_connection(target[1], target[2])


def handler(target):
    async def handle(reader, writer):
        try:
            upstream_reader, upstream_writer = await asyncio.wait_for(connect(target), 10)
        except (OSError, asyncio.TimeoutError):
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    return handle


async def serve(listen, target):
    if listen[0] == "unix":
        if os.path.exists(listen[1]):
            os.unlink(listen[1])
        return await asyncio.start_unix_server(handler(target), path=listen[1])
    return await asyncio.start_server(handler(target), listen[1], listen[2])


async def main(specs):
    servers = [await serve(parse(left), parse(right)) for left, right in specs]
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    pairs = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not pairs or any(len(p) != 2 for p in pairs):
        raise SystemExit(__doc__)
    asyncio.run(main(pairs))
