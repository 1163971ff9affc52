"""The public API at the top of the one namespace: ``from cubicle import Sandbox, GuestDriver, …``.

The list below is the contract: a name added to or removed from ``cubicle.__all__`` fails here
until this list says so. Each name is the very object its defining module holds, and importing
``cubicle`` alone loads none of them (they load on first use)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import cubicle

PUBLIC = {
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
}


def test_the_public_names_are_exactly_these() -> None:
    assert set(cubicle.__all__) == PUBLIC
    assert len(cubicle.__all__) == len(PUBLIC)
    assert set(dir(cubicle)) >= PUBLIC


@pytest.mark.parametrize("name", sorted(PUBLIC - {"__version__"}))
def test_each_name_is_its_modules_object(name: str) -> None:
    module = importlib.import_module(cubicle._EXPORTS[name])
    assert getattr(cubicle, name) is getattr(module, name)


def test_every_error_has_the_one_root() -> None:
    errors = [getattr(cubicle, n) for n in PUBLIC if n.endswith(("Error", "Rejected", "View"))]
    assert errors and all(issubclass(e, cubicle.CubicleError) for e in errors)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'NoSuchThing'"):
        _ = cubicle.NoSuchThing


def test_importing_cubicle_loads_none_of_the_layers() -> None:
    code = (
        "import sys, cubicle\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('cubicle.', 'cubicle_guest')))\n"
        "print(loaded)\n"
        "cubicle.Sandbox\n"
        "print('cubicle.orchestrator.sandbox' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "['cubicle.orchestrator']", out  # the package's version only
    assert out[1] == "True"
