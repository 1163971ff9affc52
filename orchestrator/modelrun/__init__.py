"""What every model run on a sandbox shares: ``cubicle run`` (:mod:`orchestrator.run_task`),
the drill (:mod:`orchestrator.drill`), ``cubicle serve``'s turns and the Agents SDK runs.

Neither ``cubicle run`` nor the drill imports the other; both import this package:

* :mod:`~orchestrator.modelrun.loop` — the real openai loop (``ComputerToolset`` or
  ``ResponsesToolRunner``) in a worker thread, with every turn, action, approval and diagnostic
  recorded into a trajectory (:mod:`orchestrator.trajectory`);
* :mod:`~orchestrator.modelrun.guest_steps` — a task's set-up before the first turn, and
  clean-up (helper files in :mod:`~orchestrator.modelrun.guest_files`);
* :mod:`~orchestrator.modelrun.verify` — checks of the guest's real state after the run;
  :mod:`~orchestrator.modelrun.verifiers` — the shipped tasks' Python verifiers;
* :mod:`~orchestrator.modelrun.signals` — the first Ctrl-C/SIGTERM cancels cooperatively;
* :mod:`~orchestrator.modelrun.console` — progress lines, the default trajectory folder,
  removing the sandbox without hiding the run's outcome;
* :mod:`~orchestrator.modelrun.errors` — the errors of a run.
"""

from __future__ import annotations

from typing import Protocol

from guest.client import AgentClient

__all__ = ["Desktop"]


class Desktop(Protocol):
    """What a run needs of its guest: agent connections (``hello`` done; the caller closes
    them). A :class:`orchestrator.sandbox.Sandbox`, or a local desktop in tests."""

    def connect(self, timeout: float = 10.0) -> AgentClient: ...
