"""Origin-access questions of an ask-mode sandbox, as ``browser_origin_access`` required actions.

The egress proxy of a sandbox whose network asks (issue 18:
``cubicle.orchestrator.origin_questions``) holds each connection to an origin outside its allow
list and asks the host. :func:`relay` reads those questions and puts each to the session's client
as the SDK's own kind::

    {"type": "computer_use_approval_request", "request_id": "req_…", "turn_id": "turn_…",
     "request": {"type": "browser_origin_access", "origin": "https://example.com",
                 "reason": "not in the allow list"}}

answered with ``response: {"type": "browser_origin_access", "decision": approve|deny|cancel}``,
which goes back to the proxy (``by``: the session). A question asked while no turn runs is
cancelled — refused this time, asked again on the next attempt — since there is no turn to
attach it to (a denial would be remembered for the sandbox's life and refuse that origin to
every later turn); one the client leaves until the proxy's deadline is withdrawn (the proxy
refuses it: ``timeout``).

:func:`open_questions` opens the control channel when the sandbox's network asks (``cubicle
serve --ask-origins``, :mod:`cubicle.orchestrator.serve.environment`), else returns ``None``; the
session worker calls it once the environment is ready and relays until the session ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from cubicle.orchestrator.origin_questions import OriginDecision, OriginQuestions
from cubicle.orchestrator.serve import wire
from cubicle.orchestrator.serve.store import PendingApproval, Session
from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder
from cubicle_guest.errors import CubicleError

__all__ = ["Questions", "TurnRecords", "open_questions", "relay"]

log = logging.getLogger("cubicle.serve")
POLL_S = 0.5


class Questions(Protocol):
    """What :func:`relay` needs of ``cubicle.orchestrator.origin_questions.OriginQuestions``."""

    def next(self, timeout: float | None = None) -> Any: ...

    def answer(self, question_id: str, answer: Any, *, by: str) -> None: ...

    def close(self) -> None: ...


def open_questions(
    sandbox: Any, on_decision: Callable[[OriginDecision], None] | None = None
) -> Questions | None:
    """The sandbox's question channel (``on_decision`` called with every decision, whoever made
    it), or ``None`` when its network does not ask."""
    if getattr(sandbox.info, "network", "").split(":", 1)[0] != "ask":
        return None
    questions: Questions = OriginQuestions.open(sandbox, on_decision=on_decision)
    return questions


class TurnRecords:
    """Every decision about a session's origins — the client's, the proxy's timeouts, the
    cancels while no turn runs — as an ``origin_access`` event of the trajectory of the turn
    running then (its report's "Origin access" table); the egress log has them all anyway.

    :meth:`attach` is ``run_task``'s ``origin_answers`` hook: the turn's recorder until
    :meth:`close`, which waits for a write in progress (no write after the recorder closed).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recorder: TrajectoryRecorder | None = None

    def record(self, decision: OriginDecision) -> None:
        with self._lock:
            if self._recorder is not None:
                self._recorder.event("origin_access", **decision.event())

    def attach(self, recorder: TrajectoryRecorder) -> TurnRecords:
        with self._lock:
            self._recorder = recorder
        return self

    def close(self) -> None:
        with self._lock:
            self._recorder = None


def relay(session: Session, questions: Questions, stop: Callable[[], bool]) -> None:
    """Put every question to the session's client until ``stop()`` or the channel closes; each
    question waits in its own thread, so several can be pending at once."""
    while not stop():
        try:
            question = questions.next(timeout=POLL_S)
        except CubicleError:  # the channel closed: the sandbox is gone
            return
        if question is not None:
            threading.Thread(
                target=_one,
                args=(session, questions, question),
                name="cubicle-serve-origin",
                daemon=True,
            ).start()


def _one(session: Session, questions: Questions, question: Any) -> None:
    with session.lock:
        turn = session.turn
    decision: str | None = "cancel"  # no turn: refused now, not remembered
    if turn is not None:
        pending = PendingApproval(
            {
                "type": "computer_use_approval_request",
                "request_id": wire.new_id("req"),
                "turn_id": turn.id,
                "request": dict(question.approval_request()),
            }
        )
        decision = session.ask(turn, pending, deadline=float(question.deadline))
    if decision is None:
        return  # withdrawn: cancelled turn, deleted session or the proxy's deadline
    try:
        questions.answer(question.id, decision, by=f"cubicle serve session {session.id}")
    except CubicleError as exc:  # decided meanwhile (timeout, another controller)
        log.info("origin question %s of session %s: %s", question.id, session.id, exc)
