"""Token usage totals of one model run.

The SDK's ``ResponsesToolRunner`` reports, per completed request, a ``responses``/``request``
diagnostic whose ``usage`` is ``{input_tokens, output_tokens, total_tokens}`` or ``None`` (the
response had no integer usage). The run's totals are the sums; when a request lacked usage the
totals are **incomplete** (a lower bound) and say how many requests lacked it. Cached and
reasoning tokens are not in the diagnostic: they are summed from the response bodies cubicle
records anyway (``usage.input_tokens_details.cached_tokens``,
``usage.output_tokens_details.reasoning_tokens``).

``ComputerToolset.run`` (``--loop toolset``) emits no request diagnostics; there the three
counts come from the response bodies too (:meth:`UsageTotals.add_response`, ``counts=True``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["UsageTotals", "usage_line"]

_COUNTS = ("input_tokens", "output_tokens", "total_tokens")


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _counts(usage: object) -> dict[str, int] | None:
    """The three counts when ``usage`` has them all as integers, else ``None``."""
    if not isinstance(usage, Mapping):
        return None
    values = {name: _int(usage.get(name)) for name in _COUNTS}
    if any(v is None for v in values.values()):
        return None
    return {k: v for k, v in values.items() if v is not None}


class UsageTotals:
    """Sums of token usage over a run's completed requests (thread-safe)."""

    def __init__(self) -> None:
        self.input_tokens = 0
        self.output_tokens = 0
        self.total_tokens = 0
        self.cached_tokens = 0
        self.reasoning_tokens = 0
        self.requests = 0
        """Completed requests counted."""
        self.without_usage = 0
        """Completed requests whose usage was missing."""
        self._lock = threading.Lock()

    def add_request(self, usage: object) -> None:
        """One completed request's usage (the diagnostic's ``usage``; ``None``: it had none)."""
        counts = _counts(usage)
        with self._lock:
            self.requests += 1
            if counts is None:
                self.without_usage += 1
                return
            self.input_tokens += counts["input_tokens"]
            self.output_tokens += counts["output_tokens"]
            self.total_tokens += counts["total_tokens"]

    def add_response(self, usage: object, *, counts: bool = False) -> None:
        """A completed response body's ``usage``: its cached and reasoning tokens; with
        ``counts`` (no request diagnostics in this loop) also the request itself."""
        if counts:
            self.add_request(usage)
        if not isinstance(usage, Mapping):
            return
        details_in = usage.get("input_tokens_details")
        details_out = usage.get("output_tokens_details")
        cached = _int(details_in.get("cached_tokens")) if isinstance(details_in, Mapping) else None
        reasoning = (
            _int(details_out.get("reasoning_tokens")) if isinstance(details_out, Mapping) else None
        )
        with self._lock:
            self.cached_tokens += cached or 0
            self.reasoning_tokens += reasoning or 0

    @property
    def incomplete(self) -> bool:
        return self.without_usage > 0

    def as_dict(self) -> dict[str, Any]:
        """The ``usage`` of the trajectory's ``end`` record."""
        with self._lock:
            return {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens,
                "cached_tokens": self.cached_tokens,
                "reasoning_tokens": self.reasoning_tokens,
                "requests": self.requests,
                "incomplete": self.incomplete,
                "requests_without_usage": self.without_usage,
            }


def usage_line(usage: Mapping[str, Any]) -> str:
    """One console line for an ``end`` record's ``usage`` (see :meth:`UsageTotals.as_dict`)."""
    text = (
        f"tokens: {usage.get('input_tokens', 0)} in ({usage.get('cached_tokens', 0)} cached), "
        f"{usage.get('output_tokens', 0)} out ({usage.get('reasoning_tokens', 0)} reasoning), "
        f"{usage.get('total_tokens', 0)} total over {usage.get('requests', 0)} requests"
    )
    if usage.get("incomplete"):
        text += f" — INCOMPLETE: {usage.get('requests_without_usage')} request(s) reported no usage"
    return text
