"""Function tools declared to the model beside the computer tool, for the ``runner`` loop.

A :class:`FunctionTool` is what the application declared (name, description, JSON-schema
parameters) plus the handler that answers a call — ``cubicle serve``'s pauses the turn as a
required action until the client's ``tool_result`` (:mod:`cubicle.orchestrator.serve.worker`).

The SDK's ``ResponsesToolRunner`` hands a registered function its arguments only, never the
model's ``call_id``. :class:`FunctionCalls` pairs them: the recorded session sees every response
before the SDK does (:class:`~cubicle.orchestrator.modelrun.loop.RecordedSession`) and queues its
``function_call`` items (:meth:`FunctionCalls.observe`); the runner executes the calls of a
response one at a time in output order (they are not ``independent``), so each execution takes
the first queued call of its name. Every call and its output are recorded in the trajectory
(``function_call`` and ``function_output`` events), and each output is kept in
:attr:`FunctionCalls.outputs` (a task's ``{TOOL_OUTPUT}`` check reads the latest).
"""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from openai.lib.responses_tool_runner import RegisteredFunction

from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder

__all__ = [
    "FunctionCall",
    "FunctionCalls",
    "FunctionHandler",
    "FunctionResult",
    "FunctionTool",
    "output_text",
]

FunctionResult = str | list[dict[str, Any]]
"""What a handler returns: the output text, or a list of ``input_text``/``input_image`` parts."""


@dataclass(frozen=True)
class FunctionCall:
    """One call of a function tool by the model."""

    call_id: str
    name: str
    arguments: dict[str, Any]


FunctionHandler = Callable[[FunctionCall, Callable[[], bool]], FunctionResult]
"""``handler(call, cancelled)`` → the output the model receives; it may block (polling
``cancelled``); raising stops the run with that error."""


@dataclass(frozen=True)
class FunctionTool:
    """A function tool: declared to the model as ``{"type": "function", "name", "description",
    "parameters", "strict": false}``, answered by ``handler``."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: FunctionHandler

    def declaration(self) -> dict[str, Any]:
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "strict": False,
        }


def output_text(output: FunctionResult) -> str:
    """An output as text: itself, or its ``input_text`` parts joined."""
    if isinstance(output, str):
        return output
    return "".join(str(p.get("text", "")) for p in output if p.get("type") == "input_text")


class FunctionCalls:
    """The function calls of one run (see the module doc)."""

    def __init__(self, tools: Sequence[FunctionTool], recorder: TrajectoryRecorder) -> None:
        self.tools = {tool.name: tool for tool in tools}
        self.recorder = recorder
        self.outputs: list[str] = []
        """Every output the model received, as text (:func:`output_text`), in order."""
        self._queued: collections.deque[FunctionCall] = collections.deque()
        self._lock = threading.Lock()

    def observe(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Queue the ``function_call`` items of a response body; return them as recorded
        (``call_id``, ``name``, ``arguments`` as sent)."""
        seen: list[dict[str, Any]] = []
        for item in body.get("output") or []:
            if not isinstance(item, dict) or item.get("type") != "function_call":
                continue
            try:
                arguments = json.loads(str(item.get("arguments") or "{}"))
            except ValueError:
                arguments = None
            call = FunctionCall(
                str(item.get("call_id")),
                str(item.get("name")),
                arguments if isinstance(arguments, dict) else {},
            )
            seen.append(
                {"call_id": call.call_id, "name": call.name, "arguments": item.get("arguments")}
            )
            if call.name in self.tools:
                with self._lock:
                    self._queued.append(call)
        return seen

    def registered(self) -> list[RegisteredFunction]:
        """The tools as the SDK runner's registered functions."""
        return [
            RegisteredFunction(tool.declaration(), self._executor(tool))  # type: ignore[arg-type]
            for tool in self.tools.values()
        ]

    def _next(self, name: str, arguments: dict[str, Any]) -> FunctionCall:
        with self._lock:
            for call in self._queued:
                if call.name == name:
                    self._queued.remove(call)
                    return call
        # not seen in a response (a streamed turn): still answered, without the model's id
        return FunctionCall("", name, arguments)

    def _executor(self, tool: FunctionTool) -> Callable[..., FunctionResult]:
        def execute(
            arguments: dict[str, object], cancelled: Callable[[], bool] | None = None
        ) -> FunctionResult:
            call = self._next(tool.name, dict(arguments))
            self.recorder.event(
                "function_call", call_id=call.call_id, name=call.name, arguments=call.arguments
            )
            output = tool.handler(call, cancelled or (lambda: False))
            text = output_text(output)
            self.outputs.append(text)
            self.recorder.event("function_output", call_id=call.call_id, output=text)
            return output

        return execute
