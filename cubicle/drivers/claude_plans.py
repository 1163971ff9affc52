"""Claude's computer-toolset members → validated guest requests (pure, no I/O).

Each function checks one member's input completely and returns a
:data:`~cubicle.drivers.steps.Planner`: given the geometry of the last screenshot, it maps
screenshot pixels to screen pixels (:meth:`ViewGeometry.to_native`, refused outside the image,
never clamped) and builds the :class:`~cubicle.drivers.actions.PlannedAction` the drivers send
with their usual settle, receipt and record (``GuestDriver.perform``). Errors are
:class:`~cubicle.drivers.errors.ActionRejected` naming the member and the field. The sync and async
toolsets (:mod:`cubicle.drivers.claude_toolset`) share these.

Where a member omits ``coordinate`` it acts at the pointer: the caller passes the pointer's
native position (``pointer``) and nothing is mapped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from cubicle.drivers.actions import PlannedAction
from cubicle.drivers.claude_keys import modifier_keys
from cubicle.drivers.errors import ActionRejected
from cubicle.drivers.steps import Planner
from cubicle.drivers.viewport import Point, ViewGeometry
from cubicle_guest import protocol

__all__ = [
    "CLICKS",
    "MAX_HOLD_S",
    "MAX_REPEAT",
    "MAX_SCROLL_CLICKS",
    "MAX_WAIT_S",
    "check_seconds",
    "click_plan",
    "drag_plan",
    "hold_plan",
    "keypress_plan",
    "mouse_button_plan",
    "move_plan",
    "scroll_plan",
    "type_plan",
    "wait_plan",
]

CLICKS: Final = {
    "left_click": ("left", 1),
    "right_click": ("right", 1),
    "middle_click": ("wheel", 1),
    "double_click": ("left", 2),
    "triple_click": ("left", 3),
}
"""Click members → (guest button, clicks in one burst)."""
MAX_REPEAT: Final = 100
"""Most times one ``key`` call repeats its keys."""
MAX_HOLD_S: Final = protocol.MAX_WAIT_MS // 1000
"""Longest ``hold_key`` (seconds)."""
MAX_WAIT_S: Final = protocol.MAX_WAIT_MS // 1000
"""Longest ``wait`` (seconds)."""
MAX_SCROLL_CLICKS: Final = 100
"""Most wheel clicks one ``scroll`` sends."""
_DIRECTIONS: Final = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def _int(member: str, field: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ActionRejected(
            member, f"{field} must be an integer, got {type(value).__name__} {value!r:.40}"
        )
    return value


def _model_point(member: str, field: str, value: object) -> Point:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        raise ActionRejected(member, f"{field} must be [x, y], got {value!r:.60}")
    return _int(member, f"{field}[0]", value[0]), _int(member, f"{field}[1]", value[1])


def _target(
    member: str, geometry: ViewGeometry, coordinate: object, pointer: Point | None
) -> tuple[tuple[Point, ...], Point]:
    """The model points given and the native point to act at (the pointer when ``None``)."""
    if coordinate is None:
        if pointer is None:
            raise ActionRejected(member, "coordinate is missing and the pointer is unknown")
        return (), pointer
    model = _model_point(member, "coordinate", coordinate)
    return (model,), geometry.to_native(*model, action=member)


def check_seconds(member: str, field: str, value: object, limit: int) -> int:
    """A whole number of seconds in ``0..limit``."""
    seconds = _int(member, field, value)
    if not 0 <= seconds <= limit:
        raise ActionRejected(member, f"{field} must be 0..{limit} seconds, got {seconds}")
    return seconds


def click_plan(member: str, coordinate: object, text: str | None, pointer: Point | None) -> Planner:
    """``left_click``/``right_click``/``middle_click``/``double_click``/``triple_click``."""
    button, count = CLICKS[member]
    keys = modifier_keys(member, text)

    def plan(geometry: ViewGeometry) -> PlannedAction:
        model, native = _target(member, geometry, coordinate, pointer)
        args: dict[str, Any] = {"x": native[0], "y": native[1], "button": button}
        if count > 1:
            args["count"] = count
        if keys:
            args["keys"] = keys
        details = {"button": button, "clicks": count, "held_keys": len(keys)}
        return PlannedAction(member, "click", args, model, (native,), geometry, details)

    return plan


def move_plan(member: str, coordinate: object) -> Planner:
    """``mouse_move``: ``coordinate`` is required."""
    if coordinate is None:
        raise ActionRejected(member, "coordinate is required")

    def plan(geometry: ViewGeometry) -> PlannedAction:
        model, native = _target(member, geometry, coordinate, None)
        return PlannedAction(
            member, "move", {"x": native[0], "y": native[1]}, model, (native,), geometry
        )

    return plan


def drag_plan(member: str, start: object, end: object, text: str | None) -> Planner:
    """``left_click_drag`` from ``start_coordinate`` to ``coordinate``."""
    keys = modifier_keys(member, text)

    def plan(geometry: ViewGeometry) -> PlannedAction:
        first = _model_point(member, "start_coordinate", start)
        last = _model_point(member, "coordinate", end)
        path = (geometry.to_native(*first, action=member), geometry.to_native(*last, action=member))
        args: dict[str, Any] = {"path": [{"x": x, "y": y} for x, y in path]}
        if keys:
            args["keys"] = keys
        return PlannedAction(member, "drag", args, (first, last), path, geometry, {"points": 2})

    return plan


def scroll_plan(
    member: str,
    coordinate: object,
    *,
    direction: object,
    amount: object,
    text: str | None,
    pointer: Point | None,
) -> Planner:
    """``scroll``: ``scroll_amount`` wheel clicks toward ``scroll_direction`` (clicks are not
    pixels, so they are not scaled: one click is :data:`protocol.SCROLL_PIXELS_PER_CLICK`)."""
    if not isinstance(direction, str) or direction not in _DIRECTIONS:
        raise ActionRejected(
            member, f"scroll_direction must be one of up, down, left, right, got {direction!r:.40}"
        )
    clicks = _int(member, "scroll_amount", amount)
    if not 0 < clicks <= MAX_SCROLL_CLICKS:
        raise ActionRejected(member, f"scroll_amount must be 1..{MAX_SCROLL_CLICKS}, got {clicks}")
    keys = modifier_keys(member, text)
    dx, dy = _DIRECTIONS[direction]
    pixels = clicks * protocol.SCROLL_PIXELS_PER_CLICK

    def plan(geometry: ViewGeometry) -> PlannedAction:
        model, native = _target(member, geometry, coordinate, pointer)
        args: dict[str, Any] = {
            "x": native[0],
            "y": native[1],
            "scroll_x": dx * pixels,
            "scroll_y": dy * pixels,
        }
        if keys:
            args["keys"] = keys
        details = {"direction": direction, "clicks": clicks}
        return PlannedAction(member, "scroll", args, model, (native,), geometry, details)

    return plan


def keypress_plan(member: str, chord: list[str]) -> Planner:
    """One chord of ``key``, parsed by :func:`~cubicle.drivers.claude_keys.parse_key_text`."""

    def plan(geometry: ViewGeometry) -> PlannedAction:
        return PlannedAction(
            member, "keypress", {"keys": chord}, (), (), geometry, {"keys": len(chord)}
        )

    return plan


def hold_plan(member: str, chord: list[str], seconds: int) -> Planner:
    """``hold_key``: the agent holds ``chord`` for ``seconds`` and releases it in that request."""

    def plan(geometry: ViewGeometry) -> PlannedAction:
        args = {"keys": chord, "ms": seconds * 1000}
        details = {"keys": len(chord), "seconds": seconds}
        return PlannedAction(member, "hold_keys", args, (), (), geometry, details)

    return plan


def type_plan(member: str, text: object) -> Planner:
    """``type``: any Unicode text up to the protocol's limit."""
    if not isinstance(text, str):
        raise ActionRejected(member, f"text must be a string, got {type(text).__name__}")
    if len(text) > protocol.MAX_TEXT_CHARS:
        raise ActionRejected(
            member, f"text has {len(text)} characters, over the limit of {protocol.MAX_TEXT_CHARS}"
        )

    def plan(geometry: ViewGeometry) -> PlannedAction:
        return PlannedAction(member, "type", {"text": text}, (), (), geometry, {"chars": len(text)})

    return plan


def mouse_button_plan(member: str, op: str, pointer: Point) -> Planner:
    """``left_mouse_down``/``left_mouse_up`` at the pointer (agent ops ``mouse_down``/``up``)."""

    def plan(geometry: ViewGeometry) -> PlannedAction:
        return PlannedAction(
            member, op, {"button": "left"}, (), (pointer,), geometry, {"button": "left"}
        )

    return plan


def wait_plan(member: str, seconds: int) -> Planner:
    """``wait``: the host waits (no request), checking cancellation."""

    def plan(geometry: ViewGeometry) -> PlannedAction:
        return PlannedAction(member, None, {"ms": seconds * 1000}, (), (), geometry)

    return plan
