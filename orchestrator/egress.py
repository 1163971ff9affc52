"""The allowlist egress proxy of ``allow:`` sandboxes, and THE origin type and decision of cubicle.

Runs OUTSIDE the guest: on Docker in its own container attached to the sandbox's internal network
and to a normal bridge (``orchestrator.providers.docker_network``, with the image's system
``python3 -I``); on the VM backend as a host process (``python3 -I`` as ``nobody``) bound to the
sandbox's isolated bridge (``orchestrator.providers.vm_network``, which passes ``--label
SANDBOX_ID`` so gc can find the process). The guest's only way out is this proxy
(``HTTP_PROXY``/``HTTPS_PROXY``). It is ONE standalone file on purpose — the standard library plus
h11 (Debian ``python3-h11``: the guest image and the host install it) — so it runs without
cubicle installed: ``python3 -I egress.py --listen 0.0.0.0:3128 --allow HOST[:PORT] ...``.

The one definition
------------------
:class:`Origin`, :func:`parse_origin` and :func:`decide` are used both here and by policy parsing
(:mod:`orchestrator.network` imports them; it only turns :class:`InvalidOrigin` into cubicle's
``ConfigError``), so the policy a user writes and the proxy that enforces it cannot disagree.

Policy (:func:`decide`):

- a request names ``host:port`` — ``CONNECT host:port`` (https and anything tunnelled) or an
  absolute URI ``http://host[:port]/path`` (plain http, any method);
- the host is normalised (IP literal → canonical text; name → lower-case IDNA A-labels, one
  trailing dot dropped) and must EQUAL an allowed host: ``example.com.evil.test``,
  ``evil.test/example.com``, ``user@evil.test`` and ``sub.example.com`` are not ``example.com``;
- ports are ASCII digits 1-65535; the port must equal the origin's port, or be 80/443 when the
  origin names none;
- anything else (origin-form requests, other schemes, malformed HTTP) is refused.

Requests (parsed by h11, never by hand):

- every request on a client connection is judged and logged on its own: a plain-http keep-alive
  connection carries many requests, each forwarded on a fresh upstream connection only once
  allowed; a ``CONNECT`` tunnel is one decision (its bytes are opaque, usually TLS);
- a forwarded request's ``Host`` header is replaced by the authority of its absolute URI (RFC
  9112 §3.2.2), so an allowed target cannot carry ``Host: evil.test`` to a shared front end;
  hop-by-hop headers (``Connection`` and what it names, ``Proxy-*``, ``Upgrade``, ``TE`` …) are
  dropped both ways.

Every decision is one JSON line on stdout (``docker logs`` of the proxy container, or the VM
sandbox's ``egress.log``; read back with ``cubicle logs ID``), malformed requests included::

    {"ts": 1700000000.0, "decision": "allow"|"refuse", "method": "CONNECT", "host": "...",
     "port": 443, "reason": "...", "client": "10.0.0.2", "target": "..."}

Room for more judges: the proxy asks a :data:`Judge` — an async callable from a
:class:`RequestInfo` to a :class:`Decision` — about each request, and holds the client's
connection while it waits. :class:`AllowList` is the judge of ``--allow``; a deny list
(checked before it) or an "ask" mode (await a person's answer for an unknown origin) is another
judge composed around it, with no change to the HTTP handling.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit, urlunsplit

import h11

__all__ = [
    "EGRESS_PORT",
    "AllowList",
    "BadRequest",
    "Decision",
    "InvalidHost",
    "InvalidOrigin",
    "Judge",
    "Origin",
    "Proxy",
    "RequestInfo",
    "decide",
    "main",
    "normalize_host",
    "parse_origin",
    "parse_port",
    "parse_target",
    "split_authority",
]

EGRESS_PORT: Final = 3128
"""The port the proxy listens on, on every backend."""
MAX_HEAD_BYTES: Final = 64 * 1024
"""Request heads larger than this (give or take one read of :data:`CHUNK`) are refused (431)."""
HEAD_TIMEOUT_S: Final = 30.0
"""How long a client may take to send a complete request head."""
IDLE_TIMEOUT_S: Final = 300.0
"""How long a body, a response or a tunnel may stay silent."""
CONNECT_TIMEOUT_S: Final = 15.0
DEFAULT_PORTS: Final = (80, 443)
CHUNK: Final = 16 * 1024
"""Read size while h11 parses (small, so an oversized head is caught near its limit)."""
TUNNEL_CHUNK: Final = 64 * 1024
"""Read size of an established tunnel (opaque bytes)."""
LOG_TARGET_CHARS: Final = 200
HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",
    }
)
"""Headers that concern one connection, never forwarded (with those ``Connection`` names)."""

# --------------------------------------------------------------------------- origins


class InvalidOrigin(ValueError):
    """Origin or authority text that is not ``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT``."""


class InvalidHost(InvalidOrigin):
    """A host that is neither an IP literal nor a valid DNS name."""


_PORT = re.compile(r"[0-9]{1,5}")  # [0-9], not \d: ASCII digits only ('²' is not a port)


def normalize_host(raw: str) -> str:
    """Canonical form of a host: IP literal text, or lower-case IDNA A-label name.

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


