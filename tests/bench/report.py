"""Benchmark reporting: medians, p95 and ours/peer ratios, printed as plain lines."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass
class Sample:
    name: str
    seconds: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.seconds)

    @property
    def p95(self) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@dataclass
class Report:
    samples: list[Sample] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    class Skip(Exception):
        """Raise from a benchmark whose prerequisites are missing; the message says which."""

    def section(self, name: str, doc: Iterable[str]) -> None:
        print(f"\n== {name}: {' '.join(doc)}", flush=True)

    def line(self, text: str) -> None:
        self.lines.append(text)
        print(f"   {text}", flush=True)

    def measure(
        self, name: str, fn: Callable[[], object], *, repeat: int = 50, warmup: int = 3
    ) -> Sample:
        """Time ``fn`` ``repeat`` times after ``warmup`` untimed calls; print p50/p95 in ms."""
        for _ in range(warmup):
            fn()
        seconds = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            seconds.append(time.perf_counter() - start)
        sample = Sample(name, seconds)
        self.samples.append(sample)
        self.line(
            f"{name:<58} p50 {sample.p50 * 1000:9.2f} ms   "
            f"p95 {sample.p95 * 1000:9.2f} ms   (n={repeat})"
        )
        return sample

    def ratio(self, ours: Sample, peer: Sample) -> float:
        value = peer.p50 / ours.p50 if ours.p50 > 0 else float("inf")
        self.line(f"ratio {peer.name} / {ours.name}: {value:.1f}x (p50)")
        return value

    def target(self, sample: Sample, limit_s: float) -> None:
        verdict = "meets" if sample.p50 <= limit_s else "MISSES"
        self.line(f"target {sample.name}: p50 <= {limit_s * 1000:.1f} ms -> {verdict}")

    def summary(self) -> None:
        print(f"\n{len(self.samples)} measurements", flush=True)
