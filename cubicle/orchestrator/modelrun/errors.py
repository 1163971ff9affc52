"""Errors of a model run (``cubicle run``, the drill, serve's turns), under the one root::

CubicleError
└── OrchestratorError
    └── RunError                   a model run could not go as set up
        ├── GuestStepError         a set-up step (launch, window wait, form server) failed:
        │                          names the step, the limit and what was seen
        ├── ExpectationFailed      a scripted turn's ``sees`` did not hold: names the turn,
        │                          the expectation and what was found
        ├── RunStalled             the model kept acting with nothing visible changing
        └── RunCancelled           the run was cancelled (Ctrl-C / SIGTERM / a client)
"""

from __future__ import annotations

from cubicle.orchestrator.errors import OrchestratorError

__all__ = [
    "ExpectationFailed",
    "GuestStepError",
    "RunCancelled",
    "RunError",
    "RunStalled",
]


class RunError(OrchestratorError):
    """A model run (the drill, ``cubicle run``, a serve turn) could not go as set up."""


class GuestStepError(RunError):
    """A scripted step against the guest failed.

    :param op: the step's operation (``wait_window``, ``launch`` …).
    """

    def __init__(self, op: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{op}: {message}", hint=hint)
        self.op = op


class RunCancelled(RunError):
    """The run was cancelled before it finished."""


class RunStalled(RunError):
    """The model kept acting with nothing visible changing (``--stall``)."""


class ExpectationFailed(RunError):
    """A scripted turn's ``sees`` expectation did not hold on the screenshot it was sent."""
