"""The session's function tools: a model's call pauses the turn until the client answers it.

For each function tool declared in ``agent.tools`` (:mod:`cubicle.orchestrator.serve.agents`) a
turn's loop gets a :class:`~cubicle.orchestrator.modelrun.functions.FunctionTool` whose handler
(:func:`turn_functions`):

1. registers the call as pending, then adds a ``function_call`` item (``in_progress``,
   ``agent.session.turn.item.added``: the SDK's ``tool_handlers`` answer the call on this event,
   so it must be answerable by then);
2. publishes the call as a required action, the SDK's
   ``RequiredActionSessionRequiredActionResourceFunctionCall``
   (``{"type": "function_call", "call_id", "name", "arguments", "turn_id"}``, the arguments
   parsed from the model's JSON) and waits — the session is ``requires_action`` — until the
   client's ``agent.session.input.tool_result`` for that ``turn_id`` and ``call_id``
   (:func:`cubicle.orchestrator.serve.app.post_events` checks it: an unknown call is a 404, one
   already answered or whose turn ended a 409);
3. records the answer: the call ``completed`` (``failed`` for ``success: false``,
   ``item.done``) and a ``function_call_output`` item with the output or the error as sent
   (``item.added``);
4. gives the model the output as sent (text, or text/image parts; a null output — the SDK
   sends one for a handler returning ``None`` — as empty text); a failure as the text
   :func:`failure_output` (``{"success": false, "error": "..."}``), so the model sees that the
   call failed and why.

A turn cancelled (or a session deleted) while the call is pending withdraws it: the call is
``incomplete`` and the loop stops.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from cubicle.orchestrator.modelrun.errors import RunCancelled
from cubicle.orchestrator.modelrun.functions import FunctionCall, FunctionResult, FunctionTool
from cubicle.orchestrator.serve import wire
from cubicle.orchestrator.serve.agents import AgentSpec
from cubicle.orchestrator.serve.reporter import TurnReporter
from cubicle.orchestrator.serve.store import PendingApproval, TurnState

__all__ = ["failure_output", "turn_functions"]


def failure_output(error: str | None) -> str:
    """What the model receives for ``success: false``."""
    return json.dumps({"success": False, "error": error}, ensure_ascii=False)


def turn_functions(
    agent: AgentSpec, turn: TurnState, reporter: TurnReporter
) -> tuple[FunctionTool, ...]:
    """The agent's function tools for one turn, answered by the session's client."""
    return tuple(
        FunctionTool(
            str(spec["name"]),
            str(spec["description"]),
            dict(spec["parameters"]),
            _handler(turn, reporter),
        )
        for spec in agent.functions
    )


def _handler(
    turn: TurnState, reporter: TurnReporter
) -> Callable[[FunctionCall, Callable[[], bool]], FunctionResult]:
    session = reporter.session

    def answer(call: FunctionCall, cancelled: Callable[[], bool]) -> FunctionResult:
        call_id = call.call_id or wire.new_id("call")
        item = wire.function_call(
            turn.id,
            wire.new_id("fc"),
            call_id=call_id,
            name=call.name,
            arguments=call.arguments,
            status="in_progress",
        )
        pending = PendingApproval(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": call.name,
                "arguments": call.arguments,
                "turn_id": turn.id,
            }
        )
        with session.lock:  # pending before its item is seen: a client may answer the item
            session.pending[call_id] = pending
            session.function_calls[call_id] = turn.id
        reporter.add_item(item)
        session.ask(turn, pending)
        result = pending.result
        if result is None:
            reporter.done_item({**item, "status": "incomplete"})
            raise RunCancelled(f"the function call {call_id} was withdrawn: the turn ended")
        success = bool(result["success"])
        output: Any = result.get("output")
        error = result.get("error")
        reporter.done_item({**item, "status": "completed" if success else "failed"})
        reporter.add_item(
            wire.function_call_output(
                turn.id,
                call_id=call_id,
                output=output if success else None,
                error=None if success else error,
                status="completed" if success else "failed",
            ),
            done=True,
        )
        if not success:
            return failure_output(error)
        if output is None:
            return ""
        return output if isinstance(output, str) else list(output)

    return answer
