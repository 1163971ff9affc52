"""The ``cubicle eval`` subcommand (registered by ``cubicle.orchestrator.cli``).

``cubicle eval SUITE`` — every task of SUITE (a folder of task files, or a list file:
:mod:`cubicle.orchestrator.eval.suite`) ``--attempts`` times, ``--parallel`` at a time, each
attempt in a fresh sandbox (claimed from a warm pool when one of the task's shape exists),
played by ``--model`` (a Responses API model; ``cubicle-idle`` only takes screenshots) or by each
task's oracle (``--oracle``). Every attempt's record is appended to DIR/results.jsonl as it ends;
then the summary table and DIR/index.html (pass rate, pass@k, each attempt's report). ``--resume
DIR`` runs only the attempts DIR has no finished record of (same SUITE and options, or refused
naming what differs). Exit 0 when every attempt finished and none was ``broken_task`` or
``sandbox_error``; 1 otherwise; 130/143 when cancelled by SIGINT/SIGTERM (attempts not
started are not run; the running ones are cancelled, recorded ``interrupted`` and their
sandboxes removed; a second signal skips the summary; after ``kill -9``, ``cubicle gc`` removes
what is left).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Final

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.eval.attempt import ORACLE, AttemptSpec, run_attempt
from cubicle.orchestrator.eval.oracle import IDLE_MODEL
from cubicle.orchestrator.eval.progress import Progress
from cubicle.orchestrator.eval.results import MANIFEST, RESULTS, Manifest, ResultsFile, latest
from cubicle.orchestrator.eval.suite import load_suite
from cubicle.orchestrator.eval.summary import score, summary_table, write_index
from cubicle.orchestrator.modelrun.console import default_out
from cubicle.orchestrator.modelrun.signals import cancel_on_signals
from cubicle.orchestrator.providers import PROVIDERS
from cubicle.orchestrator.providers.docker.engine import Engine
from cubicle.orchestrator.run_task import DEFAULT_MODEL
from cubicle.orchestrator.tasks import Task

__all__ = ["attempt_folder", "cmd_eval", "register"]

DEFAULT_TIMEOUT_S: Final = 900.0
POLL_S: Final = 0.5


def register(sub: Any) -> None:
    """Add ``eval`` to the ``cubicle`` subcommand parser."""
    p = sub.add_parser(
        "eval",
        help="run a suite of tasks: K attempts each, N at a time, resumable; pass rate, pass@k",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument(
        "suite",
        metavar="SUITE",
        help="a folder of task files and Harbor task folders, a Harbor task folder, or a list file",
    )
    p.add_argument("--attempts", type=int, default=1, metavar="K", help="attempts per task")
    p.add_argument("--parallel", type=int, default=1, metavar="N", help="attempts running at once")
    player = p.add_mutually_exclusive_group()
    player.add_argument(
        "--model",
        default=None,
        help=f"Responses API model (default $CUBICLE_MODEL or {DEFAULT_MODEL}; needs "
        f"OPENAI_API_KEY), or {IDLE_MODEL}: a scripted model that only takes screenshots",
    )
    player.add_argument(
        "--oracle",
        action="store_true",
        help="each task's oracle (its [scripted] script; a Harbor folder's solution/solve.sh) "
        "instead of a model: proves every task passable; an oracle that fails makes its task "
        "broken_task",
    )
    p.add_argument("--backend", default="docker", choices=sorted(PROVIDERS), help="sandbox backend")
    p.add_argument(
        "--engine",
        dest="engines",  # not "engine": the single --engine of other commands is global
        action="append",
        default=[],
        metavar="URL|local",
        help="a Docker engine to run attempts on (repeatable: attempts are spread over them in "
        "turn; local: the default engine); see docs/backends.md",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"an attempt running longer is cancelled: timeout (default {DEFAULT_TIMEOUT_S:.0f})",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--out", type=Path, default=None, help="the eval's folder (default runs/eval-<time>)"
    )
    where.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="continue the eval in DIR: only attempts without a finished record run",
    )
    p.set_defaults(func=cmd_eval)


def attempt_folder(root: Path, task: str, attempt: int) -> Path:
    """Where attempt ``attempt`` of ``task`` writes its trajectory and report."""
    return root / task / f"attempt-{attempt}"


def _player(args: argparse.Namespace) -> str:
    if args.oracle:
        return ORACLE
    model: str = args.model or os.environ.get("CUBICLE_MODEL") or DEFAULT_MODEL
    if model == ORACLE:
        raise ConfigError(f"--model {ORACLE}: use --oracle for the tasks' oracles")
    if model != IDLE_MODEL and not os.environ.get("OPENAI_API_KEY"):
        raise ConfigError(
            f"--model {model} needs OPENAI_API_KEY",
            hint=f"export OPENAI_API_KEY=...; keyless: --oracle or --model {IDLE_MODEL}",
        )
    return model


def _engines(args: argparse.Namespace) -> list[str | None]:
    """``--engine``s as URLs (``None``: the default engine); none given: the default.

    :raises ConfigError: an engine with ``--backend vm``, or a URL that is wrong (named)."""
    if not args.engines:
        return [None]
    if args.backend != "docker":
        raise ConfigError(f"--engine is for --backend docker, not {args.backend}")
    engines: list[str | None] = []
    for url in args.engines:
        if url == "local":
            engines.append(None)
        else:
            engines.append(Engine.parse(url).url)
    return engines


def _folder(args: argparse.Namespace, manifest: Manifest) -> tuple[Path, set[tuple[str, int]]]:
    """The eval's folder and the attempts it already finished (new folder: none)."""
    if args.resume is not None:
        folder: Path = args.resume
        differs = manifest.mismatches(Manifest.read(folder))
        if differs:
            raise ConfigError(
                f"--resume {folder}: not the same eval; differs: {'; '.join(differs)}",
                hint="give the SUITE and options of the run being resumed",
            )
        counting = latest(ResultsFile(folder).read())
        return folder, {key for key, record in counting.items() if record.finished}
    folder = args.out or default_out("eval")
    if (folder / MANIFEST).exists() or (folder / RESULTS).exists():
        raise ConfigError(
            f"--out {folder} already holds an eval",
            hint=f"continue it with --resume {folder}, or choose another --out",
        )
    folder.mkdir(parents=True, exist_ok=True)
    manifest.write(folder)
    return folder, set()


