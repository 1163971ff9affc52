"""The Responses API wire format the scripted model serves: full response objects and SSE.

Shapes follow the samples in the SDK contract (ids, ``usage``, ``parallel_tool_calls`` …), so
the real ``openai`` client, ``ComputerToolset`` and ``ResponsesToolRunner`` (plain and
``stream=True``) accept them.
"""

from __future__ import annotations

import json
import time
from typing import Any

from cubicle.drivers.scripted_model.script import Turn

__all__ = ["call_id", "response_json", "sse_body"]


def call_id(prefix: str, turn: Turn) -> str:
    """The ``call_id`` of a computer_call or function_call turn (stable, so requests can be
    checked against it)."""
    return f"call_{prefix}_{turn.index + 1:04d}"


def _output_item(prefix: str, turn: Turn) -> dict[str, Any]:
    number = f"{prefix}_{turn.index + 1:04d}"
    if turn.function is not None:
        name, arguments = turn.function
        return {
            "type": "function_call",
            "id": f"fc_{number}",
            "call_id": call_id(prefix, turn),
            "name": name,
            "arguments": json.dumps(arguments, ensure_ascii=False),
            "status": "completed",
        }
    if turn.actions is not None:
        item: dict[str, Any] = {
            "type": "computer_call",
            "id": f"cu_{number}",
            "call_id": call_id(prefix, turn),
            "status": "completed",
            "pending_safety_checks": [check.as_json() for check in turn.safety_checks],
        }
        if turn.legacy:
            item["action"] = dict(turn.actions[0])
        else:
            item["actions"] = [dict(action) for action in turn.actions]
        return item
    return {
        "type": "message",
        "id": f"msg_{number}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": turn.message, "annotations": []}],
    }


def response_json(
    prefix: str, turn: Turn, model: str, *, status: str = "completed"
) -> dict[str, Any]:
    """The full response object answering ``turn``."""
    return {
        "id": f"resp_{prefix}_{turn.index + 1:04d}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": status,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [{"type": "computer"}],
        "output": [_output_item(prefix, turn)] if status == "completed" else [],
        "usage": dict(turn.usage) if status == "completed" and turn.usage is not None else None,
    }


def _event(kind: str, sequence: int, payload: dict[str, Any]) -> bytes:
    data = json.dumps({"type": kind, "sequence_number": sequence, **payload})
    return f"event: {kind}\ndata: {data}\n\n".encode()


def sse_body(prefix: str, turn: Turn, model: str) -> bytes:
    """The streamed form: ``response.created`` → ``response.output_item.done`` per item →
    ``response.completed`` (with the full response)."""
    final = response_json(prefix, turn, model)
    created = {**final, "status": "in_progress", "output": [], "usage": None}
    events = [_event("response.created", 0, {"response": created})]
    for index, item in enumerate(final["output"]):
        events.append(
            _event("response.output_item.done", len(events), {"output_index": index, "item": item})
        )
    events.append(_event("response.completed", len(events), {"response": final}))
    return b"".join(events)
