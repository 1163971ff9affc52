"""Approval decisions: what was decided about an action or a safety check, by whom, and why.

:class:`DecisionLog` is a thread-safe list of :class:`Decision` records every policy in
:mod:`cubicle.drivers.approvals` appends to (the trajectory recorder consumes it). Records are
content-free: they name the action type, coordinates, key count and text length, never the typed
text or key names.

:func:`action_facts` turns an SDK action plus the driver's current
:class:`~cubicle.drivers.viewport.ViewGeometry` into the facts a policy judges and a human reads —
derived from :func:`cubicle.drivers.actions.plan_action`, the same parse the driver sends, so a
policy judges the coordinates, keys and text actually sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from cubicle.drivers.actions import ACTION_TYPES, PlannedAction, plan_action
from cubicle.drivers.errors import ActionRejected
from cubicle.drivers.viewport import Point, ViewGeometry

__all__ = [
    "ActionFacts",
    "Decision",
    "DecisionLog",
    "GeometrySource",
    "Judgement",
    "SafetyCheck",
    "action_facts",
    "safety_checks_of",
]


class GeometrySource(Protocol):
    """Anything with the current view geometry — both drivers are."""

    @property
    def geometry(self) -> ViewGeometry: ...


@dataclass(frozen=True)
class SafetyCheck:
    """One pending safety check of a computer call."""

    id: str
    code: str | None
    message: str | None


@dataclass(frozen=True)
class ActionFacts:
    """An action as a policy sees it.

    :param kind: the action type (``screenshot`` included).
    :param model_points: the action's points in model pixels.
    :param native_points: the same points in screen pixels, or ``None`` when one lies outside
        the model's image (the driver will refuse the action).
    :param keys: a keypress's chord, or the keys held during a pointer action (may be empty).
    :param text: a ``type`` action's text (``None`` otherwise).
    """

    kind: str
    model_points: tuple[Point, ...] = ()
    native_points: tuple[Point, ...] | None = ()
    keys: tuple[str, ...] = ()
    text: str | None = None
    button: str | None = None
    scroll: Point | None = None

    def describe(self) -> str:
        """One line for a human: type, button, keys, text, model and screen coordinates."""
        parts = [self.kind]
        if self.button:
            parts.append(self.button)
        if self.keys:
            parts.append(("holding " if self.kind != "keypress" else "") + "+".join(self.keys))
        if self.text is not None:
            parts.append(f"{self.text!r} ({len(self.text)} chars)")
        if self.scroll is not None:
            parts.append(f"by ({self.scroll[0]}, {self.scroll[1]}) model px")
        if self.model_points:
            model = " -> ".join(f"({x}, {y})" for x, y in self.model_points)
            if self.native_points is None:
                screen = "OUTSIDE the screenshot"
            else:
                screen = " -> ".join(f"({x}, {y})" for x, y in self.native_points)
            parts.append(f"at model {model} = screen {screen}")
        return " ".join(parts)

    @classmethod
    def of_plan(cls, plan: PlannedAction) -> ActionFacts:
        """The facts of a planned (checked, mapped) action: what the driver will send."""
        args = plan.args
        text = args.get("text")
        button = args.get("button")
        return cls(
            plan.kind,
            plan.model_points,
            plan.native_points,
            tuple(args.get("keys", ())),
            text if isinstance(text, str) else None,
            button if isinstance(button, str) else None,
            plan.details.get("model_scroll"),
        )

    def summary(self) -> str:
        """Content-free description for logs (no text, no key names)."""
        extra = ""
        if self.keys:
            extra += f" {len(self.keys)} key(s)"
        if self.text is not None:
            extra += f" {len(self.text)} char(s)"
        return self.kind + extra


def _field(source: object, name: str) -> object:
    if isinstance(source, Mapping):
        return source.get(name)
    return getattr(source, name, None)


def _points(action: object) -> tuple[Point, ...]:
    path = _field(action, "path")
    raw = path if isinstance(path, list) else [action]
    points: list[Point] = []
    for item in raw:
        x, y = _field(item, "x"), _field(item, "y")
        if isinstance(x, int) and isinstance(y, int):
            points.append((x, y))
    return tuple(points)


def action_facts(action: object, geometry: ViewGeometry | None) -> ActionFacts:
    """The facts of an SDK action (modern, legacy or a mapping) under ``geometry``.

    With a geometry, an action the driver accepts is described by its plan
    (:meth:`ActionFacts.of_plan`): exactly what will be sent. One the driver will refuse
    (:class:`~cubicle.drivers.errors.ActionRejected`, e.g. a point outside the image) or one seen
    without a geometry is described from its raw fields, with ``native_points`` ``None`` when
    refused.
    """
    kind = str(_field(action, "type"))
    refused = False
    if geometry is not None and kind in ACTION_TYPES:
        try:
            return ActionFacts.of_plan(plan_action(kind, action, geometry))
        except ActionRejected:
            refused = True  # the driver refuses it too; nothing of it is sent
    model_points = (
        _points(action) if kind in ("click", "double_click", "move", "scroll", "drag") else ()
    )
    native: tuple[Point, ...] | None = None if refused and model_points else ()
    keys_value = _field(action, "keys")
    keys = (
        tuple(k for k in keys_value if isinstance(k, str)) if isinstance(keys_value, list) else ()
    )
    text = _field(action, "text")
    button = _field(action, "button")
    sx, sy = _field(action, "scroll_x"), _field(action, "scroll_y")
    return ActionFacts(
        kind,
        model_points,
        native,
        keys,
        text if isinstance(text, str) and kind == "type" else None,
        button if isinstance(button, str) else None,
        (sx, sy) if isinstance(sx, int) and isinstance(sy, int) else None,
    )


def safety_checks_of(call: object) -> tuple[SafetyCheck, ...]:
    """The pending safety checks of a computer call (SDK model or mapping)."""
    checks = _field(call, "pending_safety_checks")
    if not isinstance(checks, list):
        return ()
    result = []
    for check in checks:
        ident, code, message = _field(check, "id"), _field(check, "code"), _field(check, "message")
        result.append(
            SafetyCheck(
                str(ident),
                code if isinstance(code, str) else None,
                message if isinstance(message, str) else None,
            )
        )
    return tuple(result)


@dataclass(frozen=True)
class Judgement:
    """What a policy answers about one action or one call's safety checks.

    :param approved: ``True`` allows, ``False`` refuses.
    :param decided_by: who decided (see :attr:`Decision.decided_by`).
    :param reason: why, in words.
    """

    approved: bool
    decided_by: str
    reason: str

    def passed_on(self, decided_by: str) -> Judgement:
        """The same answer, given by another policy on behalf of ``decided_by`` (``ask``)."""
        return Judgement(self.approved, f"{decided_by} -> {self.decided_by}", self.reason)


@dataclass(frozen=True)
class Decision:
    """One approval decision.

    :param subject: ``safety_checks`` (a call's pending checks) or ``action``.
    :param approved: the answer given to the SDK (``True`` allows).
    :param decided_by: who decided: ``terminal``, ``approve-all``, ``non-interactive``,
        ``policy <path> rule <n> (line <l>)``, ``policy <path> default`` …
    :param reason: why, in words.
    :param action: the action type (``None`` for safety checks).
    :param call_id: the computer call (safety checks only).
    :param check_codes: the checks' codes (safety checks only).
    :param model_points: the action's points, model pixels.
    :param native_points: the same points on the screen (``None`` if outside the image).
    :param summary: content-free description of the action.
    :param at: wall-clock time, seconds since the epoch.
    """

    subject: Literal["safety_checks", "action"]
    approved: bool
    decided_by: str
    reason: str
    action: str | None = None
    call_id: str | None = None
    check_codes: tuple[str | None, ...] = ()
    model_points: tuple[Point, ...] = ()
    native_points: tuple[Point, ...] | None = ()
    summary: str = ""
    at: float = field(default_factory=time.time)


class DecisionLog:
    """Thread-safe, append-only list of decisions (iterate it, index it, ``len()`` it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[Decision] = []

    def append(self, decision: Decision) -> None:
        with self._lock:
            self._records.append(decision)

    @property
    def records(self) -> list[Decision]:
        """A copy of the decisions so far, oldest first."""
        with self._lock:
            return list(self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __iter__(self) -> Iterator[Decision]:
        return iter(self.records)

    def __getitem__(self, index: int) -> Decision:
        with self._lock:
            return self._records[index]
