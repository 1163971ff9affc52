"""The allowlist egress proxy of ``allow:`` sandboxes, and its origin check.

Runs OUTSIDE the guest: on Docker in its own container attached to the sandbox's internal network
and to a normal bridge (``orchestrator.providers.docker_network``); on the VM backend as a host
process bound to the sandbox's isolated bridge (``orchestrator.providers.vm_network``, which
passes ``--label SANDBOX_ID`` so gc can find the process). The guest's only way out is this
proxy (``HTTP_PROXY``/``HTTPS_PROXY``). It is a single standard-library file on purpose: the image
build copies it to ``/opt/cubicle/egress.py`` and the proxy container runs
``python3 /opt/cubicle/egress.py --listen 0.0.0.0:3128 --allow HOST[:PORT] ...``.

Policy (the same as :meth:`orchestrator.network.NetworkPolicy.allows`; a hypothesis test checks
that both agree):

- a request names ``host:port`` — ``CONNECT host:port`` (https and anything tunnelled) or an
  absolute URI ``http://host[:port]/path`` (plain http, any method);
- the host is normalised (IP literal → canonical text; name → lower-case IDNA A-labels, one
  trailing dot dropped) and must EQUAL an allowed host: ``example.com.evil.test``,
  ``evil.test/example.com``, ``user@evil.test`` and ``sub.example.com`` are not ``example.com``;
- the port must equal the origin's port, or be 80/443 when the origin names none;
- anything else (origin-form requests, other schemes, unparsable heads) is refused.

Every decision is one JSON line on stdout (``docker logs`` of the proxy container, or the VM
sandbox's ``egress.log``; read back with ``cubicle logs ID``)::

    {"ts": 1700000000.0, "decision": "allow"|"refuse", "method": "CONNECT", "host": "...",
     "port": 443, "reason": "...", "client": "10.0.0.2"}
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "AllowedOrigin",
    "BadRequest",
    "Decision",
    "InvalidHost",
    "Target",
    "decide",
    "main",
    "normalize_host",
    "parse_allowed",
    "parse_head",
]

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 15.0
DEFAULT_PORTS = (80, 443)


class InvalidHost(ValueError):
    """A host that is neither an IP literal nor a valid DNS name."""


def normalize_host(raw: str) -> str:
    """Canonical form of a host: IP literal text, or lower-case IDNA A-label name.

    The one implementation: :func:`orchestrator.network.normalize_host` calls it (and raises
    ``ConfigError`` instead), so policies and the proxy agree on what a host is.

    :raises InvalidHost: naming the host and what is wrong with it.
    """
    host = raw.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    host = host.rstrip(".").lower()
    if not host or len(host) > 253:
        raise InvalidHost(f"invalid host name {raw!r}: empty or longer than 253 characters")
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise InvalidHost(f"invalid host name {raw!r}: {exc}") from None
    for label in ascii_host.split("."):
        if (
            not label
            or len(label) > 63
            or label.startswith("-")
            or label.endswith("-")
            or not all(c.isalnum() or c == "-" for c in label)
        ):
            raise InvalidHost(f"invalid host name {raw!r}: bad label {label!r}")
    return ascii_host


@dataclass(frozen=True)
class AllowedOrigin:
    """An allowed destination; ``port`` ``None`` means 80 and 443."""

    host: str
    port: int | None = None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    host: str
    port: int
    reason: str


def parse_allowed(text: str) -> AllowedOrigin:
    """``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT`` (as ``str(Origin)`` prints them)."""
    if text.startswith("["):
        end = text.index("]")
        host, rest = text[1:end], text[end + 1 :]
        return AllowedOrigin(normalize_host(host), int(rest[1:]) if rest else None)
    if text.count(":") == 1:
        host, port = text.split(":")
        return AllowedOrigin(normalize_host(host), int(port))
    return AllowedOrigin(normalize_host(text), None)


def decide(origins: Iterable[AllowedOrigin], host: str, port: int) -> Decision:
    """Whether a connection to ``host:port`` is exactly one of ``origins``."""
    try:
        wanted = normalize_host(host)
    except InvalidHost as exc:
        return Decision(False, host, port, str(exc))
    if not 1 <= port <= 65535:
        return Decision(False, wanted, port, f"port {port} outside 1-65535")
    for origin in origins:
        if origin.host != wanted:
            continue
        if (port in DEFAULT_PORTS) if origin.port is None else (port == origin.port):
            return Decision(True, wanted, port, "allowed origin")
        return Decision(False, wanted, port, f"port {port} not allowed for {wanted}")
    return Decision(False, wanted, port, "host not in the allow list")


# --------------------------------------------------------------------------- request heads


@dataclass(frozen=True)
class Target:
    method: str
    host: str
    port: int
    forward_head: bytes | None
    """For plain http: the head to send upstream (origin-form); ``None`` for CONNECT."""


class BadRequest(ValueError):
    pass


def parse_head(head: bytes) -> Target:
    """Parse a proxy request head (request line + headers, ending with a blank line).

    :raises BadRequest: naming what is wrong.
    """
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes everything
        raise BadRequest(str(exc)) from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"malformed request line {lines[0][:200]!r}")
    method, target, version = parts
    if method == "CONNECT":
        host, sep, port_text = target.rpartition(":")
        if not sep or not port_text.isdigit():
            raise BadRequest(f"CONNECT target {target[:200]!r} is not host:port")
        return Target(method, host, int(port_text), None)
    url = urlsplit(target)
    if url.scheme != "http" or not url.netloc:
        raise BadRequest(f"{method} target {target[:200]!r} is not an absolute http:// URI")
    try:
        port = url.port or 80
    except ValueError as exc:
        raise BadRequest(f"bad port in {target[:200]!r}: {exc}") from None
    if url.username is not None or url.password is not None:
        raise BadRequest(f"user info in {target[:200]!r} is not accepted")
    host = url.hostname or ""
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    kept = [
        line
        for line in lines[1:]
        if line and not line.lower().startswith(("proxy-", "connection:", "keep-alive:"))
    ]
    forward = "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""])
    return Target(method, host, port, forward.encode("latin-1"))


# --------------------------------------------------------------------------- the server


class Proxy:
    def __init__(self, origins: Sequence[AllowedOrigin]) -> None:
        self.origins = tuple(origins)

    @staticmethod
    def log(decision: str, client: str, method: str, host: str, port: int, reason: str) -> None:  # noqa: PLR0917
        record = {
            "ts": round(time.time(), 3),
            "decision": decision,
            "method": method,
            "host": host,
            "port": port,
            "reason": reason,
            "client": client,
        }
        print(json.dumps(record, ensure_ascii=True), flush=True)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) else "?"
        try:
            await self._handle(reader, writer, client)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()

    async def _handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str
    ) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            self.log("refuse", client, "?", "", 0, f"request head over {MAX_HEAD_BYTES} bytes")
            await self._reply(writer, 431, "request head too large")
            return
        try:
            target = parse_head(head)
        except BadRequest as exc:
            self.log("refuse", client, "?", "", 0, str(exc))
            await self._reply(writer, 400, str(exc))
            return
        decision = decide(self.origins, target.host, target.port)
        if not decision.allowed:
            self.log("refuse", client, target.method, decision.host, target.port, decision.reason)
            await self._reply(
                writer,
                403,
                f"cubicle egress: {decision.host}:{target.port} refused ({decision.reason})",
            )
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(decision.host, target.port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            self.log(
                "allow",
                client,
                target.method,
                decision.host,
                target.port,
                f"upstream failed: {exc}",
            )
            await self._reply(
                writer, 502, f"cubicle egress: cannot reach {decision.host}:{target.port}"
            )
            return
        self.log("allow", client, target.method, decision.host, target.port, decision.reason)
        if target.forward_head is None:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            up_writer.write(target.forward_head)
            await up_writer.drain()
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            up_writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            writer.close()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, text: str) -> None:
        reasons = {
            400: "Bad Request",
            403: "Forbidden",
            431: "Request Header Fields Too Large",
            502: "Bad Gateway",
        }
        body = (text + "\n").encode("utf-8", "replace")
        writer.write(
            f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii")
            + body
        )
        await writer.drain()


async def serve(host: str, port: int, origins: Sequence[AllowedOrigin], label: str = "") -> None:
    proxy = Proxy(origins)
    server = await asyncio.start_server(proxy.handle, host, port, limit=MAX_HEAD_BYTES)
    allowed = ", ".join(f"{o.host}:{o.port or '80/443'}" for o in origins)
    print(
        json.dumps(
            {
                "ts": round(time.time(), 3),
                "event": "listening",
                "listen": f"{host}:{port}",
                "allow": allowed,
                **({"label": label} if label else {}),
            }
        ),
        flush=True,
    )
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="cubicle allowlist egress proxy")
    parser.add_argument("--listen", default="0.0.0.0:3128", help="HOST:PORT to listen on")
    parser.add_argument("--allow", action="append", default=[], help="allowed HOST[:PORT]")
    parser.add_argument(
        "--label",
        default="",
        help="the sandbox id, echoed in the 'listening' line (and on the command line, where "
        "the VM backend's gc finds the proxy process of a sandbox)",
    )
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    origins = [parse_allowed(item) for item in args.allow]
    try:
        asyncio.run(serve(host, int(port), origins, args.label))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
