"""Declarative approval policy files (TOML), loaded and validated with line-precise errors.

Format (every key optional unless marked)::

    version = 1
    default = "deny"          # verdict for an action no rule matches: allow | deny | ask
    safety_checks = "ask"     # verdict for pending safety checks no [[check]] matches
    origin_access = "ask"     # verdict for an ask: sandbox's origin question no [[origin]] matches

    [[rule]]                  # action rules; the FIRST matching rule decides
    decision = "allow"        # required: allow | deny | ask
    actions = ["click", "move", "screenshot"]   # action types
    keys = ["ctrl+l", "Return"]   # chords ('+'-joined or lists); matches a keypress chord or
                                  # the keys held during a pointer action; case-insensitive,
                                  # aliases resolved by cubicle_guest.keys (CTRL = ctrl = Control_L)
    text = "(?i)password"     # regular expression searched in a type action's text
    region = {x = 0, y = 0, width = 1280, height = 40}   # screen (native) pixels; matches when
                              # every point of the action lies inside it
    note = "why this rule"    # shown in the decision log

    [[check]]                 # safety-check rules; first match wins
    decision = "allow"        # required
    codes = ["malicious_instructions"]   # matches when every pending check's code is listed

    [[origin]]                # origin-access rules (``--network ask:``); first match wins
    decision = "allow"        # required: allow (approve) | deny | ask (the terminal, if any)
    origins = ["example.com", "api.example.org:8443"]   # entries as in ``allow:`` — a NAME is
                              # that domain and its subdomains on ports 80/443, HOST:PORT exact
    note = "why this rule"

All conditions of a rule must hold. A rule with ``keys``/``text``/``region`` matches only actions
that have keys/text/points. Screen regions are matched with the driver's current geometry; an
action with a point outside the model's image matches no region rule.

The schema is :mod:`cubicle.drivers.policy_schema` (pydantic: strict types, unknown keys
refused). Errors (:class:`~cubicle.drivers.errors.PolicyFileError`) name the file, the line, the
key and the reason, for the first wrong key: ``policy file p.toml:9: rule 2: region.width should
be greater than or equal to 1`` — entries of ``[[rule]]``/``[[check]]``/``[[origin]]`` counted from
1 as decisions name them, the key's path in the entry (``actions[0]``, list items from 0). TOML
syntax errors carry tomllib's line; a wrong key points at its own line within its entry (the
entry's header when the key is missing or not found on a line of its own, e.g. in a sub-table).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from cubicle.drivers import policy_schema as schema
from cubicle.drivers.decisions import ActionFacts, SafetyCheck
from cubicle.drivers.errors import PolicyFileError
from cubicle.drivers.policy_schema import Chord, Verdict, chord
from cubicle.drivers.viewport import Rect
from cubicle.egress import origins as egress

__all__ = [
    "CheckRule",
    "OriginRule",
    "Policy",
    "Rule",
    "Verdict",
    "load_policy",
    "parse_policy",
]


@dataclass(frozen=True)
class Rule:
    """One ``[[rule]]``: ``index`` is 1-based, ``line`` its header line."""

    index: int
    line: int
    decision: Verdict
    actions: frozenset[str] | None = None
    keys: tuple[Chord, ...] | None = None
    text: re.Pattern[str] | None = None
    region: Rect | None = None
    note: str = ""

    def matches(self, facts: ActionFacts) -> bool:
        if self.actions is not None and facts.kind not in self.actions:
            return False
        if self.keys is not None:
            pressed = chord(list(facts.keys)) if facts.keys else None
            if pressed is None or pressed not in self.keys:
                return False
        if self.text is not None and (facts.text is None or not self.text.search(facts.text)):
            return False
        if self.region is not None:
            points = facts.native_points
            if not points or not all(self.region.contains(x, y) for x, y in points):
                return False
        return True


@dataclass(frozen=True)
class CheckRule:
    """One ``[[check]]``: ``index`` is 1-based, ``line`` its header line."""

    index: int
    line: int
    decision: Verdict
    codes: frozenset[str] | None = None
    note: str = ""

    def matches(self, checks: tuple[SafetyCheck, ...]) -> bool:
        return self.codes is None or all(check.code in self.codes for check in checks)


@dataclass(frozen=True)
class OriginRule:
    """One ``[[origin]]``: ``index`` is 1-based, ``line`` its header line; ``origins`` as the
    egress proxy reads an ``allow:`` list (:mod:`cubicle.egress.origins`, the one grammar)."""

    index: int
    line: int
    decision: Verdict
    origins: egress.Policy
    note: str = ""

    def matches(self, host: str, port: int) -> bool:
        return egress.decide(self.origins, host, port).allowed


@dataclass(frozen=True)
class Policy:
    """A loaded policy: rules in file order, the defaults, and where it came from."""

    path: str
    default: Verdict
    safety_checks: Verdict
    rules: tuple[Rule, ...]
    checks: tuple[CheckRule, ...]
    origin_access: Verdict = "ask"
    origin_rules: tuple[OriginRule, ...] = ()

    def decide_origin(self, host: str, port: int) -> tuple[Verdict, str]:
        """The verdict for an origin-access question (``host`` normalised) and who decided."""
        for rule in self.origin_rules:
            if rule.matches(host, port):
                note = f": {rule.note}" if rule.note else ""
                return (
                    rule.decision,
                    f"policy {self.path} origin {rule.index} (line {rule.line}){note}",
                )
        return self.origin_access, f"policy {self.path} origin_access default"

    def decide_action(self, facts: ActionFacts) -> tuple[Verdict, str]:
        """The verdict for an action and who decided (``policy <path> rule 2 (line 9)``)."""
        for rule in self.rules:
            if rule.matches(facts):
                note = f": {rule.note}" if rule.note else ""
                return (
                    rule.decision,
                    f"policy {self.path} rule {rule.index} (line {rule.line}){note}",
                )
        return self.default, f"policy {self.path} default"

    def decide_checks(self, checks: tuple[SafetyCheck, ...]) -> tuple[Verdict, str]:
        """The verdict for a call's pending safety checks and who decided."""
        for rule in self.checks:
            if rule.matches(checks):
                note = f": {rule.note}" if rule.note else ""
                return (
                    rule.decision,
                    f"policy {self.path} check {rule.index} (line {rule.line}){note}",
                )
        return self.safety_checks, f"policy {self.path} safety_checks default"


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and validate a policy file.

    :raises PolicyFileError: unreadable, not TOML, or invalid (naming the line and reason).
    """
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyFileError(name, None, f"cannot read it ({exc})") from None
    return parse_policy(text, name)


def parse_policy(text: str, path: str = "<policy>") -> Policy:
    """Validate policy TOML ``text`` (:class:`~cubicle.drivers.policy_schema.PolicyDocument`);
    ``path`` names it in errors and decisions.

    :raises PolicyFileError: not TOML, or invalid: the first wrong key, by its path and line.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        raise PolicyFileError(
            path, int(found.group(1)) if found else None, f"not valid TOML: {exc}"
        ) from None
    where = _Locator(text)
    try:
        document = schema.validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise PolicyFileError(path, _line(where, tuple(first["loc"])), _reason(first)) from None

    def line(table: str, index: int) -> int:
        return where.header(table, index) or 0

    return Policy(
        path,
        document.default,
        document.safety_checks,
        tuple(
            Rule(
                index,
                line("rule", index),
                entry.decision,
                None if entry.actions is None else frozenset(entry.actions),
                entry.keys,
                entry.text,
                None if entry.region is None else entry.region.rect(),
                entry.note,
            )
            for index, entry in enumerate(document.rule, 1)
        ),
        tuple(
            CheckRule(
                index,
                line("check", index),
                entry.decision,
                None if entry.codes is None else frozenset(entry.codes),
                entry.note,
            )
            for index, entry in enumerate(document.check, 1)
        ),
        document.origin_access,
        tuple(
            OriginRule(index, line("origin", index), entry.decision, entry.origins, entry.note)
            for index, entry in enumerate(document.origin, 1)
        ),
    )


