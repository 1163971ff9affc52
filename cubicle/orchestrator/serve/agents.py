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
``experimental``) are a 400 naming the field. The shape is
:class:`~cubicle.orchestrator.serve.requests.AgentRequest`; what it names (a task, a Responses
model the server can call) is checked here.
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
from cubicle.orchestrator.serve.requests import AgentRequest, validate
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
    """Check ``agent``/``agent_id`` of a create request
    (:class:`~cubicle.orchestrator.serve.requests.AgentRequest`), then the model's name.

    :param has_api_key: whether the server can call the Responses API (default: whether
        ``OPENAI_API_KEY`` is set).
    :raises ApiError: 400 naming the field.
    """
    agent = body.get("agent")
    if isinstance(agent, dict):
        _check_tools_size(agent.get("tools"))
    request = validate(AgentRequest, body).agent
    model = request.model
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
    tools = request.tools or []  # the computer tool only; the last one says
    return AgentSpec(
        model,
        kind,
        task=task,
        id=wire.new_id("agent"),
        instructions=request.instructions or None,
        include_screenshots=tools[-1].include_screenshots if tools else True,
    )


def _check_tools_size(tools: object) -> None:
    """Refuse an ``agent.tools`` over :data:`~cubicle.orchestrator.serve.wire.MAX_TOOLS_BYTES`
    of compact JSON whole, before its entries are read (as the API does).

    :raises ApiError: 400 naming ``agent.tools``.
    """
    if not isinstance(tools, list):
        return
    # UTF-8 bytes as the API counts them ("surrogatepass": a lone surrogate is counted, not a 500)
    compact = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
    size = len(compact.encode("utf-8", "surrogatepass"))
    if size > wire.MAX_TOOLS_BYTES:
        raise bad_request(
            f"agent.tools is {size} bytes of compact JSON, over the limit of "
            f"{wire.MAX_TOOLS_BYTES} bytes (8 MiB)",
            "agent.tools",
        )
