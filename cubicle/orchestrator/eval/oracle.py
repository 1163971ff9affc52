"""The keyless players of an eval, and the person an attempt may ask.

* **The oracle** (``--oracle``): the task's own ``[scripted]`` script, played by the drill's
  scripted model (:func:`cubicle.orchestrator.drill.runner.run_drill`). It proves the task can be
  passed: an oracle attempt that does not pass makes the task ``broken_task``.
* **cubicle-idle** (``--model cubicle-idle``): a scripted model that only takes screenshots and
  then says it is done (:data:`IDLE_SCRIPT`). It proves the task can be failed: with it every
  check of a sound task fails.
* **The person** (:func:`person_tools`): a task whose script calls function tools that a user
  answers (``ask-user``'s ``request_user_response``) gets :data:`PERSON_ANSWER` from this
  callback — the test person's answer comes from the eval, never from the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from cubicle.orchestrator.modelrun.functions import FunctionCall, FunctionResult, FunctionTool
from cubicle.orchestrator.tasks import Task

__all__ = ["IDLE_MODEL", "IDLE_SCRIPT", "PERSON_ANSWER", "person_tools"]

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
