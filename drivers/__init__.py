"""Host drivers: the ``openai.ComputerDriver`` / ``AsyncComputerDriver`` implementations over a
cubicle guest agent, coordinate scaling between the model's screenshots and the screen,
approval policies, and a local scripted stand-in for the Responses API.

* :mod:`drivers.computer` — :class:`GuestDriver` (sync); :mod:`drivers.async_computer` —
  :class:`AsyncGuestDriver` (anyio);
* :mod:`drivers.viewport` — :class:`Viewport`, :class:`ViewGeometry`, :class:`Rect`;
* :mod:`drivers.approvals`, :mod:`drivers.policy_file`, :mod:`drivers.decisions` — approval
  callbacks, policy files, the decision log;
* :mod:`drivers.scripted_model` — :class:`ScriptedModel`;
* :mod:`drivers.errors` — the ``DriverError`` branch of ``CubicleError``.
"""

from __future__ import annotations

from drivers.approvals import (
    ApprovalPolicy,
    ApproveAll,
    AsyncApprovals,
    FilePolicy,
    NonInteractive,
    TerminalPrompt,
)
from drivers.async_computer import AsyncGuestDriver
from drivers.computer import GuestDriver
from drivers.decisions import Decision, DecisionLog
from drivers.policy_file import load_policy
from drivers.records import ActionRecord
from drivers.viewport import Rect, ViewGeometry, Viewport

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
