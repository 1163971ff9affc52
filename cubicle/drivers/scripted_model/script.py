"""Scripts for the scripted model: JSON files listing the turns of a conversation.

::

    {"name": "demo", "model_view": {"width": 1280, "height": 720},
     "turns": [
       {"before": [{"op": "wait_window", "title": "Mousepad", "timeout_ms": 20000}],
        "computer_call": {"actions": [{"type": "click", "button": "left", "x": 640, "y": 360}],
                          "pending_safety_checks": [{"id": "sc_1", "code": "c", "message": "m"}]},
        "expect": {"screenshot_size": [1280, 720]}},
       {"message": "Drill complete."}]}

* ``model_view`` (optional): the screenshot size every ``computer_call_output`` must have,
  unless a turn's ``expect.screenshot_size`` says otherwise.
* each turn is exactly one of ``computer_call`` (``actions`` — a list, the GA form — or
  ``action`` — one action, the legacy form; optional ``pending_safety_checks``),
  ``function_call`` (``name`` and ``arguments``, a JSON object: a call of a function tool the
  request declares; the next request must end with its ``function_call_output``) or ``message``
  (the final assistant text);
* :data:`TOOL_OUTPUT` (``{TOOL_OUTPUT}``) in a turn's strings (typed text, the message) is
  replaced, when the turn is answered, by the output of the latest ``function_call_output`` in
  its request (a text output verbatim; a list of ``input_text`` parts joined);
* ``before`` (optional): steps handed to the embedder's ``on_turn`` hook before the server
  answers; each is an object with a string ``op``; the server does not interpret them;
* ``expect`` (computer_call turns only): ``screenshot_size`` ``[width, height]`` of the
  screenshot answering this call.
* ``sees`` (optional, not on the first turn): what the screenshot this turn was *sent* must show
  (:mod:`cubicle.drivers.scripted_model.expect`); the embedder judges it in ``on_turn`` (the drill
  does).
* ``usage`` (optional): the response's ``usage`` object (integer ``input_tokens``,
  ``output_tokens``, ``total_tokens``; optional ``input_tokens_details``/``output_tokens_details``)
  or ``null`` to serve a response without usage; default: all counts 0.
* the last turn must be a ``message``, so the script can finish.

Coordinates are not bounds-checked: a script may send a point outside the view on purpose.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Final

from cubicle.drivers.errors import ScriptError
from cubicle.drivers.scripted_model.expect import Expectation, parse_sees

__all__ = [
    "ACTION_FIELDS",
    "TOOL_OUTPUT",
    "SafetyCheckSpec",
    "Script",
    "Turn",
    "default_usage",
    "load_script",
    "parse_script",
]

TOOL_OUTPUT: Final = "{TOOL_OUTPUT}"
"""Replaced in a turn by the latest function call output its request carries."""


def default_usage() -> dict[str, Any]:
    """The ``usage`` a turn serves unless its script gives one: every count 0."""
    return {
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


_INT = "int"
_STR = "str"
_KEYS = "keys"
_PATH = "path"
_BUTTON = "button"

ACTION_FIELDS: Final[dict[str, dict[str, str]]] = {
    "click": {"x": _INT, "y": _INT, "button": _BUTTON},
    "double_click": {"x": _INT, "y": _INT},
    "drag": {"path": _PATH},
    "keypress": {"keys": _KEYS},
    "move": {"x": _INT, "y": _INT},
    "scroll": {"x": _INT, "y": _INT, "scroll_x": _INT, "scroll_y": _INT},
    "type": {"text": _STR},
    "wait": {},
    "screenshot": {},
}
"""Required fields per action type (``keys`` is also optional on pointer actions)."""
_BUTTONS: Final = ("left", "right", "wheel", "back", "forward")


@dataclass(frozen=True)
class SafetyCheckSpec:
    id: str
    code: str | None
    message: str | None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class Turn:
    """One scripted turn (``index`` is 0-based). Exactly one of ``actions``/``function``/
    ``message`` is set."""

    index: int
    before: tuple[dict[str, Any], ...] = ()
    actions: tuple[dict[str, Any], ...] | None = None
    legacy: bool = False
    safety_checks: tuple[SafetyCheckSpec, ...] = ()
    message: str | None = None
    screenshot_size: tuple[int, int] | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    sees: tuple[Expectation, ...] = ()
    """What the screenshot this turn was sent must show
    (:mod:`cubicle.drivers.scripted_model.expect`)."""
    function: tuple[str, dict[str, Any]] | None = None
    """A function call: ``(name, arguments)``."""
    usage: dict[str, Any] | None = field(default_factory=default_usage)
    """The response's ``usage`` (``None``: served without one)."""

    @property
    def is_call(self) -> bool:
        """A computer call."""
        return self.actions is not None

    @property
    def is_function_call(self) -> bool:
        return self.function is not None


