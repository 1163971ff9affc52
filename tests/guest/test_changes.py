"""The agent paces actions on the screen's changes (X DAMAGE, or frame polling without it).

A real Tk window (tests/guest/tk_effects.py) paints at known delays after a key; the receipt of
the action must cover the delayed effect, return early when nothing happens, and ignore an
animation that was already running — on both change trackers.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cubicle_guest import protocol
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError
from tests.support.agent import RunningAgent, pixel_at, start_agent
from tests.support.processes import stop_process
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11

EFFECTS = Path(__file__).with_name("tk_effects.py")
REPO = Path(__file__).resolve().parents[2]
SETTLE: dict[str, Any] = {**protocol.SettleSpec().as_args(), "typing_quiet_ms": None}
"""The defaults with the typing shortcut off: these tests time the quiet period itself."""
LONG_QUIET = {"expect_ms": 300, "quiet_ms": 1000, "cap_ms": 3000, "typing_quiet_ms": 150}
"""Quiet periods far apart, so which one the agent chose shows in ``settle_ms`` under load."""


@pytest.fixture(scope="module")
def xserver() -> Iterator[Xvfb]:
    with Xvfb(1280, 800) as server:
        yield server


@pytest.fixture(scope="module", params=["damage", "poll"])
def agent(
    request: pytest.FixtureRequest, xserver: Xvfb, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningAgent]:
    env = {"CUBICLE_SETTLE_METHOD": request.param}
    with start_agent(xserver.display, tmp_path_factory.mktemp("agent"), extra_env=env) as running:
        yield running


@pytest.fixture
def client(agent: RunningAgent) -> Iterator[AgentClient]:
    with agent.client() as connected:
        yield connected


def _effects(display: str, *args: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, str(EFFECTS), *args],
        env={"DISPLAY": display, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


@pytest.fixture
def effects(xserver: Xvfb, client: AgentClient) -> Iterator[None]:
    process = _effects(xserver.display)
    client.settle(quiet_ms=300, timeout_ms=3000)
    yield
    stop_process(process)


def test_hello_says_which_method_tracks_changes(client: AgentClient, agent: RunningAgent) -> None:
    hello = client.hello_result or {}
    assert "receipts" in hello["features"]
    assert hello["settle_method"] == agent._extra_env["CUBICLE_SETTLE_METHOD"]


def test_a_delayed_effect_is_in_the_receipt_and_on_screen_when_the_action_returns(
    client: AgentClient, effects: None
) -> None:
    receipt = client.keypress(["d"], settle=SETTLE).result["receipt"]
    assert pixel_at(client, 150, 100) == (255, 0, 0), "the red block was not painted yet"
    assert receipt["changed"] is True and receipt["settled"] is True, receipt
    assert receipt["settle_ms"] >= 250
    box = receipt["damage"]
    assert box["x"] <= 0 + 10 and box["y"] <= 10 and box["width"] >= 290 and box["height"] >= 190


def test_a_two_stage_effect_is_waited_out_across_its_gap(
    client: AgentClient, effects: None
) -> None:
    receipt = client.keypress(["s"], settle=SETTLE).result["receipt"]
    assert pixel_at(client, 75, 300) == (0, 0, 255)
    assert pixel_at(client, 225, 300) == (0, 128, 0), "the second stage came after the answer"
    assert receipt["changed"] is True and receipt["settle_ms"] >= 150


def test_nothing_happening_returns_after_the_expect_window(
    client: AgentClient, effects: None
) -> None:
    receipt = client.keypress(["x"], settle=SETTLE).result["receipt"]
    assert receipt["changed"] is False and receipt["settled"] is True
    assert SETTLE["expect_ms"] <= receipt["settle_ms"] < SETTLE["expect_ms"] + 400
    assert receipt["damage"] is None


def test_settling_off_answers_before_the_effect(client: AgentClient, effects: None) -> None:
    result = client.keypress(["d"]).result
    assert "receipt" not in result
    assert pixel_at(client, 150, 100) == (255, 255, 255), "answered after the delayed effect"
    client.settle(quiet_ms=400, timeout_ms=3000)


def test_a_running_animation_does_not_hold_actions_but_new_effects_still_count(
    xserver: Xvfb, client: AgentClient, agent: RunningAgent
) -> None:
    if agent._extra_env["CUBICLE_SETTLE_METHOD"] == "poll":
        pytest.skip("frame polling cannot tell background animation from effects (documented)")
    process = _effects(xserver.display, "--animate")
    try:
        client.wait(ms=2000)  # the agent sees the animation run while idle
        inert = client.keypress(["x"], settle=SETTLE).result["receipt"]
        assert inert["changed"] is False and inert["settled"] is True
        assert inert["settle_ms"] < SETTLE["expect_ms"] + 400, "the animation held the action"
        again = client.keypress(["x"], settle=SETTLE).result["receipt"]
        assert again["changed"] is False
        effect = client.keypress(["s"], settle=SETTLE).result["receipt"]
        assert effect["changed"] is True and effect["settle_ms"] >= 150
        assert pixel_at(client, 225, 300) == (0, 128, 0)
    finally:
        stop_process(process)


def test_the_same_place_changing_twice_is_seen_twice(client: AgentClient, effects: None) -> None:
    first = client.keypress(["s"], settle=SETTLE).result["receipt"]
    client.keypress(["c"], settle=SETTLE)
    second = client.keypress(["s"], settle=SETTLE).result["receipt"]
    assert first["changed"] and second["changed"], (first, second)
    assert second["settle_ms"] >= 150


def test_a_panel_repainted_with_the_same_pixels_is_no_visible_change(
    client: AgentClient, effects: None
) -> None:
    """tint2's clock tick: the whole panel is damaged, a digit's 10x11 pixels differ. A receipt
    says what differs on screen, so the tick is no visible change (nor a stall reset)."""
    first = client.keypress(["t"], settle=SETTLE).result["receipt"]
    assert first["changed"] is True, first  # the strip appeared: that is a change
    tick = client.keypress(["t"], settle=SETTLE).result["receipt"]
    assert tick["damage_events"] >= 1 and tick["settled"] is True, tick
    assert tick["changed"] is False, tick
    assert tick["damage"] == {"x": 1280 - 22, "y": 800 - 26, "width": 10, "height": 11}, tick
    real = client.keypress(["d"], settle=SETTLE).result["receipt"]
    assert real["changed"] is True and real["damage"] == {
        "x": 0,
        "y": 0,
        "width": 300,
        "height": 200,
    }, real


def test_bad_settle_arguments_name_the_option_and_the_agent_keeps_serving(
    client: AgentClient,
) -> None:
    for settle, named in (
        ({"quiet_ms": -5}, "settle.quiet_ms"),
        ({"cap_ms": 70_000}, "settle.cap_ms must be <= 60000"),
        ({"expect_ms": 900, "cap_ms": 500}, "settle.expect_ms (900) is over settle.cap_ms"),
        ({"pause": 1}, "unknown settle option(s) pause"),
        ({"typing_quiet_ms": "fast"}, "settle.typing_quiet_ms must be an integer"),
        ({"typing_quiet_ms": 5000}, "settle.typing_quiet_ms (5000) is over settle.cap_ms"),
        ([], "argument .settle. must be an object"),
    ):
        with pytest.raises(Exception, match=named.replace("(", r"\(").replace(")", r"\)")):
            # raw call: malformed settle values (a string, a list) are the point
            client.call("move", {"x": 1, "y": 1, "settle": settle})
    assert client.info().result["features"] == list(protocol.FEATURES)


@pytest.mark.parametrize("window_type", ["normal", "dialog"])
def test_typing_waits_the_typing_quiet_period_only_in_a_normal_window(
    xserver: Xvfb, client: AgentClient, window_type: str
) -> None:
    process = _effects(xserver.display, *(["--dialog"] if window_type == "dialog" else []))
    try:
        client.settle(quiet_ms=300, timeout_ms=3000)
        typed = client.keypress(["b"], settle=LONG_QUIET).result["receipt"]
        assert typed["changed"] is True and typed["focus_before"]["type"] == window_type
        text = client.type("b", settle=LONG_QUIET).result["receipt"]
        committed = client.keypress(["Return"], settle=LONG_QUIET)
        assert committed.result["receipt"]["changed"] is True
        assert committed.result["receipt"]["settle_ms"] >= 1000, "Enter is not typing"
        if window_type == "normal":
            assert typed["settle_ms"] < 1000 and text["settle_ms"] < 1000, (typed, text)
            assert typed["settle_ms"] >= 150
        else:
            assert typed["settle_ms"] >= 1000 and text["settle_ms"] >= 1000, (typed, text)
        off = client.keypress(["b"], settle={**LONG_QUIET, "typing_quiet_ms": None})
        assert off.result["receipt"]["settle_ms"] >= 1000, "typing_quiet_ms null turns it off"
    finally:
        stop_process(process)


IDLE: dict[str, Any] = {
    "expect_ms": 1000,
    "quiet_ms": 1000,
    "cap_ms": 3000,
    "typing_quiet_ms": None,
    "idle_quiet_ms": 150,
}
"""A long quiet period and a short idle one, so which one the agent chose shows in ``settle_ms``
under load (and a long expect window: a starved window still paints within it)."""


@pytest.fixture
def named(xserver: Xvfb, client: AgentClient) -> Iterator[None]:
    """The effects window with ``_NET_WM_PID``: the agent's busy probe can watch its program."""
    process = _effects(xserver.display, "--pid")
    client.settle(quiet_ms=300, timeout_ms=3000)
    yield
    stop_process(process)