# --------------------------------------------------------------------------- errors


def _entry(loc: tuple[int | str, ...]) -> tuple[str, int] | None:
    """``("rule", 2)`` (1-based) when ``loc`` is inside an entry of an array of tables."""
    if len(loc) >= 2 and loc[0] in schema.TABLES and isinstance(loc[1], int):
        return str(loc[0]), loc[1] + 1
    return None


def _field(loc: tuple[int | str, ...]) -> str:
    """``("region", "x")`` → ``region.x``; ``("actions", 0)`` → ``actions[0]``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text


def _line(where: _Locator, loc: tuple[int | str, ...]) -> int | None:
    """The line of the key at ``loc``: in its ``[[table]]`` entry (the entry's header when the
    key is not written there, e.g. a missing one), else at the top level."""
    entry = _entry(loc)
    if entry is not None:
        key = loc[2] if len(loc) > 2 and isinstance(loc[2], str) else None
        found = where.in_table(*entry, key)
        if found is not None:
            return found
    return where.top(str(loc[0])) if loc else None


def _reason(error: ErrorDetails) -> str:
    """The error as ``rule 2: region.width should be greater than or equal to 1``: the entry
    (1-based, as decisions name it), the key's path in it, what is wrong."""
    loc = tuple(error["loc"])
    entry = _entry(loc)
    prefix = f"{entry[0]} {entry[1]}: " if entry else ""
    inner = loc[2:] if entry else loc
    kind = error["type"]
    if kind in ("extra_forbidden", "missing"):
        parent = _field(inner[:-1])
        head = prefix + (f"{parent}: " if parent else "")
        if kind == "missing":
            return f"{head}missing {inner[-1]!r}"
        what = "top-level key" if not loc[:-1] else "key"
        allowed = ", ".join(schema.allowed_keys(loc[:-1]))
        return f"{head}unknown {what} {inner[-1]!r}; allowed: {allowed}"
    subject = prefix + _field(inner) if inner else prefix.removesuffix(": ")
    if len(loc) == 1 and loc[0] in schema.TABLES:
        return f"{loc[0]} must be an array of tables [[{loc[0]}]]"
    if kind in ("model_type", "dict_type"):
        return f"{subject} must be a table"
    if kind == "too_short":
        return f"{subject} must not be empty"
    if kind == "literal_error":
        expected = str(error.get("ctx", {}).get("expected", ""))
        choice = "one of " if " or " in expected else ""
        return f"{subject} must be {choice}{expected}, got {error['input']!r}"
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Input ")
    joint = " " if message.startswith(("must ", "is ", "should ")) else ": "
    return f"{subject}{joint}{message}"