def cmd_eval(args: argparse.Namespace) -> int:
    for name, value, least in (("--attempts", args.attempts, 1), ("--parallel", args.parallel, 1)):
        if value < least:
            raise ConfigError(f"{name} must be at least {least}, got {value}")
    if args.timeout <= 0:
        raise ConfigError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    engines = _engines(args)
    suite = load_suite(args.suite)
    player = _player(args)
    manifest = Manifest(
        suite=str(suite.source),
        tasks=suite.names,
        attempts=args.attempts,
        model=player,
        oracle=player == ORACLE,
        backend=args.backend,
        timeout_s=float(args.timeout),
    )
    folder, finished = _folder(args, manifest)
    todo = [
        (task, attempt)
        for attempt in range(1, args.attempts + 1)
        for task in suite.tasks
        if (task.name, attempt) not in finished
    ]
    progress = Progress(len(todo))
    progress.line(
        f"{len(suite.tasks)} tasks x {args.attempts} attempts by {player} on {args.backend}, "
        f"{args.parallel} at a time: {len(todo)} to run"
        + (f", {len(finished)} already finished in {folder}" if finished else "")
    )
    results = ResultsFile(folder)
    exit_code = 0
    try:
        if todo:
            with cancel_on_signals() as cancel:
                _schedule(
                    args=args,
                    engines=engines,
                    player=player,
                    folder=folder,
                    todo=todo,
                    results=results,
                    progress=progress,
                    cancel=cancel,
                )
                exit_code = cancel.exit_code if cancel() else 0
    finally:
        progress.close()
    scores = score(results.read(), suite.names, args.attempts)
    print(summary_table(scores), flush=True)
    index = write_index(folder, scores, f"cubicle eval {Path(args.suite).name} ({player})")
    progress.line(f"results: {folder / RESULTS}; index: {index}")
    if exit_code:
        return exit_code
    bad = scores.verdicts["broken_task"] + scores.verdicts["sandbox_error"]
    complete = scores.attempts == len(suite.tasks) * args.attempts
    return 0 if complete and not bad and not scores.verdicts["interrupted"] else 1


def _schedule(
    *,
    args: argparse.Namespace,
    engines: list[str | None],
    player: str,
    folder: Path,
    todo: list[tuple[Task, int]],
    results: ResultsFile,
    progress: Progress,
    cancel: Callable[[], bool],
) -> None:
    """Run ``todo`` on ``--parallel`` worker threads, the i-th on ``engines[i % len]``; each
    record is appended as it ends. Attempts not started when the eval is cancelled are not run
    (nor recorded)."""

    def job(task: Task, attempt: int, engine: str | None) -> None:
        if cancel():
            return
        progress.start(task.name, attempt)
        spec = AttemptSpec(
            task=task,
            attempt=attempt,
            player=player,
            backend=args.backend,
            out=attempt_folder(folder, task.name, attempt),
            timeout_s=float(args.timeout),
            engine=engine,
        )
        record = run_attempt(spec, cancel=cancel, root=folder, progress=progress.line)
        results.append(record)
        progress.end(record)

    with ThreadPoolExecutor(max_workers=args.parallel, thread_name_prefix="eval") as pool:
        pending: set[Future[None]] = {
            pool.submit(job, task, n, engines[i % len(engines)]) for i, (task, n) in enumerate(todo)
        }
        while pending:
            done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for future in done:
                future.result()  # a bug in a worker surfaces here, the others still finish
