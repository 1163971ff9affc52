"""What every model run on a sandbox shares: ``cubicle run`` (:mod:`cubicle.orchestrator.run_task`),
the drill (:mod:`cubicle.orchestrator.drill`), ``cubicle serve``'s turns and the Agents SDK runs.

Neither ``cubicle run`` nor the drill imports the other; both import this package:

* :mod:`~cubicle.orchestrator.modelrun.run` — :func:`~cubicle.orchestrator.modelrun.run.run`, the
  one skeleton of a run (trajectory, set-up, loop, checks, report) with a model source;
  :mod:`~cubicle.orchestrator.modelrun.responses_model` — a Responses API endpoint as that source;
* :mod:`~cubicle.orchestrator.modelrun.loop` — the real openai loop (``ComputerToolset`` or
  ``ResponsesToolRunner``) in a worker thread, with every turn, action, approval and diagnostic
  recorded into a trajectory (:mod:`cubicle.orchestrator.trajectory`);
* :mod:`~cubicle.orchestrator.modelrun.budget` — the runner's context budget (the default, cubicle's
  ``compact``, ``--context-budget``); :mod:`~cubicle.orchestrator.modelrun.usage` — token usage
  totals of a run;
* :mod:`~cubicle.orchestrator.modelrun.guest_steps` — a task's set-up before the first turn, and
  clean-up (helper files in :mod:`~cubicle.orchestrator.modelrun.guest_files`);
* :mod:`~cubicle.orchestrator.modelrun.verify` — checks of the guest's real state after the run;
  :mod:`~cubicle.orchestrator.modelrun.verifiers` — the shipped tasks' Python verifiers;
* :mod:`~cubicle.orchestrator.modelrun.signin` — browser sign-in answered by the person (a
  callback, the terminal), never the model or a policy;
* :mod:`~cubicle.orchestrator.modelrun.signals` — the first Ctrl-C/SIGTERM cancels cooperatively;
* :mod:`~cubicle.orchestrator.modelrun.console` — progress lines, the default trajectory folder,
  removing the sandbox without hiding the run's outcome;
* :mod:`~cubicle.orchestrator.modelrun.errors` — the errors of a run.
"""

from __future__ import annotations

from typing import Protocol

from cubicle_guest.client import AgentClient

__all__ = ["Desktop"]


class Desktop(Protocol):
    """What a run needs of its guest: agent connections (``hello`` done; the caller closes
    them). A :class:`cubicle.orchestrator.sandbox.Sandbox`, or a local desktop in tests."""

    def connect(self, timeout: float = 10.0) -> AgentClient: ...
