"""Verification of the guest's real state after a run, read through the agent.

Each :class:`Check` says what was expected and what was found; the drill succeeds only when
every check holds. Reads never trust the model's claims: they fetch the saved note's bytes and
the data the form server stored.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cubicle.drivers.scripted_model.script import TOOL_OUTPUT
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.modelrun.harbor_guest import run_tests
from cubicle.orchestrator.tasks import Check as TaskCheck
from cubicle.orchestrator.tasks import fill
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError, GuestError

if TYPE_CHECKING:
    from cubicle.orchestrator.modelrun.guest_steps import TaskGuest

__all__ = [
    "Check",
    "Verifier",
    "check_contains",
    "check_file",
    "check_form",
    "function_verifier",
    "harbor_verifier",
    "task_verifiers",
    "verify_task",
]


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
        return client.read_file(path, timeout=15).blob
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


def check_contains(client: AgentClient, name: str, path: str, part: str) -> Check:
    """The file at guest ``path`` is UTF-8 text containing ``part``."""
    data = _read(client, path)
    if data is None:
        return Check(name, False, part, None, f"{path} does not exist in the guest")
    got = data.decode("utf-8", errors="replace")
    if part in got:
        return Check(name, True, part, got)
    return Check(name, False, part, got, f"{path} does not contain the text")


def check_form(client: AgentClient, name: str, path: str, expected: dict[str, str]) -> Check:
    """The form server stored exactly ``expected`` (a JSON object) at guest ``path``."""
    raw = _read(client, path)
    if raw is None:
        return Check(
            name, False, expected, None, f"{path} does not exist: the form server received nothing"
        )
    try:
        stored = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # the guest wrote it: anything may be there
        return Check(
            name, False, expected, raw.decode("utf-8", "replace"), f"{path} is not JSON ({exc})"
        )
    if stored == expected:
        return Check(name, True, expected, stored)
    wrong = (
        sorted(key for key in {*expected, *stored} if stored.get(key) != expected.get(key))
        if isinstance(stored, dict)
        else []
    )
    return Check(name, False, expected, stored, f"fields that differ: {', '.join(wrong) or 'all'}")


Verifier = Callable[[AgentClient], list[Check]]
"""Checks the guest's state through an agent connection after the run."""


def function_verifier(spec: str) -> Verifier:
    """``module:function`` → a verifier calling ``function(client)`` (a bool, a
    :class:`Check` or a list of them).

    :raises ConfigError: the spec is malformed or cannot be imported.
    """
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ConfigError(f"a verifier is module:function, got {spec!r}")
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"verifier {spec}: cannot load it ({exc})") from None

    def verify(client: AgentClient) -> list[Check]:
        value = function(client)
        if isinstance(value, Check):
            return [value]
        if isinstance(value, list) and all(isinstance(v, Check) for v in value):
            return value
        if isinstance(value, bool):
            return [Check(spec, value, True, value, "" if value else f"{spec} returned False")]
        raise ConfigError(
            f"verifier {spec} returned {type(value).__name__}; "
            "expected a bool, a Check or a list of Checks"
        )

    return verify


def _verifier(spec: TaskCheck, guest: TaskGuest) -> Verifier:
    label = spec.label if spec.name else str(fill(spec.label, guest.values))
    if spec.verifier is not None:
        return function_verifier(spec.verifier)
    if spec.form is not None:
        form = dict(spec.form)
        return lambda client: [check_form(client, label, guest.form_data, form)]
    assert spec.file is not None
    path = guest.path(spec.file)
    if spec.equals is not None:
        equals = spec.equals
        return lambda client: [check_file(client, label, path, _with_output(equals, guest))]
    part = spec.contains or ""
    return lambda client: [check_contains(client, label, path, _with_output(part, guest))]


def _with_output(text: str, guest: TaskGuest) -> str:
    """``text`` with ``{TOOL_OUTPUT}`` replaced by the latest function tool output of the run
    (read when the check runs; left as is when the model received none)."""
    if not guest.tool_outputs:
        return text
    return text.replace(TOOL_OUTPUT, guest.tool_outputs[-1])


def harbor_verifier(guest: TaskGuest) -> Verifier:
    """A Harbor task's check: ``tests/test.sh`` run in the guest, passed at reward 1
    (:mod:`cubicle.orchestrator.modelrun.harbor_guest`); a reward that cannot be read, or a
    guest that cannot run the script, is a failed check saying why."""
    harbor = guest.task.harbor
    assert harbor is not None
    name = "tests/test.sh reward"

    def verify(client: AgentClient) -> list[Check]:
        try:
            outcome = run_tests(client, harbor, guest.workdir)
        except CubicleError as exc:
            return [Check(name, False, 1, None, f"could not run tests/test.sh: {exc}")]
        said = f"exit code {outcome.exit_code}; output: {outcome.output[-200:]!r}"
        if outcome.problem is not None:
            return [Check(name, False, 1, None, f"{outcome.problem} ({said})")]
        if outcome.passed:
            return [Check(name, True, 1, outcome.reward)]
        return [Check(name, False, 1, outcome.reward, f"reward {outcome.reward:g} < 1 ({said})")]

    return verify


def task_verifiers(guest: TaskGuest) -> list[Verifier]:
    """One verifier per check of the prepared task (verifier functions are imported now, so a
    wrong ``module:function`` fails before the run); a Harbor task's ``tests/test.sh`` last."""
    verifiers = [_verifier(spec, guest) for spec in guest.task.checks]
    if guest.task.harbor is not None:
        verifiers.append(harbor_verifier(guest))
    return verifiers


def verify_task(client: AgentClient, guest: TaskGuest) -> list[Check]:
    """Run every check of the prepared task (see :func:`task_verifiers`)."""
    return [check for verify in task_verifiers(guest) for check in verify(client)]
