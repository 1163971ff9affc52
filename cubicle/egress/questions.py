"""Who decides a request the egress proxy sees: a fixed policy, or — in ask mode — a person,
asked over the control socket. Both sides of the control protocol take its limits from here
(:mod:`cubicle.orchestrator.origin_questions` is the host side).

Judges: the proxy asks a :data:`Judge` — an async callable from a :class:`RequestInfo` to a
:class:`Decision` — about each request, and holds the client's connection while it waits.
:class:`PolicyJudge` applies a :class:`Policy`; :class:`AskJudge` puts :class:`Questions`
around it for ask mode.

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
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from cubicle.egress.origins import (
    Decision,
    IPNetwork,
    Origin,
    Policy,
    decide,
    forbidden_address,
    is_ip,
)
from cubicle.egress.targets import LOG_TARGET_CHARS

__all__ = [
    "ANSWERS",
    "CONTROL_VERSION",
    "MAX_BY_CHARS",
    "MAX_CONTROL_LINE",
    "MAX_PENDING",
    "MAX_QUESTIONS_KEPT",
    "AllowList",
    "Answer",
    "AskJudge",
    "DecisionRecord",
    "Judge",
    "PersonAnswer",
    "PolicyJudge",
    "QuestionRecord",
    "Questions",
    "RequestInfo",
    "origin_text",
]


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


CONTROL_VERSION: Final = 1
"""The control protocol's version (the ``hello`` line says it; the host side checks it)."""
PersonAnswer = Literal["approve", "deny", "cancel"]
Answer = Literal["approve", "deny", "cancel", "timeout"]
ANSWERS: Final[tuple[PersonAnswer, ...]] = ("approve", "deny", "cancel")
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


@dataclass(frozen=True)
class QuestionRecord:
    """One question as the control protocol carries it (``{"type": "question", ...}``), the
    one definition of its fields for both sides (the host's is
    :class:`cubicle.orchestrator.origin_questions.OriginQuestion`). ``asked_at``/``deadline``:
    Unix times of the proxy's clock."""

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

    def message(self) -> dict[str, object]:
        """The ``question`` line (the target cut to :data:`LOG_TARGET_CHARS`)."""
        return {**_line("question", self), "target": self.target[:LOG_TARGET_CHARS]}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> QuestionRecord:
        """The record of a ``question`` line.

        :raises KeyError, TypeError, ValueError: a field is missing or of the wrong kind.
        """
        return cls(**_values(cls, message))


@dataclass(frozen=True)
class DecisionRecord:
    """How a question ended, as the control protocol carries it (``{"type": "decided", ...}``),
    the one definition of its fields for both sides (the host's is
    :class:`cubicle.orchestrator.origin_questions.OriginDecision`). ``answer``: ``approve``,
    ``deny``, ``cancel`` or ``timeout``; ``by``: who answered (``timeout`` for the proxy's own);
    ``at``: Unix time of the proxy's clock."""

    id: str
    origin: str
    host: str
    port: int
    answer: str
    by: str
    at: float

    def message(self) -> dict[str, object]:
        """The ``decided`` line."""
        return _line("decided", self)

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> DecisionRecord:
        """The record of a ``decided`` line.

        :raises KeyError, TypeError, ValueError: a field is missing or of the wrong kind.
        """
        return cls(**_values(cls, message))


_KINDS: Final[Mapping[str, Callable[[Any], object]]] = {"str": str, "int": int, "float": float}
"""How a record's field type (as annotated: a string) converts a control line's value."""


def _line(kind: str, record: QuestionRecord | DecisionRecord) -> dict[str, object]:
    """A record as a control line: ``type`` first, then its fields in order, times to ms."""
    fields = dataclasses.asdict(record)
    return {
        "type": kind,
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in fields.items()},
    }


def _values(
    record: type[QuestionRecord | DecisionRecord], message: Mapping[str, Any]
) -> dict[str, Any]:
    """The values of ``record``'s fields in a control line, each converted to its type."""
    return {
        field.name: _KINDS[str(field.type)](message[field.name])
        for field in dataclasses.fields(record)
    }


@dataclass
class _Question:
    """A question the proxy holds requests on: its record, its outcome and its timeout."""

    record: QuestionRecord
    outcome: asyncio.Future[tuple[Answer, str]]
    timer: asyncio.TimerHandle | None = None

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def origin(self) -> str:
        return self.record.origin

    @property
    def host(self) -> str:
        return self.record.host

    @property
    def port(self) -> int:
        return self.record.port

    def message(self) -> dict[str, object]:
        return self.record.message()


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
        record = QuestionRecord(
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
        )
        question = _Question(record, outcome=loop.create_future())
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
        self._resolve(question, answer, by)
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
        record = DecisionRecord(
            question.id, question.origin, question.host, question.port, answer, by, now
        )
        message = record.message()
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
        writer.write(
            _control_line({"type": "hello", "version": CONTROL_VERSION, **hello, "pending": ids})
        )
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
