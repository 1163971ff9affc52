"""Run the ``cubicle`` CLI as a subprocess of the tests (``python -m cubicle.orchestrator.cli``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli(
    *args: str,
    timeout: float = 180.0,
    env: Mapping[str, str] | None = None,
    unset: Collection[str] = (),
) -> subprocess.CompletedProcess[str]:
    """The completed ``cubicle ARGS`` (text output captured), with ``env`` added to this
    process's environment and the variables named in ``unset`` left out."""
    merged = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "cubicle.orchestrator.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={name: value for name, value in merged.items() if name not in unset},
        check=False,
    )


def start_cli(
    *args: str, env: Mapping[str, str] | None = None, stdin: int | None = None
) -> subprocess.Popen[str]:
    """``cubicle ARGS`` started (text stdout and stderr piped; ``stdin``: inherited unless given),
    with ``env`` added to this process's environment. The caller ends it."""
    return subprocess.Popen(
        [sys.executable, "-m", "cubicle.orchestrator.cli", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
