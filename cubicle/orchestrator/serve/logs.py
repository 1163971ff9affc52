"""Bounded logs of ``cubicle serve``: what clients without the token can make the server log.

uvicorn logs a warning for each malformed request or unsupported upgrade (``uvicorn.error``), and
asyncio logs an error with a traceback for each failed ``accept()`` (``asyncio``); a client that
repeats them would fill the disk through stderr (issue 38, SV11b: 666 MB in 70 s).
:func:`bound_logs` puts a :class:`RateLimitFilter` on those loggers and on ``cubicle.serve``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["BURST", "WINDOW_S", "RateLimitFilter", "bound_logs"]

BURST = 10
"""Records a logger passes per window (count)."""
WINDOW_S = 60.0
"""The window (seconds)."""
LOGGERS = ("asyncio", "uvicorn.error", "cubicle.serve")


class RateLimitFilter(logging.Filter):
    """Passes at most ``burst`` records per ``window_s`` seconds (thread-safe); the first record
    passed after drops says how many were dropped."""

    def __init__(
        self,
        burst: int = BURST,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        self.dropped = 0
        self._passed = 0
        self._window_start = -window_s
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            now = self.clock()
            if now - self._window_start >= self.window_s:
                self._window_start = now
                self._passed = 0
            if self._passed >= self.burst:
                self.dropped += 1
                return False
            self._passed += 1
            dropped, self.dropped = self.dropped, 0
        if dropped:
            record.msg = f"{record.getMessage()} [{dropped} more messages of this log dropped]"
            record.args = ()
        return True


def bound_logs() -> None:
    """Rate-limit the loggers clients can reach (once per process; uvicorn's logging configured)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RateLimitFilter) for f in logger.filters):
            logger.addFilter(RateLimitFilter())
