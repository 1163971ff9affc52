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

Errors (:class:`~cubicle.drivers.errors.PolicyFileError`) name the file, the line and the reason:
TOML syntax errors carry tomllib's line; semantic errors point at the offending key's line within
its ``[[rule]]``/``[[check]]`` (or the table header).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

from cubicle.drivers.actions import ACTION_TYPES
from cubicle.drivers.decisions import ActionFacts, SafetyCheck
from cubicle.drivers.errors import PolicyFileError
from cubicle.drivers.viewport import Rect
from cubicle.egress import origins as egress
from cubicle_guest.errors import GuestError
from cubicle_guest.keys import resolve_chord

__all__ = [
    "CheckRule",
    "OriginRule",
    "Policy",
    "Rule",
    "Verdict",
    "load_policy",
    "parse_policy",
]

Verdict = Literal["allow", "deny", "ask"]
VERDICTS: Final = ("allow", "deny", "ask")
RULE_KEYS: Final = frozenset({"decision", "actions", "keys", "text", "region", "note"})
CHECK_KEYS: Final = frozenset({"decision", "codes", "note"})
ORIGIN_KEYS: Final = frozenset({"decision", "origins", "note"})
TOP_KEYS: Final = frozenset(
    {"version", "default", "safety_checks", "origin_access", "rule", "check", "origin"}
)
POLICY_ACTIONS: Final = (*ACTION_TYPES, "screenshot")

Chord = frozenset[str]


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
            chord = _chord(list(facts.keys)) if facts.keys else None
            if chord is None or chord not in self.keys:
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
    """Validate policy TOML ``text``; ``path`` names it in errors and decisions."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        raise PolicyFileError(
            path, int(found.group(1)) if found else None, f"not valid TOML: {exc}"
        ) from None
    where = _Locator(text)
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise PolicyFileError(
            path,
            where.top(unknown[0]),
            f"unknown top-level key {unknown[0]!r}; allowed: {', '.join(sorted(TOP_KEYS))}",
        )
    version = data.get("version", 1)
    if version != 1:
        raise PolicyFileError(path, where.top("version"), f"version must be 1, got {version!r}")
    default = _verdict(data.get("default", "deny"), path, where.top("default"), "default")
    checks_default = _verdict(
        data.get("safety_checks", "ask"), path, where.top("safety_checks"), "safety_checks"
    )
    origins_default = _verdict(
        data.get("origin_access", "ask"), path, where.top("origin_access"), "origin_access"
    )
    rules = _tables(data, "rule", path, where)
    checks = _tables(data, "check", path, where)
    origins = _tables(data, "origin", path, where)
    return Policy(
        path,
        default,
        checks_default,
        tuple(_rule(i, entry, path, where) for i, entry in enumerate(rules, 1)),
        tuple(_check_rule(i, entry, path, where) for i, entry in enumerate(checks, 1)),
        origins_default,
        tuple(_origin_rule(i, entry, path, where) for i, entry in enumerate(origins, 1)),
    )


# --------------------------------------------------------------------------- validation


def _tables(data: dict[str, Any], name: str, path: str, where: _Locator) -> list[dict[str, Any]]:
    value = data.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise PolicyFileError(
            path, where.top(name), f"{name} must be an array of tables [[{name}]]"
        )
    return cast(list[dict[str, Any]], value)


def _verdict(value: object, path: str, line: int | None, what: str) -> Verdict:
    if value not in VERDICTS:
        raise PolicyFileError(
            path, line, f"{what} must be one of {', '.join(VERDICTS)}, got {value!r}"
        )
    return value  # narrowed to Verdict by the membership test


def _strings(value: object, path: str, line: int | None, what: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise PolicyFileError(path, line, f"{what} must be a non-empty list of strings")
    return cast(list[str], value)


def _chord(names: list[str]) -> Chord:
    return frozenset(key.keysym_name.lower() for key in resolve_chord(names))


def _decision(
    entry: dict[str, Any],
    *,
    kind: str,
    index: int,
    allowed: frozenset[str],
    path: str,
    line: Callable[..., int | None],
) -> Verdict:
    """Refuse keys outside ``allowed``, then read the entry's required ``decision``."""
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise PolicyFileError(
            path,
            line(unknown[0]),
            f"{kind} {index}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}",
        )
    if "decision" not in entry:
        raise PolicyFileError(
            path, line(), f"{kind} {index}: missing 'decision' (allow, deny or ask)"
        )
    return _verdict(entry["decision"], path, line("decision"), f"{kind} {index}: decision")


