"""Helpers for the orchestrator tests: engine inspection by label, and local HTTP servers."""

from __future__ import annotations

import http.server
import ipaddress
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import docker

from orchestrator import labels as L


def leftovers(client: docker.DockerClient, match: Mapping[str, str]) -> list[str]:
    """Names of cubicle containers, networks and volumes whose labels include ``match``."""
    selector = [f"{key}={value}" for key, value in match.items()] or [L.SANDBOX]
    found = [
        f"container {c.name}" for c in client.containers.list(all=True, filters={"label": selector})
    ]
    found += [f"network {n.name}" for n in client.networks.list(filters={"label": selector})]
    found += [f"volume {v.name}" for v in client.volumes.list(filters={"label": selector})]
    return found


def bridge_gateway(client: docker.DockerClient) -> str:
    """The host's address on Docker's default bridge (reachable from the egress proxy)."""
    config = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    # the default bridge often omits Gateway; dockerd then gives the host the subnet's first address
    return str(config.get("Gateway") or next(ipaddress.ip_network(config["Subnet"]).hosts()))


@dataclass
class Server:
    """A local HTTP server that answers every GET with its ``token`` and records the paths."""

    token: str
    port: int = 0
    paths: list[str] = field(default_factory=list)


@contextmanager
def http_server(token: str) -> Iterator[Server]:
    """Serve on all addresses of the host on a free port; stopped on exit."""
    record = Server(token)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            record.paths.append(self.path)
            body = token.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Handler)
    record.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield record
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
