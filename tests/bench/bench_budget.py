"""Context budget: input bytes and images sent over a 30-step run, default budget vs full replay.

One Docker sandbox (1280x800) with the ``browser-form`` task's set-up (Chromium showing the
form page, a realistic screen); the scripted model plays 30 pointer moves then a final message,
through ``cubicle run``'s run twice: the runner with the default budget, then
``--context-budget off`` (full replay, what ``ComputerToolset.run`` sends). Totals come from the
``model_request`` records (what each request's ``input`` carried); the ratio is full / budgeted.

It also prints the figures the default byte bound was chosen from
(:data:`cubicle.orchestrator.modelrun.budget.DEFAULT_MAX_INPUT_BYTES`): the PNG and base64 sizes
of this run's screenshots, and a worst case: a 1280x800 screen of random pixels, which PNG
cannot compress.
"""

from __future__ import annotations

import base64
import io
import os
import statistics
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from PIL import Image

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.modelrun.budget import DEFAULT_BUDGET, BudgetSpec
from cubicle.orchestrator.modelrun.guest_steps import GuestSteps
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.tasks import load_task
from cubicle.orchestrator.trajectory import read_trajectory
from tests.bench.bench_docker import docker_or_skip
from tests.bench.report import Report
from tests.support.runs import scripted_run

STEPS = 30
SCREEN = (1280, 800)


def _script() -> dict[str, Any]:
    moves = [
        {"computer_call": {"actions": [{"type": "move", "x": 40 + 35 * i, "y": 100 + 20 * i}]}}
        for i in range(STEPS)
    ]
    return {"name": "bench-budget", "turns": [*moves, {"message": "done"}]}


def _run(sandbox: Sandbox, out: Path, budget: BudgetSpec | None) -> list[dict[str, Any]]:
    with ScriptedModel(parse_script(_script())) as model:
        result = scripted_run(
            sandbox,
            model,
            out,
            prompt="move the pointer",
            loop="runner",
            context_budget=budget,
            max_steps=STEPS + 1,
            settle=False,
            stall_limit=0,
        )
    if not result.ok:
        raise RuntimeError(f"the bench run failed: {result.error}")
    return [e for e in read_trajectory(out) if e["kind"] == "model_request"]


def _worst_case_png() -> int:
    noise = Image.frombytes("RGB", SCREEN, os.urandom(SCREEN[0] * SCREEN[1] * 3))
    buffer = io.BytesIO()
    noise.save(buffer, format="PNG")
    return len(buffer.getvalue())


def run(report: Report) -> None:
    docker_or_skip()
    sandbox = Sandbox.create("docker", network="none", screen=SCREEN)
    try:
        with sandbox.connect() as client:
            GuestSteps(client).prepare(load_task("browser-form"))
        with TemporaryDirectory(prefix="bench-budget-") as tmp:
            budgeted = _run(sandbox, Path(tmp) / "budget", DEFAULT_BUDGET)
            full = _run(sandbox, Path(tmp) / "off", None)
            shots = [p.stat().st_size for p in sorted((Path(tmp) / "off" / "shots").glob("*.png"))]
    finally:
        sandbox.destroy()
    rows = []
    for name, requests in (("default budget", budgeted), ("full replay", full)):
        total_bytes = sum(int(r["input_bytes"]) for r in requests)
        total_images = sum(int(r["images"]) for r in requests)
        largest = max(int(r["input_bytes"]) for r in requests)
        rows.append((total_bytes, total_images))
        report.line(
            f"{name:<15} {len(requests)} requests: {total_images:4d} images, "
            f"{total_bytes / 1e6:7.2f} MB input in total, largest request {largest / 1e3:.0f} KB, "
            f"at most {max(int(r['images']) for r in requests)} images in one"
        )
    report.line(
        f"ratio full replay / default budget: {rows[1][0] / rows[0][0]:.1f}x bytes, "
        f"{rows[1][1] / rows[0][1]:.1f}x images"
    )
    b64 = [len(base64.b64encode(b"x" * size)) for size in shots]
    worst = _worst_case_png()
    report.line(
        f"screenshots ({len(shots)}, {SCREEN[0]}x{SCREEN[1]}, browser page): PNG median "
        f"{statistics.median(shots) / 1e3:.0f} KB, max {max(shots) / 1e3:.0f} KB; base64 max "
        f"{max(b64) / 1e3:.0f} KB; 8 of them {8 * max(b64) / 1e6:.2f} MB"
    )
    report.line(
        f"worst case (random pixels) PNG {worst / 1e6:.2f} MB, base64 "
        f"{len(base64.b64encode(b'x' * worst)) / 1e6:.2f} MB; default bound "
        f"{DEFAULT_BUDGET.bytes / 1e6:.2f} MB"
    )
