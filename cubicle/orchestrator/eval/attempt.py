"""One attempt of one task: a fresh sandbox (from a warm pool when one of its shape exists), the
player (the oracle, ``cubicle-idle`` or a Responses API model), the task's checks, the sandbox
removed whatever happened — and its :class:`~cubicle.orchestrator.eval.results.AttemptRecord`.

Verdicts (:func:`verdict_of`):

* ``interrupted`` — the eval was cancelled (Ctrl-C/SIGTERM) during the attempt;
* ``timeout`` — the attempt ran longer than its time limit and was cancelled;
* ``passed`` — the loop finished and every check of the task holds (at least one check; the
  scripted players' own stale-screenshot check, :data:`PLAYER_CHECKS`, is recorded but does not
  decide: it measures how cubicle's settling served the script, not the task);
* ``sandbox_error`` — the sandbox could not be created, or the guest stopped answering (the
  trajectory's ``error`` record was at ``connect``, or is a lost connection or protocol error);
  such an attempt is tried once more on a fresh sandbox (:func:`run_attempt`), without counting
  as an attempt;
* ``broken_task`` — with the oracle, anything else: the task's own solution does not pass it
  (also a task with no oracle, or one the sandbox refuses, e.g. a bad network policy; for a
  Harbor task also a ``solution/solve.sh`` that exits non-zero);
* ``model_error`` — the model's API failed (an ``openai`` error in the run's error chain);
* ``failed`` — otherwise: the model ran and the checks do not all hold (or it stalled, or ran
  out of steps).

Each attempt's trajectory folder (``trajectory.jsonl``, ``report.html``) is written by
:func:`cubicle.orchestrator.modelrun.run.run` as for ``cubicle run``/``drill``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cubicle.drivers.viewport import Viewport
from cubicle.orchestrator.drill.runner import guest_time_scale, run_drill, scaled_settle
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.eval.oracle import (
    HARBOR_ORACLE_SCRIPT,
    IDLE_MODEL,
    IDLE_SCRIPT,
    HarborSolution,
    person_tools,
)
from cubicle.orchestrator.eval.results import AttemptRecord, Verdict
from cubicle.orchestrator.modelrun.console import progress as console_line
from cubicle.orchestrator.modelrun.responses_model import ResponsesModel
from cubicle.orchestrator.modelrun.run import RunResult, RunSpec, run
from cubicle.orchestrator.providers.docker.engine import Engine
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.tasks import Task
from cubicle_guest.errors import CubicleError

__all__ = ["ORACLE", "PLAYER_CHECKS", "AttemptSpec", "run_attempt", "task_passed", "verdict_of"]

ORACLE: Final = "oracle"
"""The player name of ``--oracle``."""
PLAYER_CHECKS: Final = frozenset({"stale model-visible screenshots"})
"""The checks a scripted player adds of its own (:func:`cubicle.orchestrator.drill.runner.
stale_screenshots_check`); they do not decide a verdict."""
SANDBOX_ERROR_TYPES: Final = frozenset(
    {
        "AgentConnectionError",
        "ProtocolError",
        "SandboxNotFound",
        "SandboxStartError",
        "ProviderError",
        "EngineUnavailable",
        "ConnectionError",
        "ConnectionResetError",
        "BrokenPipeError",
    }
)
"""Error types (the trajectory's ``error`` record) that mean the sandbox, not the task, failed."""
_MODEL_ERROR = re.compile(
    r"\b(APIError|APIConnectionError|APITimeoutError|APIStatusError|RateLimitError|"
    r"AuthenticationError|PermissionDeniedError|BadRequestError|InternalServerError|"
    r"NotFoundError|UnprocessableEntityError|ConflictError)\b"
)


@dataclass(frozen=True)
class AttemptSpec:
    """Attempt ``attempt`` (1..K) of ``task`` by ``player`` (:data:`ORACLE`,
    :data:`~cubicle.orchestrator.eval.oracle.IDLE_MODEL` or a Responses API model name) on
    ``backend`` (on ``engine``), its trajectory in ``out``, cancelled after ``timeout_s``."""

    task: Task
    attempt: int
    player: str
    backend: str
    out: Path
    timeout_s: float
    engine: str | None = None
    """The Docker engine's URL (:mod:`cubicle.orchestrator.providers.docker.engine`); ``None``:
    the default one (``--engine``/``CUBICLE_DOCKER_HOST``, else ``DOCKER_HOST``, else local)."""


class _Errors:
    """A trajectory observer keeping the run's ``error`` records (``where``, ``type``)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on_record(self, record: Mapping[str, Any]) -> None:
        if record.get("kind") == "error":
            self.seen.append((str(record.get("where")), str(record.get("type"))))

    def on_screenshot(self, record: Mapping[str, Any], png: bytes) -> None:
        return None

    @property
    def sandbox_failed(self) -> bool:
        return any(where == "connect" or kind in SANDBOX_ERROR_TYPES for where, kind in self.seen)


def task_passed(result: RunResult) -> bool:
    """``result.ok``, judged by the task's checks alone (not :data:`PLAYER_CHECKS`)."""
    decisive = [check for check in result.checks if check.name not in PLAYER_CHECKS]
    return (
        result.error is None
        and not result.cancelled
        and result.stalled is None
        and bool(decisive)
        and all(check.ok for check in decisive)
    )


def verdict_of(
    result: RunResult, *, oracle: bool, sandbox_failed: bool, cancelled: bool, timed_out: bool
) -> Verdict:
    """The verdict of a run that happened (module docstring, in that order)."""
    if cancelled:
        return "interrupted"
    if timed_out:
        return "timeout"
    if task_passed(result):
        return "passed"
    if sandbox_failed:
        return "sandbox_error"
    if oracle:
        return "broken_task"
    if result.error and _MODEL_ERROR.search(result.error):
        return "model_error"
    return "failed"


def run_attempt(
    spec: AttemptSpec,
    *,
    cancel: Callable[[], bool],
    root: Path,
    progress: Callable[[str], None] = lambda line: None,
) -> AttemptRecord:
    """Run ``spec`` (a sandbox error tried once more on a fresh sandbox); never raises for what
    happened in the attempt. ``root``: the eval's folder (the record's ``report`` is relative to
    it); ``cancel``: polled, true once the eval is being cancelled."""
    started = time.monotonic()
    record = _try(spec, cancel=cancel, root=root)
    if record.verdict == "sandbox_error" and not cancel():
        progress(f"{spec.task.name} #{spec.attempt}: sandbox error ({record.error}); once more")
        record = _try(spec, cancel=cancel, root=root)
        record.sandbox_retries = 1
    record.seconds = round(time.monotonic() - started, 2)
    return record


def _try(spec: AttemptSpec, *, cancel: Callable[[], bool], root: Path) -> AttemptRecord:
    task, oracle = spec.task, spec.player == ORACLE
    base = AttemptRecord(task.name, spec.attempt, "interrupted", engine=spec.engine)
    if cancel():
        base.error = "cancelled before it started"
        return base
    if oracle and task.scripted is None and task.harbor is None:
        base.verdict, base.error = "broken_task", "no oracle: the task has no [scripted] section"
        return base
    if oracle and task.harbor is not None and not task.harbor.has_solution:
        base.verdict, base.error = "broken_task", "no oracle: the task has no solution/solve.sh"
        return base
    deadline = time.monotonic() + spec.timeout_s
    timed_out = [False]

    def cancelled() -> bool:
        if cancel():
            return True
        if time.monotonic() > deadline:
            timed_out[0] = True
            return True
        return False

    said: list[str] = []
    try:
        provider = DockerProvider(engine=Engine.parse(spec.engine)) if spec.engine else None
        sandbox = Sandbox.create(
            spec.backend,
            provider=provider,
            network=task.setup.network,
            screen=task.setup.screen_size,
            progress=said.append,
        )
    except ConfigError as exc:
        base.verdict, base.error = "broken_task", f"the sandbox refused the task: {exc}"
        return base
    except CubicleError as exc:
        base.verdict, base.error = "sandbox_error", f"{type(exc).__name__}: {exc}"
        return base
    base.pooled = any("claimed from a warm pool" in line for line in said)
    errors = _Errors()
    try:
        result = _play(spec, sandbox, cancelled, errors)
    except (ConfigError, ValueError) as exc:  # its script cannot be read or played at all
        base.verdict, base.error = "broken_task", f"{type(exc).__name__}: {exc}"
        return base
    finally:
        _remove(sandbox)
    base.verdict = verdict_of(
        result,
        oracle=oracle,
        sandbox_failed=errors.sandbox_failed,
        cancelled=cancel(),
        timed_out=timed_out[0],
    )
    base.checks = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in result.checks]
    base.steps = result.actions
    base.tokens = int(result.usage.get("total_tokens") or 0)
    base.error = result.error
    base.report = str(result.report.relative_to(root)) if result.report.is_file() else None
    return base


