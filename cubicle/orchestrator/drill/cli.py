"""The ``cubicle drill`` subcommand (registered by ``cubicle.orchestrator.cli``).

``cubicle drill`` — the offline, keyless end-to-end check of a task (default: the shipped
``desktop`` task; ``--task NAME|FILE``; ``--all``: every shipped task but those whose script calls
function tools, which need a user: ``cubicle serve``): for each task and loop a
fresh sandbox (the task's screen and network), the task's set-up, the scripted model on
127.0.0.1 driving the real openai loop (``ComputerToolset`` and/or ``ResponsesToolRunner``) by
pixels only, then the task's checks through the agent. It prints a table (task, loop, verdict,
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

__all__ = ["cmd_drill", "register", "results_table"]


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
        "--loop",
        choices=["toolset", "runner", "both"],
        default="both",
        help="which SDK loop plays the script: ComputerToolset.run, "
        "ResponsesToolRunner.run, or both in turn (default)",
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


def cmd_drill(args: argparse.Namespace) -> int:
    window = parse_window(args.resume_window)
    if args.resume is not None:
        return _resume(args, window)
    loops: list[LoopKind] = ["toolset", "runner"] if args.loop == "both" else [args.loop]
    record = parse_record(args.record) if args.record is not None else None
    tasks: list[Task] = shipped_tasks() if args.all else [load_task(args.task or DEFAULT_TASK)]
    if args.all:  # a task whose script calls function tools needs a user: cubicle serve's
        tasks = [task for task in tasks if task.scripted is None or not task.scripted.tools]
    for task in tasks:
        if task.scripted is None:
            raise ConfigError(f"task {task.name} has no [scripted] section: it cannot be drilled")
        if task.scripted.tools:
            raise ConfigError(
                f"task {task.name}'s script calls the function tools "
                f"{', '.join(task.scripted.tools)}, which a user answers: run it through "
                f"cubicle serve (agent.model 'cubicle-task:{task.name}', the tools declared in "
                "agent.tools)"
            )
    out: Path = args.out or default_out("drill")
    started = time.monotonic()
    results: list[DrillResult] = []
    runs = [(task, loop) for task in tasks for loop in loops]
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
    passed = len(results) == len(runs) and all(r.ok for r in results)
    print(
        f"drill {'PASSED' if passed else 'FAILED'} on {args.backend}: {len(results)} of "
        f"{len(runs)} runs in {wall:.1f} s including the sandboxes; trajectories in {out}",
        flush=True,
    )
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
        progress(f"{sandbox.id}: task {task.name} with the {loop} loop")
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
        if args.keep:
            progress(f"{sandbox.id} kept; remove it with: cubicle down {sandbox.id}")
        elif not keep:
            destroy_quietly(sandbox)
    result.sandbox_s = time.monotonic() - started
    result.sandbox = sandbox.id
    return result


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
    print(
        f"drill {'PASSED' if passed else 'FAILED'} (resumed on {sandboxes or 'no sandbox'}): "
        f"{len(results)} runs in {wall:.1f} s; trajectories in {root}",
        flush=True,
    )
    if cancel():
        return cancel.exit_code
    return 0 if passed else 1


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
        if args.keep:
            progress(f"{sandbox.id} kept; remove it with: cubicle down {sandbox.id}")
        elif not keep:
            destroy_quietly(sandbox)
    result.sandbox_s = time.monotonic() - started
    result.sandbox = sandbox.id
    return result


def results_table(results: list[DrillResult]) -> str:
    """The conformance table: task, loop, verdict, steps (actions), seconds (sandbox
    included), stale screenshots (stale of checked)."""
    header = ("task", "loop", "verdict", "steps", "seconds", "stale")
    rows = [
        (
            r.task,
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