def test_an_idle_program_settles_after_the_idle_quiet_period(
    client: AgentClient, agent: RunningAgent, named: None
) -> None:
    receipt = client.keypress(["b"], settle=IDLE).result["receipt"]
    assert receipt["changed"] is True and receipt["settled"] is True
    assert receipt["settle_ms"] >= IDLE["idle_quiet_ms"]
    if agent._extra_env["CUBICLE_SETTLE_METHOD"] == "poll":
        assert receipt["settle_ms"] >= IDLE["quiet_ms"], "frame polling has no busy probe"
        assert receipt["quiet_ms"] == IDLE["quiet_ms"]
    else:
        assert receipt["settle_ms"] < IDLE["quiet_ms"], receipt
        assert receipt["quiet_ms"] == IDLE["idle_quiet_ms"]
    off = client.keypress(["b"], settle={**IDLE, "idle_quiet_ms": None})
    assert off.result["receipt"]["settle_ms"] >= IDLE["quiet_ms"], "idle_quiet_ms null: off"
    assert off.result["receipt"]["quiet_ms"] == IDLE["quiet_ms"]
    inert = client.keypress(["x"], settle=IDLE).result["receipt"]
    assert inert["changed"] is False and inert["quiet_ms"] is None


def test_a_program_still_working_after_its_first_change_is_waited_for(
    client: AgentClient, named: None
) -> None:
    settle = {**protocol.SettleSpec().as_args(), "typing_quiet_ms": None}
    assert settle["idle_quiet_ms"] < 250 < settle["quiet_ms"]  # type: ignore[operator]
    receipt = client.keypress(["w"], settle=settle).result["receipt"]
    assert pixel_at(client, 750, 250) == (255, 165, 0)
    assert pixel_at(client, 850, 250) == (0, 255, 255), "answered while the program still worked"
    assert receipt["changed"] is True and receipt["settle_ms"] >= 250


