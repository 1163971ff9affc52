"""Host drivers: the ``openai.ComputerDriver`` / ``AsyncComputerDriver`` implementations over a
cubicle guest agent, coordinate scaling between the model's screenshots and the screen,
approval policies, and a local scripted stand-in for the Responses API.

* :mod:`cubicle.drivers.computer` — :class:`GuestDriver` (sync);
:mod:`cubicle.drivers.async_computer` —
  :class:`AsyncGuestDriver` (anyio);
* :mod:`cubicle.drivers.viewport` — :class:`Viewport`, :class:`ViewGeometry`, :class:`Rect`;
* :mod:`cubicle.drivers.approvals`, :mod:`cubicle.drivers.policy_file`,
:mod:`cubicle.drivers.decisions` — approval
  callbacks, policy files, the decision log;
* :mod:`cubicle.drivers.scripted_model` — :class:`ScriptedModel`;
* :mod:`cubicle.drivers.errors` — the ``DriverError`` branch of ``CubicleError``.
"""

from __future__ import annotations

from cubicle.drivers.approvals import (
    ApprovalPolicy,
    ApproveAll,
    AsyncApprovals,
    FilePolicy,
    NonInteractive,
    TerminalPrompt,
)
from cubicle.drivers.async_computer import AsyncGuestDriver
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.decisions import Decision, DecisionLog
from cubicle.drivers.policy_file import load_policy
from cubicle.drivers.records import ActionRecord
from cubicle.drivers.viewport import Rect, ViewGeometry, Viewport

__all__ = [
    "ActionRecord",
    "ApprovalPolicy",
    "ApproveAll",
    "AsyncApprovals",
    "AsyncGuestDriver",
    "Decision",
    "DecisionLog",
    "FilePolicy",
    "GuestDriver",
    "NonInteractive",
    "Rect",
    "TerminalPrompt",
    "ViewGeometry",
    "Viewport",
    "load_policy",
]
