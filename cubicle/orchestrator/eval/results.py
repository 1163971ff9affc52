"""An eval's files in its folder DIR: ``eval.json`` (what was asked) and ``results.jsonl`` (what
happened, one record per attempt, appended as each attempt ends).

A record (:class:`AttemptRecord`) holds ``task`` (the task's name), ``attempt`` (1..K),
``verdict`` (:data:`VERDICTS`), ``checks`` (``name``, ``ok``, ``detail`` each), ``steps`` (actions
executed), ``seconds`` (the attempt's wall time, sandbox included), ``tokens`` (total tokens the
model reported; 0 for scripted players), ``error``, ``report`` (the attempt's ``report.html``,
relative to DIR), ``sandbox_retries`` (0 or 1), ``pooled`` (its sandbox was claimed from a warm
pool), ``engine`` (the ``--engine`` it ran on; ``null``: the default). Each line is flushed
and synced before the next attempt's record; a line cut short by a crash is dropped when the
folder is read again.

``interrupted`` attempts are recorded but never count as finished: ``--resume`` runs them again,
and the latest record of an attempt is the one that counts (:func:`latest`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from cubicle.orchestrator.errors import ConfigError

__all__ = [
    "MANIFEST",
    "RESULTS",
    "VERDICTS",
    "AttemptRecord",
    "Manifest",
    "ResultsFile",
    "Verdict",
    "latest",
]

RESULTS: Final = "results.jsonl"
MANIFEST: Final = "eval.json"
Verdict = Literal[
    "passed", "failed", "broken_task", "model_error", "sandbox_error", "timeout", "interrupted"
]
VERDICTS: Final[tuple[Verdict, ...]] = (
    "passed",
    "failed",
    "broken_task",
    "model_error",
    "sandbox_error",
    "timeout",
    "interrupted",
)


@dataclass
class AttemptRecord:
    """One line of ``results.jsonl`` (module docstring)."""

    task: str
    attempt: int
    verdict: Verdict
    checks: list[dict[str, Any]] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    tokens: int = 0
    error: str | None = None
    report: str | None = None
    sandbox_retries: int = 0
    pooled: bool = False
    """Its sandbox was claimed from a warm pool."""
    engine: str | None = None
    """The Docker engine it ran on (``--engine``); ``None``: the default one."""

    @property
    def key(self) -> tuple[str, int]:
        return self.task, self.attempt

    @property
    def finished(self) -> bool:
        """Counts as done: anything but ``interrupted``."""
        return self.verdict != "interrupted"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AttemptRecord:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        if known.get("verdict") not in VERDICTS:
            raise ValueError(f"verdict {known.get('verdict')!r} is not one of {VERDICTS}")
        return cls(**known)


def latest(records: Iterable[AttemptRecord]) -> dict[tuple[str, int], AttemptRecord]:
    """Per (task, attempt), the record that counts: the last finished one, else the last."""
    chosen: dict[tuple[str, int], AttemptRecord] = {}
    for record in records:
        old = chosen.get(record.key)
        if old is None or record.finished or not old.finished:
            chosen[record.key] = record
    return chosen


class ResultsFile:
    """``DIR/results.jsonl``: read what is there, append records (thread-safe, synced)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / RESULTS
        self._lock = threading.Lock()

    def read(self) -> list[AttemptRecord]:
        """Every complete record; a last line cut short by a crash is removed from the file
        (so the next record starts on a line of its own)."""
        if not self.path.exists():
            return []
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            raw = raw[: raw.rfind(b"\n") + 1]
            self.path.write_bytes(raw)
        records = []
        for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(AttemptRecord.from_json(json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{self.path}:{number}: not an attempt record ({exc})") from None
        return records

    def append(self, record: AttemptRecord) -> None:
        line = json.dumps(asdict(record), ensure_ascii=False) + "\n"
        with self._lock, self.path.open("a", encoding="utf-8") as file:
            file.write(line)
            file.flush()
            os.fsync(file.fileno())


@dataclass(frozen=True)
class Manifest:
    """What an eval was asked (``eval.json``); ``--resume`` must ask the same."""

    suite: str
    tasks: list[str]
    attempts: int
    model: str
    oracle: bool
    backend: str
    timeout_s: float

    def write(self, folder: Path) -> None:
        (folder / MANIFEST).write_text(json.dumps(asdict(self), indent=2) + "\n", "utf-8")

    @classmethod
    def read(cls, folder: Path) -> Manifest:
        """:raises ConfigError: no ``eval.json`` in ``folder`` (not an eval's folder) or bad."""
        path = folder / MANIFEST
        try:
            data = json.loads(path.read_text("utf-8"))
            return cls(**data)
        except FileNotFoundError:
            raise ConfigError(
                f"--resume {folder}: no {MANIFEST} there, so it is not a cubicle eval folder"
            ) from None
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"--resume {folder}: {path} cannot be read ({exc})") from None

    def mismatches(self, other: Manifest) -> list[str]:
        """What differs between this run's request and ``other`` (the folder's), by name."""
        names = {
            "suite": "SUITE",
            "tasks": "the suite's tasks",
            "attempts": "--attempts",
            "model": "--model",
            "oracle": "--oracle",
            "backend": "--backend",
            "timeout_s": "--timeout",
        }
        mine, theirs = asdict(self), asdict(other)
        return [
            f"{label} (the folder's run: {theirs[name]!r}, now: {mine[name]!r})"
            for name, label in names.items()
            if mine[name] != theirs[name]
        ]
