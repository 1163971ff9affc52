"""The ``cubicle drill`` subcommand (registered by ``cubicle.orchestrator.cli``).

``cubicle drill`` — the offline, keyless end-to-end check of a task (default: the shipped
``desktop`` task; ``--task NAME|FILE``; ``--all``: every shipped task but those whose script calls
function tools, which need a user: ``cubicle serve``): for each task and loop a
fresh sandbox (the task's screen and network), the task's set-up, the scripted model on
127.0.0.1 driving the provider's real client and loop (``--provider``: openai's
``ComputerToolset`` and ``ResponsesToolRunner``, anthropic's ``tool_runner``, google-genai's
``generate_content`` loop; without ``--loop`` every loop the provider has) by pixels only, then
the task's checks through the agent. It prints a table (task, loop, verdict,
steps, seconds, stale screenshots). Exit 0 only when every check of every run holds; 1 when one
failed (the summary says which, expected vs got); 130/143 when cancelled by SIGINT/SIGTERM. Each
sandbox is destroyed unless ``--keep``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from cubicle.orchestrator.drill.runner import DrillResult, guest_time_scale, run_drill
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.modelrun.console import default_out, destroy_quietly, progress
from cubicle.orchestrator.modelrun.loop import LoopKind
from cubicle.orchestrator.modelrun.model_providers import (
    MODEL_PROVIDERS,
    PROVIDER_LOOPS,
    ModelProviderName,
    check_loop,
    loops_help,
    provider_of_loop,
)
from cubicle.orchestrator.modelrun.resumable import (
    RESUME_FILE,
    Resumed,
    add_resume_arguments,
    parse_window,
    read_resume_file,
    reattach,
    turn_completed_hook,
    write_resume_file,
)
from cubicle.orchestrator.modelrun.signals import CancelFlag, cancel_on_signals
from cubicle.orchestrator.providers import PROVIDERS
from cubicle.orchestrator.resume_marks import read_mark
from cubicle.orchestrator.sandbox import Sandbox, teardown_on_signals
from cubicle.orchestrator.tasks import DEFAULT_TASK, Task, load_task, shipped_tasks
from cubicle.orchestrator.view.recording import add_record_argument, parse_record

__all__ = ["cmd_drill", "provider_table", "register", "results_table"]


def register(sub: Any) -> None:
    """Add ``drill`` to the ``cubicle`` subcommand parser."""
    p = sub.add_parser(
        "drill",
        help="offline keyless end-to-end drill (scripted model, real SDK loop, real apps)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument("--backend", default="docker", choices=sorted(PROVIDERS), help="sandbox backend")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--task",
        default=None,
        metavar="NAME|FILE",
        help=f"a shipped task's name or a task file (default: {DEFAULT_TASK})",
    )
    which.add_argument(
        "--all",
        action="store_true",
        help="every shipped task (tasks/*.toml) but those whose script calls function tools "
        "(a user answers those: cubicle serve): a conformance run",
    )
    p.add_argument(
        "--provider",
        choices=[*MODEL_PROVIDERS, "all"],
        default="openai",
        help="whose API the scripted model speaks, to that provider's real client "
        "(default openai; a task needs a script for it: [scripted] providers); all: every "
        "provider a task has a script for, and a table with a column per provider",
    )
    p.add_argument(
        "--loop",
        choices=[*sorted({loop for loops in PROVIDER_LOOPS.values() for loop in loops}), "both"],
        default=None,
        help=f"which of the provider's loops plays the script (default: every one in turn; "
        f"'both' is openai's two). Loops per provider: {loops_help()}",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="trajectory folder (default runs/drill-<time>; one subfolder per loop)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="leave the sandbox (and the apps) running; remove it with cubicle down ID",
    )
    add_record_argument(p, where="each report")
    add_resume_arguments(p, command="drill")
    p.set_defaults(func=cmd_drill)


def _loops(args: argparse.Namespace, provider: ModelProviderName) -> list[LoopKind]:
    """``--loop`` for ``provider`` (default: every loop it has).

    :raises ConfigError: a loop the provider does not have.
    """
    if args.loop is None or (args.loop == "both" and provider == "openai"):
        return list(PROVIDER_LOOPS[provider])
    return [check_loop(provider, args.loop)]


def _has_script(task: Task, provider: ModelProviderName) -> bool:
    return task.scripted is not None and (
        provider == "openai" or provider in task.scripted.providers
    )


def _runs(args: argparse.Namespace) -> list[tuple[Task, LoopKind]]:
    """Every (task, loop) the command runs.

    :raises ConfigError: a task that cannot be drilled (with the provider asked for), a loop the
        provider does not have.
    """
    every = args.provider == "all"
    if every and args.loop is not None:
        raise ConfigError("--provider all runs every provider's loops; leave out --loop")
    providers: tuple[ModelProviderName, ...] = MODEL_PROVIDERS if every else (args.provider,)
    tasks: list[Task] = shipped_tasks() if args.all else [load_task(args.task or DEFAULT_TASK)]
    if args.all:  # a task whose script calls function tools needs a user: cubicle serve's
        tasks = [task for task in tasks if task.scripted is None or not task.scripted.tools]
        if not every:  # only tasks with a script for the provider
            tasks = [t for t in tasks if t.scripted is None or _has_script(t, args.provider)]
    for task in tasks:
        if task.scripted is None:
            raise ConfigError(f"task {task.name} has no [scripted] section: it cannot be drilled")
        if not every and not _has_script(task, args.provider):
            raise ConfigError(
                f"task {task.name} has no {args.provider} script "
                f"([scripted] providers.{args.provider} in {task.source})"
            )
        if task.scripted.tools:
            raise ConfigError(
                f"task {task.name}'s script calls the function tools "
                f"{', '.join(task.scripted.tools)}, which a user answers: run it through "
                f"cubicle serve (agent.model 'cubicle-task:{task.name}', the tools declared in "
                "agent.tools)"
            )
    return [
        (task, loop)
        for task in tasks
        for provider in providers
        if _has_script(task, provider)
        for loop in _loops(args, provider)
    ]


def cmd_drill(args: argparse.Namespace) -> int:
    window = parse_window(args.resume_window)
    if args.resume is not None:
        return _resume(args, window)
    record = parse_record(args.record) if args.record is not None else None
    runs = _runs(args)
    tasks = list(dict.fromkeys(task.name for task, _loop in runs))
    out: Path = args.out or default_out("drill")
    started = time.monotonic()
    results: list[DrillResult] = []
    with cancel_on_signals() as cancel:
        for task, loop in runs:
            if cancel():
                break
            folder = out / task.name / loop if len(tasks) > 1 or args.all else out / loop
            result = _one_run(args, task, loop, folder, cancel=cancel, record=record, window=window)
            results.append(result)
            print(result.summary(), flush=True)
    wall = time.monotonic() - started
    print(results_table(results), flush=True)
    if args.provider == "all":
        print(provider_table(results), flush=True)
    passed = len(results) == len(runs) and all(r.ok for r in results)
    return _verdict(
        passed,
        f"on {args.backend} ({args.provider}): {len(results)} of "
        f"{len(runs)} runs in {wall:.1f} s including the sandboxes; trajectories in {out}",
        cancel,
    )


def _verdict(passed: bool, line: str, cancel: CancelFlag) -> int:
    """Print ``drill PASSED|FAILED <line>``; the exit code: the cancel's when cancelled, else 0
    when ``passed``, 1 when not."""
    print(f"drill {'PASSED' if passed else 'FAILED'} {line}", flush=True)
    if cancel():
        return cancel.exit_code
    return 0 if passed else 1


def _one_run(
    args: argparse.Namespace,
    task: Task,
    loop: LoopKind,
    out: Path,
    *,
    cancel: CancelFlag,
    record: tuple[float, int] | None,
    window: float,
) -> DrillResult:
    """One task with one loop in a sandbox of its own (apps the model opened stay open); a
    runner-loop run becomes resumable after its first completed turn."""
    started = time.monotonic()
    with teardown_on_signals():
        sandbox = Sandbox.create(
            args.backend,
            network=task.setup.network,
            screen=task.setup.screen_size,
            detached=args.keep,
            progress=progress,
        )
    time_scale = guest_time_scale(sandbox.info)
    keep = args.keep
    try:
        progress(f"{sandbox.id}: task {task.name} with the {provider_of_loop(loop)} {loop} loop")
        write_resume_file(
            out,
            command="drill",
            sandbox=sandbox,
            settings={
                "task": str(task.source) if task.source is not None else task.name,
                "loop": loop,
                "time_scale": time_scale,
            },
        )
        result = run_drill(
            sandbox,
            task=task,
            loop=loop,
            out=out,
            cancel_requested=cancel,
            keep_apps=args.keep or args.keep_for_resume,
            time_scale=time_scale,
            record=record,
            ledger=True,
            on_turn_completed=turn_completed_hook(sandbox, out, window)
            if loop == "runner"
            else None,
        )
        keep = keep or _kept_for_resume(args, result, cancel, out)
    finally:
        _release(args, sandbox, keep)
    return _stamped(result, sandbox, started)


def _kept_for_resume(
    args: argparse.Namespace, result: DrillResult, cancel: CancelFlag, out: Path
) -> bool:
    """Whether a cancelled run keeps its sandbox for ``--resume`` (``--keep-for-resume``, the
    runner loop, a completed turn); says how to resume it."""
    if not (args.keep_for_resume and cancel() and result.loop == "runner"):
        return False
    if read_mark(_sandbox_of(out)) is None:
        return False  # no completed turn: nothing to resume
    root = args.out or out
    progress(f"kept for resume; continue with: cubicle drill --resume {root}")
    return True


def _sandbox_of(out: Path) -> str:
    return str(read_resume_file(out, "drill")["sandbox"])


def _resume(args: argparse.Namespace, window: float) -> int:
    """``cubicle drill --resume DIR``: continue the interrupted runner-loop run under DIR."""
    root: Path = args.resume
    folders = [root] if (root / RESUME_FILE).exists() else []
    folders = folders or sorted(
        path.parent
        for pattern in ("*/" + RESUME_FILE, "*/*/" + RESUME_FILE)
        for path in root.glob(pattern)
    )
    if not folders:
        raise ConfigError(
            f"--resume {root}: no interrupted drill there (no {RESUME_FILE} in it or its loop "
            "folders); give the folder that was the drill's --out"
        )
    runners = [
        f for f in folders if read_resume_file(f, "drill")["settings"].get("loop") == "runner"
    ]
    if not runners:
        reattach(folders[0], "drill", window)  # refuses the toolset loop by name
    pending = runners
    started = time.monotonic()
    results: list[DrillResult] = []
    errors: list[str] = []
    with cancel_on_signals() as cancel:
        for folder in pending:
            try:
                resumed = reattach(folder, "drill", window)
            except ConfigError as exc:
                if len(pending) == 1:
                    raise
                errors.append(str(exc))
                continue
            results.append(_resume_one(args, resumed, cancel, window))
            print(results[-1].summary(), flush=True)
    for error in errors:
        progress(f"not resumed: {error}")
    wall = time.monotonic() - started
    print(results_table(results), flush=True)
    passed = bool(results) and all(r.ok for r in results)
    sandboxes = ", ".join(sorted({r.sandbox for r in results}))
    return _verdict(
        passed,
        f"(resumed on {sandboxes or 'no sandbox'}): "
        f"{len(results)} runs in {wall:.1f} s; trajectories in {root}",
        cancel,
    )


def _resume_one(
    args: argparse.Namespace, resumed: Resumed, cancel: CancelFlag, window: float
) -> DrillResult:
    """Continue one interrupted run on its sandbox; tear it down after (unless kept)."""
    sandbox, out = resumed.sandbox, resumed.out
    task = load_task(str(resumed.settings["task"]))
    progress(
        f"{sandbox.id}: resuming task {task.name} after {resumed.ledger.completed_turns} "
        f"completed turns ({resumed.ledger.remaining_steps} steps left)"
    )
    started = time.monotonic()
    keep = args.keep
    try:
        result = run_drill(
            sandbox,
            task=task,
            loop="runner",
            out=out,
            cancel_requested=cancel,
            keep_apps=args.keep or args.keep_for_resume,
            time_scale=float(resumed.settings.get("time_scale") or 1.0),
            ledger=True,
            resume=resumed.ledger,
            on_turn_completed=turn_completed_hook(sandbox, out, window),
        )
        keep = keep or _kept_for_resume(args, result, cancel, out)
    finally:
        _release(args, sandbox, keep)
    return _stamped(result, sandbox, started)


def _release(args: argparse.Namespace, sandbox: Sandbox, keep: bool) -> None:
    """After a run, passed, failed or broken: a ``--keep`` sandbox stays (how to remove it is
    printed); another is destroyed unless ``keep`` (kept for a resume)."""
    if args.keep:
        progress(f"{sandbox.id} kept; remove it with: cubicle down {sandbox.id}")
    elif not keep:
        destroy_quietly(sandbox)


def _stamped(result: DrillResult, sandbox: Sandbox, started: float) -> DrillResult:
    """``result`` with its sandbox's id and the seconds since ``started`` (monotonic)."""
    result.sandbox_s = time.monotonic() - started
    result.sandbox = sandbox.id
    return result


