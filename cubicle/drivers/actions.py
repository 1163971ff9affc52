"""Validate one ``openai`` computer action and translate it into a guest request (pure).

Shared by :class:`cubicle.drivers.computer.GuestDriver` and
:class:`cubicle.drivers.async_computer.AsyncGuestDriver` so both check and map actions identically.
Actions arrive as the SDK's pydantic models (modern ``computer_action.*`` or legacy
``response_computer_tool_call.Action*``); mappings with the same fields are accepted too. Every
field is treated as untrusted and checked here, before anything is sent: integer coordinates (not
bools) inside the model's image, a known button, a non-empty chord, a drag path of at least two
points, key names in the one key vocabulary (:mod:`cubicle_guest.keys`), text within the protocol's
limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from cubicle.drivers.errors import ActionRejected
from cubicle.drivers.viewport import Point, ViewGeometry
from cubicle_guest import protocol
from cubicle_guest.errors import GuestError
from cubicle_guest.keys import resolve_key

__all__ = ["ACTION_TYPES", "PlannedAction", "plan_action"]

ACTION_TYPES: Final = (
    "click",
    "double_click",
    "drag",
    "keypress",
    "move",
    "scroll",
    "type",
    "wait",
)
"""The action types a driver executes (``screenshot`` is the separate ``screenshot()`` call)."""


@dataclass(frozen=True)
class PlannedAction:
    """One validated action, ready to send.

    :param kind: the action type.
    :param op: the guest op to send, or ``None`` for ``wait`` (the driver waits itself).
    :param args: the op's arguments, coordinates and scroll distances in native pixels.
    :param model_points: the points the model gave (model pixels), in order.
    :param native_points: the same points on the screen (native pixels).
    :param geometry: the view geometry the points were mapped with.
    """

    kind: str
    op: str | None
    args: dict[str, Any]
    model_points: tuple[Point, ...]
    native_points: tuple[Point, ...]
    geometry: ViewGeometry
    details: dict[str, Any] = field(default_factory=dict)
    """Content-free facts for records: button, key count, text length, scroll distances."""


def _field(action: object, name: str) -> object:
    if isinstance(action, Mapping):
        return action.get(name)
    return getattr(action, name, None)


def _int(kind: str, name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ActionRejected(
            kind, f"{name} must be an integer, got {type(value).__name__} {value!r:.40}"
        )
    return value


def _keys(kind: str, value: object, *, required: bool) -> list[str] | None:
    if value is None and not required:
        return None
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise ActionRejected(kind, f"keys must be a list of key names, got {type(value).__name__}")
    if required and not value:
        raise ActionRejected(kind, "keys is empty; a keypress needs at least one key")
    for index, name in enumerate(value):
        try:
            resolve_key(name)
        except GuestError as exc:
            raise ActionRejected(kind, f"keys[{index}]: {exc.reason}") from None
    return list(value)


def _point(
    kind: str, geometry: ViewGeometry, x: object, y: object, name: str = ""
) -> tuple[Point, Point]:
    model = (_int(kind, f"{name}x", x), _int(kind, f"{name}y", y))
    return model, geometry.to_native(*model, action=kind)


def plan_action(kind: str, action: object, geometry: ViewGeometry) -> PlannedAction:
    """Check ``action`` completely and map it to native pixels with ``geometry``.

    :param kind: the driver method called (``click`` …); must match ``action.type`` when present.
    :raises ActionRejected: anything invalid (:class:`CoordinateOutOfView` for a point outside
        the image), naming the field, the value and the limit. Nothing has been sent.
    """
    if kind not in ACTION_TYPES:
        raise ActionRejected(kind, f"unknown action type; known: {', '.join(ACTION_TYPES)}")
    declared = _field(action, "type")
    if declared is not None and declared != kind:
        raise ActionRejected(
            kind, f"the action's type is {declared!r}, but it was passed to {kind}()"
        )
    if kind in ("click", "double_click", "move", "scroll"):
        model, native = _point(kind, geometry, _field(action, "x"), _field(action, "y"))
        args: dict[str, Any] = {"x": native[0], "y": native[1]}
        details: dict[str, Any] = {}
        keys = _keys(kind, _field(action, "keys"), required=False)
        if keys:
            args["keys"] = keys
            details["held_keys"] = len(keys)
        if kind == "click":
            button = _field(action, "button")
            if not isinstance(button, str) or button not in protocol.BUTTONS:
                raise ActionRejected(
                    kind, f"button must be one of {', '.join(protocol.BUTTONS)}, got {button!r:.40}"
                )
            args["button"] = button
            details["button"] = button
        if kind == "scroll":
            model_dx = _int(kind, "scroll_x", _field(action, "scroll_x"))
            model_dy = _int(kind, "scroll_y", _field(action, "scroll_y"))
            args["scroll_x"], args["scroll_y"] = geometry.scroll_to_native(model_dx, model_dy)
            details.update(
                model_scroll=(model_dx, model_dy),
                native_scroll=(args["scroll_x"], args["scroll_y"]),
            )
        return PlannedAction(kind, kind, args, (model,), (native,), geometry, details)
    if kind == "drag":
        path = _field(action, "path")
        if not isinstance(path, list):
            raise ActionRejected(kind, f"path must be a list of points, got {type(path).__name__}")
        if len(path) < 2:
            raise ActionRejected(kind, f"path has {len(path)} point(s); a drag needs at least 2")
        model_points: list[Point] = []
        native_points: list[Point] = []
        for index, point in enumerate(path):
            model, native = _point(
                kind, geometry, _field(point, "x"), _field(point, "y"), f"path[{index}]."
            )
            model_points.append(model)
            native_points.append(native)
        args = {"path": [{"x": x, "y": y} for x, y in native_points]}
        keys = _keys(kind, _field(action, "keys"), required=False)
        if keys:
            args["keys"] = keys
        return PlannedAction(
            kind,
            kind,
            args,
            tuple(model_points),
            tuple(native_points),
            geometry,
            {"points": len(native_points)},
        )
    if kind == "keypress":
        keys = _keys(kind, _field(action, "keys"), required=True)
        assert keys is not None
        return PlannedAction(kind, kind, {"keys": keys}, (), (), geometry, {"keys": len(keys)})
    if kind == "type":
        text = _field(action, "text")
        if not isinstance(text, str):
            raise ActionRejected(kind, f"text must be a string, got {type(text).__name__}")
        if len(text) > protocol.MAX_TEXT_CHARS:
            raise ActionRejected(
                kind,
                f"text has {len(text)} characters, over the limit of {protocol.MAX_TEXT_CHARS}",
            )
        return PlannedAction(kind, kind, {"text": text}, (), (), geometry, {"chars": len(text)})
    # wait: the SDK defines no duration field; the driver waits its configured time.
    return PlannedAction(kind, None, {}, (), (), geometry)
