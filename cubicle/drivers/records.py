"""What a driver reports to its observer after every action and screenshot.

A driver calls ``on_action(record)`` once per action (executed, failed, rejected or cancelled) and
once per screenshot, so a trajectory recorder can log the model's coordinates next to the screen
pixels they became, the geometry in force, the duration, and each screenshot's bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from cubicle.drivers.actions import PlannedAction
from cubicle.drivers.errors import ActionCancelled, ActionRejected
from cubicle.drivers.receipts import Receipt
from cubicle.drivers.viewport import Point, ViewGeometry

__all__ = ["ActionObserver", "ActionRecord", "Outcome", "action_record", "outcome_of"]

Outcome = Literal["done", "rejected", "failed", "cancelled"]


@dataclass(frozen=True)
class ActionRecord:
    """One action or screenshot as the driver executed it.

    :param kind: the action type, or ``"screenshot"``.
    :param outcome: ``done``; ``rejected`` (validation, nothing sent); ``failed`` (guest or
        connection error); ``cancelled`` (stopped before sending).
    :param model_points: points in model pixels (empty for keypress/type/wait/screenshot).
    :param native_points: the same points in native screen pixels (empty when rejected).
    :param geometry: the view geometry the points were mapped with (for a screenshot: the
        geometry it established).
    :param started_at: wall-clock start, seconds since the epoch.
    :param duration_s: how long the driver spent, seconds (monotonic clock).
    :param details: content-free facts (button, number of keys, text length, scroll distances).
    :param error: the error message when the outcome is not ``done``.
    :param image: the PNG bytes of a screenshot (``None`` for actions).
    :param receipt: what the screen did after the action (:mod:`cubicle.drivers.receipts`); ``None``
        for screenshots, ``wait``, actions that were not executed, and with settling off.
    """

    kind: str
    outcome: Outcome
    model_points: tuple[Point, ...]
    native_points: tuple[Point, ...]
    geometry: ViewGeometry
    started_at: float
    duration_s: float
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    image: bytes | None = None
    receipt: Receipt | None = None


ActionObserver = Callable[[ActionRecord], None]
"""Called synchronously, in the driver's thread or task, after each action/screenshot.
An exception it raises propagates out of the driver method (the action has already happened)."""


def outcome_of(exc: BaseException | None) -> Outcome:
    """The outcome an exception (or none) stands for."""
    if exc is None:
        return "done"
    if isinstance(exc, ActionRejected):
        return "rejected"
    if isinstance(exc, ActionCancelled):
        return "cancelled"
    return "failed"


def action_record(  # noqa: PLR0917 -- one positional per record field, called by cubicle.drivers.steps
    kind: str,
    plan: PlannedAction | None,
    geometry: ViewGeometry,
    started_at: float,
    started: float,
    exc: BaseException | None,
    receipt: Receipt | None = None,
) -> ActionRecord:
    """The record of one action; ``started`` is the ``time.monotonic()`` at its start."""
    outcome = outcome_of(exc)
    return ActionRecord(
        kind,
        outcome,
        plan.model_points if plan else (),
        plan.native_points if plan and outcome != "rejected" else (),
        geometry,
        started_at,
        time.monotonic() - started,
        dict(plan.details) if plan else {},
        None if exc is None else str(exc),
        receipt=receipt,
    )