def test_a_program_that_draws_in_steps_while_it_works_is_waited_for_past_the_busy_limit(
    client: AgentClient, agent: RunningAgent, named: None
) -> None:
    """A page loading in steps on a slow machine (Chromium under TCG): the program draws, works
    longer than the quiet period, draws again, works, draws the rest. The busy limit (5 quiet
    periods: 500 ms here) counts from the last thing drawn, not from the key alone: the second
    step comes 300 ms after the first and the third 600 ms after the key, past 500 ms."""
    if agent._extra_env["CUBICLE_SETTLE_METHOD"] == "poll":
        pytest.skip("frame polling has no busy probe (documented)")
    settle = {"expect_ms": 100, "quiet_ms": 100, "cap_ms": 5000, "typing_quiet_ms": None}
    receipt = client.keypress(["p"], settle=settle).result["receipt"]
    assert pixel_at(client, 850, 450) == (255, 192, 203)
    assert pixel_at(client, 950, 450) == (0, 128, 128), "answered while the program still worked"
    assert receipt["changed"] is True and receipt["settled"] is True
    assert receipt["last_change_ms"] >= 600


def test_the_settle_op_until_idle_waits_for_the_focused_program_to_finish_its_work(
    client: AgentClient, agent: RunningAgent, named: None
) -> None:
    """A program that draws in steps with a pause while it works (Chromium under TCG: its frame,
    then its page): ``settle`` with ``until_idle`` is not ended by the quiet pause; the
    screen it answers after shows the second step."""
    if agent._extra_env["CUBICLE_SETTLE_METHOD"] == "poll":
        pytest.skip("frame polling has no busy probe (documented)")
    client.keypress(["w"])  # orange now, then 250 ms of work, then cyan
    result = client.settle(quiet_ms=100, timeout_ms=5000, until_idle=True)
    assert result.result["settled"] is True
    assert pixel_at(client, 750, 250) == (255, 165, 0)
    assert pixel_at(client, 850, 250) == (0, 255, 255), "answered while the program still worked"
    with pytest.raises(GuestError, match="until_idle"):
        # raw call: a non-boolean until_idle is the point, which settle() would refuse
        client.call("settle", {"quiet_ms": 100, "until_idle": "yes"})
    assert client.settle(quiet_ms=0, timeout_ms=0).result["settled"] is True


