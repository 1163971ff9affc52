"""An "origin server" that only a sandbox's egress proxy can reach, for domain-rule and
ask-mode tests on Docker.

A container of its own on a network of its own (internal: no way out; ports 80 and 443, the
ports domain rules admit) that answers every GET with a green page naming the Host it was asked
for and logs each request as a JSON line. No sandbox shares a network with anything else, so
:func:`resolve_in_proxy` connects the sandbox's proxy to the server's network (the guest sits on
its internal network, so it reaches the server only through the proxy), and makes test names
resolve, for the proxy only, through lines appended to the proxy container's hosts file.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import docker.models.containers
import docker.models.networks
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.network import NetworkPolicy

__all__ = ["GREEN", "NAMES", "OriginServer", "origin", "resolve_in_proxy"]

WAIT_S = 30.0
GREEN = (0x12, 0xC4, 0x8B)
"""The background colour of every page the origin server sends."""

ORIGIN_SERVER = r"""
import http.server, json, sys, threading
PAGE = ("<html><head><title>origin {host}</title></head>"
        "<body style='margin:0;background:#12c48b'><h1>origin {host}</h1></body></html>")
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        host = self.headers.get("Host", "")
        print(json.dumps({"port": self.server.server_address[1], "path": self.path,
                          "host": host}), flush=True)
        body = PAGE.format(host=host).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
for port in (80, 443):
    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


@dataclass
class OriginServer:
    container: docker.models.containers.Container
    address: str
    network: docker.models.networks.Network

    @property
    def subnet(self) -> str:
        """The server's network (private): a sandbox whose names resolve into it needs it as an
        internal network (``NetworkPolicy.with_internal``, ``--allow-internal``)."""
        self.network.reload()
        subnet: str = self.network.attrs["IPAM"]["Config"][0]["Subnet"]
        return subnet

    def policy(self, text: str, **options: Any) -> NetworkPolicy:
        """``NetworkPolicy.parse(text, **options)`` that lets the proxy reach this server."""
        return NetworkPolicy.parse(text, **options).with_internal([self.subnet])

    def seen(self) -> list[tuple[str, int, str]]:
        """``(Host header, port, path)`` of every request the server got, in order."""
        lines = bytes(self.container.logs()).decode().splitlines()
        records = [json.loads(line) for line in lines if line.startswith("{")]
        return [(r["host"], r["port"], r["path"]) for r in records]


@pytest.fixture
def origin(engine: docker.DockerClient, docker_image: str) -> Iterator[OriginServer]:
    mark = {"cubicle.test": f"origin-server-{os.getpid()}"}
    network = engine.networks.create(
        f"cubicle-test-origin-{os.getpid()}-{secrets.token_hex(3)}",
        driver="bridge",
        internal=True,
        labels=mark,
    )
    try:
        container = engine.containers.run(
            docker_image,
            ["/usr/bin/python3", "-I", "-c", ORIGIN_SERVER],
            entrypoint=[],
            user="0:0",
            detach=True,
            network=network.name,
            labels=mark,
            mem_limit="128m",
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while b"ready" not in bytes(container.logs()):  # polls the server's own signal
                assert time.monotonic() < deadline, bytes(container.logs())
                threading.Event().wait(0.05)
            container.reload()
            address = container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
            yield OriginServer(container, address, network)
        finally:
            container.remove(force=True)
    finally:
        network.reload()
        for attached in network.containers:  # proxies of sandboxes not yet destroyed
            with contextlib.suppress(docker.errors.NotFound):
                network.disconnect(attached, force=True)
        network.remove()


NAMES = (
    "example.test www.example.test deep.sub.example.test badexample.test other.test "
    "blocked.test sub.blocked.test asked.test denied.test late.test"
)


def resolve_in_proxy(engine: docker.DockerClient, sandbox_id: str, origin: OriginServer) -> None:
    """Make the test names resolve, for the proxy only, to the origin server (and one name to
    loopback): lines appended to the proxy container's hosts file, which glibc reads on every
    lookup."""
    mine: dict[str, str | list[str] | bool] = {
        "label": [f"{L.SANDBOX}={sandbox_id}", f"{L.ROLE}=egress"]
    }
    [proxy] = engine.containers.list(filters=mine)  # by label: no provider module path
    origin.network.connect(proxy)
    with open(proxy.attrs["HostsPath"], "a", encoding="ascii") as hosts:
        hosts.write(f"{origin.address} {NAMES}\n127.0.0.1 loop.example.test\n")
