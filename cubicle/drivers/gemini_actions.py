"""Gemini's computer-use function calls executed on a cubicle guest driver.

Gemini's computer-use tool answers with function calls (``click_at``, ``type_text_at``,
``scroll_document``, ``key_combination`` …) whose coordinates lie on a 1000x1000 grid over the
screenshot it was shown: ``0..999`` on each axis. :class:`GeminiComputer` validates each call's
fields completely (a missing, mistyped or unknown field is refused by name; so is an unknown
function), maps grid points onto the screen through the driver's view (the grid covers the crop the
last screenshot showed: ``native = crop.x + x * crop.width // 1000``, so 0 is the first pixel and
999 lands inside the last) and runs the call through ``GuestDriver.perform`` with the same settle,
receipts and records as every other path. Errors are
:class:`~cubicle.drivers.errors.ActionRejected` naming the function and the field.

The browser-only functions (:data:`BROWSER_ONLY`: ``open_web_browser``, ``navigate``, ``search``,
``go_back``, ``go_forward``) are not served: a cubicle desktop is a whole desktop, not a browser
tab, and typing an address into whatever window has the focus is not something to guess.
:func:`computer_use_tool` builds the tool entry with ``environment=ENVIRONMENT_DESKTOP`` and those
functions in ``excluded_predefined_functions``, and a call to one is refused by name. A model that
wants a page opens the desktop's browser as a person would (click its icon, type the address).

A call whose ``safety_decision`` asks for confirmation runs only when ``confirm(name, args)``
returns ``True``; without a ``confirm`` it is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import anyio.to_thread

from cubicle.drivers.actions import PlannedAction
from cubicle.drivers.async_computer import AsyncGuestDriver
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.errors import ActionRejected
from cubicle.drivers.options import Cancelled
from cubicle.drivers.steps import Planner
from cubicle.drivers.viewport import Point, ViewGeometry
from cubicle_guest import protocol
from cubicle_guest.errors import GuestError
from cubicle_guest.keys import resolve_key

if TYPE_CHECKING:
    from google.genai import types

__all__ = [
    "BROWSER_ONLY",
    "DEFAULT_SCROLL_MAGNITUDE",
    "FUNCTIONS",
    "GRID",
    "AsyncGeminiComputer",
    "Confirm",
    "GeminiComputer",
    "computer_use_tool",
    "gemini_steps",
    "grid_to_native",
    "needs_confirmation",
]

GRID: Final = 1000
"""Gemini's coordinates are ``0..GRID-1`` on each axis of the screenshot."""
BROWSER_ONLY: Final = ("open_web_browser", "navigate", "search", "go_back", "go_forward")
"""Functions that act on a browser tab; excluded from the tool and refused (module docstring)."""
DEFAULT_SCROLL_MAGNITUDE: Final = 800
"""``scroll_at``'s magnitude when the call gives none (grid units, as Gemini's reference does)."""
WAIT_S: Final = 5
"""``wait_5_seconds`` waits this long."""


@dataclass(frozen=True)
class _Field:
    kind: type
    required: bool = True


_X = _Field(int)
_Y = _Field(int)
_COMMON: Final = {"safety_decision": _Field(dict, False), "intent": _Field(str, False)}
FUNCTIONS: Final[Mapping[str, Mapping[str, _Field]]] = {
    "click_at": {"x": _X, "y": _Y},
    "hover_at": {"x": _X, "y": _Y},
    "type_text_at": {
        "x": _X,
        "y": _Y,
        "text": _Field(str),
        "press_enter": _Field(bool, False),
        "clear_before_typing": _Field(bool, False),
    },
    "key_combination": {"keys": _Field(str)},
    "scroll_document": {"direction": _Field(str)},
    "scroll_at": {"x": _X, "y": _Y, "direction": _Field(str), "magnitude": _Field(int, False)},
    "drag_and_drop": {"x": _X, "y": _Y, "destination_x": _X, "destination_y": _Y},
    "wait_5_seconds": {},
}
"""The functions served and their fields (besides ``safety_decision`` and ``intent``)."""
_DIRECTIONS: Final = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def computer_use_tool() -> types.Tool:
    """The ``tools[]`` entry: computer use on a desktop, without the browser-only functions."""
    from google.genai import types  # noqa: PLC0415 — google-genai loads only where Gemini runs

    return types.Tool(
        computer_use=types.ComputerUse(
            environment=types.Environment.ENVIRONMENT_DESKTOP,
            excluded_predefined_functions=list(BROWSER_ONLY),
        )
    )