def _remove(sandbox: Sandbox) -> None:
    """Remove ``sandbox`` from a worker thread (no signal handlers there: a signal cancels the
    eval, whose workers then come here); a failure is reported, not raised."""
    try:
        sandbox.destroy()
    except CubicleError as exc:
        console_line(f"{sandbox.id}: removing the sandbox failed: {exc}")


def _play(
    spec: AttemptSpec, sandbox: Sandbox, cancelled: Callable[[], bool], errors: _Errors
) -> RunResult:
    """The run itself, on ``sandbox``, by ``spec.player``."""
    task = spec.task
    scale = guest_time_scale(sandbox.info)
    if spec.player == ORACLE and task.harbor is not None:
        oracle_spec = RunSpec(
            out=spec.out,
            loop="runner",
            task=task,
            viewport=Viewport.exact(1024, 640),
            settle=scaled_settle(scale),
            max_steps=len(HARBOR_ORACLE_SCRIPT["turns"]) + 1,
            on_stall="record",
            time_scale=scale,
            stop_launched_apps=True,
            require_checks=True,
        )
        return run(
            sandbox,
            oracle_spec,
            HarborSolution(task.harbor),
            observers=[errors],
            cancel_requested=cancelled,
        )
    if spec.player in (ORACLE, IDLE_MODEL):
        return run_drill(
            sandbox,
            loop="runner",
            out=spec.out,
            task=task,
            script_template=IDLE_SCRIPT if spec.player == IDLE_MODEL else None,
            cancel_requested=cancelled,
            time_scale=scale,
            observers=[errors],
            functions=person_tools(task),
        )
    run_spec = RunSpec(
        out=spec.out,
        loop="runner",
        task=task,
        max_steps=task.limits.max_steps,
        stall_limit=task.limits.stall,
        time_scale=scale,
        stop_launched_apps=True,
        require_checks=True,
        functions=person_tools(task),
    )
    model = ResponsesModel.from_environment(spec.player)
    return run(sandbox, run_spec, model, observers=[errors], cancel_requested=cancelled)
