"""The egress proxy of ``allow:``, ``block:`` and ``ask:`` sandboxes.

Runs OUTSIDE the guest: on Docker in its own container attached to the sandbox's internal network
and to a normal bridge (``cubicle.orchestrator.providers.docker.network``, with the image's system
``python3 -I``); on the VM backend as a host process (``python3 -I`` as ``nobody``) bound to the
sandbox's isolated bridge (``cubicle.orchestrator.providers.vm.network``, which passes ``--label
SANDBOX_ID`` so gc can find the process). The guest's only way out is this proxy
(``HTTP_PROXY``/``HTTPS_PROXY``). It needs the standard library and h11 only (Debian
``python3-h11``: the guest image and the host install it) and ships as ONE file without the rest
of cubicle — a zipapp of this package (:mod:`cubicle.egress.bundle`):
``python3 -I egress.pyz --listen 0.0.0.0:3128 --allow HOST[:PORT] ...`` (``python -m
cubicle.egress`` is the same program).

The one definition
------------------
Origins, policies and the decision are :mod:`cubicle.egress.origins`, used here, by policy
parsing (:mod:`cubicle.orchestrator.network`) and by approval policy files, so the policy a user
writes and the proxy that enforces it cannot disagree.

Policy (:func:`parse_policy`, :func:`decide`) — the text ``--policy`` receives::

    allow:ENTRY,...      only these
    block:NAME,...       everything except these
    ask:[ENTRY,...]      these, and a person is asked about anything else

- ``ENTRY`` is ``NAME`` (a domain: that host and every subdomain, ports 80 and 443),
  ``HOST:PORT`` (exactly that host, that port: no subdomains), ``IP`` / ``[V6]`` (that address,
  ports 80 and 443) or ``IP:PORT`` / ``[V6]:PORT``;
- a ``block:`` entry is a ``NAME`` (that domain and its subdomains) or an IP literal, on every
  port; it takes no port; allow and block lists cannot be combined (one mode per policy);
- a request names ``host:port`` — ``CONNECT host:port`` (https and anything tunnelled) or an
  absolute URI ``http://host[:port]/path`` (plain http, any method);
- hosts are normalised (IP literal → canonical text; name → lower-case IDNA A-labels, one
  trailing dot dropped); a domain matches by whole labels: ``api.example.com`` is in
  ``example.com``, ``example.com.evil.test``, ``badexample.com``, ``evil.test/example.com`` and
  ``user@evil.test`` are not;
- ports are ASCII digits 1-65535;
- a destination admitted by a rule that did not name it exactly — a name under a domain rule
  (the domain or a subdomain), anything a block list lets through, an origin a person approved —
  must resolve to public addresses only (:func:`forbidden_address`: not loopback, link-local /
  cloud metadata, private RFC 1918, CGNAT, unique-local, multicast, reserved … nor an IPv6 form
  of such an IPv4 address): the proxy resolves the name once, checks every address and connects
  to exactly the checked socket address (no second resolution: no DNS rebinding). An IP literal
  or ``HOST:PORT`` entry names its destination exactly and is not guarded (``allow:
  127.0.0.1:8080`` reaches a local server). ``--allow-internal NET`` (repeatable) lets guarded
  destinations reach an internal network an operator names (never loopback, link-local,
  unspecified or multicast); no sandbox passes it;
- the request head (request line and headers, up to and including the empty line) may have
  :data:`MAX_HEAD_BYTES` bytes, counted exactly across reads; one more is refused (431);
- a refusal tells the guest only that the policy refused the origin (403, one text for a rule,
  a person, a timeout or the address guard); who refused and why is in the log;
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
sandbox's ``egress.log``; read back with ``cubicle logs ID``), malformed requests included, with
who decided (``"by"``: ``policy``, a person's name, ``timeout`` …)::

    {"ts": 1700000000.0, "decision": "allow"|"refuse", "method": "CONNECT", "host": "...",
     "port": 443, "reason": "...", "client": "10.0.0.2", "target": "...", "by": "policy"}

and in ask mode each question and its answer is a line too (``"event": "question"`` /
``"event": "answer"``).

Who decides is :mod:`cubicle.egress.questions` (the policy, or a person in ask mode); name
resolution and the address guard are :mod:`cubicle.egress.upstream`; request targets
:mod:`cubicle.egress.targets`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from html import escape as html_escape
from typing import Final

import h11

from cubicle.egress.origins import (
    Decision,
    InvalidOrigin,
    IPNetwork,
    Origin,
    Policy,
    parse_origin,
    parse_permit,
    parse_policy,
    parse_port,
    split_authority,
)
from cubicle.egress.questions import (
    MAX_CONTROL_LINE,
    AskJudge,
    Judge,
    PolicyJudge,
    Questions,
    RequestInfo,
)
from cubicle.egress.targets import (
    LOG_TARGET_CHARS,
    BadRequest,
    authority,
    forwarded_headers,
    parse_target,
)
from cubicle.egress.upstream import (
    ForbiddenAddress,
    HostsFile,
    Resolver,
    open_upstream,
    system_resolver,
)
from cubicle_guest.egress_mux import Mux, MuxError

__all__ = ["EGRESS_PORT", "MAX_HEAD_BYTES", "Proxy", "main", "relay", "serve"]

EGRESS_PORT: Final = 3128
"""The port the proxy listens on, on every backend."""
MAX_HEAD_BYTES: Final = 64 * 1024
"""The most bytes a request head may have — request line, headers and the empty line that ends
them, counted across reads; a head of one byte more is refused (431)."""
_HEAD_END: Final = re.compile(rb"\n\r?\n")
"""The end of a head, as h11 finds it (lines end in CRLF or LF)."""
HEAD_TIMEOUT_S: Final = 30.0
"""How long a client may take to send a complete request head."""
IDLE_TIMEOUT_S: Final = 300.0
"""How long a body, a response or a tunnel may stay silent."""
CONNECT_TIMEOUT_S: Final = 15.0
CHUNK: Final = 16 * 1024
"""Read size while h11 parses."""
TUNNEL_CHUNK: Final = 64 * 1024
"""Read size of an established tunnel (opaque bytes)."""

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
        """The next h11 event, reading as needed (h11 raises ``RemoteProtocolError``; so does a
        request head over :data:`MAX_HEAD_BYTES`)."""
        while True:
            self._check_head()
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            data = await asyncio.wait_for(self.reader.read(CHUNK), timeout)
            self.conn.receive_data(data)

    def _check_head(self) -> None:
        """A client's next request head (what h11 holds while it waits for one) must end within
        :data:`MAX_HEAD_BYTES` bytes; h11's own limit applies only to a head still incomplete
        after a read, so a larger one completed by the same read would pass."""
        if self.conn.our_role is not h11.SERVER or self.conn.their_state is not h11.IDLE:
            return
        buffered, _closed = self.conn.trailing_data
        end = _HEAD_END.search(buffered)
        size = len(buffered) if end is None else end.end()
        if size > MAX_HEAD_BYTES:
            raise h11.RemoteProtocolError(
                f"request head larger than {MAX_HEAD_BYTES} bytes", error_status_hint=431
            )

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
    :param permit: internal networks guarded destinations may reach (``--allow-internal``).
    :param resolve: name resolution (default: the system's; ``--hosts`` gives a :class:`HostsFile`).
    """

    def __init__(
        self,
        judge: Judge,
        emit: Callable[[dict[str, object]], None] | None = None,
        *,
        permit: Sequence[IPNetwork] = (),
        resolve: Resolver | None = None,
    ) -> None:
        self.judge = judge
        self.emit = emit or _print_json
        self.permit = tuple(permit)
        self.resolve = resolve or system_resolver

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
                "by": decision.by,
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
            return await self._refuse(client, decision, address, method, target)
        try:
            up_reader, up_writer = await asyncio.wait_for(
                open_upstream(decision, self.permit, self.resolve), CONNECT_TIMEOUT_S
            )
        except ForbiddenAddress as exc:
            refused = replace(decision, verdict="refuse", reason=f"{decision.reason}; but {exc}")
            return await self._refuse(client, refused, address, method, target)
        except (OSError, TimeoutError) as exc:
            failed = replace(decision, reason=f"{decision.reason}; upstream: {exc}")
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
            named = authority(decision.host, port)
            if sent_host and sent_host != [named.encode("ascii")]:
                shown = b", ".join(sent_host).decode("latin-1")[:LOG_TARGET_CHARS]
                decision = replace(
                    decision,
                    reason=f"{decision.reason}; Host header {shown!r} replaced by {named!r}",
                )
            self.log(decision, address, method, target)
            return await self._forward(client, upstream, event, named, path)
        finally:
            await upstream.close()

    async def _refuse(
        self, client: _Peer, decision: Decision, address: str, method: str, target: str
    ) -> bool:
        """Log a refusal (with its reason and who decided) and answer it: 403, and for plain
        http a page. The guest learns only that this sandbox's policy refused the origin — the
        same status and text whether a rule, a person, a timeout or the address guard refused:
        who said no, and what a name resolves to, stay in the log."""
        self.log(decision, address, method, target)
        where = authority(decision.host, decision.port) if decision.host else "this origin"
        text = f"cubicle egress: {where} refused by this sandbox's network policy"
        if method == "CONNECT":
            await self._reply(client, 403, text)
        else:
            await self._reply(client, 403, text, html=_refusal_page(where))
        return False

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
            *forwarded_headers(request.headers, extra_drop=(b"host",)),
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
                            headers=forwarded_headers(reply.headers),
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
    async def _reply(client: _Peer, status: int, text: str, *, html: str | None = None) -> None:
        """A small text/plain (or ``html``) answer that closes the connection (best effort)."""
        body = (text + "\n" if html is None else html).encode("utf-8", "replace")
        kind = b"text/plain" if html is None else b"text/html"
        headers = [
            (b"Content-Type", kind + b"; charset=utf-8"),
            (b"Cache-Control", b"no-store"),
            (b"Content-Length", str(len(body)).encode("ascii")),
            (b"Connection", b"close"),
        ]
        with contextlib.suppress(h11.LocalProtocolError, ConnectionError, OSError):
            await client.send(
                h11.Response(status_code=status, headers=headers),
                h11.Data(data=body),
                h11.EndOfMessage(),
            )


