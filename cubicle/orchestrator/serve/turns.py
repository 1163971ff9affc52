"""Run one turn's loop for a session's agent (:mod:`cubicle.orchestrator.serve.agents`).

Every kind goes through the recorded SDK loop cubicle already has
(:mod:`cubicle.orchestrator.modelrun.loop`), writing a trajectory folder:

- ``drill``: :func:`cubicle.orchestrator.drill.runner.run_drill` (the ``toolset`` loop, the scripted
  model and the drill's script and checks);
- ``task``: :func:`~cubicle.orchestrator.drill.runner.run_drill` with the task loaded by
  :func:`cubicle.orchestrator.serve.agents.resolve_task` (its script and checks);
- ``responses``: :func:`cubicle.orchestrator.run_task.run_task` with the user's text as the task,
  against ``OPENAI_BASE_URL`` (default the OpenAI API) with the server's ``OPENAI_API_KEY``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from cubicle.drivers.approvals import ApprovalPolicy
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.serve.agents import AgentSpec
from cubicle.orchestrator.serve.store import TurnState
from cubicle.orchestrator.serve.worker import TurnOutcome, TurnRun

__all__ = ["turn_runner", "user_text"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class _Result(Protocol):
    @property
    def ok(self) -> bool: ...

    error: str | None
    cancelled: bool


def user_text(content: list[dict[str, Any]]) -> str:
    """The text of a turn's user messages (their ``input_text`` parts, one per line)."""
    return "\n".join(
        str(part.get("text", "")) for part in content if part.get("type") == "input_text"
    )


def model_input(agent: AgentSpec, content: list[dict[str, Any]]) -> str:
    """What a Responses model is asked: the agent's instructions, then the user's text."""
    text = user_text(content)
    return f"{agent.instructions}\n\n{text}" if agent.instructions else text


def outcome_of(result: _Result, policy: ApprovalPolicy) -> TurnOutcome:
    """The turn's outcome from the loop's result; a turn stopped by a refused safety check (the
    policy's log says so) fails with code ``invalid_request`` and who refused it."""
    if result.cancelled:
        return TurnOutcome("cancelled", result.error)
    if result.ok:
        return TurnOutcome("completed")
    refused = [d for d in policy.log if d.subject == "safety_checks" and not d.approved]
    if refused and result.error is not None:
        why = f"{refused[-1].decided_by}: {refused[-1].reason}"
        return TurnOutcome(
            "failed", f"{result.error} (safety checks refused by {why})", "invalid_request"
        )
    error = result.error
    if error is None:
        failed = [c.describe() for c in getattr(result, "checks", []) if not c.ok]
        error = "verification failed: " + "; ".join(failed) if failed else "the run failed"
    return TurnOutcome("failed", error, "sandbox_error")


def turn_runner(agent: AgentSpec) -> TurnRun:
    """The function the session worker calls for each turn of ``agent``."""

    def run(sandbox: Sandbox, turn: TurnState, out: Path, policy: ApprovalPolicy) -> TurnOutcome:
        cancel = turn.cancel.is_set
        result: _Result
        if agent.kind == "drill":
            from cubicle.orchestrator.drill.runner import run_drill  # noqa: PLC0415

            result = run_drill(
                sandbox, loop="toolset", out=out, safety_policy=policy, cancel_requested=cancel
            )
        elif agent.kind == "task":
            from cubicle.orchestrator.drill.runner import run_drill  # noqa: PLC0415
            from cubicle.orchestrator.tasks import Task  # noqa: PLC0415

            if not isinstance(agent.task, Task):
                raise TypeError(f"a task agent needs a Task, got {type(agent.task).__name__}")
            result = run_drill(
                sandbox,
                task=agent.task,
                loop="toolset",
                out=out,
                safety_policy=policy,
                cancel_requested=cancel,
            )
        else:
            from cubicle.orchestrator.run_task import run_task  # noqa: PLC0415

            result = run_task(
                sandbox,
                base_url=os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
                api_key=os.environ.get("OPENAI_API_KEY", ""),
                task=model_input(agent, turn.content),
                model=agent.model,
                out=out,
                safety_policy=policy,
                cancel_requested=cancel,
                # run_task only closes what the hook returns (origin_answers.Answering)
                origin_answers=turn.origin_records,
                on_response=turn.on_response,
            )
        return outcome_of(result, policy)

    return run
