"""A running turn's trajectory, turned into session items and events as it is written.

Every loop cubicle runs (the drill, a task, a Responses model) records into a trajectory folder
(:mod:`cubicle.orchestrator.trajectory.recorder`: ``trajectory.jsonl`` plus ``shots/``). A
:class:`TrajectoryFollower` thread reads that file as it grows and a :class:`TurnReporter`
maps each record to the wire:

- ``model_turn``: each computer call → a ``computer_use_call`` item (``in_progress``,
  ``agent.session.turn.item.added``, titled with its actions); a final message → an assistant
  ``message`` item (``item.added``, ``output_text.done``, ``item.done``);
- the SDK's next ``screenshot`` → those calls done (``completed``, ``item.done``) with that
  screenshot as their ``computer_screenshot`` output (a JPEG data URL);
- a refused safety check → the call ``failed``; whatever is still open at the end →
  ``incomplete``.

The session's latest screenshot (the console's image) follows every screenshot. Each
``model_turn``'s ``usage`` adds to the turn's and the session's token totals (the spend is
counted in the loop itself: :meth:`cubicle.orchestrator.serve.worker.SessionWorker.run_turn`).
"""

from __future__ import annotations

import base64
import io
import json
import threading
from pathlib import Path
from typing import Any

from PIL import Image

from cubicle.orchestrator.modelrun.usage import UsageTotals
from cubicle.orchestrator.serve import wire
from cubicle.orchestrator.serve.store import Session
from cubicle.orchestrator.trajectory.recorder import TRAJECTORY_FILE

__all__ = ["TrajectoryFollower", "TurnReporter", "jpeg_data_url"]

POLL_S = 0.05
JPEG_QUALITY = 80


def to_jpeg(png: bytes) -> bytes:
    with Image.open(io.BytesIO(png)) as image:
        out = io.BytesIO()
        image.convert("RGB").save(out, "JPEG", quality=JPEG_QUALITY)
        return out.getvalue()


def jpeg_data_url(jpeg: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")


def describe_actions(actions: list[dict[str, Any]]) -> str:
    """A short title for a computer call: ``click (120, 40); type 'hello'; keypress ctrl+s``."""
    parts: list[str] = []
    for action in actions:
        kind = str(action.get("type", "?"))
        if kind == "type":
            text = str(action.get("text", ""))
            parts.append(f"type {text[:40]!r}")
        elif kind == "keypress":
            parts.append("keypress " + "+".join(str(k) for k in action.get("keys") or []))
        elif "x" in action and "y" in action:
            parts.append(f"{kind} ({action['x']}, {action['y']})")
        else:
            parts.append(kind)
    return "; ".join(parts) or "screenshot"


class TurnReporter:
    """Maps one turn's trajectory records to items and events (see the module doc)."""

    def __init__(self, session: Session, turn_id: str, folder: Path) -> None:
        self.session = session
        self.turn_id = turn_id
        self.folder = folder
        self.open_calls: list[dict[str, Any]] = []
        self.final_message: str | None = None
        self.usage = UsageTotals()
        """The turn's token usage (from the responses' bodies)."""
        self._output_index = 0

    def _item_event(self, kind: str, item: dict[str, Any]) -> None:
        self.session.publish(
            wire.event(
                kind,
                session_id=self.session.id,
                turn_id=self.turn_id,
                item=item,
                output_index=self._output_index,
            )
        )

    def record(self, rec: dict[str, Any]) -> None:
        kind = rec.get("kind")
        if kind == "model_turn":
            self._account(rec)
            for call in rec.get("calls") or []:
                item = wire.computer_use_call(
                    self.turn_id,
                    wire.new_id("cu"),
                    status="in_progress",
                    title=describe_actions(list(call.get("actions") or [])),
                )
                self.session.add_item(item)
                self.open_calls.append(item)
                self._item_event("agent.session.turn.item.added", item)
            message = rec.get("message")
            if isinstance(message, str) and message:
                self._message(message)
        elif kind == "screenshot":
            self._screenshot(rec)
        elif kind == "approval" and rec.get("subject") == "safety_check" and not rec.get("allowed"):
            self._close_calls("failed", None)

    def _account(self, rec: dict[str, Any]) -> None:
        """The token usage of one completed model response."""
        if rec.get("status") != "completed":
            return
        self.usage.add_response(rec.get("usage"), counts=True)
        self.session.usage.add_response(rec.get("usage"), counts=True)

    def _message(self, text: str) -> None:
        self.final_message = text
        item = wire.assistant_message(self.turn_id, text)
        self._output_index += 1
        self.session.add_item(item)
        self._item_event("agent.session.turn.item.added", {**item, "status": "in_progress"})
        self.session.publish(
            wire.event(
                "agent.session.turn.output_text.done",
                session_id=self.session.id,
                turn_id=self.turn_id,
                item_id=item["id"],
                output_index=self._output_index,
                content_index=0,
                text=text,
            )
        )
        self._item_event("agent.session.turn.item.done", item)

    def _screenshot(self, rec: dict[str, Any]) -> None:
        try:
            png = (self.folder / str(rec["file"])).read_bytes()
            jpeg = to_jpeg(png)
        except (OSError, KeyError, ValueError):
            return
        with self.session.lock:
            self.session.latest_screenshot = jpeg
        if rec.get("note") is None and self.open_calls:
            shown = self.session.agent.include_screenshots
            self._close_calls("completed", jpeg_data_url(jpeg) if shown else None)

    def _close_calls(self, status: str, image_url: str | None) -> None:
        calls, self.open_calls = self.open_calls, []
        for call in calls:
            item = wire.computer_use_call(
                self.turn_id, call["id"], status=status, title=call["title"], image_url=image_url
            )
            self.session.replace_item(item)
            self._item_event("agent.session.turn.item.done", item)
            self._output_index += 1

    def finish(self) -> None:
        """Close what the loop left open (``incomplete``)."""
        self._close_calls("incomplete", None)


class TrajectoryFollower:
    """Reads ``folder/trajectory.jsonl`` as it grows, in a thread, into ``reporter``.

    :meth:`stop` (after the loop returned) reads what is left, then ends the thread.
    """

    def __init__(self, folder: Path, reporter: TurnReporter) -> None:
        self.path = folder / TRAJECTORY_FILE
        self.reporter = reporter
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="cubicle-serve-follow", daemon=True)

    def start(self) -> TrajectoryFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _main(self) -> None:
        handle = None
        buffer = ""
        try:
            while True:
                stopping = self._stop.is_set()
                if handle is None:
                    try:
                        handle = self.path.open(encoding="utf-8")
                    except FileNotFoundError:
                        if stopping:
                            return
                        self._stop.wait(POLL_S)
                        continue
                chunk = handle.read()
                if chunk:
                    buffer += chunk
                    *lines, buffer = buffer.split("\n")
                    for line in lines:
                        self._line(line)
                    continue
                if stopping:
                    return
                self._stop.wait(POLL_S)
        finally:
            if handle is not None:
                handle.close()

    def _line(self, line: str) -> None:
        try:
            rec = json.loads(line)
        except ValueError:
            return
        if isinstance(rec, dict):
            self.reporter.record(rec)
