"""The schema of approval policy files (:mod:`cubicle.drivers.policy_file`), as pydantic models.

:class:`PolicyDocument` validates what ``tomllib`` parsed: strict types (no coercion: ``"1"`` is
not an integer, ``true`` is not one either), unknown keys refused (``extra="forbid"``), and each
value turned into what the matcher uses — chords into key-name sets, ``text`` into a compiled
pattern, ``region`` into a :class:`~cubicle.drivers.viewport.Rect`, ``origins`` into the egress
proxy's :data:`cubicle.egress.origins.Policy`. A bad value fails with a
:class:`pydantic.ValidationError` whose ``loc`` is the path of the offending key
(``("rule", 1, "actions", 0)``); the file's line comes from that path, in the caller.

Messages of the checks written here start with a verb (``must be ...``, ``is not ...``) so
that the caller can put the field's name in front of them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator

from cubicle.drivers.actions import ACTION_TYPES
from cubicle.drivers.gemini_actions import FUNCTIONS as GEMINI_FUNCTIONS
from cubicle.drivers.viewport import Rect
from cubicle.egress import origins as egress
from cubicle_guest.errors import GuestError
from cubicle_guest.keys import resolve_chord

__all__ = [
    "CLAUDE_MEMBERS",
    "POLICY_ACTIONS",
    "CheckEntry",
    "Chord",
    "OriginEntry",
    "PolicyDocument",
    "RegionEntry",
    "RuleEntry",
    "Verdict",
    "chord",
]

Verdict = Literal["allow", "deny", "ask"]
CLAUDE_MEMBERS: Final = (
    "key",
    "hold_key",
    "type",
    "cursor_position",
    "mouse_move",
    "left_mouse_down",
    "left_mouse_up",
    "left_click",
    "left_click_drag",
    "right_click",
    "middle_click",
    "double_click",
    "triple_click",
    "scroll",
    "wait",
    "screenshot",
    "zoom",
)
"""Claude's computer-toolset members: anthropic's ``BetaComputerMemberName``, spelled here so that
reading a policy (and so every ``cubicle`` command) does not import the anthropic package, seconds
of CPU at each start; tests/drivers/test_policy_file.py checks they are anthropic's."""
POLICY_ACTIONS: Final = (
    *ACTION_TYPES,
    "screenshot",
    *(m for m in CLAUDE_MEMBERS if m not in ACTION_TYPES and m != "screenshot"),
    *(name for name in GEMINI_FUNCTIONS if name not in ACTION_TYPES),
)
"""What a rule's ``actions`` may name: the OpenAI action types, Claude's computer-toolset members
(``left_click``, ``key``, ``zoom`` …) and Gemini's computer-use functions (``click_at`` …) — each
provider's actions are judged under the names the model used."""
Chord = frozenset[str]
"""A chord as matched: lower-case keysym names (``{"control_l", "l"}``)."""


def chord(names: list[str]) -> Chord:
    """The chord of key ``names`` (aliases resolved: ``CTRL`` = ``ctrl`` = ``Control_L``).

    :raises GuestError: a name is no key."""
    return frozenset(key.keysym_name.lower() for key in resolve_chord(names))


def _strings(value: object) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a non-empty list of strings")
    return value


def _version(value: object) -> int:
    if type(value) is not int or value != 1:
        raise ValueError(f"must be 1, got {value!r}")
    return value


def _action(value: str) -> str:
    if value not in POLICY_ACTIONS:
        raise ValueError(f"unknown action type {value!r}; known: {', '.join(POLICY_ACTIONS)}")
    return value


def _chord(value: object) -> Chord:
    """A chord written ``"ctrl+l"`` or ``["ctrl", "l"]`` (``"+"`` alone is the plus key)."""
    names: list[object] = (
        list(value)
        if isinstance(value, list)
        else list(value.split("+"))
        if isinstance(value, str) and value != "+"
        else [value]
    )
    if not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"bad chord {value!r}: a string 'ctrl+l' or a list ['ctrl', 'l']")
    try:
        return chord([str(name) for name in names])
    except GuestError as exc:
        raise ValueError(exc.reason) from None


def _chords(value: object) -> tuple[Chord, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError("must be a non-empty list of chords")
    return tuple(_chord(item) for item in value)


def _pattern(value: object) -> re.Pattern[str]:
    if not isinstance(value, str):
        raise ValueError("must be a regular expression string")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ValueError(f"is not a valid regular expression ({exc})") from None


def _origins(value: object) -> egress.Policy:
    items = _strings(value)
    for item in items:
        if "," in item:
            raise ValueError(f"{item!r}: one origin per string")
    try:
        return egress.parse_policy("allow:" + ",".join(items))
    except egress.InvalidOrigin as exc:
        raise ValueError(str(exc)) from None


Strings = Annotated[list[str], PlainValidator(_strings)]
Actions = Annotated[list[Annotated[str, AfterValidator(_action)]], Field(min_length=1)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RegionEntry(_Table):
    """``region = {x, y, width, height}``: screen (native) pixels."""

    x: int = Field(ge=0)
    y: int = Field(ge=0)
    width: int = Field(ge=1)
    height: int = Field(ge=1)

    def rect(self) -> Rect:
        return Rect(self.x, self.y, self.width, self.height)


class RuleEntry(_Table):
    """One ``[[rule]]`` (action rule)."""

    decision: Verdict
    actions: Actions | None = None
    keys: Annotated[tuple[Chord, ...], PlainValidator(_chords)] | None = None
    text: Annotated[re.Pattern[str], PlainValidator(_pattern)] | None = None
    region: RegionEntry | None = None
    note: str = ""


class CheckEntry(_Table):
    """One ``[[check]]`` (safety-check rule)."""

    decision: Verdict
    codes: Strings | None = None
    note: str = ""


class OriginEntry(_Table):
    """One ``[[origin]]`` (origin-access rule)."""

    decision: Verdict
    origins: Annotated[egress.Policy, PlainValidator(_origins)]
    note: str = ""


class PolicyDocument(_Table):
    """A whole policy file."""

    version: Annotated[int, PlainValidator(_version)] = 1
    default: Verdict = "deny"
    safety_checks: Verdict = "ask"
    origin_access: Verdict = "ask"
    rule: list[RuleEntry] = []
    check: list[CheckEntry] = []
    origin: list[OriginEntry] = []


TABLES: Final[dict[str, type[BaseModel]]] = {
    "rule": RuleEntry,
    "check": CheckEntry,
    "origin": OriginEntry,
}
"""The array-of-tables keys and the model of one entry."""


def allowed_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the table at ``loc`` (a path into the document) takes, sorted."""
    model: type[BaseModel] = PolicyDocument
    if loc and loc[0] in TABLES:
        model = TABLES[str(loc[0])]
        if loc[2:] == ("region",):
            model = RegionEntry
    return sorted(model.model_fields)


def validate(data: dict[str, Any]) -> PolicyDocument:
    """``data`` (parsed TOML) as a document. :raises pydantic.ValidationError: naming the path."""
    return PolicyDocument.model_validate(data)
