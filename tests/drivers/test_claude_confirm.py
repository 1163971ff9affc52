"""Claude's ``confirm`` through cubicle's approval policies (cubicle.drivers.claude_confirm): the
same policies as ``before_action`` decide, the decision log says what was asked and who answered,
and a refused call has no effect on the screen (real agent on Xvfb)."""

from __future__ import annotations

import anyio
import pytest
from anthropic.tools import BetaToolsetCallContext, ToolError

from cubicle.drivers.approvals import ApproveAll, FilePolicy, NonInteractive
from cubicle.drivers.async_computer import AsyncGuestDriver
from cubicle.drivers.claude_confirm import AsyncClaudeConfirm, ClaudeConfirm, claude_facts
from cubicle.drivers.claude_toolset import AsyncClaudeToolset, ClaudeToolset
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.policy_file import parse_policy
from cubicle.drivers.viewport import Viewport
from tests.drivers.conftest import DesktopFactory

pytestmark = pytest.mark.x11

CONTEXT = BetaToolsetCallContext()


def test_an_unattended_run_denies_keyboard_input_and_logs_who_decided(
    desktop: DesktopFactory,
) -> None:
    running, recorder = desktop(800, 600)
    driver = GuestDriver.connect(running.agent.socket_path, viewport=Viewport.fit(400, 300))
    policy = NonInteractive(geometry=driver)
    with ClaudeToolset(driver, confirm=ClaudeConfirm(policy), owns_driver=True) as tools:
        with pytest.raises(ToolError):
            tools.call(CONTEXT, "type", {"text": "secret"})
        with pytest.raises(ToolError):
            tools.call(CONTEXT, "left_click", {"coordinate": [10, 20]})
    assert not recorder.events
    assert [(d.action, d.approved, d.decided_by) for d in policy.log] == [
        ("type", False, "non-interactive"),
        ("left_click", False, "non-interactive"),
    ]
    assert policy.log[1].model_points == ((10, 20),)
    assert policy.log[1].native_points == ((20, 40),)


def test_a_policy_files_key_rule_decides_claudes_chords(desktop: DesktopFactory) -> None:
    running, recorder = desktop(800, 600)
    rules = parse_policy(
        'default = "allow"\n[[rule]]\ndecision = "deny"\nkeys = ["ctrl+q"]\n', "no-quit.toml"
    )
    driver = GuestDriver.connect(running.agent.socket_path)
    policy = FilePolicy(rules, geometry=driver)
    with ClaudeToolset(driver, confirm=ClaudeConfirm(policy), owns_driver=True) as tools:
        with pytest.raises(ToolError):
            tools.call(CONTEXT, "key", {"text": "CTRL+Q"})
        tools.call(CONTEXT, "key", {"text": "ctrl+l"})
    pressed = recorder.wait_for(lambda e: e.kind == "KeyPress" and e.keysym_name == "l")
    assert "control" in pressed.modifiers
    assert not [e for e in recorder.key_events() if e.keysym_name in ("q", "Q")]
    assert [(d.action, d.approved, d.decided_by) for d in policy.log] == [
        ("key", False, "policy no-quit.toml rule 1 (line 2)"),
        ("key", True, "policy no-quit.toml default"),
    ]


def test_the_async_confirm_decides_in_a_worker_thread(desktop: DesktopFactory) -> None:
    running, recorder = desktop(800, 600)
    policy = ApproveAll()

    async def main() -> None:
        driver = await AsyncGuestDriver.connect(running.agent.socket_path)
        confirm = AsyncClaudeConfirm(policy, geometry=driver)
        async with AsyncClaudeToolset(driver, confirm=confirm, owns_driver=True) as tools:
            await tools.call(CONTEXT, "type", {"text": "ok"})

    anyio.run(main)
    recorder.wait_until(lambda _: recorder.text() == "ok", what="typed text")
    assert [(d.action, d.approved) for d in policy.log] == [("type", True)]


def test_facts_of_a_point_outside_the_screenshot_have_no_screen_points() -> None:
    geometry = Viewport.fit(400, 300).geometry(800, 600)
    facts = claude_facts(
        "left_click_drag", {"start_coordinate": [1, 2], "coordinate": [400, 5]}, geometry
    )
    assert facts.model_points == ((1, 2), (400, 5)) and facts.native_points is None
    scroll = claude_facts(
        "scroll", {"scroll_direction": "up", "scroll_amount": 3, "text": "shift"}, geometry
    )
    assert scroll.scroll == (0, -3) and scroll.keys == ("Shift_L",)
