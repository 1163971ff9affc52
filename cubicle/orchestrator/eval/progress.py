"""The eval's progress on stderr: a line when an attempt starts and when it ends, each end with
the counts (done, running, failed — anything but ``passed``), the ETA and the tokens so far.

Where stderr is a terminal (and ``TERM`` is not ``dumb``), a live panel
(:mod:`cubicle.orchestrator.eval.live`) stays below those lines, redrawn twice a second: a bar,
the counts, the ETA counting down, the tokens, and the running attempts with their seconds so
far. Anywhere else (a pipe, a file, a test) only the lines are written, unchanged.

The ETA is the wall time per finished attempt so far times the attempts left (it already
reflects ``--parallel``); none before the first attempt ends. Thread-safe: workers report.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

from cubicle.orchestrator.eval.live import LiveDisplay, Snapshot
from cubicle.orchestrator.eval.results import AttemptRecord

__all__ = ["Progress", "eta_text", "wants_live"]


def eta_text(seconds: float | None) -> str:
    """``ETA 1m05s``; ``ETA -`` when not known yet."""
    if seconds is None:
        return "ETA -"
    whole = max(0, round(seconds))
    return f"ETA {whole // 60}m{whole % 60:02d}s"


def wants_live(stream: TextIO) -> bool:
    """Whether ``stream`` gets the live panel: a terminal, ``TERM`` not ``dumb``."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM", "") != "dumb"


class Progress:
    """Counts of one eval run (this invocation's attempts; ``total`` of them to run).

    :param live: draw the live panel (default: :func:`wants_live` of ``stream``); call
        :meth:`close` at the end either way."""

    def __init__(self, total: int, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self.tokens = 0
        self.started = time.monotonic()
        self.active: dict[str, float] = {}
        """``task #attempt`` → when it started (monotonic), for the attempts running now."""
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()
        self._live: LiveDisplay | None = None
        if wants_live(self._stream) if live is None else live:
            self._live = LiveDisplay(self._stream, self.snapshot)
            self._live.start()

    @property
    def running(self) -> int:
        return len(self.active)

    def _eta(self) -> float | None:
        if not self.done:
            return None
        return (time.monotonic() - self.started) / self.done * (self.total - self.done)

    def snapshot(self) -> Snapshot:
        """The counts now (what the live panel draws)."""
        with self._lock:
            return Snapshot(
                self.total,
                self.done,
                self.failed,
                self.tokens,
                eta_text(self._eta()),
                dict(self.active),
            )

    def line(self, text: str) -> None:
        live = self._live
        if live is not None:  # not under our lock: the panel's refresh takes it (snapshot)
            live.print(f"cubicle eval: {text}")
            return
        with self._lock:
            print(f"cubicle eval: {text}", file=self._stream, flush=True)

    def start(self, task: str, attempt: int) -> None:
        with self._lock:
            self.active[f"{task} #{attempt}"] = time.monotonic()
        self.line(f"{task} #{attempt}: started")

    def end(self, record: AttemptRecord) -> None:
        with self._lock:
            self.active.pop(f"{record.task} #{record.attempt}", None)
            self.done += 1
            self.failed += record.verdict != "passed"
            self.tokens += record.tokens
            counts = (
                f"[{self.done}/{self.total}] done {self.done}, running {self.running}, "
                f"failed {self.failed}, {eta_text(self._eta())}, tokens {self.tokens}"
            )
        detail = f" ({record.error})" if record.error and record.verdict != "passed" else ""
        self.line(
            f"{record.task} #{record.attempt}: {record.verdict} in {record.seconds:.1f} s"
            f"{detail:.200} {counts}"
        )

    def close(self) -> None:
        """Stop the live panel (its last state stays on the screen); the lines go on plain."""
        with self._lock:
            live, self._live = self._live, None
        if live is not None:
            live.stop()
