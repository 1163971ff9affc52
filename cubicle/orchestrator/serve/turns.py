"""Run one turn's loop for a session's agent (:mod:`cubicle.orchestrator.serve.agents`).

Every kind goes through the one run skeleton (:func:`cubicle.orchestrator.modelrun.run.run`),
writing a trajectory folder that the turn's reporter observes as it is written:

- ``drill``: :func:`cubicle.orchestrator.drill.runner.run_drill` (the ``toolset`` loop, the scripted
  model and the drill's script and checks);
- ``task``: :func:`~cubicle.orchestrator.drill.runner.run_drill` with the task loaded by
  :func:`cubicle.orchestrator.serve.agents.resolve_task` (its script and checks);
- ``responses``: a :class:`~cubicle.orchestrator.modelrun.responses_model.ResponsesModel` with the
  user's text as the task, against ``OPENAI_BASE_URL`` (default the OpenAI API) with the server's
  ``OPENAI_API_KEY``.

A sign-in form in the turn's browser is a ``browser_authentication`` required action the client
answers (:mod:`cubicle.orchestrator.serve.signin`). An agent with function tools runs the
``runner`` loop (``ResponsesToolRunner``: the computer tool and the functions,
:mod:`cubicle.orchestrator.serve.functions`), without them the ``toolset`` loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cubicle.drivers.approvals import ApprovalPolicy
from cubicle.orchestrator.drill.runner import run_drill
from cubicle.orchestrator.modelrun.responses_model import ResponsesModel
from cubicle.orchestrator.modelrun.run import RunResult, RunSpec, run
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.serve.agents import AgentSpec
from cubicle.orchestrator.serve.functions import turn_functions
from cubicle.orchestrator.serve.reporter import TurnReporter
from cubicle.orchestrator.serve.signin import turn_signin
from cubicle.orchestrator.serve.store import TurnState
from cubicle.orchestrator.serve.worker import TurnOutcome, TurnRun
from cubicle.orchestrator.tasks import Task

__all__ = ["turn_runner", "user_text"]


def user_text(content: list[dict[str, Any]]) -> str:
    """The text of a turn's user messages (their ``input_text`` parts, one per line)."""
    return "\n".join(
        str(part.get("text", "")) for part in content if part.get("type") == "input_text"
    )


def model_input(agent: AgentSpec, content: list[dict[str, Any]]) -> str:
    """What a Responses model is asked: the agent's instructions, then the user's text."""
    text = user_text(content)
    return f"{agent.instructions}\n\n{text}" if agent.instructions else text


def outcome_of(result: RunResult, policy: ApprovalPolicy) -> TurnOutcome:
    """The turn's outcome from the run's result; a turn stopped by a refused safety check (the
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
        failed = [c.describe() for c in result.checks if not c.ok]
        error = "verification failed: " + "; ".join(failed) if failed else "the run failed"
    return TurnOutcome("failed", error, "sandbox_error")


def turn_runner(agent: AgentSpec) -> TurnRun:
    """The function the session worker calls for each turn of ``agent``."""

    def run_turn(
        sandbox: Sandbox,
        turn: TurnState,
        out: Path,
        policy: ApprovalPolicy,
        reporter: TurnReporter,
    ) -> TurnOutcome:
        cancel = turn.cancel.is_set
        functions = turn_functions(agent, turn, reporter)
        result: RunResult
        if agent.kind in ("drill", "task"):
            task: Task | None = None
            if agent.kind == "task":
                if not isinstance(agent.task, Task):
                    raise TypeError(f"a task agent needs a Task, got {type(agent.task).__name__}")
                task = agent.task
            result = run_drill(
                sandbox,
                task=task,
                loop="runner" if functions else "toolset",
                out=out,
                safety_policy=policy,
                cancel_requested=cancel,
                observers=[reporter],
                functions=functions,
                signin=turn_signin(turn, reporter),
            )
        else:
            model = ResponsesModel.from_environment(agent.model)
            spec = RunSpec(
                out=out,
                loop="runner" if functions else "toolset",
                functions=functions,
                prompt=model_input(agent, turn.content),
                safety_policy=policy,
                # the run only closes what the hook returns (origin_answers.Answering)
                origin_answers=turn.origin_records,
                signin=turn_signin(turn, reporter),
            )
            result = run(sandbox, spec, model, observers=[reporter], cancel_requested=cancel)
        return outcome_of(result, policy)

    return run_turn
