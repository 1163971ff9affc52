"""A Harbor task's scripts in the guest (:mod:`cubicle.orchestrator.harbor`): ``tests/test.sh``
(the check) and ``solution/solve.sh`` (the oracle).

Each script's folder is uploaded into its guest folder (``/tests``, ``/solution``: emptied
first; each entry through :func:`cubicle.orchestrator.file_transfer.upload`, the path of
``Sandbox.upload``) and run with ``bash`` as the desktop user, in the task's work folder, under
the task's time limit (``[verifier]``/``[agent]`` ``timeout_sec``). Before ``test.sh`` runs,
``/logs/verifier`` is emptied (a reward planted during the run does not count); afterwards the
reward is read as Harbor reads it: ``reward.json`` (its ``reward`` number) if there, else
``reward.txt`` (a number). :func:`run_tests` never raises for what the script did: a missing or
garbled reward is a :class:`TestsOutcome` whose ``problem`` names the file.
"""

from __future__ import annotations

import json
import math
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cubicle.orchestrator import file_transfer
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.harbor import GUEST_LOGS, GUEST_SOLUTION, GUEST_TESTS
from cubicle.orchestrator.modelrun.errors import GuestStepError
from cubicle.orchestrator.tasks import HarborParts
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError

__all__ = [
    "REWARD_JSON",
    "REWARD_TXT",
    "SolutionFailed",
    "TestsOutcome",
    "run_solution",
    "run_tests",
]

VERIFIER_DIR: Final = f"{GUEST_LOGS}/verifier"
REWARD_JSON: Final = f"{VERIFIER_DIR}/reward.json"
REWARD_TXT: Final = f"{VERIFIER_DIR}/reward.txt"
TAIL_CHARS: Final = 400


class SolutionFailed(ConfigError):
    """``solution/solve.sh`` exited non-zero or ran out of time: the task's oracle is broken."""


@dataclass(frozen=True)
class TestsOutcome:
    """What ``test.sh`` left: ``reward`` (None: none could be read, ``problem`` says why),
    its exit code and the tail of its output."""

    reward: float | None
    problem: str | None
    exit_code: int | None
    output: str

    @property
    def passed(self) -> bool:
        return self.reward == 1.0 and self.problem is None


def _sh(client: AgentClient, script: str, *args: str) -> dict[str, Any]:
    reply = client.exec(["sh", "-c", script, "sh", *args], timeout_ms=20_000, timeout=40).result
    if reply.get("exit_code") != 0:
        raise GuestStepError(
            "harbor",
            f"{script.split(';', 1)[0]}: exit code {reply.get('exit_code')}, "
            f"{str(reply.get('stderr', '')).strip()[-TAIL_CHARS:]!r}",
            hint=f"the guest image gives the desktop user {GUEST_TESTS}, {GUEST_SOLUTION} and "
            f"{GUEST_LOGS} (tmpfs); a sandbox from an older image has none: rebuild the image",
        )
    return reply


def _upload(client: AgentClient, local: Path, guest: str) -> None:
    """Empty the guest folder ``guest`` (it exists: a tmpfs) and copy ``local``'s entries in."""
    _sh(client, 'test -w "$1" && find "$1" -mindepth 1 -delete', guest)
    for entry in sorted(local.iterdir()):
        file_transfer.upload(client, entry, guest)


def _run(client: AgentClient, script: str, cwd: str, timeout_s: float) -> dict[str, Any]:
    milliseconds = round(timeout_s * 1000)
    return client.exec(
        ["bash", script], cwd=cwd, timeout_ms=milliseconds, timeout=timeout_s + 30
    ).result


def _tail(reply: dict[str, Any]) -> str:
    text = f"{reply.get('stdout', '')}{reply.get('stderr', '')}".strip()
    return text[-TAIL_CHARS:]


def run_solution(client: AgentClient, harbor: HarborParts, workdir: str) -> str:
    """Upload ``solution/`` to ``/solution`` and run ``solve.sh``; its output's tail.

    :raises SolutionFailed: it exited non-zero or timed out (the oracle is broken)."""
    _upload(client, harbor.solution, GUEST_SOLUTION)
    reply = _run(
        client, posixpath.join(GUEST_SOLUTION, "solve.sh"), workdir, harbor.agent_timeout_s
    )
    if reply.get("timed_out"):
        raise SolutionFailed(
            f"solution/solve.sh ran longer than {harbor.agent_timeout_s:g} s ([agent] "
            f"timeout_sec): {_tail(reply)!r}"
        )
    if reply.get("exit_code") != 0:
        raise SolutionFailed(
            f"solution/solve.sh exited with {reply.get('exit_code')}: {_tail(reply)!r}"
        )
    return _tail(reply)


def run_tests(client: AgentClient, harbor: HarborParts, workdir: str) -> TestsOutcome:
    """Upload ``tests/`` to ``/tests``, empty ``/logs/verifier``, run ``test.sh`` and read the
    reward (module docstring)."""
    _sh(client, 'mkdir -p "$1" && find "$1" -mindepth 1 -delete', VERIFIER_DIR)
    _upload(client, harbor.tests, GUEST_TESTS)
    reply = _run(client, posixpath.join(GUEST_TESTS, "test.sh"), workdir, harbor.verifier_timeout_s)
    code = reply.get("exit_code")
    exit_code = code if isinstance(code, int) else None
    output = _tail(reply)
    if reply.get("timed_out"):
        late = f"tests/test.sh ran longer than {harbor.verifier_timeout_s:g} s"
        return TestsOutcome(None, late, exit_code, output)
    reward, problem = _reward(client)
    return TestsOutcome(reward, problem, exit_code, output)


def _read(client: AgentClient, path: str) -> bytes | None:
    try:
        return client.read_file(path, max_bytes=65_536, timeout=15).blob
    except GuestError as exc:
        if exc.code == "not_found":
            return None
        raise


def _reward(client: AgentClient) -> tuple[float | None, str | None]:
    """(reward, None) or (None, what is wrong with the reward file, naming it)."""
    raw = _read(client, REWARD_JSON)
    if raw is not None:
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            return None, f"{REWARD_JSON} is not JSON ({exc})"
        value = data.get("reward") if isinstance(data, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None, f'{REWARD_JSON} has no number "reward": {raw[:200]!r}'
        return _in_range(float(value), REWARD_JSON)
    raw = _read(client, REWARD_TXT)
    if raw is None:
        return None, f"tests/test.sh wrote no reward: neither {REWARD_TXT} nor {REWARD_JSON}"
    try:
        value = float(raw.decode("utf-8").strip())
    except (UnicodeDecodeError, ValueError):
        return None, f"{REWARD_TXT} is not a number: {raw[:200]!r}"
    return _in_range(value, REWARD_TXT)


def _in_range(value: float, path: str) -> tuple[float | None, str | None]:
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        return None, f"{path}: reward {value!r} is not a number from 0 to 1"
    return value, None
