"""The keyless players of an eval, and the person an attempt may ask.

* **The oracle** (``--oracle``): the task's own ``[scripted]`` script, played by the drill's
  scripted model (:func:`cubicle.orchestrator.drill.runner.run_drill`); for a Harbor task
  (:mod:`cubicle.orchestrator.harbor`), its ``solution/solve.sh`` run in the guest after the
  set-up (:class:`HarborSolution`). It proves the task can be passed: an oracle attempt that
  does not pass makes the task ``broken_task``.
* **cubicle-idle** (``--model cubicle-idle``): a scripted model that only takes screenshots and
  then says it is done (:data:`IDLE_SCRIPT`). It proves the task can be failed: with it every
  check of a sound task fails.
* **The person** (:func:`person_tools`): a task whose script calls function tools that a user
  answers (``ask-user``'s ``request_user_response``) gets :data:`PERSON_ANSWER` from this
  callback — the test person's answer comes from the eval, never from the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from cubicle.orchestrator.drill.runner import DrillModel
from cubicle.orchestrator.modelrun.functions import FunctionCall, FunctionResult, FunctionTool
from cubicle.orchestrator.modelrun.harbor_guest import run_solution
from cubicle.orchestrator.modelrun.run import LoopContext, ModelEndpoint
from cubicle.orchestrator.tasks import HarborParts, Task

__all__ = [
    "HARBOR_ORACLE_SCRIPT",
    "IDLE_MODEL",
    "IDLE_SCRIPT",
    "PERSON_ANSWER",
    "HarborSolution",
    "person_tools",
]

IDLE_MODEL: Final = "cubicle-idle"
"""``--model`` value of the idle scripted model."""
IDLE_SCREENSHOTS: Final = 3
IDLE_SCRIPT: Final[dict[str, Any]] = {
    "name": IDLE_MODEL,
    "description": "Looks at the screen a few times and does nothing else: every check must fail.",
    "turns": [
        *(
            {"computer_call": {"actions": [{"type": "screenshot"}]}}
            for _ in range(IDLE_SCREENSHOTS)
        ),
        {"message": "I looked at the screen and did nothing."},
    ],
}
HARBOR_ORACLE_SCRIPT: Final[dict[str, Any]] = {
    "name": "harbor-oracle",
    "description": "solution/solve.sh ran in the guest before this turn; nothing else to do.",
    "turns": [{"message": "solution/solve.sh ran in the guest."}],
}
PERSON_ANSWER: Final = "Answer from the eval's test person"
"""What the eval's person answers every question (typed by the oracle, checked by the task)."""


def _answer(call: FunctionCall, cancelled: Callable[[], bool]) -> FunctionResult:
    """The test person: answers every question at once with :data:`PERSON_ANSWER`."""
    return PERSON_ANSWER


def person_tools(task: Task) -> tuple[FunctionTool, ...]:
    """The function tools ``task``'s script calls, each answered by the eval's person."""
    names = task.scripted.tools if task.scripted is not None else []
    return tuple(
        FunctionTool(
            name=name,
            description="Show the user a question and return their answer.",
            parameters={
                "type": "object",
                "properties": {"question": {"type": "string"}},
                "required": ["question"],
            },
            handler=_answer,
        )
        for name in names
    )


class HarborSolution:
    """A Harbor task's oracle as a model source: before the loop, ``solution/solve.sh`` runs in
    the prepared guest (:func:`~cubicle.orchestrator.modelrun.harbor_guest.run_solution`; it
    raising makes the run fail: the task is broken); then a scripted model that only says it is
    done (:data:`HARBOR_ORACLE_SCRIPT`). The solution's output is the trajectory's
    ``harbor_solution`` event."""

    name = "harbor-solution"

    def __init__(self, harbor: HarborParts, model_view: tuple[int, int] = (1024, 640)) -> None:
        self.harbor = harbor
        self.inner = DrillModel(HARBOR_ORACLE_SCRIPT, model_view)

    @contextmanager
    def serve(self, context: LoopContext) -> Iterator[ModelEndpoint]:
        workdir = context.guest.workdir if context.guest is not None else "/"
        output = run_solution(context.agent, self.harbor, workdir)
        context.session.recorder.event("harbor_solution", ok=True, output=output)
        with self.inner.serve(context) as endpoint:
            yield endpoint
