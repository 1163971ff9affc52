"""The I/O-free part of every driver call, shared by the sync and async drivers.

:class:`GuestDriver <cubicle.drivers.computer.GuestDriver>` and
:class:`AsyncGuestDriver <cubicle.drivers.async_computer.AsyncGuestDriver>` differ only in how they
talk to the guest (``client.call`` vs ``await client.call``) and how they sleep while waiting. All
the rest lives here, synchronous and without I/O:

* :class:`ActionStep` — one action: its start time, the geometry in force, planning, the
  cancellation check before sending, and its :class:`~cubicle.drivers.records.ActionRecord`;
* :class:`ScreenshotStep` — one screenshot: the request arguments, the cancellation check,
  accepting the reply, and its record;
* :func:`wait_pauses` — the ``wait`` action's polling loop, as the pauses to sleep;
* :class:`DriverBase` — the geometry accessors and the observer call both drivers expose.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from cubicle.drivers.actions import PlannedAction, plan_action
from cubicle.drivers.errors import ActionCancelled
from cubicle.drivers.options import WAIT_POLL_S, Cancelled
from cubicle.drivers.receipts import Receipt
from cubicle.drivers.records import ActionObserver, ActionRecord, action_record, outcome_of
from cubicle.drivers.view_state import ViewState
from cubicle.drivers.viewport import Point, ViewGeometry
from cubicle_guest.client import Reply
from cubicle_guest.protocol import SettleSpec
from cubicle_guest.waiting import Deadline

__all__ = ["ActionStep", "DriverBase", "Planner", "ScreenshotStep", "wait_pauses"]

Planner = Callable[[ViewGeometry], PlannedAction]
"""Validates one provider call and maps it to a guest request with the geometry in force."""


class ActionStep:
    """One action in progress: timing, geometry, plan and the record of its outcome."""

    def __init__(self, kind: str, view: ViewState) -> None:
        self.kind = kind
        self.started_at, self.started = time.time(), time.monotonic()
        self.geometry = view.geometry
        self.plan: PlannedAction | None = None
        self.receipt: Receipt | None = None
        self.settle: SettleSpec | None = None
        """The settle the action was sent with (``None``: none)."""

    def prepare(
        self, action: object, cancelled: Cancelled, settle: SettleSpec | None = None
    ) -> PlannedAction:
        """Plan the action against the geometry, then check ``cancelled`` before it is sent.

        With ``settle``, an input action's arguments ask the agent to wait for its effect and
        to answer with a receipt (:meth:`accept`).

        :raises ActionRejected: the action does not validate (nothing is sent).
        :raises ActionCancelled: ``cancelled()`` is true.
        """
        return self.prepare_plan(
            lambda geometry: plan_action(self.kind, action, geometry), cancelled, settle
        )

    def prepare_plan(
        self,
        planner: Planner,
        cancelled: Cancelled,
        settle: SettleSpec | None = None,
    ) -> PlannedAction:
        """:meth:`prepare` with a provider adapter's own ``planner`` (it validates and maps the
        call with the geometry, raising ``ActionRejected``; :mod:`cubicle.drivers.claude_plans`)."""
        self.plan = planner(self.geometry)
        if settle is not None and self.plan.op is not None:
            self.plan.args["settle"] = settle.as_args()
            self.settle = settle
        if cancelled is not None and cancelled():
            raise ActionCancelled(self.kind, "before it was sent")
        return self.plan

    def timeout_s(self, action_timeout_s: float) -> float:
        """The deadline of the action's request: ``action_timeout_s`` plus the longest the settle
        may wait (its launch cap when it has one)."""
        if self.settle is None:
            return action_timeout_s
        return action_timeout_s + self.settle.longest_ms() / 1000

    def accept(self, reply: Reply) -> None:
        """Take the agent's reply: its receipt when the action was sent with ``settle``."""
        if self.plan is not None and "settle" in self.plan.args:
            self.receipt = Receipt.from_reply(self.kind, reply.result.get("receipt"))

    def record(self, exc: BaseException | None) -> ActionRecord:
        """The record of the action: ``done`` when ``exc`` is ``None``, else its outcome."""
        return action_record(
            self.kind,
            self.plan,
            self.geometry,
            self.started_at,
            self.started,
            exc,
            self.receipt if exc is None else None,
        )


class ScreenshotStep:
    """One screenshot in progress: request arguments, expected geometry, timing, record."""

    def __init__(self, view: ViewState) -> None:
        self.started_at, self.started = time.time(), time.monotonic()
        self._view = view
        self.args, self.expected = view.screenshot_request()

    @staticmethod
    def check(cancelled: Cancelled) -> None:
        """:raises ActionCancelled: ``cancelled()`` is true (checked before sending)."""
        if cancelled is not None and cancelled():
            raise ActionCancelled("screenshot", "before the request was sent")

    def accept(self, reply: Reply) -> bytes:
        """Check the reply (:meth:`ViewState.accept`) and return the PNG at the view's size."""
        return self._view.accept(reply.result, reply.blob, self.expected)

    def failed(self, exc: BaseException) -> ActionRecord:
        """The record of a screenshot that raised ``exc``."""
        return ActionRecord(
            "screenshot",
            outcome_of(exc),
            (),
            (),
            self.expected,
            self.started_at,
            time.monotonic() - self.started,
            error=str(exc),
        )

    def done(self, png: bytes) -> ActionRecord:
        """The record of a screenshot that produced ``png``."""
        return ActionRecord(
            "screenshot",
            "done",
            (),
            (),
            self.expected,
            self.started_at,
            time.monotonic() - self.started,
            {"width": self.expected.width, "height": self.expected.height},
            image=png,
        )


def wait_pauses(wait_ms: int, cancelled: Cancelled) -> Iterator[float]:
    """The pauses (seconds) to sleep one after the other to wait ``wait_ms``.

    ``cancelled`` is checked before each pause.

    :raises ActionCancelled: ``cancelled()`` became true while waiting.
    """
    deadline = Deadline(wait_ms / 1000)
    while (remaining := deadline.remaining()) > 0:
        if cancelled is not None and cancelled():
            raise ActionCancelled("wait", "while waiting")
        yield min(WAIT_POLL_S, remaining)


class DriverBase:
    """The I/O-free members both drivers expose: geometry accessors and the observer call."""

    _view: ViewState
    _last_receipt: Receipt | None = None
    on_action: ActionObserver | None

    @property
    def geometry(self) -> ViewGeometry:
        """The geometry the next coordinates are mapped with (see
        :mod:`cubicle.drivers.view_state`)."""
        return self._view.geometry

    @property
    def screen(self) -> tuple[int, int]:
        """Native screen size ``(width, height)`` from the agent's ``hello``."""
        return self._view.screen

    def to_native(self, x: int, y: int) -> Point:
        """Map a model point with the current geometry (raises ``CoordinateOutOfView``)."""
        return self._view.geometry.to_native(x, y)

    @property
    def screenshot_request(self) -> dict[str, Any]:
        """The ``screenshot`` op arguments this driver sends (crop and size of the view)."""
        return self._view.screenshot_request()[0]

    @property
    def last_receipt(self) -> Receipt | None:
        """The receipt of the last action that has one (``None`` before the first, or with
        settling off): did the screen change, how long it took to settle, the focus."""
        return self._last_receipt

    def _emit(self, record: ActionRecord) -> None:
        if record.receipt is not None:
            self._last_receipt = record.receipt
        if self.on_action is not None:
            self.on_action(record)
