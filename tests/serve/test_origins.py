"""Origin-access questions (issue 18's ask mode) reach the session's client as the SDK's own
``browser_origin_access`` required action, and its decision goes back to the proxy.

The question channel here is a stand-in with the interface of
``cubicle.orchestrator.origin_questions.OriginQuestions`` (next / answer / close; a test checks the
real class has it); the whole path on Docker, through the openai client, is
tests/serve/test_origin_access.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import inspect
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from openai.types.beta.agent_session import AgentSession

from cubicle.orchestrator.serve import origins, wire
from cubicle.orchestrator.serve.agents import parse_agent
from cubicle.orchestrator.serve.environment import parse_environment
from cubicle.orchestrator.serve.store import Session, TurnState
from cubicle_guest.errors import CubicleError

pytestmark = pytest.mark.newest  # the required action validates against openai's own models


@dataclass(frozen=True)
class Question:
    id: str
    origin: str
    deadline: float

    def approval_request(self) -> dict[str, str]:
        return {
            "type": "browser_origin_access",
            "origin": self.origin,
            "reason": "not in the allow list",
        }


@dataclass
class Channel:
    """The documented interface of OriginQuestions, fed by the test."""

    asked: queue.Queue[Question] = field(default_factory=queue.Queue)
    answers: queue.Queue[tuple[str, str, str]] = field(default_factory=queue.Queue)
    closed: threading.Event = field(default_factory=threading.Event)

    def next(self, timeout: float | None = None) -> Question | None:
        try:
            return self.asked.get(timeout=timeout)
        except queue.Empty:
            return None

    def answer(self, question_id: str, answer: Any, *, by: str) -> None:
        self.answers.put((question_id, str(answer), by))

    def close(self) -> None:
        self.closed.set()


def session_with_turn(turn: bool = True) -> Session:
    session = Session(
        wire.new_id("sess"),
        agent=parse_agent({"agent": {"model": "cubicle-drill"}}),
        plan=parse_environment({"type": "openai_hosted"}),
        metadata={},
        review="none",
    )
    if turn:
        session.turn = TurnState(wire.new_id("turn"), [], 0)
        session.status = "in_progress"
    return session


def relay_until(session: Session, channel: Channel, stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=origins.relay, args=(session, channel, stop.is_set))
    thread.start()
    return thread


def test_a_question_becomes_a_required_action_and_the_answer_goes_back() -> None:
    session = session_with_turn()
    channel = Channel()
    stop = threading.Event()

    async def main() -> dict[str, Any]:
        events, _ = session.subscribe()
        thread = relay_until(session, channel, stop)
        channel.asked.put(Question("q1", "https://example.com", time.time() + 60))
        try:
            while True:
                event = await asyncio.wait_for(events.get(), 10)
                if event["type"] == "agent.session.requires_action":
                    return dict(event)
        finally:
            stop.set()
            await asyncio.to_thread(thread.join)

    event = asyncio.run(main())
    snapshot = event["session"]
    AgentSession.model_validate(snapshot)  # the SDK's own kind: validates strictly
    (action,) = snapshot["required_actions"]
    assert action["request"] == {
        "type": "browser_origin_access",
        "origin": "https://example.com",
        "reason": "not in the allow list",
    }
    assert session.turn is not None and action["turn_id"] == session.turn.id
    pending = session.pending[action["request_id"]]
    assert pending.kind == "browser_origin_access"
    pending.decision = "cancel"  # what the events endpoint does with the client's answer
    pending.answered.set()
    question_id, answer, by = channel.answers.get(timeout=10)
    assert (question_id, answer) == ("q1", "cancel") and session.id in by
    assert session.pending == {}


def test_no_turn_cancels_and_a_passed_deadline_withdraws() -> None:
    idle = session_with_turn(turn=False)
    channel = Channel()
    stop = threading.Event()
    thread = relay_until(idle, channel, stop)
    channel.asked.put(Question("q1", "https://a.example", time.time() + 60))
    # cancel, not deny: a denial would be remembered and refuse the origin to later turns
    assert channel.answers.get(timeout=10)[:2] == ("q1", "cancel")
    stop.set()
    thread.join()

    busy = session_with_turn()
    stop = threading.Event()

    async def withdrawn() -> list[str]:
        events, _ = busy.subscribe()
        thread = relay_until(busy, channel, stop)
        channel.asked.put(Question("q2", "https://b.example", time.time() - 1))
        seen: list[str] = []
        try:
            while "agent.session.in_progress" not in seen:
                seen.append((await asyncio.wait_for(events.get(), 10))["type"])
            return seen
        finally:
            stop.set()
            await asyncio.to_thread(thread.join)

    # the proxy's deadline had passed: asked, then withdrawn; nothing answered (the proxy
    # refused it as timed out)
    assert asyncio.run(withdrawn()) == [
        "agent.session.requires_action",
        "agent.session.in_progress",
    ]
    assert busy.pending == {}
    assert channel.answers.empty()


def test_the_stand_in_has_the_real_channels_interface() -> None:
    """What :func:`origins.relay` calls exists on the real class with the same parameters."""
    real = importlib.import_module("cubicle.orchestrator.origin_questions")
    for name in ("next", "answer", "close"):
        ours = inspect.signature(getattr(Channel, name)).parameters
        theirs = inspect.signature(getattr(real.OriginQuestions, name)).parameters
        assert list(ours) == list(theirs)[: len(ours)], name
        extra = list(theirs)[len(ours) :]
        assert all(theirs[p].default is not inspect.Parameter.empty for p in extra), name
    fields = {f.name for f in dataclasses.fields(real.OriginQuestion)}
    assert {"id", "origin", "deadline"} <= fields
    assert issubclass(real.QuestionChannelClosed, CubicleError)
