"""A running turn's trajectory, turned into session items and events as it is written.

Every loop cubicle runs (the drill, a task, a Responses model) records into a trajectory folder
(:mod:`cubicle.orchestrator.trajectory.recorder`: ``trajectory.jsonl`` plus ``shots/``). A
:class:`TurnReporter` observes the recorder in process (a
:class:`~cubicle.orchestrator.trajectory.recorder.TrajectoryObserver`: each record as it is
written, a screenshot with its image) and maps each record to the wire:

- ``model_turn``: each computer call → a ``computer_use_call`` item (``in_progress``,
  ``agent.session.turn.item.added``, titled with its actions); a final message → an assistant
  ``message`` item (``item.added``, ``output_text.done``, ``item.done``);
- the SDK's next ``screenshot`` → those calls done (``completed``, ``item.done``) with that
  screenshot as their ``computer_screenshot`` output (a JPEG data URL);
- a refused safety check → the call ``failed``; whatever is still open at the end →
  ``incomplete``;
- function calls and their outputs are added by their handler
  (:mod:`cubicle.orchestrator.serve.functions`, :meth:`TurnReporter.add_item`).

The session's latest screenshot (the console's image) follows every screenshot. Each
``model_turn``'s ``usage`` adds to the turn's and the session's token totals and to the
session's spend (:mod:`cubicle.orchestrator.serve.spend`); at its limit, a response with computer
calls cancels the turn before they run (the worker then pauses the session: ``budget_reached``).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from typing import Any

from PIL import Image

from cubicle.orchestrator.modelrun.usage import UsageTotals
from cubicle.orchestrator.serve import wire
from cubicle.orchestrator.serve.store import Session

__all__ = ["TurnReporter", "jpeg_data_url"]

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

    def __init__(self, session: Session, turn_id: str) -> None:
        self.session = session
        self.turn_id = turn_id
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

    def on_record(self, rec: Mapping[str, Any]) -> None:
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
        elif kind == "approval" and rec.get("subject") == "safety_check" and not rec.get("allowed"):
            self._close_calls("failed", None)

    def add_item(self, item: dict[str, Any], *, done: bool = False) -> None:
        """Add an item of the turn (``item.added``; with ``done`` also ``item.done``)."""
        self.session.add_item(item)
        self._item_event("agent.session.turn.item.added", item)
        if done:
            self._item_event("agent.session.turn.item.done", item)
        self._output_index += 1

    def done_item(self, item: dict[str, Any]) -> None:
        """Replace an item of the turn by its final state (``item.done``)."""
        self.session.replace_item(item)
        self._item_event("agent.session.turn.item.done", item)

    def _account(self, rec: Mapping[str, Any]) -> None:
        """The token usage and spend of one completed model response. Called as the record is
        written, in the loop's thread before the SDK acts on the response: at the session's
        spending limit a response with computer calls cancels the turn before they run."""
        if rec.get("status") != "completed":
            return
        usage = rec.get("usage")
        self.usage.add_response(usage, counts=True)
        self.session.usage.add_response(usage, counts=True)
        if self.session.spend.add(usage) and rec.get("calls"):
            with self.session.lock:
                turn = self.session.turn
            if turn is not None and turn.id == self.turn_id:
                turn.cancel.set()

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

    def on_screenshot(self, rec: Mapping[str, Any], png: bytes) -> None:
        jpeg = to_jpeg(png)
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
