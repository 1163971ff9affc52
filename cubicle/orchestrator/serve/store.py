"""Sessions in the server's memory: their state, items, required actions and event fan-out.

One :class:`Session` per API session. Its fields change from the request handlers (the event
loop) and from its worker thread (:mod:`cubicle.orchestrator.serve.worker`), always under its lock.
:meth:`Session.publish` hands an event to every subscriber (the SSE streams, each an asyncio
queue on the server's loop) thread-safely, and keeps the last :data:`RECENT_EVENTS` for the
console. Nothing is persisted: a restarted server knows no session, and collects the sandboxes
the previous one left (:mod:`cubicle.orchestrator.serve.registry`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from cubicle.orchestrator.modelrun.usage import UsageTotals
from cubicle.orchestrator.serve import wire
from cubicle.orchestrator.serve.agents import AgentSpec
from cubicle.orchestrator.serve.environment import EnvironmentPlan
from cubicle.orchestrator.serve.errors import bad_request, not_found
from cubicle.orchestrator.serve.spend import Spend

if TYPE_CHECKING:
    from cubicle.orchestrator.origin_answers import Answering
    from cubicle.orchestrator.sandbox import Sandbox
    from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder

__all__ = ["PendingApproval", "Session", "SessionStore", "page"]

RECENT_EVENTS = 200
"""Events each session keeps for the console's first view (live ones follow)."""
Status = Literal["idle", "in_progress", "requires_action", "failed", "budget_reached"]
ASK_POLL_S = 0.2
"""How often a waiting approval looks at the turn's cancel flag and its deadline."""


@dataclass
class PendingApproval:
    """A required action waiting for the client; the worker blocks on :attr:`answered`.

    An approval request (``computer_use_approval_request``, keyed by its ``request_id``) is
    answered with a :attr:`decision`; a ``function_call`` (keyed by its ``call_id``) with a
    :attr:`result` (the client's ``tool_result``: ``success``, ``output``, ``error``)."""

    action: dict[str, Any]
    answered: threading.Event = field(default_factory=threading.Event)
    decision: str | None = None
    result: dict[str, Any] | None = None

    @property
    def request_id(self) -> str:
        """The key of :attr:`Session.pending`: the request's id, or the call's."""
        if self.is_function_call:
            return str(self.action["call_id"])
        return str(self.action["request_id"])

    @property
    def is_function_call(self) -> bool:
        return self.action.get("type") == "function_call"

    @property
    def kind(self) -> str:
        return str(self.action["request"]["type"])


@dataclass
class TurnState:
    id: str
    content: list[dict[str, Any]]
    created_at: int
    cancel: threading.Event = field(default_factory=threading.Event)
    origin_records: Callable[[TrajectoryRecorder], Answering] | None = None
    """Ask mode: records the origin decisions made during the turn in its trajectory (the
    ``origin_answers`` hook of ``run_task``;
    :class:`cubicle.orchestrator.serve.origins.TurnRecords`)."""


