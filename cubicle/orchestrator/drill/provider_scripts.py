"""The drill's scripts for Anthropic's and Gemini's stand-ins (a task's
``[scripted] providers = {anthropic = "…", gemini = "…"}``).

A provider script is JSON, beside the task's Responses API script and read the same way
(placeholders filled from the prepared task)::

    {"name": "desktop",
     "description": "…",
     "turns": [
       {"calls": [["screenshot", {}]]},
       {"sees": [{"pixel": [115, 624], "rgb": "#20242c", "tolerance": 24}],
        "calls": [["left_click", {"coordinate": [43, 624]}], ["screenshot", {}]]},
       {"sees": [...], "message": "Done."}]}

* each turn has exactly one of ``calls`` — the model's calls of that turn, each
  ``[name, input]`` (Claude's member and its input, a Gemini function and its args) or
  ``[name, input, "error"]`` for a call the run must refuse — and ``message``, the final text (the
  last turn, and only it);
* ``sees`` (not on the first turn): what the screenshot the model received last must show, as in
  the Responses API script (:mod:`cubicle.drivers.scripted_model.expect`); ``note``: a comment.

Claude's model sees only the screenshots it asks for: a turn that is followed by ``sees`` ends
with a ``screenshot`` call. Gemini's model is sent one with the last answer of every turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cubicle.drivers.errors import ScriptError
from cubicle.drivers.scripted_gemini import GeminiCall
from cubicle.drivers.scripted_messages import Call
from cubicle.drivers.scripted_model.expect import Expectation, parse_sees

__all__ = ["ProviderScript", "ProviderTurn", "parse_provider_script"]


@dataclass(frozen=True)
class ProviderTurn:
    """One turn: its calls (``None`` for the final message) and what its screenshot shows."""

    index: int
    calls: tuple[Call, ...] | None
    message: str | None
    sees: tuple[Expectation, ...] = ()

    @property
    def is_call(self) -> bool:
        return self.calls is not None


@dataclass(frozen=True)
class ProviderScript:
    name: str
    turns: tuple[ProviderTurn, ...]

    def stand_in_turns(self) -> list[list[Call] | str]:
        """The turns as :class:`~cubicle.drivers.scripted_messages.ScriptedMessages` and
        :class:`~cubicle.drivers.scripted_gemini.ScriptedGemini` take them."""
        return [
            list(turn.calls) if turn.calls is not None else turn.message or ""
            for turn in self.turns
        ]


def _call(value: object, path: str, index: int, number: int) -> Call | GeminiCall:
    where = f"calls[{number}]"
    if not isinstance(value, list) or len(value) not in (2, 3):
        raise ScriptError(path, index, f"{where} must be [name, input] or [name, input, 'error']")
    name, values = value[0], value[1]
    if not isinstance(name, str) or not name:
        raise ScriptError(path, index, f"{where}: the name must be a non-empty string")
    if not isinstance(values, dict):
        raise ScriptError(path, index, f"{where} ({name}): the input must be a JSON object")
    if len(value) == 3:
        if value[2] != "error":
            raise ScriptError(path, index, f"{where} ({name}): the third item must be 'error'")
        return (name, dict(values), "error")
    return (name, dict(values))


def _turn(value: object, path: str, index: int) -> ProviderTurn:
    if not isinstance(value, dict):
        raise ScriptError(path, index, f"a turn must be an object, got {type(value).__name__}")
    unknown = sorted(set(value) - {"calls", "message", "note", "sees"})
    if unknown:
        raise ScriptError(
            path, index, f"unknown key {unknown[0]!r}; allowed: calls, message, note, sees"
        )
    if ("calls" in value) == ("message" in value):
        raise ScriptError(path, index, "a turn needs exactly one of 'calls' or 'message'")
    if "sees" in value and index == 0:
        raise ScriptError(path, index, "the first turn has no screenshot to see")
    sees = parse_sees(value["sees"], path, index) if "sees" in value else ()
    if "message" in value:
        if not isinstance(value["message"], str) or not value["message"]:
            raise ScriptError(path, index, "message must be a non-empty string")
        return ProviderTurn(index, None, value["message"], sees)
    calls = value["calls"]
    if not isinstance(calls, list) or not calls:
        raise ScriptError(path, index, "calls must be a non-empty list")
    return ProviderTurn(
        index, tuple(_call(c, path, index, n) for n, c in enumerate(calls)), None, sees
    )


def parse_provider_script(data: Any, path: str = "<script>") -> ProviderScript:
    """Validate a provider script already parsed from JSON (module docstring).

    :raises ScriptError: naming ``path``, the turn and what is wrong.
    """
    if not isinstance(data, dict):
        raise ScriptError(
            path, None, f"the script must be a JSON object, got {type(data).__name__}"
        )
    unknown = sorted(set(data) - {"name", "description", "turns"})
    if unknown:
        raise ScriptError(
            path, None, f"unknown key {unknown[0]!r}; allowed: description, name, turns"
        )
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ScriptError(path, None, "name must be a non-empty string")
    raw = data.get("turns")
    if not isinstance(raw, list) or not raw:
        raise ScriptError(path, None, "turns must be a non-empty list")
    turns = tuple(_turn(t, path, i) for i, t in enumerate(raw))
    for turn in turns[:-1]:
        if not turn.is_call:
            raise ScriptError(path, turn.index, "only the last turn may be a message")
    if turns[-1].is_call:
        raise ScriptError(path, len(turns) - 1, "the last turn must be a message")
    return ProviderScript(name, turns)