def test_a_program_the_agent_cannot_name_keeps_the_long_quiet_period(
    client: AgentClient, effects: None
) -> None:
    receipt = client.keypress(["b"], settle=IDLE).result["receipt"]
    assert receipt["changed"] is True and receipt["settle_ms"] >= IDLE["quiet_ms"], receipt


def test_an_action_into_a_dialog_never_takes_the_idle_quiet_period(
    xserver: Xvfb, client: AgentClient
) -> None:
    process = _effects(xserver.display, "--pid", "--dialog")
    try:
        client.settle(quiet_ms=300, timeout_ms=3000)
        typed = client.keypress(["b"], settle=IDLE).result["receipt"]
        assert typed["focus_before"]["type"] == "dialog"
        assert typed["settle_ms"] >= IDLE["quiet_ms"], "a late completion popup would be missed"
        committed = client.keypress(["Return"], settle=IDLE).result
        assert committed["receipt"]["changed"] is True
        assert committed["receipt"]["settle_ms"] >= IDLE["quiet_ms"], "Save As closes late"
        assert committed["receipt"]["quiet_ms"] == IDLE["quiet_ms"]
    finally:
        stop_process(process)


def test_a_click_waits_for_the_program_under_the_pointer_not_only_the_focused_one(
    xserver: Xvfb, client: AgentClient, named: None
) -> None:
    client.move(5, 5)  # a Tk window mapped under the pointer takes the focus
    process = subprocess.Popen(
        [sys.executable, str(EFFECTS.with_name("tk_clicker.py"))],
        env={"DISPLAY": xserver.display, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        client.settle(quiet_ms=300, timeout_ms=3000)
        settle = {**protocol.SettleSpec().as_args(), "typing_quiet_ms": None}
        receipt = client.click(1100, 600, settle=settle).result["receipt"]
        assert receipt["focus_before"]["title"] == "tk", "the effects window keeps the focus"
        assert pixel_at(client, 1050, 600) == (255, 165, 0)
        assert pixel_at(client, 1150, 600) == (0, 255, 255), "answered while the clicked one worked"
    finally:
        stop_process(process)


def test_a_program_busy_all_the_time_gets_the_idle_quiet_period_above_its_background(
    xserver: Xvfb, client: AgentClient, agent: RunningAgent
) -> None:
    if agent._extra_env["CUBICLE_SETTLE_METHOD"] == "poll":
        pytest.skip("frame polling cannot tell background animation from effects (documented)")
    process = _effects(xserver.display, "--pid", "--animate-cpu")
    try:
        client.keypress(["x"], settle=IDLE)  # a settled action ends...
        client.wait(ms=2000)  # ...then the animation runs while nobody acts
        typed = client.keypress(["b"], settle=IDLE).result["receipt"]
        assert typed["changed"] is True and typed["settled"] is True
        assert typed["settle_ms"] < IDLE["quiet_ms"], "the animation's CPU held the action"
        assert typed["quiet_ms"] == IDLE["idle_quiet_ms"]
        client.wait(ms=1000)
        settle = {**protocol.SettleSpec().as_args(), "typing_quiet_ms": None}
        worked = client.keypress(["w"], settle=settle).result["receipt"]
        assert pixel_at(client, 850, 250) == (0, 255, 255), "answered while the program worked"
        # settle_ms counts from the end of the input (XTEST sent and synced); the program starts
        # its 250 ms of work when the key arrives, which can be a few ms before that (seen: 248)
        assert worked["settle_ms"] >= 250 - 25
    finally:
        stop_process(process)
