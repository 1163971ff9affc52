"""Approval policies: the terminal prompt over a real pipe, the non-interactive default,
approve-all, policy files with ``ask``, the decision log, and the async wrappers."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

import anyio
import pytest
from openai.types.responses import computer_action as modern
from openai.types.responses.response_computer_tool_call import (
    PendingSafetyCheck,
    ResponseComputerToolCall,
)

from cubicle.drivers.approvals import (
    ApproveAll,
    AsyncApprovals,
    FilePolicy,
    NonInteractive,
    TerminalPrompt,
)
from cubicle.drivers.decisions import ActionFacts, DecisionLog, Judgement
from cubicle.drivers.policy_file import parse_policy
from cubicle.drivers.viewport import ViewGeometry, Viewport


@dataclass
class View:
    """Stands where a driver stands for policies: it has the current geometry."""

    geometry: ViewGeometry


VIEW = View(Viewport.fit(1280, 800).geometry(1920, 1080))  # 1280x720, scale 1.5
CLICK = modern.Click(type="click", button="left", x=640, y=360)
CALL = ResponseComputerToolCall(
    id="cu_1",
    call_id="call_1",
    type="computer_call",
    status="completed",
    actions=[CLICK],
    pending_safety_checks=[
        PendingSafetyCheck(
            id="sc_1", code="malicious_instructions", message="Page asks to wire money"
        )
    ],
)


@pytest.fixture
def pipe() -> Iterator[tuple[TextIO, TextIO]]:
    """A real OS pipe: (reader the prompt reads, writer the test answers into)."""
    read_fd, write_fd = os.pipe()
    with open(read_fd, encoding="utf-8") as reader, open(write_fd, "w", encoding="utf-8") as writer:
        yield reader, writer


def test_prompt_shows_check_code_and_message_and_yes_approves(pipe: tuple[TextIO, TextIO]) -> None:
    reader, writer = pipe
    shown = io.StringIO()
    prompt = TerminalPrompt(reader, shown, geometry=VIEW)
    writer.write("yes\n")
    writer.flush()
    assert prompt.approve_safety_checks(CALL) is True
    assert "[malicious_instructions] Page asks to wire money" in shown.getvalue()
    assert "call_1" in shown.getvalue()
    decision = prompt.log[0]
    assert (decision.subject, decision.approved, decision.decided_by) == (
        "safety_checks",
        True,
        "terminal",
    )
    assert decision.check_codes == ("malicious_instructions",)


def test_prompt_shows_model_and_screen_coordinates(pipe: tuple[TextIO, TextIO]) -> None:
    reader, writer = pipe
    shown = io.StringIO()
    prompt = TerminalPrompt(reader, shown, geometry=VIEW)
    writer.write("y\n")
    writer.flush()
    assert prompt.before_action(CLICK) is True
    assert "click left at model (640, 360) = screen (960, 540)" in shown.getvalue()
    assert prompt.log[0].native_points == ((960, 540),)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("\n", "empty answer; default is deny"),
        ("n\n", "answered 'n'"),
        ("sure\n", "answered 'sure'"),
    ],
    ids=["empty", "no", "other"],
)
def test_prompt_default_is_deny(pipe: tuple[TextIO, TextIO], answer: str, reason: str) -> None:
    reader, writer = pipe
    prompt = TerminalPrompt(reader, io.StringIO(), geometry=VIEW)
    writer.write(answer)
    writer.flush()
    assert prompt.before_action(CLICK) is False
    assert prompt.log[0].reason.startswith(reason)


def test_prompt_denies_at_end_of_input(pipe: tuple[TextIO, TextIO]) -> None:
    reader, writer = pipe
    writer.close()
    prompt = TerminalPrompt(reader, io.StringIO())
    assert prompt.approve_safety_checks(CALL) is False
    assert "end of input" in prompt.log[0].reason


def test_prompt_marks_points_outside_the_screenshot(pipe: tuple[TextIO, TextIO]) -> None:
    reader, writer = pipe
    shown = io.StringIO()
    writer.write("y\n")
    writer.flush()
    TerminalPrompt(reader, shown, geometry=VIEW).before_action(
        modern.Click(type="click", button="left", x=1280, y=0)
    )
    assert "OUTSIDE the screenshot" in shown.getvalue()


def test_non_interactive_denies_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    policy = NonInteractive()
    with caplog.at_level(logging.WARNING, logger="cubicle.approvals"):
        assert policy.approve_safety_checks(CALL) is False
        assert policy.before_action(CLICK) is False
    assert [d.reason for d in policy.log] == ["no approver is configured (non-interactive run)"] * 2
    assert "denied safety checks [malicious_instructions] of call_1" in caplog.text


def test_approve_all_logs_every_approval(caplog: pytest.LogCaptureFixture) -> None:
    log = DecisionLog()
    policy = ApproveAll(log=log, geometry=VIEW)
    with caplog.at_level(logging.WARNING, logger="cubicle.approvals"):
        assert policy.approve_safety_checks(CALL) is True
        assert policy.before_action(modern.Type(type="type", text="secret")) is True
    assert [d.approved for d in log] == [True, True]
    assert "approve-all: approved type 6 char(s)" in caplog.text
    assert "secret" not in caplog.text  # logs are content-free
    assert log[1].summary == "type 6 char(s)"


POLICY = parse_policy(
    '[[rule]]\ndecision = "ask"\nactions = ["click"]\n'
    '[[rule]]\ndecision = "allow"\nactions = ["screenshot"]\n',
    "p.toml",
)


def test_policy_ask_goes_to_the_prompt(pipe: tuple[TextIO, TextIO]) -> None:
    reader, writer = pipe
    prompt = TerminalPrompt(reader, io.StringIO())
    policy = FilePolicy(POLICY, ask=prompt, geometry=VIEW)
    writer.write("y\n")
    writer.flush()
    assert policy.before_action(CLICK) is True
    assert policy.before_action(modern.Screenshot(type="screenshot")) is True
    assert policy.before_action(modern.Type(type="type", text="x")) is False
    decided = [d.decided_by for d in policy.log]
    assert decided == [
        "policy p.toml rule 1 (line 1) -> terminal",
        "policy p.toml rule 2 (line 4)",
        "policy p.toml default",
    ]


def test_policy_ask_without_anyone_to_ask_denies() -> None:
    policy = FilePolicy(POLICY)
    assert policy.before_action(CLICK) is False
    assert policy.log[0].reason == "the policy says ask, and no one is there to ask"
    assert policy.approve_safety_checks(CALL) is False  # safety_checks default is ask


def test_async_wrappers_decide_the_same() -> None:
    async def main() -> tuple[bool, bool]:
        approvals = AsyncApprovals(ApproveAll(geometry=VIEW))
        return (
            await approvals.approve_safety_checks(CALL),
            await approvals.before_action(CLICK),
        )

    assert anyio.run(main) == (True, True)


def test_a_policy_judges_the_points_the_driver_sends() -> None:
    """Facts come from the planned action: a region rule sees every point the driver would send,
    and an action the driver refuses is described as refused, never judged on a subset."""
    policy = parse_policy(
        "default = 'deny'\n"
        "[[rule]]\ndecision = 'allow'\nactions = ['drag', 'click']\n"
        "region = {x = 0, y = 0, width = 960, height = 1080}\n"
    )
    approver = FilePolicy(policy, geometry=VIEW)

    def judged(action: dict[str, object]) -> tuple[bool, object]:
        return approver.before_action(action), approver.log[-1].native_points

    inside = [{"x": 10, "y": 10}, {"x": 600, "y": 700}]  # model px; screen x <= 900
    assert judged({"type": "drag", "path": inside}) == (True, ((15, 15), (900, 1050)))
    # a float in the middle: the old lenient parse skipped it and judged the other two points
    sneaky = [{"x": 10, "y": 10}, {"x": 1200.5, "y": 10}, {"x": 20, "y": 20}]
    assert judged({"type": "drag", "path": sneaky}) == (False, None)
    # a bool is not a coordinate (plan_action refuses it), whatever int(True) is
    assert judged({"type": "click", "button": "left", "x": True, "y": 5}) == (False, None)


def test_facts_of_a_keypress_and_text_are_the_planned_ones() -> None:
    seen = []

    class Recorder(NonInteractive):
        def judge_action(self, facts: ActionFacts) -> Judgement:
            seen.append(facts)
            return Judgement(True, "test", "recorded")

    recorder = Recorder(geometry=VIEW)
    assert recorder.before_action(modern.Keypress(type="keypress", keys=["CTRL", "l"]))
    assert recorder.before_action(modern.Type(type="type", text="héllo"))
    scroll = modern.Scroll(type="scroll", x=100, y=100, scroll_x=0, scroll_y=-3)
    assert recorder.before_action(scroll)
    assert seen[0].keys == ("CTRL", "l") and seen[0].kind == "keypress"
    assert seen[1].text == "héllo"
    assert seen[2].scroll == (0, -3) and seen[2].native_points == ((150, 150),)


@pytest.mark.attack
def test_the_prompt_shows_control_characters_of_the_model_instead_of_sending_them(
    pipe: tuple[TextIO, TextIO],
) -> None:
    """LG1's class: what the model types (a page may have put it there) and a check's message
    reach the person's terminal with their control characters shown, not interpreted."""
    reader, writer = pipe
    shown = io.StringIO()
    prompt = TerminalPrompt(reader, shown, geometry=VIEW)
    writer.write("n\nn\n")
    writer.flush()
    hostile = "\x1b]52;c;aGk=\x07\x1b[2J\rApprove? [y/N] y\u202e"
    assert prompt.before_action(modern.Type(type="type", text=hostile)) is False
    check = PendingSafetyCheck(id="sc_2", code="malicious_instructions", message=hostile)
    assert (
        prompt.approve_safety_checks(CALL.model_copy(update={"pending_safety_checks": [check]}))
        is False
    )
    text = shown.getvalue()
    assert text.count("\\x1b]52;c;aGk=\\x07\\x1b[2J") == 2  # both shown, escaped
    assert "[malicious_instructions] \\x1b]52;c;aGk=\\x07\\x1b[2J\\x0dApprove?" in text
    assert not any(c in text for c in "\x1b\x07\r\u202e")
