"""``agent`` of a session request: which loop runs a turn.

``agent.model`` is one of

- ``cubicle-drill`` — the built-in scripted drill
(:func:`cubicle.orchestrator.drill.runner.run_drill`:
  the scripted model server plus the drill's script, through the SDK's recorded loop);
- ``cubicle-task:NAME`` — a shipped task with its script, through :func:`resolve_task` (the one
  seam for task files; unknown names are a 400 naming ``agent.model``);
- any other name — a Responses model, called by the server with its own ``OPENAI_API_KEY``
  (and ``OPENAI_BASE_URL`` when set) through :func:`cubicle.orchestrator.run_task.run_task`.

``instructions`` go to a Responses model ahead of the user's text (scripted agents read neither);
``tools`` may hold the computer tool only (``{"type": "computer_use", "include_screenshots":
bool}``; without screenshots the ``computer_use_call`` items carry none), at most
:data:`~cubicle.orchestrator.serve.wire.MAX_TOOLS_BYTES` of compact JSON. ``compaction`` is null,
``{}`` or ``{"async": null | bool}`` — accepted and ignored, as the API does: compaction is always
blocking and the session reports ``{"async": false}``. Agent settings cubicle cannot honour
(``agent_id``, other tools, ``reasoning``, ``text``, ``multi_agent``, ``service_tier``,
``experimental``) are a 400 naming the field.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from cubicle.orchestrator.serve import wire
from cubicle.orchestrator.serve.errors import bad_request
from cubicle_guest.errors import CubicleError

__all__ = [
    "DRILL_MODEL",
    "TASK_PREFIX",
    "AgentSpec",
    "TaskNotFound",
    "parse_agent",
    "resolve_task",
    "set_task_resolver",
]

DRILL_MODEL = "cubicle-drill"
TASK_PREFIX = "cubicle-task:"
Kind = Literal["drill", "task", "responses"]
_UNSUPPORTED = (
    "reasoning",
    "text",
    "multi_agent",
    "service_tier",
    "experimental",
)


class TaskNotFound(LookupError):
    """No shipped task has that name."""


def _shipped_task(name: str) -> object:
    """The shipped task ``name`` through the task-file API
    (``cubicle.orchestrator.tasks.load_task``, issue 11) when it is installed; only names, never
    paths, are accepted from the API."""
    if not name or "/" in name or name.endswith(".toml") or name.startswith("."):
        raise TaskNotFound(f"{name!r} is not a shipped task name")
    try:
        tasks = importlib.import_module("cubicle.orchestrator.tasks")
    except ImportError:
        raise TaskNotFound(
            f"no shipped task named {name!r} (task files are not installed)"
        ) from None
    try:
        return tasks.load_task(name)
    except CubicleError as exc:
        raise TaskNotFound(str(exc)) from None


_task_resolver: Callable[[str], object] = _shipped_task


def set_task_resolver(resolver: Callable[[str], object]) -> None:
    """Install the task-file loader: ``resolver(NAME)`` returns the task (whatever the turn
    runner's task branch takes) or raises :class:`TaskNotFound`."""
    global _task_resolver
    _task_resolver = resolver


def resolve_task(name: str) -> object:
    """The shipped task ``name``. :raises TaskNotFound: no such task."""
    return _task_resolver(name)


@dataclass(frozen=True)
class AgentSpec:
    """The agent of one session."""

    model: str
    kind: Kind
    task: object = None
    id: str = ""
    instructions: str | None = None
    include_screenshots: bool = True

    def resource(self) -> dict[str, Any]:
        """The session's ``agent`` object."""
        return {
            "id": self.id,
            "model": self.model,
            "instructions": self.instructions,
            "name": None,
            "multi_agent": {"enabled": False, "max_concurrent_subagents": None},
            "reasoning": {"effort": None, "summary": None},
            "service_tier": "auto",
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tools": [{"type": "computer_use", "include_screenshots": self.include_screenshots}],
            "compaction": dict(wire.COMPACTION),
        }


def parse_agent(body: dict[str, Any], *, has_api_key: bool | None = None) -> AgentSpec:
    """Check ``agent``/``agent_id`` of a create request.

    :param has_api_key: whether the server can call the Responses API (default: whether
        ``OPENAI_API_KEY`` is set).
    :raises ApiError: 400 naming the field.
    """
    if body.get("agent_id") is not None:
        raise bad_request(
            "agent_id: saved agents are not available in cubicle serve; send agent.model",
            "agent_id",
        )
    agent = body.get("agent")
    if not isinstance(agent, dict):
        raise bad_request("agent is required, with agent.model", "agent")
    instructions: str | None = None
    include_screenshots = True
    for key, value in agent.items():
        if key == "model":
            continue
        if key == "instructions":
            if value is not None and not isinstance(value, str):
                raise bad_request("agent.instructions must be a string", "agent.instructions")
            instructions = value or None
            continue
        if key == "tools":
            include_screenshots = _computer_tool(value)
            continue
        if key == "compaction":
            _compaction(value)
            continue
        if key in _UNSUPPORTED:
            if value is None or value == {}:
                continue
            raise bad_request(f"agent.{key} is not supported by cubicle serve", f"agent.{key}")
        raise bad_request(f"agent.{key} is not a known field", f"agent.{key}")
    model = agent.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("agent.model is required (a model name)", "agent.model")
    kind: Kind = "responses"
    task: object = None
    if model == DRILL_MODEL:
        kind = "drill"
    elif model.startswith(TASK_PREFIX):
        kind = "task"
        try:
            task = resolve_task(model[len(TASK_PREFIX) :])
        except TaskNotFound as exc:
            raise bad_request(f"agent.model: {exc}", "agent.model", code="unknown_task") from None
    else:
        if has_api_key is None:
            has_api_key = bool(os.environ.get("OPENAI_API_KEY"))
        if not has_api_key:
            raise bad_request(
                f"agent.model {model!r} is a Responses model and this server has no "
                f"OPENAI_API_KEY to call it; use '{DRILL_MODEL}', 'cubicle-task:NAME', or start "
                "the server with OPENAI_API_KEY set",
                "agent.model",
            )
    return AgentSpec(
        model,
        kind,
        task=task,
        id=wire.new_id("agent"),
        instructions=instructions,
        include_screenshots=include_screenshots,
    )


def _computer_tool(value: object) -> bool:
    """``include_screenshots`` of an ``agent.tools`` list holding at most the computer tool.

    :raises ApiError: 400 naming the offending entry.
    """
    tools = value or []
    if not isinstance(tools, list):
        raise bad_request("agent.tools must be a list", "agent.tools")
    # UTF-8 bytes as the API counts them ("surrogatepass": a lone surrogate is counted, not a 500)
    compact = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
    size = len(compact.encode("utf-8", "surrogatepass"))
    if size > wire.MAX_TOOLS_BYTES:
        raise bad_request(
            f"agent.tools is {size} bytes of compact JSON, over the limit of "
            f"{wire.MAX_TOOLS_BYTES} bytes (8 MiB)",
            "agent.tools",
        )
    include = True
    for index, tool in enumerate(tools):
        p = f"agent.tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "computer_use":
            raise bad_request(f"{p}: cubicle agents have the computer tool only", p)
        for key, val in tool.items():
            if key == "include_screenshots":
                if not isinstance(val, bool):
                    raise bad_request(f"{p}.include_screenshots must be a boolean", f"{p}.{key}")
                include = val
            elif key != "type":
                raise bad_request(f"{p}.{key} is not a known field", f"{p}.{key}")
    return include


def _compaction(value: object) -> None:
    """Check ``agent.compaction``: null, ``{}`` or ``{"async": null | bool}`` (ignored).

    :raises ApiError: 400 naming the offending field.
    """
    if value is None:
        return
    if not isinstance(value, dict):
        raise bad_request("agent.compaction must be an object or null", "agent.compaction")
    for key, val in value.items():
        p = f"agent.compaction.{key}"
        if key != "async":
            raise bad_request(f"{p} is not a known field", p)
        if val is not None and not isinstance(val, bool):
            raise bad_request(f"{p} must be a boolean or null", p)