def grid_to_native(name: str, geometry: ViewGeometry, x: int, y: int, field: str = "") -> Point:
    """Map grid point ``(x, y)`` onto the screen through the view's crop.

    :raises ActionRejected: a coordinate outside ``0..999`` (never clamped), naming the field.
    """
    for axis, value in ((f"{field}x", x), (f"{field}y", y)):
        if not 0 <= value < GRID:
            raise ActionRejected(name, f"{axis} must be 0..{GRID - 1} (the grid), got {value}")
    crop = geometry.crop
    return crop.x + x * crop.width // GRID, crop.y + y * crop.height // GRID


def _checked(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    if name in BROWSER_ONLY:
        raise ActionRejected(
            name,
            "browser-only functions are not served on a desktop (excluded from the tool; "
            "open the desktop's browser and type the address instead)",
        )
    fields = FUNCTIONS.get(name)
    if fields is None:
        raise ActionRejected(name, f"unknown function; served: {', '.join(FUNCTIONS)}")
    if not isinstance(args, Mapping):
        raise ActionRejected(name, f"args must be an object, got {type(args).__name__}")
    allowed = {**fields, **_COMMON}
    for key in args:
        if key not in allowed:
            raise ActionRejected(name, f"unknown field {key!r}; fields: {', '.join(allowed)}")
    for key, spec in allowed.items():
        value = args.get(key)
        if value is None:
            if spec.required:
                raise ActionRejected(name, f"{key} is required")
            continue
        wrong = not isinstance(value, spec.kind) or (spec.kind is int and isinstance(value, bool))
        if wrong:
            raise ActionRejected(
                name,
                f"{key} must be {spec.kind.__name__}, got {type(value).__name__} {value!r:.40}",
            )
    return dict(args)


def _direction(name: str, value: str) -> tuple[int, int]:
    if value not in _DIRECTIONS:
        raise ActionRejected(name, f"direction must be up, down, left or right, got {value!r:.20}")
    return _DIRECTIONS[value]


def _keys(name: str, text: str) -> list[str]:
    """``key_combination``'s ``"Control+Shift+T"`` → keysym names (cubicle's key vocabulary)."""
    parts = text.split("+") if text != "+" else ["plus"]
    if text.endswith("++"):
        parts = [*text[:-2].split("+"), "plus"]
    keys = []
    for part in parts:
        try:
            keys.append(resolve_key(part.strip()).keysym_name)
        except GuestError:
            raise ActionRejected(name, f"keys: unknown key {part!r} in {text!r}") from None
    return keys


def _point_plan(name: str, call: Mapping[str, Any], op: str) -> Planner:
    def plan(geometry: ViewGeometry) -> PlannedAction:
        native = grid_to_native(name, geometry, call["x"], call["y"])
        args: dict[str, Any] = {"x": native[0], "y": native[1]}
        if op == "click":
            args["button"] = "left"
        return PlannedAction(name, op, args, ((call["x"], call["y"]),), (native,), geometry)

    return plan


def _key_plan(name: str, chord: list[str]) -> Planner:
    def plan(geometry: ViewGeometry) -> PlannedAction:
        return PlannedAction(name, "keypress", {"keys": chord}, (), (), geometry)

    return plan


def _type_plan(name: str, text: str) -> Planner:
    def plan(geometry: ViewGeometry) -> PlannedAction:
        return PlannedAction(name, "type", {"text": text}, (), (), geometry, {"chars": len(text)})

    return plan


def _scroll_plan(
    name: str,
    center: Callable[[ViewGeometry], Point],
    direction: str,
    magnitude: int | None,
) -> Planner:
    """The wheel at ``center``: ``magnitude`` grid units, or half the view when ``None``."""
    dx, dy = _direction(name, direction)
    if magnitude is not None and not 0 < magnitude < GRID:
        raise ActionRejected(name, f"magnitude must be 1..{GRID - 1}, got {magnitude}")

    def plan(geometry: ViewGeometry) -> PlannedAction:
        x, y = center(geometry)
        crop = geometry.crop
        if magnitude is None:
            distance_x, distance_y = crop.width // 2, crop.height // 2
        else:
            distance_x, distance_y = magnitude * crop.width // GRID, magnitude * crop.height // GRID
        args = {"x": x, "y": y, "scroll_x": dx * distance_x, "scroll_y": dy * distance_y}
        details = {"direction": direction}
        return PlannedAction(name, "scroll", args, (), ((x, y),), geometry, details)

    return plan


def _drag_plan(name: str, call: Mapping[str, Any]) -> Planner:
    def plan(geometry: ViewGeometry) -> PlannedAction:
        start = grid_to_native(name, geometry, call["x"], call["y"])
        end = grid_to_native(
            name, geometry, call["destination_x"], call["destination_y"], "destination_"
        )
        args = {"path": [{"x": x, "y": y} for x, y in (start, end)]}
        model = ((call["x"], call["y"]), (call["destination_x"], call["destination_y"]))
        return PlannedAction(name, "drag", args, model, (start, end), geometry)

    return plan


def _wait_plan(name: str) -> Planner:
    def plan(geometry: ViewGeometry) -> PlannedAction:
        return PlannedAction(name, None, {"ms": WAIT_S * 1000}, (), (), geometry)

    return plan


def gemini_steps(name: str, args: Mapping[str, Any]) -> list[Planner]:
    """Validate one function call and return the driver steps that perform it, in order
    (``type_text_at`` is a click, optionally select-all + BackSpace, the text, optionally Return).

    :raises ActionRejected: an unknown, browser-only or malformed call (naming the field).
    """
    call = _checked(name, args)
    if name in ("click_at", "hover_at"):
        return [_point_plan(name, call, "click" if name == "click_at" else "move")]
    if name == "type_text_at":
        text = call["text"]
        if len(text) > protocol.MAX_TEXT_CHARS:
            raise ActionRejected(
                name,
                f"text has {len(text)} characters, over the limit of {protocol.MAX_TEXT_CHARS}",
            )
        steps = [_point_plan(name, call, "click")]
        if call.get("clear_before_typing", True):
            steps += [_key_plan(name, ["Control_L", "a"]), _key_plan(name, ["BackSpace"])]
        steps.append(_type_plan(name, text))
        if call.get("press_enter", True):
            steps.append(_key_plan(name, ["Return"]))
        return steps
    if name == "key_combination":
        return [_key_plan(name, _keys(name, call["keys"]))]
    if name == "scroll_document":
        return [
            _scroll_plan(
                name,
                lambda g: (g.crop.x + g.crop.width // 2, g.crop.y + g.crop.height // 2),
                call["direction"],
                None,
            )
        ]
    if name == "scroll_at":
        given = call.get("magnitude")
        magnitude = DEFAULT_SCROLL_MAGNITUDE if given is None else given
        return [
            _scroll_plan(
                name,
                lambda g: grid_to_native(name, g, call["x"], call["y"]),
                call["direction"],
                magnitude,
            )
        ]
    if name == "drag_and_drop":
        return [_drag_plan(name, call)]
    return [_wait_plan(name)]  # wait_5_seconds


def needs_confirmation(args: Mapping[str, Any]) -> bool:
    """Whether the call's ``safety_decision`` asks for a person's confirmation."""
    decision = args.get("safety_decision")
    return isinstance(decision, Mapping) and decision.get("decision") == "require_confirmation"


Confirm = Callable[[str, Mapping[str, Any]], bool]
"""``confirm(name, args) -> bool`` for a call whose ``safety_decision`` requires confirmation."""


def _refused(name: str) -> ActionRejected:
    return ActionRejected(name, "safety_decision requires confirmation; refused")


class GeminiComputer:
    """Executes Gemini's computer-use function calls on ``driver`` (see the module docstring).

    :param confirm: asked for a call whose ``safety_decision`` requires confirmation
        (``None``: such calls are refused).
    :param cancelled: checked before each request is sent and while waiting.
    """

    def __init__(
        self, driver: GuestDriver, *, confirm: Confirm | None = None, cancelled: Cancelled = None
    ) -> None:
        self.driver = driver
        self._confirm = confirm
        self._cancelled = cancelled

    def execute(self, name: str, args: Mapping[str, Any]) -> None:
        """Validate and run one function call.

        :raises ActionRejected: an unknown, browser-only or malformed call, or one whose
            confirmation was refused (nothing was sent).
        """
        steps = gemini_steps(name, args)
        if needs_confirmation(args) and not (
            self._confirm is not None and self._confirm(name, args) is True
        ):
            raise _refused(name)
        for step in steps:
            self.driver.perform(name, step, cancelled=self._cancelled)


class AsyncGeminiComputer:
    """:class:`GeminiComputer` over an :class:`AsyncGuestDriver`; ``confirm`` runs in a worker
    thread (it may prompt a person)."""

    def __init__(
        self,
        driver: AsyncGuestDriver,
        *,
        confirm: Confirm | None = None,
        cancelled: Cancelled = None,
    ) -> None:
        self.driver = driver
        self._confirm = confirm
        self._cancelled = cancelled

    async def execute(self, name: str, args: Mapping[str, Any]) -> None:
        """See :meth:`GeminiComputer.execute`."""
        steps = gemini_steps(name, args)
        if needs_confirmation(args):
            confirm = self._confirm
            approved = confirm is not None and (
                await anyio.to_thread.run_sync(confirm, name, args, abandon_on_cancel=True)
            )
            if approved is not True:
                raise _refused(name)
        for step in steps:
            await self.driver.perform(name, step, cancelled=self._cancelled)
