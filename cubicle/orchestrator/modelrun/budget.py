"""The context budget of a model run: how much history goes into each request, and what is
dropped when it would not fit.

The SDK's ``ResponsesToolRunner`` keeps the full history and, before every request, measures
it (compact JSON bytes of ``input`` and its images). Over the budget it calls ``compact`` with a
snapshot and the calls it may drop (never the latest computer call, calls with safety checks,
or the ``keep_recent_screenshots`` latest screenshots: cubicle passes 1); the dropped calls (the
call and its screenshot) leave *that request's* input, replaced by a receipt and our summary.
Without a budget (``ComputerToolset.run``, ``--loop toolset``) every screenshot is resent every
step, so what is sent grows with the square of the steps.

:class:`Compactor` is cubicle's ``compact``:

* it drops the **oldest** eligible calls, and once dropped a call stays dropped (the choice is
  sticky), so the request prefix changes only when a new batch is dropped;
* when the budget is exceeded it drops down to *half* the image cap and half the byte bound
  (not one call per step): the next few requests then grow from a stable prefix again, which
  is what lets the provider reuse its prompt cache;
* it keeps what the SDK protects (the current screenshot and the latest call, safety checks and
  their acknowledgements), the two screenshots before the current one unless only dropping them
  meets the limits (heavy screens), and every message and reasoning item (only calls are
  dropped), and adds a short summary of the dropped steps'
  actions (``step 3: click 640,400; type "hello"``), at most :data:`SUMMARY_CHARS` characters.

:data:`DEFAULT_BUDGET` is what ``cubicle run`` and the drill's runner loop use;
:func:`parse_context_budget` reads ``--context-budget``. :func:`measure_input` measures a request's
input as the SDK does (the ``model_request`` records use it).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

from openai.lib.responses_tool_runner import (
    ContextBudget,
    ContextBudgetDecision,
    ContextBudgetSnapshot,
)

from cubicle.orchestrator.errors import ConfigError

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_MAX_INPUT_BYTES",
    "DEFAULT_MAX_INPUT_IMAGES",
    "KEEP_RECENT_SCREENSHOTS",
    "BudgetSpec",
    "Compactor",
    "describe_budget",
    "measure_input",
    "parse_context_budget",
    "resolve_budget",
]

DEFAULT_MAX_INPUT_IMAGES: Final = 8
"""At most this many images in one request."""
DEFAULT_MAX_INPUT_BYTES: Final = 4 * 1024 * 1024
"""At most this many bytes of request input (compact JSON, base64 screenshots included).

Chosen from measurement (``make bench``, ``tests/bench/bench_budget.py``, prints the figures):
a 1280x800 screen with Chromium showing a page is a 40 KB PNG (54 KB as base64), so eight of
them take 0.43 MB and the image cap, not the byte bound, compacts an ordinary run; the
shipped tasks' drill screenshots (1024x640) were 9-92 KB. The worst case, a screen of random
pixels that PNG cannot compress, is 3.08 MB at 1280x800, 4.10 MB as base64: 4 MiB (4.19 MB) is
the smallest round bound that still admits one such screenshot, so the byte bound acts only on
heavy screens (photos, video) and a single screenshot never makes a request unsendable at the
default screen size."""
KEEP_RECENT_SCREENSHOTS: Final = 3
"""The latest screenshots ``compact`` keeps (the current one always; the two before it unless
the limits cannot be met otherwise)."""
SUMMARY_CHARS: Final = 2000
"""The summary of dropped steps keeps the latest steps within this many characters."""

_CALL_KINDS: Final = frozenset(
    {"computer_call", "computer_call_output", "function_call", "function_call_output"}
)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class BudgetSpec:
    """A context budget: ``images`` and ``bytes`` per request (see :data:`DEFAULT_BUDGET`)."""

    images: int
    bytes: int
    keep_recent: int = KEEP_RECENT_SCREENSHOTS

    def describe(self) -> str:
        return f"images={self.images},bytes={self.bytes}"

    def context_budget(self) -> ContextBudget:
        """The SDK's ``context_budget`` with a fresh :class:`Compactor` (one per run)."""
        return {
            "max_input_bytes": self.bytes,
            "max_input_images": self.images,
            # the SDK protects only the current screenshot: the Compactor keeps ``keep_recent``
            # unless heavy screenshots leave no other way under the limits
            "keep_recent_screenshots": 1,
            "compact": Compactor(self),
        }


