"""An eval's scores from its records: pass rate, pass@k, per-task rows, the slowest and the
costliest attempts — as a text table (:func:`summary_table`) and as ``index.html``
(:func:`write_index`, each attempt linking to its report).

pass@k is the unbiased estimator of Chen et al. (2021) per task, averaged over tasks:
``1 - C(n-c, k) / C(n, k)`` with ``n`` finished attempts of which ``c`` passed (a task with fewer
than ``k`` attempts counts as passed at k when any passed). Only the record that counts per
attempt is used (:func:`cubicle.orchestrator.eval.results.latest`), so a resumed eval scores
exactly like an uninterrupted one.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import comb
from pathlib import Path
from typing import Final

from cubicle.orchestrator.eval.results import VERDICTS, AttemptRecord, latest

__all__ = ["INDEX", "Scores", "pass_at_k", "score", "summary_table", "write_index"]

INDEX: Final = "index.html"
TOP: Final = 3


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of ``k`` attempts drawn from ``n`` (``c`` passed)
    passes; ``n < k``: 1.0 when ``c`` > 0."""
    if n <= 0:
        return 0.0
    if n < k or n - c < k:
        return 1.0 if c > 0 else 0.0
    return 1.0 - comb(n - c, k) / comb(n, k)


@dataclass(frozen=True)
class TaskRow:
    task: str
    records: tuple[AttemptRecord, ...]

    @property
    def passed(self) -> int:
        return sum(r.verdict == "passed" for r in self.records)

    @property
    def verdicts(self) -> str:
        counts = Counter(r.verdict for r in self.records)
        return ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v])

    @property
    def mean_seconds(self) -> float:
        return sum(r.seconds for r in self.records) / len(self.records) if self.records else 0.0

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.records)


@dataclass(frozen=True)
class Scores:
    """The scores of an eval's counting records."""

    rows: tuple[TaskRow, ...]
    k: int

    @property
    def records(self) -> list[AttemptRecord]:
        return [r for row in self.rows for r in row.records]

    @property
    def attempts(self) -> int:
        return len(self.records)

    @property
    def passed(self) -> int:
        return sum(row.passed for row in self.rows)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.attempts if self.attempts else 0.0

    def pass_at(self, k: int) -> float:
        rows = [row for row in self.rows if row.records]
        if not rows:
            return 0.0
        return sum(pass_at_k(len(r.records), r.passed, k) for r in rows) / len(rows)

    @property
    def verdicts(self) -> Counter[str]:
        return Counter(r.verdict for r in self.records)

    def slowest(self) -> list[AttemptRecord]:
        return sorted(self.records, key=lambda r: -r.seconds)[:TOP]

    def costliest(self) -> list[AttemptRecord]:
        return [r for r in sorted(self.records, key=lambda r: -r.tokens) if r.tokens][:TOP]


def score(records: Iterable[AttemptRecord], tasks: Sequence[str], k: int) -> Scores:
    """The scores of ``tasks`` (in order) from ``records`` (the counting one per attempt)."""
    counting = latest(records)
    rows = tuple(
        TaskRow(
            name,
            tuple(
                sorted(
                    (r for r in counting.values() if r.task == name),
                    key=lambda r: r.attempt,
                )
            ),
        )
        for name in tasks
    )
    return Scores(rows, k)


def summary_table(scores: Scores) -> str:
    """The terminal table: a row per task, then the totals."""
    header = ("task", "attempts", "passed", "mean s", "tokens", "verdicts")
    rows = [
        (
            row.task,
            str(len(row.records)),
            str(row.passed),
            f"{row.mean_seconds:.1f}",
            str(row.tokens),
            row.verdicts or "-",
        )
        for row in scores.rows
    ]
    widths = [max(len(line[i]) for line in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (header, *rows)
    ]
    counts = scores.verdicts
    lines.append(
        f"total: {scores.passed}/{scores.attempts} passed (pass rate {scores.pass_rate:.0%}), "
        f"{_pass_at(scores)}; " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v])
    )
    return "\n".join(lines)


def _pass_at(scores: Scores) -> str:
    text = f"pass@1 {scores.pass_at(1):.2f}"
    return text + (f", pass@{scores.k} {scores.pass_at(scores.k):.2f}" if scores.k > 1 else "")


def _link(record: AttemptRecord) -> str:
    label = f"#{record.attempt} {record.verdict}"
    if record.report is None:
        return html.escape(label)
    return f'<a href="{html.escape(record.report)}">{html.escape(label)}</a>'


def write_index(folder: Path, scores: Scores, title: str) -> Path:
    """``folder/index.html``: the totals, a row per task (each attempt linked to its report),
    the slowest and the costliest attempts. Returns its path."""
    rows = "\n".join(
        f"<tr><td>{html.escape(row.task)}</td><td>{row.passed}/{len(row.records)}</td>"
        f"<td>{row.mean_seconds:.1f}</td><td>{row.tokens}</td>"
        f"<td>{' · '.join(_link(r) for r in row.records)}</td></tr>"
        for row in scores.rows
    )

    def listing(records: list[AttemptRecord], value: str) -> str:
        items = "".join(
            f"<li>{html.escape(r.task)} {_link(r)}: "
            f"{html.escape(f'{r.seconds:.1f} s' if value == 'seconds' else f'{r.tokens} tokens')}"
            "</li>"
            for r in records
        )
        return f"<ol>{items}</ol>" if items else "<p>none</p>"

    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{scores.passed}/{scores.attempts} attempts passed: pass rate {scores.pass_rate:.0%},
{_pass_at(scores)}</p>
<table><tr><th>task</th><th>passed</th><th>mean s</th><th>tokens</th><th>attempts</th></tr>
{rows}
</table>
<h2>Slowest</h2>{listing(scores.slowest(), "seconds")}
<h2>Costliest</h2>{listing(scores.costliest(), "tokens")}
</body></html>
"""
    path = folder / INDEX
    path.write_text(page, "utf-8")
    return path
