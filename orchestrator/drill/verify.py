"""Verification of the guest's real state after a drill, read through the agent.

Each :class:`Check` says what was expected and what was found; the drill succeeds only when
every check holds. Reads never trust the model's claims: they fetch the saved note's bytes and
the data the form server stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from guest.client import AgentClient
from guest.errors import GuestError
from orchestrator.drill.task import EXPECTED_FORM, EXPECTED_NOTE, DrillPaths

__all__ = ["Check", "check_file", "verify_drill"]


@dataclass(frozen=True)
class Check:
    """One verified fact: ``ok`` when ``got == expected``; ``detail`` says how they differ."""

    name: str
    ok: bool
    expected: Any
    got: Any
    detail: str = ""

    def describe(self) -> str:
        if self.ok:
            return f"ok      {self.name}"
        return (
            f"FAILED  {self.name}: {self.detail}\n"
            f"        expected: {json.dumps(self.expected, ensure_ascii=False)}\n"
            f"        got:      {json.dumps(self.got, ensure_ascii=False)}"
        )


def _read(client: AgentClient, path: str) -> bytes | None:
    try:
        return client.call("read_file", {"path": path}, timeout=15).blob
    except GuestError as exc:
        if exc.code == "not_found":
            return None
        raise


def _first_difference(expected: str, got: str) -> str:
    for index, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a != b:
            return f"first difference at character {index}: expected {a!r}, got {b!r}"
    return f"lengths differ: expected {len(expected)} characters, got {len(got)}"


def check_file(client: AgentClient, name: str, path: str, expected: str) -> Check:
    """The file at guest ``path`` holds exactly ``expected`` encoded as UTF-8."""
    data = _read(client, path)
    if data is None:
        return Check(name, False, expected, None, f"{path} does not exist in the guest")
    got = data.decode("utf-8", errors="replace")
    if data == expected.encode("utf-8"):
        return Check(name, True, expected, got)
    return Check(name, False, expected, got, f"{path} differs; {_first_difference(expected, got)}")


def verify_drill(client: AgentClient, paths: DrillPaths) -> list[Check]:
    """Check the saved note and the submitted form of one drill run."""
    checks = [check_file(client, "note saved through the editor", paths.note, EXPECTED_NOTE)]
    name = "form submitted in the browser"
    raw = _read(client, paths.form_data)
    if raw is None:
        checks.append(
            Check(
                name,
                False,
                EXPECTED_FORM,
                None,
                f"{paths.form_data} does not exist: the form server received nothing",
            )
        )
    else:
        try:
            stored = json.loads(raw.decode("utf-8"))
        except ValueError as exc:
            checks.append(
                Check(
                    name,
                    False,
                    EXPECTED_FORM,
                    raw.decode("utf-8", "replace"),
                    f"{paths.form_data} is not JSON ({exc})",
                )
            )
        else:
            ok = stored == EXPECTED_FORM
            wrong = (
                []
                if ok or not isinstance(stored, dict)
                else sorted(
                    key
                    for key in {*EXPECTED_FORM, *stored}
                    if stored.get(key) != EXPECTED_FORM.get(key)
                )
            )
            checks.append(
                Check(
                    name,
                    ok,
                    EXPECTED_FORM,
                    stored,
                    "" if ok else f"fields that differ: {', '.join(wrong) or 'all'}",
                )
            )
    return checks