def _rule(index: int, entry: dict[str, Any], path: str, where: _Locator) -> Rule:
    def line(key: str | None = None) -> int | None:
        return where.in_table("rule", index, key)

    decision = _decision(entry, kind="rule", index=index, allowed=RULE_KEYS, path=path, line=line)
    actions = None
    if "actions" in entry:
        actions = frozenset(
            _strings(entry["actions"], path, line("actions"), f"rule {index}: actions")
        )
        bad = sorted(actions - set(POLICY_ACTIONS))
        if bad:
            raise PolicyFileError(
                path,
                line("actions"),
                f"rule {index}: unknown action type {bad[0]!r}; known: {', '.join(POLICY_ACTIONS)}",
            )
    keys = None
    if "keys" in entry:
        raw = entry["keys"]
        if not isinstance(raw, list) or not raw:
            raise PolicyFileError(
                path, line("keys"), f"rule {index}: keys must be a non-empty list of chords"
            )
        chords = []
        for chord in raw:
            names = (
                chord
                if isinstance(chord, list)
                else chord.split("+")
                if isinstance(chord, str) and chord != "+"
                else [chord]
            )
            if not all(isinstance(n, str) and n for n in names):
                raise PolicyFileError(path, line("keys"), f"rule {index}: bad chord {chord!r}")
            try:
                chords.append(_chord(names))
            except GuestError as exc:
                raise PolicyFileError(path, line("keys"), f"rule {index}: {exc.reason}") from None
        keys = tuple(chords)
    pattern = None
    if "text" in entry:
        if not isinstance(entry["text"], str):
            raise PolicyFileError(
                path, line("text"), f"rule {index}: text must be a regular expression string"
            )
        try:
            pattern = re.compile(entry["text"])
        except re.error as exc:
            raise PolicyFileError(
                path, line("text"), f"rule {index}: text is not a valid regular expression ({exc})"
            ) from None
    region = None
    if "region" in entry:
        value = entry["region"]
        if (
            not isinstance(value, dict)
            or set(value) != {"x", "y", "width", "height"}
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value.values())
            or value["width"] < 1
            or value["height"] < 1
            or value["x"] < 0
            or value["y"] < 0
        ):
            raise PolicyFileError(
                path,
                line("region"),
                f"rule {index}: region must be {{x, y, width, height}} integers "
                f"(x, y >= 0, size >= 1), got {value!r}",
            )
        region = Rect(value["x"], value["y"], value["width"], value["height"])
    note = entry.get("note", "")
    if not isinstance(note, str):
        raise PolicyFileError(path, line("note"), f"rule {index}: note must be a string")
    return Rule(
        index, where.header("rule", index) or 0, decision, actions, keys, pattern, region, note
    )


def _check_rule(index: int, entry: dict[str, Any], path: str, where: _Locator) -> CheckRule:
    def line(key: str | None = None) -> int | None:
        return where.in_table("check", index, key)

    decision = _decision(entry, kind="check", index=index, allowed=CHECK_KEYS, path=path, line=line)
    codes = None
    if "codes" in entry:
        codes = frozenset(_strings(entry["codes"], path, line("codes"), f"check {index}: codes"))
    note = entry.get("note", "")
    if not isinstance(note, str):
        raise PolicyFileError(path, line("note"), f"check {index}: note must be a string")
    return CheckRule(index, where.header("check", index) or 0, decision, codes, note)


def _origin_rule(index: int, entry: dict[str, Any], path: str, where: _Locator) -> OriginRule:
    def line(key: str | None = None) -> int | None:
        return where.in_table("origin", index, key)

    decision = _decision(
        entry, kind="origin", index=index, allowed=ORIGIN_KEYS, path=path, line=line
    )
    if "origins" not in entry:
        raise PolicyFileError(path, line(), f"origin {index}: missing 'origins' (a list)")
    items = _strings(entry["origins"], path, line("origins"), f"origin {index}: origins")
    for item in items:
        if "," in item:
            raise PolicyFileError(
                path, line("origins"), f"origin {index}: {item!r}: one origin per string"
            )
    try:
        origins = egress.parse_policy("allow:" + ",".join(items))
    except egress.InvalidOrigin as exc:
        raise PolicyFileError(path, line("origins"), f"origin {index}: {exc}") from None
    note = entry.get("note", "")
    if not isinstance(note, str):
        raise PolicyFileError(path, line("note"), f"origin {index}: note must be a string")
    return OriginRule(index, where.header("origin", index) or 0, decision, origins, note)


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
