"""The eval's progress on stderr: a line when an attempt starts and when it ends, each end with
the counts (done, running, failed — anything but ``passed``), the ETA and the tokens so far.

The ETA is the wall time per finished attempt so far times the attempts left (it already
reflects ``--parallel``); none before the first attempt ends. Thread-safe: workers report.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from cubicle.orchestrator.eval.results import AttemptRecord

__all__ = ["Progress", "eta_text"]


def eta_text(seconds: float | None) -> str:
    """``ETA 1m05s``; ``ETA -`` when not known yet."""
    if seconds is None:
        return "ETA -"
    whole = max(0, round(seconds))
    return f"ETA {whole // 60}m{whole % 60:02d}s"


class Progress:
    """Counts of one eval run (this invocation's attempts; ``total`` of them to run)."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.done = 0
        self.running = 0
        self.failed = 0
        self.tokens = 0
        self.started = time.monotonic()
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            print(f"cubicle eval: {text}", file=self._stream, flush=True)

    def start(self, task: str, attempt: int) -> None:
        with self._lock:
            self.running += 1
        self.line(f"{task} #{attempt}: started")

    def end(self, record: AttemptRecord) -> None:
        with self._lock:
            self.running -= 1
            self.done += 1
            self.failed += record.verdict != "passed"
            self.tokens += record.tokens
            elapsed = time.monotonic() - self.started
            left = self.total - self.done
            eta = elapsed / self.done * left if self.done else None
            counts = (
                f"[{self.done}/{self.total}] done {self.done}, running {self.running}, "
                f"failed {self.failed}, {eta_text(eta)}, tokens {self.tokens}"
            )
        detail = f" ({record.error})" if record.error and record.verdict != "passed" else ""
        self.line(
            f"{record.task} #{record.attempt}: {record.verdict} in {record.seconds:.1f} s"
            f"{detail:.200} {counts}"
        )
