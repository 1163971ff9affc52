"""The drill's stale-screenshot check (cubicle/orchestrator/drill/stale.py) on a real X server and
agent: an effect that shows after the screenshot makes it stale; ongoing animation does not."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cubicle.orchestrator.drill.stale import StaleCheck
from cubicle_guest.client import AgentClient
from tests.support.agent import start_agent
from tests.support.processes import stop_process
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11

EFFECTS = Path(__file__).resolve().parents[1] / "guest" / "tk_effects.py"
SCREEN = (1280, 800)
VIEW = (1024, 640)
SHOT: dict[str, Any] = {"format": "png", "max_width": VIEW[0], "max_height": VIEW[1]}


@pytest.fixture
def xserver() -> Iterator[Xvfb]:
    with Xvfb(*SCREEN) as server:
        yield server


@pytest.fixture
def client(xserver: Xvfb, tmp_path: Path) -> Iterator[AgentClient]:
    with start_agent(xserver.display, tmp_path / "agent") as agent, agent.client() as connected:
        yield connected


def effects(xserver: Xvfb, client: AgentClient, *args: str) -> subprocess.Popen[str]:
    """tests/guest/tk_effects.py on ``xserver``, drawn and settled."""
    process = subprocess.Popen(
        [sys.executable, str(EFFECTS), *args],
        env={"DISPLAY": xserver.display, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    client.settle(quiet_ms=300, timeout_ms=3000)
    return process


def check(client: AgentClient) -> StaleCheck:
    return StaleCheck(client, SHOT, screen=SCREEN, view=VIEW, window_s=1.0)


def test_an_effect_that_shows_after_the_screenshot_makes_it_stale(
    xserver: Xvfb, client: AgentClient
) -> None:
    process = effects(xserver, client)
    try:
        client.keypress(["d"])  # a red block 250 ms later
        seen = client.screenshot(**SHOT).blob
        stale = check(client)
        verdict = stale.check(seen, 0)
        assert verdict.stale and stale.stale == 1
        assert verdict.box is not None and verdict.area >= 300 * 200  # the block, native px
    finally:
        stop_process(process)


def test_ongoing_animation_is_not_a_late_effect_but_a_late_effect_beside_it_is(
    xserver: Xvfb, client: AgentClient
) -> None:
    process = effects(xserver, client, "--animate")  # a 40x40 square moving every 40 ms, forever
    try:
        stale = check(client)
        verdict = stale.check(client.screenshot(**SHOT).blob, 0)
        assert not verdict.stale, verdict
        assert verdict.animating is not None, "the moving square was seen moving"
        client.keypress(["d"])
        verdict = stale.check(client.screenshot(**SHOT).blob, 1)
        assert verdict.stale, "the red block arrived after the screenshot, beside the animation"
        assert (stale.checked, stale.stale) == (2, 1)
    finally:
        stop_process(process)
