"""Terminal helpers shared by ``cubicle drill`` and ``cubicle run``: progress lines and the
default trajectory folder. Progress goes to stderr; screenshots never reach the terminal."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from cubicle.orchestrator.sandbox import Sandbox, teardown_on_signals
from cubicle_guest.errors import CubicleError

__all__ = ["default_out", "destroy_quietly", "progress"]


def default_out(kind: str) -> Path:
    """``runs/<kind>-<UTC time>`` under the current directory (``runs/`` is git-ignored)."""
    return Path("runs") / f"{kind}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def progress(line: str) -> None:
    """One progress line on stderr."""
    print(f"cubicle: {line}", file=sys.stderr, flush=True)


def destroy_quietly(sandbox: Sandbox) -> None:
    """Destroy ``sandbox`` (signals cannot interrupt it); a failure is reported, not raised, so it
    never hides the run's own outcome."""
    try:
        with teardown_on_signals():
            sandbox.destroy()
    except CubicleError as exc:
        progress(f"{sandbox.id}: removing the sandbox failed: {exc}")