DEFAULT_BUDGET: Final = BudgetSpec(DEFAULT_MAX_INPUT_IMAGES, DEFAULT_MAX_INPUT_BYTES)


def resolve_budget(kind: str, budget: BudgetSpec | Literal["default"] | None) -> BudgetSpec | None:
    """The budget a ``kind`` loop runs with: ``"default"`` is :data:`DEFAULT_BUDGET` for the
    runner and none for the toolset (which replays the full history)."""
    if budget == "default":
        return DEFAULT_BUDGET if kind == "runner" else None
    return budget


def describe_budget(budget: BudgetSpec | None) -> str:
    """``images=N,bytes=M``, or ``off`` (full replay); for records and the console."""
    return budget.describe() if budget is not None else "off"


def parse_context_budget(text: str) -> BudgetSpec | None:
    """``--context-budget``: ``off`` (``None``: full replay) or ``images=N,bytes=M`` (either
    part may be left out; it keeps its default). ``bytes`` takes a ``K``/``M`` suffix (KiB/MiB).

    :raises ConfigError: naming the part that is wrong.
    """
    if text.strip() == "off":
        return None
    values = {"images": DEFAULT_BUDGET.images, "bytes": DEFAULT_BUDGET.bytes}
    for part in text.split(","):
        name, sep, raw = (s.strip() for s in part.partition("="))
        if not sep or name not in values:
            raise ConfigError(
                f"--context-budget: {part!r} is not images=N or bytes=M "
                "(or give 'off' for the SDK's full replay)"
            )
        scale = {"K": 1024, "M": 1024 * 1024}.get(raw[-1:].upper(), 1)
        digits = raw[:-1] if scale != 1 else raw
        if not digits.isascii() or not digits.isdecimal():
            raise ConfigError(f"--context-budget: {name} must be a whole number, got {raw!r}")
        values[name] = int(digits) * scale
    if values["images"] < 1:
        raise ConfigError("--context-budget: images must be at least 1 (the current screenshot)")
    if values["bytes"] < 64 * 1024:
        raise ConfigError(
            f"--context-budget: bytes={values['bytes']} cannot hold one screenshot; "
            "give at least 64K"
        )
    return BudgetSpec(values["images"], values["bytes"])


def _size(value: object) -> int:
    return sum(len(chunk.encode("utf-8")) for chunk in _ENCODER.iterencode(value))


def _images(item: Mapping[str, Any]) -> int:
    kind = item.get("type", "message")
    if kind == "computer_call_output":
        return 1
    blocks = item.get("output" if kind == "function_call_output" else "content")
    if kind in ("message", "function_call_output") and isinstance(blocks, list):
        return sum(1 for b in blocks if isinstance(b, dict) and b.get("type") == "input_image")
    return 0


def measure_input(items: object) -> tuple[int, int]:
    """``(bytes, images)`` of a request's ``input`` as the SDK's runner measures it: compact
    JSON bytes (UTF-8), and one image per ``computer_call_output`` and ``input_image`` block."""
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return 0, 0
    return _size(items), sum(_images(i) for i in items if isinstance(i, dict))


def _describe_action(action: Mapping[str, Any]) -> str:
    kind = str(action.get("type"))
    if kind == "type":
        text = str(action.get("text", ""))
        return f"type {json.dumps(text[:40] + ('…' if len(text) > 40 else ''), ensure_ascii=False)}"
    if kind == "keypress":
        return "keys " + "+".join(map(str, action.get("keys") or []))
    if "x" in action and "y" in action:
        return f"{kind} {action['x']},{action['y']}"
    if kind == "drag":
        path = action.get("path") or []
        if path:
            first, last = path[0], path[-1]
            return f"drag {first.get('x')},{first.get('y')}→{last.get('x')},{last.get('y')}"
    return kind


def _step_summary(step: int, call: Mapping[str, Any]) -> str:
    actions = call.get("actions") or ([call["action"]] if call.get("action") else [])
    described = [_describe_action(a) for a in actions if isinstance(a, dict)]
    return f"step {step}: " + "; ".join(d for d in described if d != "screenshot") or "screenshot"


