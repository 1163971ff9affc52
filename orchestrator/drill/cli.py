"""The ``cubicle drill`` and ``cubicle run`` subcommands (registered by ``orchestrator.cli``).

``cubicle drill`` — the offline, keyless end-to-end check: a sandbox with network ``none``, the
scripted model on 127.0.0.1, the real openai loops (``ComputerToolset`` and/or
``ResponsesToolRunner``) driving mousepad and chromium in the guest, then verification of the
guest's files through the agent. Exit 0 only when every check of every loop holds; 1 when one
failed (the summary says which, expected vs got); 130/143 when cancelled by SIGINT/SIGTERM. The
sandbox is destroyed in every case unless ``--keep``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from orchestrator.drill.console import default_out, destroy_quietly, progress
from orchestrator.drill.runner import DrillResult, guest_time_scale, run_drill
from orchestrator.drill.session import LoopKind
from orchestrator.drill.signals import cancel_on_signals
from orchestrator.run_task import register_run
from orchestrator.sandbox import Sandbox, teardown_on_signals
from orchestrator.view.recording import add_record_argument, parse_record

__all__ = ["cmd_drill", "register"]

FIRST_PORT = 8765
DRILL_SCREEN = (1280, 800)


def register(sub: Any) -> None:
    """Add ``drill`` and ``run`` to the ``cubicle`` subcommand parser."""
    p = sub.add_parser(
        "drill",
        help="offline keyless end-to-end drill (scripted model, real SDK loop, real apps)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument(
        "--backend", default="docker", help="sandbox backend (docker, vm); default docker"
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
    p.set_defaults(func=cmd_drill)

    register_run(sub)


def cmd_drill(args: argparse.Namespace) -> int:
    loops: list[LoopKind] = ["toolset", "runner"] if args.loop == "both" else [args.loop]
    record = parse_record(args.record) if args.record is not None else None
    out: Path = args.out or default_out("drill")
    started = time.monotonic()
    with teardown_on_signals():
        sandbox = Sandbox.create(
            args.backend,
            network="none",
            screen=DRILL_SCREEN,
            detached=args.keep,
            progress=progress,
        )
    results: list[DrillResult] = []
    try:
        with cancel_on_signals() as cancel:
            for index, loop in enumerate(loops):
                if cancel():
                    break
                progress(f"{sandbox.id}: drill with the {loop} loop")
                result = run_drill(
                    sandbox,
                    loop=loop,
                    out=out / loop,
                    port=FIRST_PORT + index,
                    cancel_requested=cancel,
                    keep_apps=args.keep,
                    time_scale=guest_time_scale(sandbox.info),
                    record=record,
                )
                results.append(result)
                print(result.summary(), flush=True)
    finally:
        if args.keep:
            progress(f"{sandbox.id} kept; remove it with: cubicle down {sandbox.id}")
        else:
            destroy_quietly(sandbox)
    wall = time.monotonic() - started
    passed = len(results) == len(loops) and all(r.ok for r in results)
    print(
        f"drill {'PASSED' if passed else 'FAILED'} ({', '.join(loops)}) in {wall:.1f} s "
        f"including the sandbox; trajectories in {out}",
        flush=True,
    )
    if cancel():
        return cancel.exit_code
    return 0 if passed else 1
