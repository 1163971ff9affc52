"""Write one run's trajectory: ``trajectory.jsonl`` plus the screenshots as files.

Folder layout (all paths inside the folder are relative, so it can be moved or zipped)::

    OUT/
      trajectory.jsonl      one JSON object per line, in the order things happened
      shots/0000.png ...    every screenshot the model saw (model-view size)
      report.html           written by :func:`cubicle.orchestrator.trajectory.report.write_report`

Every line has ``kind`` and ``t`` (seconds since the recorder was created, monotonic clock).
Kinds and their fields:

- ``run``: ``task``, ``loop``, ``context_budget`` (``images=N,bytes=M`` or ``off``), ``model``,
  ``screen`` [w, h] (native px), ``model_view`` [w, h], ``meta``, ``sandbox`` (its id, or null
  for a desktop that is no sandbox)
- ``resume``: a resumed run continues the trajectory here (after the interrupted run's last
  record): ``sandbox`` (the same id), ``from_revision`` (the ledger's boundary),
  ``completed_turns``, ``consumed_requests``, ``remaining_steps``, ``uncertain`` (calls in flight
  when the run died, with their actions: never sent again), ``settle_shot`` (the fresh
  screenshot that settled them and is the model's next observation)
- ``model_turn``: ``index``, ``response_id``, ``status``, ``calls`` (``call_id``, ``actions`` in
  model-view px, ``pending_safety_checks``), ``message`` (final text or null), ``usage``,
  ``duration_ms`` (the HTTP request)
- ``model_request``: ``index``, ``input_bytes`` (compact JSON of the request's ``input``, as the
  SDK's context budget measures it), ``images``, ``items``, ``body_bytes`` (the HTTP body);
  one per request, written as it is sent
- ``approval``: ``subject`` (``safety_check`` | ``action``), ``allowed``, ``by``, ``reason``,
  ``call_id``, ``detail``
- ``action``: ``index``, ``after_shot`` (the screenshot the model saw when it chose the action,
  or null), ``type``, ``model`` (coordinates as the model gave them), ``native`` (screen px),
  ``text``/``keys`` when present, ``duration_ms``, ``error``, ``receipt`` (what the screen did
  after it: :class:`cubicle.drivers.receipts.Receipt` as a dict)
- ``screenshot``: ``index``, ``file``, ``size`` [w, h], ``native`` (crop rect / geometry facts),
  ``note`` (who took it, when not the SDK)
- ``diagnostic``: the SDK's ``ToolDiagnostic`` fields (``api``, ``stage``, ``reason``, ``call_id``,
  ``member``, ``duration_ms``, ``usage``)
- ``guest_wait``: ``op``, ``detail``, ``duration_ms`` (time the orchestrator spent waiting on the
  guest outside the model loop: window waits, settles, set-up)
- ``check``: ``name``, ``ok``, ``expected``, ``got`` (verification of the guest's state)
- ``error``: ``where``, ``type``, ``message``
- ``failure_screen``: ``file`` (the screen at native size when a drill failed, e.g.
  ``failure.png``; not a screenshot the model received)
- ``warning``: ``what`` (``stall``), ``message``, ``actions``
- ``handover``: ``state`` (``requested`` | ``taken`` | ``released`` | ``cancelled``), ``by``,
  ``held_s``, ``reason`` (a person had control between ``taken`` and ``released``:
  :mod:`cubicle.orchestrator.view.handover`)
- ``recording``: ``file`` (the video, relative; null when none), ``frames``, ``duration_s``,
  ``bytes``, ``error`` (``--record``: :mod:`cubicle.orchestrator.view.recording`)
- ``stale_check``: ``shot``, ``stale``, ``changed_box``, ``changed_area``, ``animating_box``,
  ``window_s``, ``later`` (the drill compared the screenshot the model received with the screen
  that much later, leaving out what was still animating then; when stale, ``later`` is the file
  of what the screen became, under ``stale/``)
- ``origin_access``: ``question``, ``origin``, ``host``, ``port``, ``answer`` (``approve`` |
  ``deny`` | ``cancel`` | ``timeout``), ``by`` (an ``ask:`` sandbox's proxy held a guest
  connection to ``origin`` until this decision: :mod:`cubicle.orchestrator.origin_answers`)
- ``end``: ``ok``, ``final_message``, ``wall_s``, ``guest_wait_s``, ``driver_s``, ``error``,
  ``usage`` (token totals: ``input_tokens``, ``output_tokens``, ``total_tokens``,
  ``cached_tokens``, ``reasoning_tokens``, ``requests``, ``incomplete``,
  ``requests_without_usage``)

The recorder is thread-safe (the scripted model's hooks run on the HTTP server's thread). The
caller owns it and calls :meth:`close`; screenshots never go to the terminal, only to files.

Observers (:class:`TrajectoryObserver`, e.g. ``cubicle serve``'s turn reporter) see every record
in process, in the order it was written, right after it is in the file: the file stays the
record, and nobody re-reads it to follow a run.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

__all__ = ["TRAJECTORY_FILE", "TrajectoryObserver", "TrajectoryRecorder", "read_trajectory"]

log = logging.getLogger(__name__)

TRAJECTORY_FILE = "trajectory.jsonl"
SHOTS_DIR = "shots"


class TrajectoryObserver(Protocol):
    """Sees a run's records as they are written (:class:`TrajectoryRecorder`'s ``observers``).

    Called on the writing thread with the recorder's lock held, so records arrive one at a time
    and in file order; an observer must be quick and must not write to the recorder. An
    exception is logged and does not stop the run.
    """

    def on_record(self, record: Mapping[str, Any]) -> None:
        """Any record but ``screenshot`` (the line as written, ``kind`` and ``t`` included)."""

    def on_screenshot(self, record: Mapping[str, Any], png: bytes) -> None:
        """A ``screenshot`` record and the image it names (PNG, model-view size)."""


class TrajectoryRecorder:
    """Append-only writer of a run folder.

    :param folder: where to write; created if missing. Existing trajectory files are replaced.
    :param observers: told of every record after it is written (:class:`TrajectoryObserver`).
    :param append: continue the trajectory already in ``folder`` (a resumed run): its records
        and screenshots stay, indexes and ``t`` go on from its last ones, a last line cut short
        by a killed writer is dropped.
    """

    def __init__(
        self, folder: Path, observers: Iterable[TrajectoryObserver] = (), *, append: bool = False
    ) -> None:
        self.folder = folder
        self._observers = tuple(observers)
        (folder / SHOTS_DIR).mkdir(parents=True, exist_ok=True)
        self._shots = 0
        self._actions = 0
        self._turns = 0
        offset = 0.0
        if append:
            offset = self._continue()
        else:
            for old in (folder / SHOTS_DIR).glob("*.png"):
                old.unlink()
        self._file = (folder / TRAJECTORY_FILE).open("a" if append else "w", encoding="utf-8")
        self._lock = threading.Lock()
        self._start = time.monotonic() - offset
        self._closed = False

    def _continue(self) -> float:
        """Read the existing trajectory for :param:`append`: counts and the last ``t``."""
        path = self.folder / TRAJECTORY_FILE
        if not path.exists():
            return 0.0
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            path.write_bytes(complete)
        last_t = 0.0
        for record in read_trajectory(self.folder):
            last_t = max(last_t, float(record.get("t") or 0.0))
            kind = record.get("kind")
            if kind == "screenshot":
                self._shots = max(self._shots, int(record["index"]) + 1)
            elif kind == "action":
                self._actions = max(self._actions, int(record["index"]) + 1)
            elif kind == "model_turn":
                self._turns = max(self._turns, int(record["index"]) + 1)
        return last_t

    # -- generic -----------------------------------------------------------------------------

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one event line; return it. Values must be JSON-serialisable."""
        with self._lock:
            return self._write_locked(kind, fields)

    def _write_locked(
        self, kind: str, fields: dict[str, Any], png: bytes | None = None
    ) -> dict[str, Any]:
        if self._closed:
            raise ValueError(
                f"trajectory recorder for {self.folder} is closed; cannot add {kind!r}"
            )
        record = {"kind": kind, "t": round(time.monotonic() - self._start, 4), **fields}
        self._file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._file.flush()
        for observer in self._observers:
            try:
                if png is None:
                    observer.on_record(record)
                else:
                    observer.on_screenshot(record, png)
            except Exception:
                log.exception("trajectory observer %r failed on a %s record", observer, kind)
        return record

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._start

    # -- typed helpers -------------------------------------------------------------------------

    def screenshot(
        self,
        png: bytes,
        *,
        size: tuple[int, int],
        native: dict[str, Any] | None = None,
        note: str | None = None,
    ) -> int:
        """Store one screenshot (PNG bytes at model-view size); return its index.

        :param note: who took it when not the SDK's loop (e.g. the drill after its waits).
        """
        with self._lock:
            index = self._shots
            self._shots += 1
            name = f"{SHOTS_DIR}/{index:04d}.png"
            (self.folder / name).write_bytes(png)
            fields = {"index": index, "file": name, "size": list(size), "native": native}
            if note:
                fields["note"] = note
            self._write_locked("screenshot", fields, png)
            return index

    @property
    def last_shot(self) -> int | None:
        """Index of the latest screenshot, or None before the first."""
        with self._lock:
            return self._shots - 1 if self._shots else None

    def action(self, **fields: Any) -> None:
        """Record one executed (or failed) action; ``after_shot`` is filled in here."""
        with self._lock:
            index = self._actions
            self._actions += 1
            after = self._shots - 1 if self._shots else None
            self._write_locked("action", {"index": index, "after_shot": after, **fields})

    def model_turn(self, **fields: Any) -> None:
        with self._lock:
            index = self._turns
            self._turns += 1
            self._write_locked("model_turn", {"index": index, **fields})

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close the file. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_trajectory(folder: Path) -> list[dict[str, Any]]:
    """Load every event of ``folder/trajectory.jsonl`` (a truncated last line is skipped)."""
    events: list[dict[str, Any]] = []
    with (folder / TRAJECTORY_FILE).open(encoding="utf-8") as handle:
        for line in handle:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                events.append(value)
    return events
