"""Helpers for the orchestrator tests: engine inspection by label, and local HTTP servers."""

from __future__ import annotations

import http.server
import io
import ipaddress
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import docker

from cubicle.orchestrator import labels as L


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
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    host: str | None
    body: bytes


@dataclass
class Server:
    """A local HTTP/1.1 server that answers every request with its ``token`` and records it."""

    token: str
    port: int = 0
    seen: list[Seen] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [s.path for s in self.seen]


@contextmanager
def http_server(token: str, address: str = "0.0.0.0") -> Iterator[Server]:
    """Serve on ``address`` (default: all addresses of the host) on a free port; stopped on
    exit. Request bodies (sized or chunked) are recorded with the method, path and Host."""
    record = Server(token)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = _read_chunked(self.rfile)
            record.seen.append(Seen(self.command, self.path, self.headers.get("Host"), body))
            reply = token.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((address, 0), Handler)
    server.daemon_threads = True
    record.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield record
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _read_chunked(rfile: io.BufferedIOBase) -> bytes:
    body = b""
    while size := int(rfile.readline().split(b";")[0], 16):
        body += rfile.read(size)
        rfile.readline()
    rfile.readline()
    return body