def _refusal_page(where: str) -> str:
    """The page a browser shows for a refused plain-http request (the origin escaped; nothing
    about who refused or why: see :meth:`Proxy._refuse`)."""
    esc = html_escape
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Access to {esc(where)} refused</title></head><body>"
        f"<h1>cubicle egress: {esc(where)} refused by this sandbox's network policy</h1>"
        "<p>The policy does not let the guest reach this origin.</p>"
        "</body></html>\n"
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


async def serve(
    host: str | None,
    port: int,
    policy: Policy | Sequence[Origin],
    label: str = "",
    *,
    ask_timeout: float = 120.0,
    control: str | socket.socket | None = None,
    permit: Sequence[IPNetwork] = (),
    resolve: Resolver | None = None,
    channel: socket.socket | None = None,
) -> None:
    """Listen on ``host:port`` (none when ``host`` is None) and judge by ``policy`` until
    cancelled. In ask mode the control socket (a path to create, or a listening unix socket)
    takes the answers. ``channel``: a listening unix socket whose every connection carries many
    client connections as :mod:`cubicle_guest.egress_mux` streams (a VM guest's virtio-serial
    port: the hypervisor connects to it). ``permit`` and ``resolve``: see :class:`Proxy`."""
    if host is None and channel is None:
        raise ValueError("serve needs a TCP address or a channel socket to listen on")
    rules = policy if isinstance(policy, Policy) else Policy("allow", tuple(policy))
    questions: Questions | None = None
    judge: Judge = PolicyJudge(rules)
    control_server: asyncio.AbstractServer | None = None
    if rules.mode == "ask":
        questions = Questions(ask_timeout, _print_json)
        judge = AskJudge(rules, questions, permit)
        hello: dict[str, object] = {"policy": str(rules), "timeout": ask_timeout, "label": label}

        async def on_control(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            assert questions is not None
            await questions.serve_control(r, w, hello)

        if isinstance(control, socket.socket):
            control_server = await asyncio.start_unix_server(
                on_control, sock=control, limit=MAX_CONTROL_LINE
            )
        elif control is not None:
            old = os.umask(0o077)  # the socket file: owner only
            try:
                control_server = await asyncio.start_unix_server(
                    on_control, control, limit=MAX_CONTROL_LINE
                )
            finally:
                os.umask(old)
    proxy = Proxy(judge, permit=permit, resolve=resolve)
    servers: list[asyncio.AbstractServer] = []
    if host is not None:
        servers.append(await asyncio.start_server(proxy.handle, host, port, limit=MAX_HEAD_BYTES))
    if channel is not None:
        servers.append(await asyncio.start_unix_server(_channel_handler(proxy), sock=channel))
    if control_server is not None:
        servers.append(control_server)
    _print_json(
        {
            "ts": round(time.time(), 3),
            "event": "listening",
            "listen": f"{host}:{port}" if host is not None else "channel",
            "policy": str(rules),
            "allow": ", ".join(f"{o.host}:{o.port or '80/443'}" for o in rules.origins),
            **({"ask_timeout": ask_timeout} if rules.mode == "ask" else {}),
            **({"allow_internal": [str(net) for net in permit]} if permit else {}),
            **({"label": label} if label else {}),
        }
    )
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            await stack.enter_async_context(server)
        await asyncio.gather(*(server.serve_forever() for server in servers))


def _channel_handler(
    proxy: Proxy,
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """Serve one channel connection: each stream the guest opens becomes a client connection of
    ``proxy`` (one end of a socket pair; the other end is the stream's)."""

    async def accept(_hello: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=ours, limit=MAX_HEAD_BYTES)
        client_reader, client_writer = await asyncio.open_connection(sock=theirs)
        task = asyncio.ensure_future(proxy.handle(client_reader, client_writer))
        _CHANNEL_TASKS.add(task)
        task.add_done_callback(_CHANNEL_TASKS.discard)
        return reader, writer

    async def on_channel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await Mux(reader, writer, accept).run()
        except MuxError as exc:
            _print_json({"ts": round(time.time(), 3), "event": "channel_error", "error": str(exc)})
        finally:
            writer.close()

    return on_channel


_CHANNEL_TASKS: set[asyncio.Task[None]] = set()
"""Client connections served from channel streams (kept so they are not collected mid-run)."""


def relay(path: str) -> int:
    """``--relay PATH``: connect to the control socket and copy stdin → socket → stdout (how the
    host reaches a Docker proxy's control socket through ``docker exec``)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        print(f"cubicle egress relay: cannot connect to {path}: {exc}", file=sys.stderr)
        return 1

    def upward() -> None:
        with contextlib.suppress(OSError):
            while data := os.read(0, 65536):
                sock.sendall(data)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=upward, daemon=True).start()
    with contextlib.suppress(OSError):
        while data := sock.recv(65536):
            os.write(1, data)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="cubicle egress proxy")
    parser.add_argument(
        "--listen", help=f"HOST:PORT (default 0.0.0.0:{EGRESS_PORT}; none with only --channel-fd)"
    )
    parser.add_argument(
        "--channel-fd",
        type=int,
        help="an inherited listening unix socket whose connections carry many client "
        "connections each (cubicle_guest.egress_mux: a VM guest's virtio-serial port)",
    )
    parser.add_argument("--allow", action="append", default=[], help="allowed HOST[:PORT]")
    parser.add_argument(
        "--policy", help="allow:ENTRY,... | block:NAME,... | ask:[ENTRY,...] (not with --allow)"
    )
    parser.add_argument(
        "--ask-timeout", type=float, default=120.0, help="seconds a question waits (ask mode)"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--control", help="ask mode: create the control socket at this path")
    where.add_argument(
        "--control-fd", type=int, help="ask mode: an inherited listening unix socket"
    )
    parser.add_argument(
        "--allow-internal",
        action="append",
        default=[],
        metavar="NET",
        help="an internal network (e.g. 10.1.0.0/16) that names under domain rules, block-list "
        "passes and ask approvals may reach (default: public addresses only; never loopback, "
        "link-local, unspecified or multicast)",
    )
    parser.add_argument(
        "--hosts",
        metavar="FILE",
        help="resolve the names in this hosts(5)-format file to its addresses first (tests)",
    )
    parser.add_argument("--relay", help="relay stdin/stdout to this control socket and exit")
    parser.add_argument(
        "--label",
        default="",
        help="the sandbox id, echoed in the 'listening' line (and on the command line, where "
        "the VM backend's gc finds the proxy process of a sandbox)",
    )
    args = parser.parse_args(argv)
    if args.relay:
        return relay(args.relay)
    try:
        host: str | None = None
        port = EGRESS_PORT
        if args.listen is not None or args.channel_fd is None:
            host, port_text = split_authority(args.listen or f"0.0.0.0:{EGRESS_PORT}")
            port = parse_port(port_text or "")
        if args.policy is not None and args.allow:
            parser.error("give --policy or --allow, not both")
        if args.policy is not None:
            policy = parse_policy(args.policy)
        else:
            policy = Policy("allow", tuple(sorted({parse_origin(i) for i in args.allow})))
        permit = [parse_permit(text) for text in args.allow_internal]
        resolve = None if args.hosts is None else HostsFile(args.hosts)
    except InvalidOrigin as exc:
        parser.error(str(exc))
    except OSError as exc:
        parser.error(f"--hosts {args.hosts}: {exc.strerror or exc}")
    if not 0 < args.ask_timeout <= 86400:
        parser.error(f"--ask-timeout must be within (0, 86400] seconds, got {args.ask_timeout}")
    channel = None if args.channel_fd is None else socket.socket(fileno=args.channel_fd)
    control: str | socket.socket | None = args.control
    if args.control_fd is not None:
        control = socket.socket(fileno=args.control_fd)
    if policy.mode == "ask" and control is None:
        parser.error("ask mode needs --control PATH or --control-fd N")
    try:
        asyncio.run(serve(host, port, policy, args.label, ask_timeout=args.ask_timeout,
                          control=control, permit=permit, resolve=resolve,
                          channel=channel))  # fmt: skip
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