class Session:
    """One API session (see the module doc)."""

    def __init__(
        self,
        session_id: str,
        *,
        agent: AgentSpec,
        plan: EnvironmentPlan,
        metadata: dict[str, str],
        review: str,
        spend: Spend | None = None,
    ) -> None:
        self.id = session_id
        self.agent = agent
        self.plan = plan
        self.metadata = metadata
        self.review = review
        self.spend = spend or Spend(None)
        """The spending limit and consumption (:mod:`cubicle.orchestrator.serve.spend`)."""
        self.usage = UsageTotals()
        """Token usage over the session's turns (the ``usage`` of ``agent.session``)."""
        self.created_at = wire.now()
        self.last_active_at = self.created_at
        self.status: Status = "idle"
        self.error: str | None = None
        self.environment_status = "pending"
        self.environment_error: dict[str, str] | None = None
        self.items: list[dict[str, Any]] = []
        self.pending: dict[str, PendingApproval] = {}
        self.function_calls: dict[str, str] = {}
        """Every function call ever pending, ``call_id`` → ``turn_id`` (an answer to one no
        longer pending is a conflict, not an unknown call)."""
        self.signin_requests: dict[str, Any] = {}
        """Every sign-in request ever made, ``request_id`` →
        :class:`cubicle.orchestrator.serve.signin.SigninState` (no value: an HMAC)."""
        self.signin_expiry_s = 300.0
        """Seconds a sign-in request waits for its answer (``cubicle serve --signin-expiry``)."""
        self.turn: TurnState | None = None
        self.sandbox: Sandbox | None = None
        self.latest_screenshot: bytes | None = None
        self.deleted = False
        self.lock = threading.RLock()
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_EVENTS)
        self._subscribers: set[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]] = set()

    # -- wire objects ----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The ``agent.session`` object."""
        with self.lock:
            body: dict[str, Any] = {
                "id": self.id,
                "object": "agent.session",
                "agent": self.agent.resource(),
                "created_at": self.created_at,
                "environment": self.plan.resource(),
                "error": self.error,
                "last_active_at": self.last_active_at,
                "metadata": dict(self.metadata),
                "required_actions": [p.action for p in self.pending.values()],
                "spend_control": self.spend.resource(),
                "status": self.status,
                "usage": wire.token_usage(self.usage),
                "vault_ids": [],
            }
            if self.review != "none":
                body["review"] = self.review
            return body

    def environment_state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "id": self.plan.id,
                "type": "openai_hosted",
                "status": self.environment_status,
                "error": self.environment_error,
            }

    def status_event(self) -> dict[str, Any]:
        """``agent.session.<status>`` with the current snapshot."""
        with self.lock:
            return wire.event(f"agent.session.{self.status}", session=self.snapshot())

    # -- changes ---------------------------------------------------------------------------------

    def set_status(self, status: Status, *, error: str | None = None) -> None:
        """Change the status and publish ``agent.session.<status>``."""
        with self.lock:
            self.status = status
            if error is not None:
                self.error = error
            self.last_active_at = wire.now()
            self.publish(self.status_event())

    def ask(
        self, turn: TurnState, pending: PendingApproval, *, deadline: float | None = None
    ) -> str | None:
        """Publish ``pending`` as a required action; wait for the client's decision
        (``approve``, ``deny``, ``cancel``) — or ``None`` when the turn is cancelled, the
        session deleted or the Unix time ``deadline`` passed first (the request is then
        withdrawn). The one path of every required action (safety checks, origin access,
        function calls: their :attr:`PendingApproval.result` holds the answer)."""
        with self.lock:
            self.pending[pending.request_id] = pending
            if pending.is_function_call:
                self.function_calls[pending.request_id] = turn.id
        self.set_status("requires_action")
        while not pending.answered.wait(ASK_POLL_S):
            if turn.cancel.is_set() or self.deleted:
                break
            if deadline is not None and time.time() >= deadline:
                break
        with self.lock:
            self.pending.pop(pending.request_id, None)
            waiting = bool(self.pending)
            running = self.turn is turn
        if not self.deleted and running:
            self.set_status("requires_action" if waiting else "in_progress")
        return pending.decision

    def add_item(self, item: dict[str, Any]) -> None:
        with self.lock:
            self.items.append(item)

    def replace_item(self, item: dict[str, Any]) -> None:
        with self.lock:
            for index, old in enumerate(self.items):
                if old["id"] == item["id"]:
                    self.items[index] = item
                    return
            self.items.append(item)

    # -- events ----------------------------------------------------------------------------------

    def publish(self, event: dict[str, Any]) -> None:
        """Send ``event`` to every subscriber (from any thread) and keep it for the console."""
        with self.lock:
            self.recent.append(event)
            subscribers = list(self._subscribers)
        for loop, queue in subscribers:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # that loop is closed: the stream is gone
                self.unsubscribe(loop, queue)

    def subscribe(self, *, replay: bool = False) -> tuple[asyncio.Queue[Any], list[dict[str, Any]]]:
        """A queue of the events from now on (call on the event loop), plus the kept ones when
        ``replay``. Close with :meth:`unsubscribe`."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        with self.lock:
            self._subscribers.add((loop, queue))
            kept = list(self.recent) if replay else []
        return queue, kept

    def unsubscribe(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]) -> None:
        with self.lock:
            self._subscribers.discard((loop, queue))

    def close_streams(self) -> None:
        """End every open stream (the session was deleted): each receives ``None``."""
        with self.lock:
            subscribers = list(self._subscribers)
            self._subscribers.clear()
        for loop, queue in subscribers:
            with contextlib.suppress(RuntimeError):  # that loop is closed already
                loop.call_soon_threadsafe(queue.put_nowait, None)


class SessionStore:
    """The server's sessions by id (thread-safe)."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def add(self, session: Session) -> None:
        with self._lock:
            self._sessions[session.id] = session

    def get(self, session_id: str) -> Session:
        """:raises ApiError: 404 when there is no such (undeleted) session."""
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None or session.deleted:
            raise not_found("session", session_id)
        return session

    def remove(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def count(self) -> int:
        """Sessions held, deleted ones whose teardown has not finished included."""
        with self._lock:
            return len(self._sessions)

    def all(self) -> list[Session]:
        with self._lock:
            return [s for s in self._sessions.values() if not s.deleted]


def page(
    rows: list[dict[str, Any]], *, after: str | None, order: str, limit: int
) -> dict[str, Any]:
    """One cursor page as the SDK pages it: ``data`` in ``order`` (``asc``: oldest first), the
    rows following the one whose id is ``after``, at most ``limit``; ``has_more``,
    ``first_id``, ``last_id``.

    :raises ApiError: 400 for an ``order`` other than asc/desc, a ``limit`` outside 1..100, or
        an ``after`` that names no row.
    """
    if order not in ("asc", "desc"):
        raise bad_request(f"order must be 'asc' or 'desc', got {order!r}", "order")
    if not 1 <= limit <= 100:
        raise bad_request(f"limit must be between 1 and 100, got {limit}", "limit")
    ordered = rows if order == "asc" else list(reversed(rows))
    start = 0
    if after is not None:
        ids = [row["id"] for row in ordered]
        if after not in ids:
            raise bad_request(f"after {after!r} names no item of this list", "after")
        start = ids.index(after) + 1
    data = ordered[start : start + limit]
    return {
        "object": "list",
        "data": data,
        "has_more": start + limit < len(ordered),
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }
