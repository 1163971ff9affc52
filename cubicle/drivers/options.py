"""Defaults and option checks shared by the sync and async drivers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from cubicle.drivers.errors import ActionRejected
from cubicle_guest import protocol

__all__ = [
    "DEFAULT_ACTION_TIMEOUT_S",
    "DEFAULT_SCREENSHOT_TIMEOUT_S",
    "DEFAULT_WAIT_MS",
    "WAIT_POLL_S",
    "Cancelled",
    "check_wait_ms",
]

DEFAULT_ACTION_TIMEOUT_S: Final = 15.0
"""Deadline of one action request, seconds (typing long text takes a while)."""
DEFAULT_SCREENSHOT_TIMEOUT_S: Final = 30.0
"""Deadline of one screenshot request, seconds."""
DEFAULT_WAIT_MS: Final = 1000
"""What the SDK's ``wait`` action (which carries no duration) waits, milliseconds."""
WAIT_POLL_S: Final = 0.02
"""How often ``wait`` checks ``cancelled``, seconds."""

Cancelled = Callable[[], bool] | None
"""The SDK's cooperative cancellation callable (given to methods with a ``cancelled`` parameter)."""


def check_wait_ms(wait_ms: object) -> int:
    """Validate the ``wait`` duration (milliseconds, 0..``MAX_WAIT_MS``)."""
    if (
        not isinstance(wait_ms, int)
        or isinstance(wait_ms, bool)
        or not 0 <= wait_ms <= protocol.MAX_WAIT_MS
    ):
        raise ActionRejected(
            "wait", f"wait_ms must be an integer 0..{protocol.MAX_WAIT_MS}, got {wait_ms!r}"
        )
    return wait_ms
