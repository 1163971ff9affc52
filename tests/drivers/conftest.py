"""Fixtures for the driver tests: real Xvfb + real guest agent + recorder window, and scripts.

The desktop fixture owns an Xvfb and an agent process and stops both (by pid) on teardown.
Socket directories are short paths under /tmp (unix socket paths are limited to 107 bytes).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cubicle.drivers.scripted_model import Script, parse_script
from tests.support.agent import RunningAgent, start_agent
from tests.support.recorder import Recorder
from tests.support.xvfb import Xvfb


@dataclass
class Desktop:
    xvfb: Xvfb
    agent: RunningAgent

    @property
    def display(self) -> str:
        return self.xvfb.display


DesktopFactory = Callable[[int, int], tuple[Desktop, Recorder]]


@pytest.fixture
def desktop() -> Iterator[DesktopFactory]:
    """Factory: ``desktop(width, height)`` starts an Xvfb of that size, an agent on it and a
    fullscreen recorder window; everything is stopped when the test ends (even on failure)."""
    with ExitStack() as stack:

        def make(width: int, height: int) -> tuple[Desktop, Recorder]:
            socket_dir = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="cbl-drv-", dir="/tmp")
            )
            xvfb = stack.enter_context(Xvfb(width, height))
            agent = stack.enter_context(start_agent(xvfb.display, Path(socket_dir)))
            recorder = stack.enter_context(Recorder(xvfb.display))
            return Desktop(xvfb, agent), recorder

        yield make


def one_call_script(
    actions: list[dict[str, Any]],
    *,
    view: tuple[int, int] | None = None,
    checks: list[dict[str, Any]] | None = None,
    name: str = "test",
) -> Script:
    """A two-turn script: one computer_call with ``actions``, then a final message."""
    data: dict[str, Any] = {
        "name": name,
        "turns": [
            {
                "computer_call": {
                    "actions": actions,
                    "pending_safety_checks": checks or [],
                }
            },
            {"message": "done"},
        ],
    }
    if view is not None:
        data["model_view"] = {"width": view[0], "height": view[1]}
    return parse_script(data, f"<{name}>")
