"""cubicle_guest.waiting: the one deadline/poll helper (host and guest code wait with it)."""

from __future__ import annotations

import math
import time

import pytest

from cubicle_guest.waiting import Deadline, poll


def test_poll_tries_at_once_then_until_and_at_the_deadline() -> None:
    # 0.5 s at 10 ms: room for several attempts even when the machine is loaded
    deadline = Deadline(0.5)
    stamps = [time.monotonic() for _ in poll(deadline, interval=0.01)]
    assert stamps[0] - deadline.started < 0.05  # the first attempt does not wait
    assert len(stamps) >= 3
    assert stamps[-1] >= deadline.at  # one last attempt at the deadline
    assert stamps[-2] < deadline.at
    assert deadline.expired and deadline.remaining() == 0.0


def test_poll_never_sleeps_past_the_deadline() -> None:
    deadline = Deadline(0.02)
    for _ in poll(deadline, interval=10.0):
        pass
    assert deadline.elapsed() < 1.0


def test_a_spent_deadline_still_gets_one_attempt() -> None:
    assert list(poll(Deadline(0.0), interval=1.0)) == [0]
    assert list(poll(Deadline(-5.0), interval=1.0)) == [0]


def test_remaining_is_kept_within_bounds() -> None:
    deadline = Deadline(100.0)
    assert 99.0 < deadline.remaining() <= 100.0
    assert deadline.remaining(high=2.0) == 2.0
    assert Deadline(-1.0).remaining(low=0.05) == 0.05
    assert Deadline(math.inf).remaining() == math.inf


def test_nan_is_refused() -> None:
    with pytest.raises(ValueError, match="NaN"):
        Deadline(float("nan"))