@dataclass(frozen=True)
class Script:
    name: str
    turns: tuple[Turn, ...]
    model_view: tuple[int, int] | None = None
    path: str = "<script>"

    def expected_size(self, turn: Turn) -> tuple[int, int] | None:
        """The screenshot size the output answering ``turn``'s call must have (or None)."""
        return turn.screenshot_size or self.model_view


def load_script(path: str | os.PathLike[str]) -> Script:
    """Read and validate a script file.

    :raises ScriptError: unreadable, not JSON, or invalid (naming the path, turn and problem).
    """
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise ScriptError(name, None, f"cannot read it ({exc})") from None
    except ValueError as exc:
        raise ScriptError(name, None, f"not valid JSON ({exc})") from None
    return parse_script(data, name)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size(value: object, path: str, turn: int | None, what: str) -> tuple[int, int]:
    if isinstance(value, dict) and set(value) == {"width", "height"}:
        value = [value["width"], value["height"]]
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(_is_int(v) and v > 0 for v in value)
    ):
        raise ScriptError(
            path, turn, f"{what} must be [width, height] positive integers, got {value!r:.60}"
        )
    return int(value[0]), int(value[1])


def _action(value: object, path: str, turn: int, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ScriptError(path, turn, f"{where} must be an object, got {type(value).__name__}")
    kind = value.get("type")
    if kind not in ACTION_FIELDS:
        raise ScriptError(
            path, turn, f"{where}: unknown action type {kind!r}; known: {', '.join(ACTION_FIELDS)}"
        )
    for name, check in ACTION_FIELDS[kind].items():
        item = value.get(name)
        ok = {
            _INT: _is_int(item),
            _STR: isinstance(item, str),
            _BUTTON: item in _BUTTONS,
            _KEYS: isinstance(item, list) and bool(item) and all(isinstance(k, str) for k in item),
            _PATH: isinstance(item, list)
            and bool(item)
            and all(
                isinstance(p, dict) and _is_int(p.get("x")) and _is_int(p.get("y")) for p in item
            ),
        }[check]
        if not ok:
            raise ScriptError(
                path, turn, f"{where} ({kind}): field {name!r} is missing or invalid: {item!r:.60}"
            )
    keys = value.get("keys")
    if (
        kind != "keypress"
        and keys is not None
        and (not isinstance(keys, list) or not all(isinstance(k, str) for k in keys))
    ):
        raise ScriptError(path, turn, f"{where} ({kind}): keys must be a list of strings")
    return dict(value)


def _turn(index: int, value: object, path: str) -> Turn:
    if not isinstance(value, dict):
        raise ScriptError(path, index, f"a turn must be an object, got {type(value).__name__}")
    kinds = ("computer_call", "function_call", "message")
    unknown = sorted(set(value) - {"before", *kinds, "expect", "note", "sees", "usage"})
    if unknown:
        raise ScriptError(
            path,
            index,
            f"unknown key {unknown[0]!r}; "
            "allowed: before, computer_call, expect, function_call, message, note, sees, usage",
        )
    usage = _usage(value["usage"], path, index) if "usage" in value else default_usage()
    sees = parse_sees(value["sees"], path, index) if "sees" in value else ()
    if sum(kind in value for kind in kinds) != 1:
        raise ScriptError(
            path,
            index,
            "a turn needs exactly one of 'computer_call', 'function_call' or 'message'",
        )
    before = value.get("before", [])
    if not isinstance(before, list) or not all(
        isinstance(s, dict) and isinstance(s.get("op"), str) for s in before
    ):
        raise ScriptError(path, index, "before must be a list of objects each with a string 'op'")
    if "message" in value:
        if not isinstance(value["message"], str) or not value["message"]:
            raise ScriptError(path, index, "message must be a non-empty string")
        if "expect" in value:
            raise ScriptError(path, index, "expect belongs to computer_call turns only")
        return Turn(
            index, tuple(before), message=value["message"], raw=dict(value), sees=sees, usage=usage
        )
    if "function_call" in value:
        if "expect" in value:
            raise ScriptError(path, index, "expect belongs to computer_call turns only")
        return Turn(
            index,
            tuple(before),
            raw=dict(value),
            sees=sees,
            function=_function_call(value["function_call"], path, index),
            usage=usage,
        )
    call = value["computer_call"]
    if not isinstance(call, dict):
        raise ScriptError(path, index, "computer_call must be an object")
    unknown = sorted(set(call) - {"actions", "action", "pending_safety_checks"})
    if unknown:
        raise ScriptError(
            path,
            index,
            f"computer_call: unknown key {unknown[0]!r}; "
            "allowed: action, actions, pending_safety_checks",
        )
    if ("actions" in call) == ("action" in call):
        raise ScriptError(
            path, index, "computer_call needs exactly one of 'actions' (list) or 'action' (legacy)"
        )
    if "actions" in call:
        raw_actions = call["actions"]
        if not isinstance(raw_actions, list) or not raw_actions:
            raise ScriptError(path, index, "computer_call.actions must be a non-empty list")
        actions = tuple(_action(a, path, index, f"actions[{i}]") for i, a in enumerate(raw_actions))
    else:
        actions = (_action(call["action"], path, index, "action"),)
    checks_raw = call.get("pending_safety_checks", [])
    if not isinstance(checks_raw, list):
        raise ScriptError(path, index, "pending_safety_checks must be a list")
    checks = []
    for i, check in enumerate(checks_raw):
        if (
            not isinstance(check, dict)
            or not isinstance(check.get("id"), str)
            or not isinstance(check.get("code", ""), str | None)
            or not isinstance(check.get("message", ""), str | None)
        ):
            raise ScriptError(
                path, index, f"pending_safety_checks[{i}] must be {{id, code, message}} strings"
            )
        checks.append(SafetyCheckSpec(check["id"], check.get("code"), check.get("message")))
    expect = value.get("expect", {})
    if not isinstance(expect, dict) or set(expect) - {"screenshot_size"}:
        raise ScriptError(path, index, "expect must be an object with only 'screenshot_size'")
    size = (
        _size(expect["screenshot_size"], path, index, "expect.screenshot_size")
        if "screenshot_size" in expect
        else None
    )
    return Turn(
        index,
        tuple(before),
        actions,
        "action" in call,
        tuple(checks),
        None,
        size,
        dict(value),
        sees,
        usage=usage,
    )


def _function_call(call: object, path: str, index: int) -> tuple[str, dict[str, Any]]:
    if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
        raise ScriptError(
            path, index, "function_call must be an object with exactly 'name' and 'arguments'"
        )
    name, arguments = call["name"], call["arguments"]
    if not isinstance(name, str) or not name:
        raise ScriptError(path, index, "function_call.name must be a non-empty string")
    if not isinstance(arguments, dict):
        raise ScriptError(path, index, "function_call.arguments must be a JSON object")
    return name, dict(arguments)


def _usage(value: object, path: str, index: int) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ScriptError(path, index, "usage must be an object or null")
    for name in ("input_tokens", "output_tokens", "total_tokens"):
        if not _is_int(value.get(name)) or value[name] < 0:
            raise ScriptError(path, index, f"usage.{name} must be a whole number >= 0")
    for name in ("input_tokens_details", "output_tokens_details"):
        if name in value and not isinstance(value[name], dict):
            raise ScriptError(path, index, f"usage.{name} must be an object")
    return dict(value)


def parse_script(data: object, path: str = "<script>") -> Script:
    """Validate a script already parsed from JSON; ``path`` names it in errors."""
    if not isinstance(data, dict):
        raise ScriptError(
            path, None, f"the script must be a JSON object, got {type(data).__name__}"
        )
    unknown = sorted(set(data) - {"name", "model_view", "turns", "description"})
    if unknown:
        raise ScriptError(
            path, None, f"unknown key {unknown[0]!r}; allowed: description, model_view, name, turns"
        )
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ScriptError(path, None, "name must be a non-empty string")
    view = _size(data["model_view"], path, None, "model_view") if "model_view" in data else None
    turns_raw = data.get("turns")
    if not isinstance(turns_raw, list) or not turns_raw:
        raise ScriptError(path, None, "turns must be a non-empty list")
    turns = tuple(_turn(i, t, path) for i, t in enumerate(turns_raw))
    if turns[-1].message is None:
        raise ScriptError(
            path, len(turns) - 1, "the last turn must be a message, so the run can finish"
        )
    seen: set[str] = set()
    for turn in turns:
        for check in turn.safety_checks:
            if check.id in seen:
                raise ScriptError(path, turn.index, f"safety check id {check.id!r} is used twice")
            seen.add(check.id)
    return Script(name, turns, view, path)