def parse_port(text: str) -> int:
    """A port written in ASCII digits, 1-65535.

    :raises InvalidOrigin: naming the text.
    """
    if not _PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise InvalidOrigin(f"port must be 1-65535 in ASCII digits, got {text!r}")
    return int(text)


def split_authority(text: str) -> tuple[str, str | None]:
    """Split ``HOST``, ``HOST:PORT``, ``[V6]``, ``[V6]:PORT`` or a bare IPv6 literal into the
    host text and the port text (``None`` when absent); neither is checked here.

    :raises InvalidOrigin: for an unclosed ``[`` or text after ``]`` that is not ``:PORT``.
    """
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise InvalidOrigin(f"unclosed '[' in {text!r}")
        host, rest = text[1:end], text[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise InvalidOrigin(f"unexpected {rest!r} after ']' in {text!r}")
        return host, rest[1:]
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, port
    return text, None  # a name, or a bare IPv6 literal (several colons)


@dataclass(frozen=True, order=True)
class Origin:
    """An allowed destination: a lower-case IDNA (ASCII) host name or an IP literal, and a port.

    ``port`` ``None`` means the scheme defaults 80 and 443. Make one with :func:`parse_origin`.
    """

    host: str
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    def allows(self, host: str, port: int) -> bool:
        """True when a connection to ``host:port`` is exactly this origin (no suffix matching)."""
        return decide((self,), host, port).allowed


def parse_origin(text: str) -> Origin:
    """Parse ``HOST``, ``HOST:PORT``, ``[V6]``, ``[V6]:PORT`` or a bare IPv6 literal; no scheme,
    path or user info. Surrounding blanks are ignored.

    :raises InvalidOrigin: naming the text and what is wrong with it.
    """
    item = text.strip()
    if not item:
        raise InvalidOrigin("empty origin in allow list")
    if any(c in item for c in "/@?#\\ \t") or "://" in item:
        raise InvalidOrigin(
            f"invalid origin {text!r}: give HOST or HOST:PORT, without scheme or path"
        )
    try:
        host, port_text = split_authority(item)
        port = None if port_text is None else parse_port(port_text)
        return Origin(normalize_host(host), port)
    except InvalidHost:
        raise
    except InvalidOrigin as exc:
        raise InvalidOrigin(f"invalid origin {text!r}: {exc}") from None


Verdict = Literal["allow", "refuse"]


@dataclass(frozen=True)
class Decision:
    """What a judge said about one request; ``host`` is normalised when it could be."""

    verdict: Verdict
    host: str
    port: int
    reason: str

    @property
    def allowed(self) -> bool:
        return self.verdict == "allow"


def decide(origins: Iterable[Origin], host: str, port: int) -> Decision:
    """Whether a connection to ``host:port`` is exactly one of ``origins`` (the one check)."""
    try:
        wanted = normalize_host(host)
    except InvalidHost as exc:
        return Decision("refuse", host, port, str(exc))
    if not 1 <= port <= 65535:
        return Decision("refuse", wanted, port, f"port {port} outside 1-65535")
    for origin in origins:
        if origin.host != wanted:
            continue
        if (port in DEFAULT_PORTS) if origin.port is None else (port == origin.port):
            return Decision("allow", wanted, port, "allowed origin")
        return Decision("refuse", wanted, port, f"port {port} not allowed for {wanted}")
    return Decision("refuse", wanted, port, "host not in the allow list")


# --------------------------------------------------------------------------- judges


@dataclass(frozen=True)
class RequestInfo:
    """What a judge sees of one request: who asks, for which ``host:port`` (as written)."""

    client: str
    method: str
    host: str
    port: int
    target: str


Judge = Callable[[RequestInfo], Awaitable[Decision]]
"""Decides one request; may take its time (the client's connection is held meanwhile)."""


class AllowList:
    """The judge of ``--allow``: :func:`decide` against a fixed list of origins."""

    def __init__(self, origins: Iterable[Origin]) -> None:
        self.origins = tuple(origins)

    async def __call__(self, request: RequestInfo) -> Decision:
        return decide(self.origins, request.host, request.port)


# --------------------------------------------------------------------------- request targets


class BadRequest(ValueError):
    """A request the proxy cannot judge (names what is wrong); answered 400 and logged."""


def parse_target(method: str, target: str) -> tuple[str, int, str | None]:
    """``(host, port, origin-form target)`` of a proxy request-target; the origin-form target is
    ``None`` for ``CONNECT host:port`` and ``/path?query`` for ``http://host[:port]/path?query``.

    :raises BadRequest: naming what is wrong (origin-form, another scheme, user info, bad port).
    """
    shown = target[:LOG_TARGET_CHARS]
    try:
        if method == "CONNECT":
            host, port_text = split_authority(target)
            if port_text is None:
                raise BadRequest(f"CONNECT target {shown!r} is not host:port")
            return host, parse_port(port_text), None
        try:
            url = urlsplit(target)
        except ValueError as exc:
            raise BadRequest(f"{method} target {shown!r}: {exc}") from None
        if url.scheme.lower() != "http" or not url.netloc:
            raise BadRequest(f"{method} target {shown!r} is not an absolute http:// URI")
        if "@" in url.netloc:
            raise BadRequest(f"user info in {shown!r} is not accepted")
        host, port_text = split_authority(url.netloc)
        port = 80 if port_text is None else parse_port(port_text)
    except InvalidOrigin as exc:
        raise BadRequest(f"{method} target {shown!r}: {exc}") from None
    return host, port, urlunsplit(("", "", url.path or "/", url.query, ""))


def _authority(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == 80 else f"{shown}:{port}"


def _forwarded_headers(
    headers: Iterable[tuple[bytes, bytes]], *, extra_drop: Iterable[bytes] = ()
) -> list[tuple[bytes, bytes]]:
    """``headers`` minus hop-by-hop ones, those the ``Connection`` header names and ``extra``."""
    pairs = list(headers)
    named = {
        token.strip().lower()
        for name, value in pairs
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    drop = HOP_BY_HOP | named | {name.lower() for name in extra_drop}
    return [(name, value) for name, value in pairs if name.lower() not in drop]


# --------------------------------------------------------------------------- the server


class _Peer:
    """One side of a proxied exchange: an h11 connection over an asyncio stream pair."""

    def __init__(
        self, role: type[h11.CLIENT] | type[h11.SERVER], reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:  # fmt: skip
        self.conn = h11.Connection(role, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.reader = reader
        self.writer = writer

    async def next_event(self, timeout: float) -> h11.Event | type[h11.PAUSED]:
        """The next h11 event, reading as needed (h11 raises ``RemoteProtocolError``)."""
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            data = await asyncio.wait_for(self.reader.read(CHUNK), timeout)
            self.conn.receive_data(data)

    async def send(self, *events: h11.Event) -> None:
        for event in events:
            data = self.conn.send(event)
            if data:
                self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(self.writer.wait_closed(), 5.0)


class Proxy:
    """Judges and forwards the requests of every client connection (see the module docstring).

    :param judge: decides each request (:class:`AllowList` for ``--allow``).
    :param emit: writes one log record (default: a JSON line on stdout).
    """

    def __init__(self, judge: Judge, emit: Callable[[dict[str, object]], None] | None = None):
        self.judge = judge
        self.emit = emit or _print_json

    def log(self, decision: Decision, client: str, method: str, target: str) -> None:
        self.emit(
            {
                "ts": round(time.time(), 3),
                "decision": decision.verdict,
                "method": method,
                "host": decision.host,
                "port": decision.port,
                "reason": decision.reason,
                "client": client,
                "target": target[:LOG_TARGET_CHARS],
            }
        )

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The ``asyncio.start_server`` callback: serve one client connection, then close it."""
        peer = writer.get_extra_info("peername")
        client_address = str(peer[0]) if isinstance(peer, tuple) else "?"
        client = _Peer(h11.SERVER, reader, writer)
        try:
            first = True
            while await self._one_request(client, client_address, first=first):
                client.conn.start_next_cycle()
                first = False
        except (ConnectionError, TimeoutError, OSError, h11.ProtocolError):
            pass
        finally:
            await client.close()

    async def _one_request(self, client: _Peer, address: str, *, first: bool) -> bool:
        """Read, judge and answer one request; True when the connection may carry another."""
        # a new connection has HEAD_TIMEOUT_S for its whole first head (no slow drip); a
        # kept-alive one may first stay idle
        deadline = HEAD_TIMEOUT_S if first else IDLE_TIMEOUT_S
        try:
            event = await asyncio.wait_for(client.next_event(IDLE_TIMEOUT_S), deadline)
        except h11.RemoteProtocolError as exc:
            reason = f"malformed request: {exc}"
            self.log(Decision("refuse", "", 0, reason), address, "?", "")
            await self._reply(client, exc.error_status_hint, reason)
            return False
        except TimeoutError:
            if client.conn.trailing_data[0]:
                reason = f"no complete request head within {deadline:.0f} s"
                self.log(Decision("refuse", "", 0, reason), address, "?", "")
                await self._reply(client, 408, reason)
            return False
        if not isinstance(event, h11.Request):
            return False  # the client closed between requests
        method = event.method.decode("latin-1")
        target = event.target.decode("latin-1")
        try:
            host, port, path = parse_target(method, target)
        except BadRequest as exc:
            self.log(Decision("refuse", "", 0, str(exc)), address, method, target)
            await self._reply(client, 400, str(exc))
            return False
        decision = await self.judge(RequestInfo(address, method, host, port, target))
        if not decision.allowed:
            self.log(decision, address, method, target)
            await self._reply(
                client, 403, f"cubicle egress: {decision.host}:{port} refused ({decision.reason})"
            )
            return False
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(decision.host, port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            failed = Decision("allow", decision.host, port, f"{decision.reason}; upstream: {exc}")
            self.log(failed, address, method, target)
            await self._reply(client, 502, f"cubicle egress: cannot reach {decision.host}:{port}")
            return False
        upstream = _Peer(h11.CLIENT, up_reader, up_writer)
        try:
            if path is None:
                self.log(decision, address, method, target)
                await self._tunnel(client, upstream)
                return False
            sent_host = [value for name, value in event.headers if name == b"host"]
            authority = _authority(decision.host, port)
            if sent_host and sent_host != [authority.encode("ascii")]:
                shown = b", ".join(sent_host).decode("latin-1")[:LOG_TARGET_CHARS]
                decision = Decision(
                    decision.verdict,
                    decision.host,
                    port,
                    f"{decision.reason}; Host header {shown!r} replaced by {authority!r}",
                )
            self.log(decision, address, method, target)
            return await self._forward(client, upstream, event, authority, path)
        finally:
            await upstream.close()

    async def _tunnel(self, client: _Peer, upstream: _Peer) -> None:
        """Answer ``200`` to an allowed CONNECT and pipe bytes both ways until both ends close."""
        event = await client.next_event(IDLE_TIMEOUT_S)
        if not isinstance(event, h11.EndOfMessage):
            await self._reply(client, 400, "a CONNECT request has no body")
            return
        await client.send(
            h11.Response(status_code=200, headers=[], reason=b"Connection established")
        )
        early, _closed = client.conn.trailing_data
        if early:
            upstream.writer.write(early)
        await asyncio.gather(
            _pipe(client.reader, upstream.writer), _pipe(upstream.reader, client.writer)
        )

    async def _forward(
        self, client: _Peer, upstream: _Peer, request: h11.Request, authority: str, path: str
    ) -> bool:
        """Send one request upstream (Host rewritten, hop-by-hop headers dropped) and relay its
        response; True when the client's connection may carry another request."""
        if client.conn.they_are_waiting_for_100_continue:
            await client.send(h11.InformationalResponse(status_code=100, headers=[]))
        headers = [
            (b"Host", authority.encode("ascii")),
            *_forwarded_headers(request.headers, extra_drop=(b"host",)),
            (b"Connection", b"close"),
        ]
        await upstream.send(
            h11.Request(method=request.method, target=path.encode("ascii"), headers=headers)
        )
        while True:  # the request body
            event = await client.next_event(IDLE_TIMEOUT_S)
            if isinstance(event, h11.Data | h11.EndOfMessage):
                await upstream.send(event)
            if not isinstance(event, h11.Data):
                break
        started = False
        try:
            while True:  # the response
                reply = await upstream.next_event(IDLE_TIMEOUT_S)
                if isinstance(reply, h11.InformationalResponse):
                    continue  # 1xx: we sent our own 100; nothing else is expected without Upgrade
                if isinstance(reply, h11.Response):
                    started = True
                    await client.send(
                        h11.Response(
                            status_code=reply.status_code,
                            headers=_forwarded_headers(reply.headers),
                            reason=reply.reason,
                        )
                    )
                elif isinstance(reply, h11.Data | h11.EndOfMessage):
                    await client.send(reply)
                    if isinstance(reply, h11.EndOfMessage):
                        break
                else:  # the upstream closed before the end of its response
                    return False
        except (h11.RemoteProtocolError, TimeoutError) as exc:
            if not started:
                await self._reply(client, 502, f"cubicle egress: bad upstream response ({exc})")
            return False
        return client.conn.our_state is h11.DONE and client.conn.their_state is h11.DONE

    @staticmethod
    async def _reply(client: _Peer, status: int, text: str) -> None:
        """A small text/plain answer that closes the connection (best effort)."""
        body = (text + "\n").encode("utf-8", "replace")
        headers = [
            (b"Content-Type", b"text/plain; charset=utf-8"),
            (b"Content-Length", str(len(body)).encode("ascii")),
            (b"Connection", b"close"),
        ]
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError, OSError):
            await client.send(
                h11.Response(status_code=status, headers=headers),
                h11.Data(data=body),
                h11.EndOfMessage(),
            )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await asyncio.wait_for(reader.read(TUNNEL_CHUNK), IDLE_TIMEOUT_S):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError, TimeoutError):
        writer.close()


def _print_json(record: dict[str, object]) -> None:
    print(json.dumps(record, ensure_ascii=True), flush=True)


async def serve(host: str, port: int, origins: Sequence[Origin], label: str = "") -> None:
    """Listen on ``host:port`` and judge with :class:`AllowList` ``origins`` until cancelled."""
    proxy = Proxy(AllowList(origins))
    server = await asyncio.start_server(proxy.handle, host, port, limit=MAX_HEAD_BYTES)
    _print_json(
        {
            "ts": round(time.time(), 3),
            "event": "listening",
            "listen": f"{host}:{port}",
            "allow": ", ".join(f"{o.host}:{o.port or '80/443'}" for o in origins),
            **({"label": label} if label else {}),
        }
    )
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="cubicle allowlist egress proxy")
    parser.add_argument("--listen", default=f"0.0.0.0:{EGRESS_PORT}", help="HOST:PORT")
    parser.add_argument("--allow", action="append", default=[], help="allowed HOST[:PORT]")
    parser.add_argument(
        "--label",
        default="",
        help="the sandbox id, echoed in the 'listening' line (and on the command line, where "
        "the VM backend's gc finds the proxy process of a sandbox)",
    )
    args = parser.parse_args(argv)
    try:
        host, port_text = split_authority(args.listen)
        port = parse_port(port_text or "")
        origins = [parse_origin(item) for item in args.allow]
    except InvalidOrigin as exc:
        parser.error(str(exc))
    try:
        asyncio.run(serve(host, port, origins, args.label))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
