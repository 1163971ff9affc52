"""Errors of the drill and of ``cubicle run``, under the one root::

CubicleError
└── OrchestratorError
    └── DrillError                 the drill could not run as scripted
        ├── GuestStepError         a set-up step (launch, window wait, form server) failed:
        │                          names the step, the limit and what was seen
        ├── ExpectationFailed      a scripted turn's ``sees`` did not hold: names the turn,
        │                          the expectation and what was found
        └── DrillCancelled         the run was cancelled (Ctrl-C / SIGTERM)
"""

from __future__ import annotations

from cubicle.orchestrator.errors import OrchestratorError

__all__ = ["DrillCancelled", "DrillError", "ExpectationFailed", "GuestStepError"]


class DrillError(OrchestratorError):
    """The drill (or a task run) could not run as scripted."""


class GuestStepError(DrillError):
    """A scripted step against the guest failed.

    :param op: the step's operation (``wait_window``, ``launch`` …).
    """

    def __init__(self, op: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{op}: {message}", hint=hint)
        self.op = op


class DrillCancelled(DrillError):
    """The run was cancelled before it finished."""


class ExpectationFailed(DrillError):
    """A scripted turn's ``sees`` expectation did not hold on the screenshot it was sent."""
