"""Ask mode on the host side: the questions an ``ask:`` sandbox's egress proxy holds, and answers.

A sandbox created with ``--network ask:[ENTRY,...]`` (or ``NetworkPolicy.restricted(ask=True)``)
has an egress proxy that HOLDS every guest connection to an origin outside its allow list and
asks the host side about it (:mod:`cubicle.egress.questions`). This module is the
host side: :class:`OriginQuestions` opens one control connection (Docker: ``docker exec`` of the
proxy's relay in the proxy container; VM: the root-only unix socket in the run folder — never
anything the guest can reach), keeps the pending questions, and sends answers::

    with OriginQuestions.open(sandbox) as questions:
        for question in questions:                # blocks; ends when the channel closes
            print(question.origin, question.reason)
            questions.answer(question.id, "approve", by="alice")

Semantics (enforced by the proxy, whatever the number of connected controllers):

- one question per origin (``host``, ``port``) at a time; concurrent guest connections to it
  wait on that one question;
- ``approve``: the held connections go through; the origin stays approved for the sandbox's
  life (no more questions). ``deny``: refused (403 page for http, refused CONNECT for https)
  and remembered. ``cancel``: refused this time; the next attempt asks again;
- no answer before ``question.deadline`` (the policy's ask timeout, default 120 s): refused,
  ``answer == "timeout"``, ``by == "timeout"`` (not remembered);
- the first answer wins; answering a decided question raises :class:`QuestionClosed`;
- every question, answer and request decision is a line of the proxy's egress log
  (``cubicle logs ID``), with who decided.

Thread-safe: a reader thread parses the proxy's messages; every method may be called from any
thread. Async callers run :meth:`OriginQuestions.next` / :meth:`~OriginQuestions.answer` in a
worker thread (``anyio.to_thread.run_sync``) or use ``on_question``/``on_decision`` callbacks
(called on the reader thread: keep them short, never block in them).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

from cubicle.egress.questions import (
    ANSWERS,
    CONTROL_VERSION,
    MAX_BY_CHARS,
    DecisionRecord,
    PersonAnswer,
    QuestionRecord,
)
from cubicle.egress.questions import MAX_CONTROL_LINE as MAX_LINE
from cubicle.orchestrator.errors import OrchestratorError

if TYPE_CHECKING:
    from cubicle.orchestrator.provider import AgentStream
    from cubicle.orchestrator.sandbox import Sandbox

__all__ = [
    "Answer",
    "OriginDecision",
    "OriginQuestion",
    "OriginQuestions",
    "QuestionChannelClosed",
    "QuestionClosed",
    "QuestionError",
]

Answer = PersonAnswer
"""What a person (or a policy) may answer; the proxy adds ``timeout`` on its own."""
MAX_DECISIONS_KEPT: Final = 1000


class QuestionError(OrchestratorError):
    """An ask-mode control problem (bad answer, unknown question, broken channel)."""


class QuestionClosed(QuestionError):
    """The question was already decided (answered elsewhere, or timed out), or never existed."""


class QuestionChannelClosed(QuestionError):
    """The control connection to the proxy ended (the sandbox is gone, or it was closed)."""


@dataclass(frozen=True)
class OriginQuestion(QuestionRecord):
    """A held guest connection waiting for a person: the proxy's question
    (:class:`~cubicle.egress.questions.QuestionRecord`, the protocol's one definition of its
    fields) and the sandbox it came from.

    ``origin``: ``https://host[:port]`` for a CONNECT, ``http://host[:port]`` for plain http
    (the default port omitted); ``host`` is normalised (lower-case IDNA, IP text). ``reason``
    says why the proxy asks (e.g. ``not in the allow list``). ``asked_at``/``deadline``: Unix
    times (the proxy's clock); after ``deadline`` the proxy refuses on its own.
    """

    sandbox_id: str

    def approval_request(self) -> dict[str, str]:
        """The ``request`` of a ``computer_use_approval_request`` for this question."""
        return {"type": "browser_origin_access", "origin": self.origin, "reason": self.reason}


@dataclass(frozen=True)
class OriginDecision(DecisionRecord):
    """How a question ended: the proxy's ``decided`` line
    (:class:`~cubicle.egress.questions.DecisionRecord`, the protocol's one definition of its
    fields: ``answer`` is ``approve``/``deny``/``cancel``/``timeout``, ``by`` who answered — the
    ``by`` given to :meth:`OriginQuestions.answer`, or ``timeout``) and the sandbox it came from."""

    sandbox_id: str

    @property
    def approved(self) -> bool:
        return self.answer == "approve"

    def event(self) -> dict[str, object]:
        """The fields of a trajectory ``origin_access`` event."""
        return {
            "question": self.id,
            "origin": self.origin,
            "host": self.host,
            "port": self.port,
            "answer": self.answer,
            "by": self.by,
        }


class OriginQuestions:
    """One control connection to an ``ask:`` sandbox's egress proxy (see the module docstring).

    Make one with :meth:`open`. ``policy`` and ``timeout`` are the proxy's (from its hello).

    :param on_question: called (reader thread) with each new question.
    :param on_decision: called (reader thread) with each decision, whoever made it.
    """

    def __init__(
        self,
        stream: AgentStream,
        sandbox_id: str,
        *,
        timeout: float = 10.0,
        on_question: Callable[[OriginQuestion], None] | None = None,
        on_decision: Callable[[OriginDecision], None] | None = None,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.policy = ""
        self.timeout = 0.0
        self._sock = stream.sock
        self._sock.settimeout(None)  # blocking reads on the reader thread (an exec socket may
        # come non-blocking from the engine's client)
        self._codec = stream.codec
        self._name = stream.name
        self._on_question = on_question
        self._on_decision = on_decision
        self._changed = threading.Condition()
        self._send_lock = threading.Lock()
        self._pending: dict[str, OriginQuestion] = {}
        self._fresh: collections.deque[OriginQuestion] = collections.deque()
        self._decisions: collections.deque[OriginDecision] = collections.deque(
            maxlen=MAX_DECISIONS_KEPT
        )
        self._replies: dict[int, dict[str, Any]] = {}
        self._refs = 0
        self._hello: dict[str, Any] | None = None
        self._heard: set[str] = set()
        """Ids of every question this connection has heard of (asked or decided)."""
        self._closed_reason: str | None = None
        self._reader = threading.Thread(
            target=self._read, name=f"origin-questions-{sandbox_id}", daemon=True
        )
        self._reader.start()
        with self._changed:
            # the hello names the pending questions whose lines follow it: wait for those too,
            # so pending() is whole as soon as the connection is open (an older proxy names none)
            self._changed.wait_for(
                lambda: (
                    self._closed_reason is not None
                    or (self._hello is not None and self._announced() <= self._heard)
                ),
                timeout,
            )
            hello = self._greeting()
        if hello is None:
            why = self._closed_reason or f"no hello within {timeout:g} s"
            self.close()
            raise QuestionChannelClosed(f"cannot talk to {self._name}: {why}")
        if hello.get("version") != CONTROL_VERSION:
            self.close()
            raise QuestionError(
                f"{self._name} speaks control protocol {hello.get('version')!r}, "
                f"not {CONTROL_VERSION}"
            )
        self.policy = str(hello.get("policy", ""))
        self.timeout = float(hello.get("timeout", 0.0))

    def _greeting(self) -> dict[str, Any] | None:
        return self._hello

    def _announced(self) -> set[str]:
        """The pending question ids the proxy's hello said would follow it."""
        pending = (self._hello or {}).get("pending")
        return {str(item) for item in pending} if isinstance(pending, list) else set()

    @classmethod
    def open(
        cls,
        sandbox: Sandbox,
        *,
        timeout: float = 10.0,
        on_question: Callable[[OriginQuestion], None] | None = None,
        on_decision: Callable[[OriginDecision], None] | None = None,
    ) -> OriginQuestions:
        """Connect to ``sandbox``'s proxy (its network must be ``ask:``).

        :raises ProviderError: the sandbox has no ask-mode proxy.
        :raises QuestionChannelClosed: the proxy did not answer within ``timeout``.
        """
        stream = sandbox.provider.open_egress_control(sandbox.id, timeout=timeout)
        return cls(
            stream,
            sandbox.id,
            timeout=timeout,
            on_question=on_question,
            on_decision=on_decision,
        )

    # -- reading ----------------------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        reason = "the proxy closed the control connection"
        try:
            while data := self._sock.recv(65536):
                if self._codec is not None:
                    data = self._codec.decode(data)
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self._message(json.loads(line))
                if len(buffer) > MAX_LINE:
                    raise QuestionError(f"a control line longer than {MAX_LINE} bytes")
        except (OSError, ValueError, OrchestratorError) as exc:
            reason = f"control connection failed: {exc}"
        except Exception as exc:  # the reader must always mark the end
            reason = f"control connection failed: {type(exc).__name__}: {exc}"
        if self._codec is not None:
            said = self._codec.closed_reason()
            if said:
                reason += f" ({said})"
        with self._changed:
            if self._closed_reason is None:
                self._closed_reason = reason
            self._changed.notify_all()

    def _message(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        question: OriginQuestion | None = None
        decision: OriginDecision | None = None
        with self._changed:
            if kind == "hello":
                self._hello = message
            elif kind == "question":
                record = QuestionRecord.from_message(message)
                question = OriginQuestion(sandbox_id=self.sandbox_id, **dataclasses.asdict(record))
                self._pending[question.id] = question
                self._fresh.append(question)
                self._heard.add(question.id)
            elif kind == "decided":
                decided = DecisionRecord.from_message(message)
                decision = OriginDecision(sandbox_id=self.sandbox_id, **dataclasses.asdict(decided))
                self._pending.pop(decision.id, None)
                self._decisions.append(decision)
                self._heard.add(decision.id)
            elif kind == "reply" and isinstance(message.get("ref"), int):
                self._replies[message["ref"]] = message
            self._changed.notify_all()
        if question is not None and self._on_question is not None:
            self._on_question(question)
        if decision is not None and self._on_decision is not None:
            self._on_decision(decision)

    # -- the API ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether the control connection has ended."""
        with self._changed:
            return self._closed_reason is not None

    def pending(self) -> list[OriginQuestion]:
        """The questions waiting for an answer now, oldest first."""
        with self._changed:
            return sorted(self._pending.values(), key=lambda q: q.asked_at)

    def decisions(self) -> list[OriginDecision]:
        """Every decision seen on this connection (the last 1000), oldest first."""
        with self._changed:
            return list(self._decisions)

    def next(self, timeout: float | None = None) -> OriginQuestion | None:
        """The next question this object has not handed out yet (pending ones at connect time
        first), waiting up to ``timeout`` s (``None``: forever); ``None`` on timeout. It may
        be decided already by the time the caller answers (then :meth:`answer` raises
        :class:`QuestionClosed`).

        :raises QuestionChannelClosed: the channel ended and no question is left.
        """
        with self._changed:
            self._changed.wait_for(
                lambda: bool(self._fresh) or self._closed_reason is not None, timeout
            )
            if self._fresh:
                return self._fresh.popleft()
            if self._closed_reason is not None:
                raise QuestionChannelClosed(f"{self._name}: {self._closed_reason}")
            return None

    def __iter__(self) -> Iterator[OriginQuestion]:
        """Questions as they come, until the channel closes."""
        while True:
            try:
                question = self.next()
            except QuestionChannelClosed:
                return
            if question is not None:
                yield question

    def answer(self, question_id: str, answer: Answer, *, by: str, timeout: float = 10.0) -> None:
        """Answer a question: ``approve``, ``deny`` or ``cancel``; ``by`` names who answers
        (1-300 characters; logged and shown in the trajectory).

        :raises QuestionError: a bad ``answer``/``by``.
        :raises QuestionClosed: the question is unknown or already decided (the proxy says
            by whom).
        :raises QuestionChannelClosed: the channel ended.
        """
        if answer not in ANSWERS:
            raise QuestionError(f"answer must be one of {', '.join(ANSWERS)}, got {answer!r}")
        if not by.strip() or len(by) > MAX_BY_CHARS:
            raise QuestionError(
                f"'by' must name who answers in 1-{MAX_BY_CHARS} characters, got {by!r}"
            )
        with self._changed:
            if self._closed_reason is not None:
                raise QuestionChannelClosed(f"{self._name}: {self._closed_reason}")
            self._refs += 1
            ref = self._refs
        line = {"op": "answer", "ref": ref, "id": question_id, "answer": answer, "by": by}
        data = (json.dumps(line, ensure_ascii=True) + "\n").encode("ascii")
        with self._send_lock:
            try:
                self._sock.sendall(data if self._codec is None else self._codec.encode(data))
            except OSError as exc:
                raise QuestionChannelClosed(f"{self._name}: cannot send: {exc}") from None
        with self._changed:
            self._changed.wait_for(
                lambda: ref in self._replies or self._closed_reason is not None, timeout
            )
            reply = self._replies.pop(ref, None)
            if reply is None:
                why = self._closed_reason or f"no reply within {timeout:g} s"
                raise QuestionChannelClosed(f"{self._name}: {why}")
        if not reply.get("ok"):
            error = str(reply.get("error"))
            kind = QuestionClosed if "decided" in error or "no question" in error else QuestionError
            raise kind(f"{self._name}: {error}")

    def wait_decided(self, question_id: str, timeout: float | None = None) -> OriginDecision | None:
        """The decision of ``question_id`` once seen (``None`` after ``timeout`` s)."""

        def found() -> OriginDecision | None:
            return next((d for d in self._decisions if d.id == question_id), None)

        with self._changed:
            self._changed.wait_for(
                lambda: found() is not None or self._closed_reason is not None, timeout
            )
            return found()

    def close(self) -> None:
        """End the control connection (pending questions stay pending in the proxy)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with self._changed:
            if self._closed_reason is None:
                self._closed_reason = "closed by this side"
            self._changed.notify_all()
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=5.0)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def seconds_left(question: OriginQuestion) -> float:
    """How long until the proxy answers ``question`` with a timeout (never negative)."""
    return max(question.deadline - time.time(), 0.0)
