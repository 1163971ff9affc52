"""``launch_cap_ms``: an action that launched a program waits past its cap for the program's first
drawn frame, and only that action (cubicle_guest/changes.py, cubicle_guest/launches.py).

A real X client (tests/guest/late_launcher.py) plays a panel launcher and a slow program: a click
broadcasts a startup notification, maps a flat window and draws into it 2.5 s later — later than
the 1 s cap of these actions, as Chromium's first frame under TCG is later than any cap an
ordinary action can afford.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cubicle_guest import protocol
from cubicle_guest.client import AgentClient
from cubicle_guest.client_ops import Settle
from tests.guest import late_launcher
from tests.support.agent import RunningAgent, pixel_at, start_agent
from tests.support.processes import stop_process
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11

FIRST_FRAME_S = 2.5
"""How late the launched program draws its first frame (seconds)."""
SHORT_CAP = protocol.SettleSpec(cap_ms=1000).as_args()
"""Defaults but a 1 s cap, well under the program's first frame."""
app_x, app_y, _, _ = late_launcher.APP
frame_x, frame_y, _, _ = late_launcher.FIRST_FRAME
FRAME_PIXEL = (app_x + frame_x + 10, app_y + frame_y + 10)
"""A screen pixel inside the block of the program's first frame."""
LAUNCHER_PIXEL = (late_launcher.LAUNCHER[0] + 50, late_launcher.LAUNCHER[1] + 20)


@pytest.fixture(scope="module")
def xserver() -> Iterator[Xvfb]:
    with Xvfb(1280, 800) as server:
        yield server


@pytest.fixture(scope="module")
def agent(xserver: Xvfb, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    with start_agent(xserver.display, tmp_path_factory.mktemp("agent")) as running:
        yield running


@pytest.fixture
def client(agent: RunningAgent) -> Iterator[AgentClient]:
    with agent.client() as connected:
        yield connected


@pytest.fixture
def launcher(xserver: Xvfb, client: AgentClient) -> Iterator[None]:
    """A fresh launcher per test: its windows, and any first frame still due, end with it."""
    process = subprocess.Popen(
        [sys.executable, str(Path(late_launcher.__file__)), str(FIRST_FRAME_S)],
        env={"DISPLAY": xserver.display, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    client.settle(quiet_ms=300, timeout_ms=3000)
    yield
    stop_process(process)


def _click(client: AgentClient, settle: Settle) -> dict[str, object]:
    x, y = LAUNCHER_PIXEL
    reply = client.click(x, y, settle=settle)
    receipt: dict[str, object] = reply.result["receipt"]
    return receipt


def test_a_click_that_launched_a_program_waits_past_its_cap_for_the_first_frame(
    client: AgentClient, launcher: None
) -> None:
    receipt = _click(client, {**SHORT_CAP, "launch_cap_ms": 10_000})
    assert pixel_at(client, *FRAME_PIXEL) == (0, 0, 0), f"first frame not drawn yet: {receipt}"
    assert receipt["settled"] is True and receipt["changed"] is True, receipt
    settle_ms = receipt["settle_ms"]
    assert isinstance(settle_ms, int) and FIRST_FRAME_S * 1000 <= settle_ms < 10_000, receipt


def test_without_a_launch_cap_the_click_ends_at_its_cap_and_says_unsettled(
    client: AgentClient, launcher: None
) -> None:
    receipt = _click(client, SHORT_CAP)
    assert receipt["settled"] is False, receipt
    settle_ms = receipt["settle_ms"]
    assert isinstance(settle_ms, int) and 1000 <= settle_ms < FIRST_FRAME_S * 1000, receipt
    assert pixel_at(client, *FRAME_PIXEL) == (255, 255, 255), "the program's window, still blank"


def test_an_action_that_launched_nothing_keeps_its_own_cap(
    client: AgentClient, launcher: None
) -> None:
    x, y = LAUNCHER_PIXEL
    settle = {**SHORT_CAP, "launch_cap_ms": 10_000}
    receipt = client.click(x, y, button="right", settle=settle)
    result = receipt.result["receipt"]
    assert result["settled"] is False, "an animation it started holds it to its cap"
    assert 1000 <= result["settle_ms"] < FIRST_FRAME_S * 1000, result


def test_a_launch_cap_outside_its_range_is_named_and_the_agent_keeps_serving(
    client: AgentClient,
) -> None:
    for launch_cap_ms in (500, protocol.MAX_LAUNCH_CAP_MS + 1, "long"):
        with pytest.raises(Exception, match=r"settle\.launch_cap_ms"):
            settle = {**SHORT_CAP, "launch_cap_ms": launch_cap_ms}
            # raw call: a value of the wrong kind ("long") is the point, which move() would refuse
            client.call("move", {"x": 1, "y": 1, "settle": settle})
    assert "launch_cap" in client.info().result["features"]
