"""cubicle: disposable, network-restricted Linux desktops for computer-use agents.

The public API, importable from the top::

    from cubicle import GuestDriver, NetworkPolicy, Sandbox, SandboxSpec

    with Sandbox.create(SandboxSpec(network=NetworkPolicy.parse("none"))) as sandbox:
        driver = GuestDriver(sandbox.connect())

Names load on first use (PEP 562), so ``import cubicle`` is cheap and every helper process that
imports a ``cubicle.…`` module pays only for what it uses. Everything else lives in the layers
below, which import downward only (``tests/test_layers.py``): :mod:`cubicle.drivers` (the
``openai.ComputerDriver`` implementations), :mod:`cubicle.orchestrator` (sandboxes, providers,
pools, the live view, ``cubicle serve``, the CLI). The in-guest agent is its own distribution,
:mod:`cubicle_guest`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

from cubicle.orchestrator import __version__

_EXPORTS: Final = {
    # sandboxes
    "Sandbox": "cubicle.orchestrator.sandbox",
    "SandboxSpec": "cubicle.orchestrator.provider",
    "SandboxInfo": "cubicle.orchestrator.provider",
    "NetworkPolicy": "cubicle.orchestrator.network",
    "OriginQuestions": "cubicle.orchestrator.origin_questions",
    # drivers
    "GuestDriver": "cubicle.drivers.computer",
    "AsyncGuestDriver": "cubicle.drivers.async_computer",
    "Viewport": "cubicle.drivers.viewport",
    "ViewGeometry": "cubicle.drivers.viewport",
    "Rect": "cubicle.drivers.viewport",
    "ActionRecord": "cubicle.drivers.records",
    "ScriptedModel": "cubicle.drivers.scripted_model",
    # approvals
    "ApprovalPolicy": "cubicle.drivers.approvals",
    "ApproveAll": "cubicle.drivers.approvals",
    "AsyncApprovals": "cubicle.drivers.approvals",
    "FilePolicy": "cubicle.drivers.approvals",
    "NonInteractive": "cubicle.drivers.approvals",
    "TerminalPrompt": "cubicle.drivers.approvals",
    "Decision": "cubicle.drivers.decisions",
    "DecisionLog": "cubicle.drivers.decisions",
    "load_policy": "cubicle.drivers.policy_file",
    # errors: one root, a branch per layer
    "CubicleError": "cubicle_guest.errors",
    "GuestError": "cubicle_guest.errors",
    "DriverError": "cubicle.drivers.errors",
    "ActionRejected": "cubicle.drivers.errors",
    "CoordinateOutOfView": "cubicle.drivers.errors",
    "OrchestratorError": "cubicle.orchestrator.errors",
    "ConfigError": "cubicle.orchestrator.errors",
    "SandboxNotFound": "cubicle.orchestrator.errors",
    "SandboxStartError": "cubicle.orchestrator.errors",
}
"""Public name → the module that defines it."""

__all__ = [
    "ActionRecord",
    "ActionRejected",
    "ApprovalPolicy",
    "ApproveAll",
    "AsyncApprovals",
    "AsyncGuestDriver",
    "ConfigError",
    "CoordinateOutOfView",
    "CubicleError",
    "Decision",
    "DecisionLog",
    "DriverError",
    "FilePolicy",
    "GuestDriver",
    "GuestError",
    "NetworkPolicy",
    "NonInteractive",
    "OrchestratorError",
    "OriginQuestions",
    "Rect",
    "Sandbox",
    "SandboxInfo",
    "SandboxNotFound",
    "SandboxSpec",
    "SandboxStartError",
    "ScriptedModel",
    "TerminalPrompt",
    "ViewGeometry",
    "Viewport",
    "__version__",
    "load_policy",
]

if TYPE_CHECKING:
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
    from cubicle.drivers.errors import ActionRejected, CoordinateOutOfView, DriverError
    from cubicle.drivers.policy_file import load_policy
    from cubicle.drivers.records import ActionRecord
    from cubicle.drivers.scripted_model import ScriptedModel
    from cubicle.drivers.viewport import Rect, ViewGeometry, Viewport
    from cubicle.orchestrator.errors import (
        ConfigError,
        OrchestratorError,
        SandboxNotFound,
        SandboxStartError,
    )
    from cubicle.orchestrator.network import NetworkPolicy
    from cubicle.orchestrator.origin_questions import OriginQuestions
    from cubicle.orchestrator.provider import SandboxInfo, SandboxSpec
    from cubicle.orchestrator.sandbox import Sandbox
    from cubicle_guest.errors import CubicleError, GuestError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cubicle' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
