"""Deadlines and polling: the one way cubicle waits for something (host and guest side).

A :class:`Deadline` is a point in monotonic time; :func:`poll` drives a loop until it passes::

    for _ in poll(Deadline(10.0), interval=0.05):
        if ready():
            return
    raise TimeoutError(...)

The loop body runs at once, then every ``interval`` seconds (never sleeping past the deadline),
and once more at the deadline; leaving the ``for`` without ``return``/``break`` means the time
ran out. Standard library only: ``guest/`` installs alone.
"""

from __future__ import annotations

import math
import time

# typing.TYPE_CHECKING without importing typing or collections.abc (~7 ms of every start of the
# guest's bridge, which imports this module); type checkers read the name as typing's
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Deadline", "poll"]


class Deadline:
    """``seconds`` from now, on the monotonic clock.

    :raises ValueError: ``seconds`` is not a number (NaN).
    """

    __slots__ = ("at", "seconds", "started")

    def __init__(self, seconds: float) -> None:
        if math.isnan(seconds):
            raise ValueError("a deadline needs a number of seconds, got NaN")
        self.seconds = seconds
        self.started = time.monotonic()
        self.at = self.started + seconds

    def remaining(self, *, low: float = 0.0, high: float = math.inf) -> float:
        """Seconds left, kept within ``[low, high]`` (e.g. a socket timeout that must be > 0)."""
        return min(max(self.at - time.monotonic(), low), high)

    @property
    def expired(self) -> bool:
        """The deadline has passed."""
        return time.monotonic() >= self.at

    def elapsed(self) -> float:
        """Seconds since the deadline was set."""
        return time.monotonic() - self.started


def poll(deadline: Deadline, interval: float) -> Iterator[int]:
    """Yield attempt numbers 0, 1, ... until ``deadline`` passes, sleeping ``interval`` seconds
    between attempts (less when the deadline is nearer); the last attempt is at the deadline."""
    attempt = 0
    while True:
        yield attempt
        attempt += 1
        if deadline.expired:
            return
        time.sleep(min(interval, deadline.remaining()))
