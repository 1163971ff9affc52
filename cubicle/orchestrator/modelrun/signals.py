"""Cooperative cancellation on SIGINT/SIGTERM for long runs (``cubicle drill``/``cubicle run``).

Inside :func:`cancel_on_signals` the first SIGINT or SIGTERM only sets a flag: the run loop polls
it (the SDK's ``cancelled``), stops at its next checkpoint and lets the caller tear down in
order. A second signal raises ``KeyboardInterrupt`` (SIGINT) or ``SystemExit(143)`` (SIGTERM) at
once, so an impatient user is never stuck; ``with`` blocks around it (the sandbox) still clean
up. Main thread only (Python delivers signals there). Previous handlers are restored on exit.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["CancelFlag", "cancel_on_signals"]


class CancelFlag:
    """Set by the first signal; ``flag()`` is a ready-made ``cancelled`` callable."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signum: int | None = None

    def __call__(self) -> bool:
        return self._event.is_set()

    def set(self, signum: int) -> None:
        self.signum = signum
        self._event.set()

    @property
    def exit_code(self) -> int:
        """The shell convention for the signal that cancelled the run (130 / 143)."""
        return 128 + (self.signum or signal.SIGINT)


@contextlib.contextmanager
def cancel_on_signals(*, announce: bool = True) -> Iterator[CancelFlag]:
    """Turn the first SIGINT/SIGTERM into a cancel request (see the module docstring)."""
    flag = CancelFlag()

    def handler(signum: int, _frame: FrameType | None) -> None:
        if flag():
            if signum == signal.SIGTERM:
                raise SystemExit(128 + signum)
            raise KeyboardInterrupt
        flag.set(signum)
        if announce:
            print(
                f"cubicle: {signal.Signals(signum).name}: cancelling; waiting for the current "
                "step to finish (repeat to stop at once)",
                file=sys.stderr,
                flush=True,
            )

    previous_int = signal.signal(signal.SIGINT, handler)
    previous_term = signal.signal(signal.SIGTERM, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
