"""Payloads of the Agents sessions wire, spelled as the installed ``openai`` package's types.

The wire spoken is the locked openai's (``requirements/host.txt``; ``make newest`` checks the newest
the bounds allow): since 3.63 every session carries ``spend_control``
(:meth:`cubicle.orchestrator.serve.spend.Spend.resource`) and
its agent ``compaction: {"async": false}`` (:data:`COMPACTION`); an ``agent.tools`` list is at
most :data:`MAX_TOOLS_BYTES` of compact JSON.

Objects: ``agent.session`` (:func:`session_object`), ``agent.session.turn`` (:func:`turn_object`),
items (``message``, ``computer_use_call``, ``function_call``, ``function_call_output``) and
events (:func:`event`: every event carries ``event_id`` and ``type``; the session-scoped ones
``session_id``). Names and required fields follow ``openai/types/beta/agent_session*.py``;
tests validate every payload against those models.

cubicle's own required-action kind (the SDK's ``computer_use_approval_request`` union knows only
``browser_origin_access`` and ``browser_authentication``) — the model's pending safety checks::

    {"type": "computer_use_approval_request", "request_id": "req_…", "turn_id": "turn_…",
     "request": {"type": "safety_check", "call_id": "call_…",
                 "checks": [{"id": "sc_…", "code": "malicious_instructions", "message": "…"}]}}

answered with the SDK's ``agent.session.input.computer_use_approval_request_result`` input and
``response: {"type": "safety_check", "decision": "approve" | "deny" | "cancel"}`` (``cancel``
dismisses the request, which denies it). The SDK's ``browser_authentication`` kind, its items
(``computer_use_approval_request``, ``computer_use_approval_request_result``) and its answers are
:mod:`cubicle.orchestrator.serve.signin`'s.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from typing import Any

from cubicle.orchestrator.modelrun.usage import UsageTotals

__all__ = [
    "COMPACTION",
    "MAX_TOOLS_BYTES",
    "SAFETY_CHECK_KIND",
    "assistant_message",
    "computer_use_call",
    "event",
    "function_call",
    "function_call_output",
    "new_id",
    "token_usage",
    "turn_object",
    "user_message",
]

SAFETY_CHECK_KIND = "safety_check"
ORIGIN_ACCESS_KIND = "browser_origin_access"

MAX_TOOLS_BYTES = 8 * 1024 * 1024
"""Largest ``agent.tools`` list a session takes, in bytes of compact UTF-8 JSON (8 MiB, as
``openai/types/beta/agents/session_create_params.py`` says since 3.63; 3 MiB before)."""
COMPACTION: dict[str, bool] = {"async": False}
"""The agent's effective ``compaction``: always blocking (a request's ``async`` is accepted for
compatibility and ignored, as the API does since openai 3.63)."""

_counter = itertools.count(1)
_counter_lock = threading.Lock()


def new_id(prefix: str) -> str:
    """A unique id that sorts by creation: ``prefix_<12 hex counter><8 hex random>``."""
    with _counter_lock:
        n = next(_counter)
    return f"{prefix}_{n:012x}{secrets.token_hex(4)}"


def event(kind: str, **fields: Any) -> dict[str, Any]:
    """One event: ``{"event_id", "type": kind, **fields}``."""
    return {"event_id": new_id("evt"), "type": kind, **fields}


def token_usage(usage: UsageTotals) -> dict[str, Any] | None:
    """A session's or turn's ``usage`` (``TokenUsage``) from its totals; ``None`` (unknown)
    before any response had usage."""
    totals = usage.as_dict()
    if totals["requests"] == totals["requests_without_usage"]:
        return None
    return {
        "input_tokens": totals["input_tokens"],
        "input_tokens_details": {"cached_tokens": totals["cached_tokens"]},
        "output_tokens": totals["output_tokens"],
        "output_tokens_details": {"reasoning_tokens": totals["reasoning_tokens"]},
        "total_tokens": totals["total_tokens"],
    }


def turn_object(
    turn_id: str,
    session_id: str,
    agent_id: str,
    *,
    status: str,
    created_at: int,
    started_at: int | None = None,
    completed_at: int | None = None,
    error: dict[str, str] | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": turn_id,
        "object": "agent.session.turn",
        "agent_id": agent_id,
        "session_id": session_id,
        "status": status,
        "created_at": created_at,
        "started_at": started_at,
        "completed_at": completed_at,
        "error": error,
        "subagent_id": None,
        "usage": usage,
    }


def user_message(turn_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": content,
        "turn_id": turn_id,
    }


def assistant_message(turn_id: str, text: str, *, item_id: str | None = None) -> dict[str, Any]:
    return {
        "id": item_id or new_id("msg"),
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "phase": "final_answer",
        "content": [{"type": "output_text", "text": text}],
        "turn_id": turn_id,
    }


def computer_use_call(
    turn_id: str,
    item_id: str,
    *,
    status: str,
    title: str | None,
    image_url: str | None = None,
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "computer_use_call",
        "status": status,
        "title": title,
        "turn_id": turn_id,
        "output": None
        if image_url is None
        else {"type": "computer_screenshot", "image_url": image_url},
    }


def function_call(
    turn_id: str, item_id: str, *, call_id: str, name: str, arguments: object, status: str
) -> dict[str, Any]:
    """A ``function_call`` item (``AgentFunctionCallItem``): ``in_progress`` while the client's
    answer is pending, then ``completed``, ``failed`` (``success: false``) or ``incomplete``."""
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
        "turn_id": turn_id,
    }


def function_call_output(
    turn_id: str, *, call_id: str, output: object, error: str | None, status: str
) -> dict[str, Any]:
    """A ``function_call_output`` item (``FunctionCallOutputItemResource``): the client's
    ``tool_result`` as it was sent (``output`` on success, ``error`` on failure)."""
    return {
        "id": new_id("fco"),
        "type": "function_call_output",
        "call_id": call_id,
        "output": output,
        "error": error,
        "status": status,
        "turn_id": turn_id,
    }


def now() -> int:
    return int(time.time())
