"""``cubicle eval``: a 20-attempt oracle suite (every shipped task, attempts enough for 20: the
10 shipped tasks x 2) from a warm pool at ``--parallel 1`` and ``--parallel 4``: tasks per
minute of each and the ratio.

The pool lives in a private pool folder (nobody else claims it) with the shipped tasks' shape
(1280x800, network none) and 4 members; before each run it is topped up. Every attempt must pass
(the oracles), and the pool is drained afterwards. ``CUBICLE_BENCH_EVAL_ATTEMPTS`` sets the
attempts per task (default: 20 attempts in all, rounded to a whole number per task).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cubicle.orchestrator.pool import admin
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.tasks import shipped_tasks
from tests.bench.bench_docker import docker_or_skip
from tests.bench.bench_pool import private_pools, wait_refilled
from tests.bench.report import Report, Sample

ATTEMPTS_ENV = "CUBICLE_BENCH_EVAL_ATTEMPTS"
POOL_SIZE = 4
SUITE_ATTEMPTS = 20
REPO = Path(__file__).resolve().parents[2]


def _suite(parallel: int, attempts: int, out: Path) -> tuple[float, int]:
    """Seconds of one ``cubicle eval tasks --oracle`` run (every attempt must pass) and how
    many of its attempts claimed their sandbox from the pool."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cubicle.orchestrator.cli", "eval", "tasks", "--oracle",
         "--attempts", str(attempts), "--parallel", str(parallel), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise AssertionError(f"cubicle eval failed ({done.returncode}):\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    verdicts = {r["verdict"] for r in records}
    assert verdicts == {"passed"}, verdicts
    return seconds, sum(bool(r["pooled"]) for r in records)


def run(report: Report) -> None:
    docker_or_skip()
    tasks = len(shipped_tasks())
    attempts = int(os.environ.get(ATTEMPTS_ENV, "0")) or max(1, round(SUITE_ATTEMPTS / tasks))
    total = attempts * tasks
    with private_pools(), tempfile.TemporaryDirectory(prefix="cubicle-bench-eval-") as folder:
        record, _ = admin.start(
            "docker",
            SandboxSpec(screen=(1280, 800), ttl_s=3600),
            POOL_SIZE,
            progress=lambda _: None,
        )
        measured: dict[int, Sample] = {}
        for parallel in (1, 4):
            wait_refilled(record.key, timeout_s=300)
            seconds, pooled = _suite(parallel, attempts, Path(folder) / f"p{parallel}")
            measured[parallel] = Sample(f"eval {total} attempts --parallel {parallel}", [seconds])
            report.samples.append(measured[parallel])
            report.line(
                f"--parallel {parallel}: {total} attempts in {seconds:.0f} s = "
                f"{total / seconds * 60:.1f} tasks per minute ({pooled} sandboxes from the pool)"
            )
        report.ratio(measured[4], measured[1])