class _Locator:
    """Finds the source line of a top-level key, the n-th ``[[table]]`` header, or a key in it.

    tomllib keeps no positions, so this scans the text: good for the plain layout the format
    documents (one key per line, array-of-tables headers).
    """

    _HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?\s*(#.*)?$")

    def __init__(self, text: str) -> None:
        self._lines = text.splitlines()
        self._headers: list[tuple[int, str]] = []
        for number, content in enumerate(self._lines, 1):
            found = self._HEADER.match(content)
            if found:
                self._headers.append((number, found.group(1)))

    def _key_line(self, key: str, start: int, end: int) -> int | None:
        pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
        for number in range(start, end):
            if pattern.match(self._lines[number - 1]):
                return number
        return None

    def top(self, key: str) -> int | None:
        end = self._headers[0][0] if self._headers else len(self._lines) + 1
        return self._key_line(key, 1, end) or self.header(key, 1)

    def header(self, table: str, index: int) -> int | None:
        found = [number for number, name in self._headers if name == table]
        return found[index - 1] if 0 < index <= len(found) else None

    def in_table(self, table: str, index: int, key: str | None) -> int | None:
        start = self.header(table, index)
        if start is None:
            return None
        following = [number for number, _ in self._headers if number > start]
        end = following[0] if following else len(self._lines) + 1
        if key is None:
            return start
        return self._key_line(key, start + 1, end) or start