class Compactor:
    """cubicle's ``context_budget.compact`` (see the module docstring). One per run: it
    remembers what it dropped. Thread-safe (the SDK calls it from the loop's thread)."""

    def __init__(self, spec: BudgetSpec) -> None:
        self.spec = spec
        self.dropped: list[str] = []
        """Call ids dropped so far, oldest first (sticky)."""
        self.compactions = 0
        """How many requests needed a compaction."""
        self.batches = 0
        """How many times new calls were dropped."""
        self._lock = threading.Lock()
        self._sized: list[dict[str, Any]] | None = None
        self._item_sizes: list[tuple[int, int]] = []

    def __call__(self, snapshot: ContextBudgetSnapshot) -> ContextBudgetDecision:
        with self._lock:
            return self._decide(snapshot)

    def _decide(self, snapshot: ContextBudgetSnapshot) -> ContextBudgetDecision:
        self.compactions += 1
        history = cast(list[dict[str, Any]], snapshot["history"])
        eligible = list(snapshot["eligible_call_ids"])
        steps = {
            item["call_id"]: number
            for number, item in enumerate(
                (i for i in history if i.get("type") == "computer_call"), start=1
            )
        }
        calls = {i["call_id"]: i for i in history if i.get("type") == "computer_call"}
        drop = [c for c in self.dropped if c in eligible]

        def fits(images: int, size: int) -> bool:
            return self._fits(history, drop, calls=calls, steps=steps, images=images, size=size)

        if not fits(self.spec.images, self.spec.bytes):
            # over budget: drop the oldest eligible calls down to half the limits, keeping the
            # latest screenshots (the current one is the SDK's to keep)
            images, size = max(1, self.spec.images // 2), self.spec.bytes // 2
            recent = max(0, self.spec.keep_recent - 1)
            preferred = eligible[:-recent] if recent else eligible
            for call_id in preferred:
                if fits(images, size):
                    break
                if call_id not in drop:
                    drop.append(call_id)
            # heavy screenshots: the recent ones go too, as far as the limits need
            for call_id in eligible:
                if fits(self.spec.images, self.spec.bytes):
                    break
                if call_id not in drop:
                    drop.append(call_id)
            self.batches += 1
        self.dropped = [c for c in eligible if c in drop]
        self._sized = None  # do not hold the history past the decision
        decision: ContextBudgetDecision = {"drop_call_ids": list(self.dropped)}
        summary = self._summary(self.dropped, calls, steps)
        if summary:
            decision["summary"] = summary
        return decision

    def _summary(
        self, drop: Iterable[str], calls: Mapping[str, dict[str, Any]], steps: Mapping[str, int]
    ) -> str:
        lines = [_step_summary(steps[c], calls[c]) for c in drop if c in calls]
        kept: list[str] = []
        total = 0
        for line in reversed(lines):
            total += len(line) + 2
            if total > SUMMARY_CHARS:
                break
            kept.append(line)
        kept.reverse()
        earlier = len(lines) - len(kept)
        head = [f"{earlier} earlier steps"] if earlier else []
        return "; ".join(head + kept) + ("." if lines else "")

    def _fits(
        self,
        history: list[dict[str, Any]],
        drop: list[str],
        *,
        calls: Mapping[str, dict[str, Any]],
        steps: Mapping[str, int],
        images: int,
        size: int,
    ) -> bool:
        """Whether the input with ``drop`` left out fits ``images``/``size`` (the SDK's receipts
        and the summary counted, with a margin for their exact wording)."""
        dropped = set(drop)
        sizes = self._sizes(history)
        kept = [
            index
            for index, item in enumerate(history)
            if not (item.get("type") in _CALL_KINDS and item.get("call_id") in dropped)
        ]
        total_bytes = sum(sizes[i][0] for i in kept) + max(0, len(kept) - 1) + 2
        total_images = sum(sizes[i][1] for i in kept)
        receipts = [{"call_id": c, "kind": "computer_call"} for c in drop]
        overhead = _size(receipts) + len(self._summary(drop, calls, steps).encode()) + 512
        return total_images <= images and total_bytes + overhead <= size

    def _sizes(self, history: list[dict[str, Any]]) -> list[tuple[int, int]]:
        """Bytes and images of each item (cached per snapshot: a decision measures once)."""
        if self._sized is not history:
            self._sized = history
            self._item_sizes = [(_size(i), _images(i)) for i in history]
        return self._item_sizes