def results_table(results: list[DrillResult]) -> str:
    """The conformance table: task, provider, loop, verdict, steps (actions), seconds (sandbox
    included), stale screenshots (stale of checked)."""
    header = ("task", "provider", "loop", "verdict", "steps", "seconds", "stale")
    rows = [
        (
            r.task,
            r.provider,
            r.loop,
            "PASSED" if r.ok else ("CANCELLED" if r.cancelled else "FAILED"),
            str(r.actions),
            f"{r.sandbox_s or r.wall_s:.1f}",
            f"{r.stale_check.stale}/{r.stale_check.checked}" if r.stale_check else "-",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in (header, *rows)
    ]
    return "\n".join(line.rstrip() for line in lines)


def provider_table(results: list[DrillResult]) -> str:
    """The conformance table with a column per provider: for each task, each provider's
    verdict over its loops (``PASSED 2/2``: loops passed of loops run, then stale screenshots
    of those checked), ``-`` where the task has no script for the provider."""
    providers = [p for p in MODEL_PROVIDERS if any(r.provider == p for r in results)]
    tasks = list(dict.fromkeys(r.task for r in results))
    header = ("task", *providers)
    rows = []
    for task in tasks:
        cells = [task]
        for provider in providers:
            runs = [r for r in results if r.task == task and r.provider == provider]
            if not runs:
                cells.append("-")
                continue
            passed = sum(r.ok for r in runs)
            stale = sum(r.stale_check.stale for r in runs if r.stale_check)
            checked = sum(r.stale_check.checked for r in runs if r.stale_check)
            verdict = "PASSED" if passed == len(runs) else "FAILED"
            cells.append(f"{verdict} {passed}/{len(runs)} stale {stale}/{checked}")
        rows.append(tuple(cells))
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in (header, *rows)
    ]
    return "\n".join(line.rstrip() for line in lines)
