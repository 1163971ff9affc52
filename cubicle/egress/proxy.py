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

Name resolution: the system resolver, or first ``--hosts FILE`` (hosts(5) lines ``ADDRESS
NAME...``, read at every lookup) — a seam for tests, which make names resolve to their local
servers; no sandbox passes it.

Ask mode (``--policy ask:…``): a request the list does not admit is HELD while a question goes
to the host side over the control socket (``--control PATH``, or an inherited listening socket
``--control-fd N``); approve lets it through and is remembered (this proxy = this sandbox), deny
refuses it and is remembered too, cancel refuses this once, and no answer within
``--ask-timeout`` seconds (default 120) refuses it (``by: "timeout"``). Concurrent requests for
one origin share one question. The control socket is never reachable from the guest (on Docker
it lives in the proxy container's own tmpfs and the host reaches it through ``docker exec
egress.pyz --relay PATH``; on VMs it is a root-only unix socket in the sandbox's run folder).
Control protocol (version 1), JSON lines both ways::

    proxy → host  {"type": "hello", "version": 1, "policy": "...", "timeout": 120.0, "label": ...,
                   "pending": ["q1", ...]}      (the ids of the question lines that follow it)
                  {"type": "question", "id": "q1", "origin": "https://example.com",
                   "host": ..., "port": 443, "method": "CONNECT", "target": ..., "client": ...,
                   "reason": ..., "asked_at": ts, "deadline": ts}      (pending ones after hello)
                  {"type": "decided", "id": "q1", "origin": ..., "host": ..., "port": ...,
                   "answer": "approve"|"deny"|"cancel"|"timeout", "by": "...", "at": ts}
                  {"type": "reply", "ref": N, "ok": true} | {..., "ok": false, "error": "..."}
    host → proxy  {"op": "answer", "ref": N, "id": "q1", "answer": "approve", "by": "alice"}

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

Judges: the proxy asks a :data:`Judge` — an async callable from a :class:`RequestInfo` to a
:class:`Decision` — about each request, and holds the client's connection while it waits.
:class:`PolicyJudge` applies a :class:`Policy`; :class:`AskJudge` puts :class:`Questions`
around it for ask mode.
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
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from html import escape as html_escape
from typing import Final, Literal
from urllib.parse import urlsplit, urlunsplit

import h11

from cubicle.egress.origins import (
    Decision,
    InvalidHost,
    InvalidOrigin,
    IPNetwork,
    Origin,
    Policy,
    decide,
    forbidden_address,
    is_ip,
    normalize_host,
    parse_origin,
    parse_permit,
    parse_policy,
    parse_port,
    split_authority,
)

__all__ = [
    "EGRESS_PORT",
    "AllowList",
    "Answer",
    "AskJudge",
    "BadRequest",
    "HostsFile",
    "Judge",
    "PolicyJudge",
    "Proxy",
    "Questions",
    "RequestInfo",
    "Resolver",
    "main",
    "origin_text",
    "parse_target",
]

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


class PolicyJudge:
    """The judge of ``--policy``/``--allow``: :func:`decide` against a fixed :class:`Policy`;
    ``ask`` verdicts become refusals (use :class:`AskJudge` to ask instead)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    async def __call__(self, request: RequestInfo) -> Decision:
        decision = decide(self.policy, request.host, request.port)
        if decision.verdict == "ask":
            return Decision("refuse", decision.host, decision.port, decision.reason)
        return decision


class AllowList(PolicyJudge):
    """The judge of a plain allow list (``--allow``)."""

    def __init__(self, origins: Iterable[Origin]) -> None:
        super().__init__(Policy("allow", tuple(origins)))
        self.origins = self.policy.origins


Answer = Literal["approve", "deny", "cancel", "timeout"]
ANSWERS: Final = ("approve", "deny", "cancel")
"""What a person may answer (``timeout`` is the proxy's own)."""
MAX_PENDING: Final = 32
"""Distinct origins that may wait for an answer at once; more are refused (a guest flood)."""
MAX_QUESTIONS_KEPT: Final = 1000
"""Questions kept by id (pending ones always); older decided ones are forgotten."""
MAX_BY_CHARS: Final = 300
"""The longest ``by`` an answer may carry (who answered, e.g. a policy file's rule)."""
MAX_CONTROL_LINE: Final = 64 * 1024


def origin_text(method: str, host: str, port: int) -> str:
    """How a question names an origin: ``https://host`` for CONNECT, ``http://host`` otherwise,
    the port shown when it is not the scheme's default."""
    scheme, default = ("https", 443) if method == "CONNECT" else ("http", 80)
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port == default else f"{scheme}://{shown}:{port}"


@dataclass
class _Question:
    id: str
    origin: str
    host: str
    port: int
    method: str
    target: str
    client: str
    reason: str
    asked_at: float
    deadline: float
    outcome: asyncio.Future[tuple[Answer, str]]
    timer: asyncio.TimerHandle | None = None

    def message(self) -> dict[str, object]:
        return {
            "type": "question",
            "id": self.id,
            "origin": self.origin,
            "host": self.host,
            "port": self.port,
            "method": self.method,
            "target": self.target[:LOG_TARGET_CHARS],
            "client": self.client,
            "reason": self.reason,
            "asked_at": round(self.asked_at, 3),
            "deadline": round(self.deadline, 3),
        }


class Questions:
    """Ask mode's questions: held requests by origin, answers from the control socket.

    Origins are ``(host, port)``. Approve and deny are remembered for the life of the proxy;
    cancel and timeout are not (the next request asks again).
    """

    def __init__(self, timeout: float, emit: Callable[[dict[str, object]], None]) -> None:
        self.timeout = timeout
        self.emit = emit
        self.pending: dict[tuple[str, int], _Question] = {}
        self.by_id: dict[str, _Question] = {}
        self.remembered: dict[tuple[str, int], tuple[Answer, str]] = {}
        self.listeners: set[asyncio.StreamWriter] = set()
        self._count = 0

    async def ask(self, request: RequestInfo, decision: Decision) -> Decision:
        """Hold until the origin of ``decision`` (verdict ``ask``) is answered; the decision."""
        key = (decision.host, decision.port)
        if key in self.remembered:
            answer, by = self.remembered[key]
            verb = "approved" if answer == "approve" else "denied"
            return Decision(
                "allow" if answer == "approve" else "refuse",
                decision.host,
                decision.port,
                f"{verb} earlier by {by}",
                guard=True,
                by=by,
            )
        question = self.pending.get(key)
        if question is None:
            if len(self.pending) >= MAX_PENDING:
                return Decision(
                    "refuse",
                    decision.host,
                    decision.port,
                    f"{MAX_PENDING} questions already wait for an answer",
                )
            question = self._open(request, decision)
        answer, by = await asyncio.shield(question.outcome)
        reason = {
            "approve": f"approved by {by}",
            "deny": f"denied by {by}",
            "cancel": f"cancelled by {by}",
            "timeout": f"no answer within {self.timeout:g} s",
        }[answer]
        return Decision(
            "allow" if answer == "approve" else "refuse",
            decision.host,
            decision.port,
            reason,
            guard=True,
            by=by,
        )

    def _open(self, request: RequestInfo, decision: Decision) -> _Question:
        self._count += 1
        now = time.time()
        loop = asyncio.get_running_loop()
        question = _Question(
            id=f"q{self._count}",
            origin=origin_text(request.method, decision.host, decision.port),
            host=decision.host,
            port=decision.port,
            method=request.method,
            target=request.target,
            client=request.client,
            reason=decision.reason,
            asked_at=now,
            deadline=now + self.timeout,
            outcome=loop.create_future(),
        )
        question.timer = loop.call_later(
            self.timeout, self._resolve, question, "timeout", "timeout"
        )
        self.pending[(question.host, question.port)] = question
        self.by_id[question.id] = question
        if len(self.by_id) > MAX_QUESTIONS_KEPT:  # forget the oldest decided ones (bounded)
            for old in [q for q in self.by_id.values() if q.outcome.done()][:MAX_PENDING]:
                del self.by_id[old.id]
        message = question.message()
        self.emit({"ts": round(now, 3), "event": "question", **_without_type(message)})
        self._broadcast(message)
        return question

    def answer(self, question_id: str, answer: str, by: str) -> str | None:
        """Apply a person's answer; ``None`` when applied, else why not."""
        if answer not in ANSWERS:
            return f"answer must be one of {', '.join(ANSWERS)}, got {answer!r}"
        question = self.by_id.get(question_id)
        if question is None:
            return f"no question {question_id!r}"
        if question.outcome.done():
            done, who = question.outcome.result()
            return f"question {question_id} is already decided ({done} by {who})"
        self._resolve(question, answer, by)  # type: ignore[arg-type]
        return None

    def _resolve(self, question: _Question, answer: Answer, by: str) -> None:
        if question.outcome.done():
            return
        if question.timer is not None:
            question.timer.cancel()
        question.outcome.set_result((answer, by))
        key = (question.host, question.port)
        if self.pending.get(key) is question:
            del self.pending[key]
        if answer in ("approve", "deny"):
            self.remembered[key] = (answer, by)
        now = round(time.time(), 3)
        message: dict[str, object] = {
            "type": "decided",
            "id": question.id,
            "origin": question.origin,
            "host": question.host,
            "port": question.port,
            "answer": answer,
            "by": by,
            "at": now,
        }
        self.emit({"ts": now, "event": "answer", **_without_type(message)})
        self._broadcast(message)

    def _broadcast(self, message: dict[str, object]) -> None:
        line = _control_line(message)
        for writer in list(self.listeners):
            if writer.is_closing():
                self.listeners.discard(writer)
            else:
                writer.write(line)

    async def serve_control(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: dict[str, object]
    ) -> None:
        """One host-side controller: hello, the pending questions, then answers until EOF."""
        pending = list(self.pending.values())
        ids = [question.id for question in pending]
        writer.write(_control_line({"type": "hello", "version": 1, **hello, "pending": ids}))
        for question in pending:
            writer.write(_control_line(question.message()))
        self.listeners.add(writer)
        try:
            await writer.drain()
            while line := await reader.readline():
                writer.write(_control_line(self._command(line)))
                await writer.drain()
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            self.listeners.discard(writer)
            writer.close()

    def _command(self, line: bytes) -> dict[str, object]:
        try:
            message = json.loads(line)
        except ValueError:
            return {"type": "reply", "ref": None, "ok": False, "error": "not a JSON line"}
        if not isinstance(message, dict):
            return {"type": "reply", "ref": None, "ok": False, "error": "not a JSON object"}
        ref = message.get("ref")
        if message.get("op") != "answer":
            return {"type": "reply", "ref": ref, "ok": False, "error": "unknown op"}
        by = message.get("by")
        if not isinstance(by, str) or not by.strip() or len(by) > MAX_BY_CHARS:
            why = f"'by' must name who answers (1-{MAX_BY_CHARS} characters)"
            return {"type": "reply", "ref": ref, "ok": False, "error": why}
        error = self.answer(str(message.get("id")), str(message.get("answer")), by.strip())
        if error is not None:
            return {"type": "reply", "ref": ref, "ok": False, "error": error}
        return {"type": "reply", "ref": ref, "ok": True}


def _without_type(message: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in message.items() if key != "type"}


def _control_line(message: dict[str, object]) -> bytes:
    return (json.dumps(message, ensure_ascii=True) + "\n").encode("ascii")


class AskJudge:
    """Ask mode: :func:`decide`, and :class:`Questions` for what the list does not admit."""

    def __init__(
        self, policy: Policy, questions: Questions, permit: Sequence[IPNetwork] = ()
    ) -> None:
        self.policy = policy
        self.questions = questions
        self.permit = tuple(permit)

    async def __call__(self, request: RequestInfo) -> Decision:
        decision = decide(self.policy, request.host, request.port)
        if decision.verdict != "ask":
            return decision
        why = forbidden_address(decision.host, self.permit) if is_ip(decision.host) else None
        if why is not None:  # never worth a question: an approval could not be used
            return Decision("refuse", decision.host, decision.port, f"{why}; never asked")
        return await self.questions.ask(request, decision)


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
                _open_upstream(decision, self.permit, self.resolve), CONNECT_TIMEOUT_S
            )
        except _ForbiddenAddress as exc:
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
            authority = _authority(decision.host, port)
            if sent_host and sent_host != [authority.encode("ascii")]:
                shown = b", ".join(sent_host).decode("latin-1")[:LOG_TARGET_CHARS]
                decision = replace(
                    decision,
                    reason=f"{decision.reason}; Host header {shown!r} replaced by {authority!r}",
                )
            self.log(decision, address, method, target)
            return await self._forward(client, upstream, event, authority, path)
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
        where = _authority(decision.host, decision.port) if decision.host else "this origin"
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


class _ForbiddenAddress(Exception):
    """A guarded destination resolved to an address it may not reach."""


SocketAddress = tuple[socket.AddressFamily, tuple[str, int] | tuple[str, int, int, int]]
"""One address to connect to: its family and its socket address."""
Resolver = Callable[[str, int], Awaitable[list[SocketAddress]]]
"""Name resolution: ``(host, port)`` to the socket addresses to try, in order."""


async def system_resolver(host: str, port: int) -> list[SocketAddress]:
    """The system's resolver (``getaddrinfo``; an IP literal is its own answer)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys((info[0], info[4]) for info in infos))  # type: ignore[misc]


class HostsFile:
    """``--hosts FILE``: names listed in a hosts(5)-format file resolve to its addresses, every
    other name through :func:`system_resolver`. The file is read at every lookup (as glibc reads
    /etc/hosts), so a test can add names while the proxy runs. A seam for tests: the proxy's
    own resolution path, with the answers a test needs (a name resolving to a private address)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lookup()  # a missing or unreadable file is an error now, not at the first request

    def lookup(self) -> dict[str, list[str]]:
        """``{normalised name: [addresses in file order]}``.

        :raises OSError: the file cannot be read. :raises InvalidOrigin: a bad line (named).
        """
        names: dict[str, list[str]] = {}
        with open(self.path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                fields = line.partition("#")[0].split()
                if not fields:
                    continue
                if len(fields) < 2 or not is_ip(fields[0]):
                    raise InvalidOrigin(
                        f"{self.path}:{number}: give 'ADDRESS NAME...', got {line.strip()!r}"
                    )
                for name in fields[1:]:
                    names.setdefault(normalize_host(name), []).append(fields[0])
        return names

    async def __call__(self, host: str, port: int) -> list[SocketAddress]:
        try:
            names = self.lookup()
        except (OSError, InvalidOrigin) as exc:  # changed since the start: this request fails
            raise OSError(f"--hosts {self.path}: {exc}") from None
        try:
            addresses = names.get(normalize_host(host))
        except InvalidHost:
            addresses = None
        if not addresses:
            return await system_resolver(host, port)
        found: list[SocketAddress] = []
        for address in addresses:
            found += await system_resolver(address, port)
        return found


async def _open_upstream(
    decision: Decision, permit: Sequence[IPNetwork], resolve: Resolver
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the decided destination: resolve it once; for a guarded one check every
    address (:func:`forbidden_address`); then connect to exactly those socket addresses, in
    order (never by name again: what is connected to is what was checked)."""
    addresses = await resolve(decision.host, decision.port)
    if decision.guard:
        for _family, sockaddr in addresses:
            why = forbidden_address(sockaddr[0], permit)
            if why is not None:
                raise _ForbiddenAddress(f"{decision.host} resolves to {why}")
    loop = asyncio.get_running_loop()
    error: OSError = OSError(f"{decision.host} has no address")
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:  # cancelled (the connect timeout): no socket left behind
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)
    raise error


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
    host: str,
    port: int,
    policy: Policy | Sequence[Origin],
    label: str = "",
    *,
    ask_timeout: float = 120.0,
    control: str | socket.socket | None = None,
    permit: Sequence[IPNetwork] = (),
    resolve: Resolver | None = None,
) -> None:
    """Listen on ``host:port`` and judge by ``policy`` until cancelled. In ask mode the
    control socket (a path to create, or a listening unix socket) takes the answers.
    ``permit`` and ``resolve``: see :class:`Proxy`."""
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
    server = await asyncio.start_server(proxy.handle, host, port, limit=MAX_HEAD_BYTES)
    _print_json(
        {
            "ts": round(time.time(), 3),
            "event": "listening",
            "listen": f"{host}:{port}",
            "policy": str(rules),
            "allow": ", ".join(f"{o.host}:{o.port or '80/443'}" for o in rules.origins),
            **({"ask_timeout": ask_timeout} if rules.mode == "ask" else {}),
            **({"allow_internal": [str(net) for net in permit]} if permit else {}),
            **({"label": label} if label else {}),
        }
    )
    async with server:
        if control_server is None:
            await server.serve_forever()
        else:
            async with control_server:
                await server.serve_forever()


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
    parser.add_argument("--listen", default=f"0.0.0.0:{EGRESS_PORT}", help="HOST:PORT")
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
        host, port_text = split_authority(args.listen)
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
    control: str | socket.socket | None = args.control
    if args.control_fd is not None:
        control = socket.socket(fileno=args.control_fd)
    if policy.mode == "ask" and control is None:
        parser.error("ask mode needs --control PATH or --control-fd N")
    try:
        asyncio.run(serve(host, port, policy, args.label, ask_timeout=args.ask_timeout,
                          control=control, permit=permit, resolve=resolve))  # fmt: skip
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
