"""The real ``anthropic`` and ``google-genai`` clients against the local scripted stand-ins
(cubicle.drivers.scripted_messages, scripted_gemini), with no key: Claude's tool runner drives a
ClaudeToolset, a Gemini loop drives GeminiComputer, both on a real agent on Xvfb; the stand-ins
check every result the clients send back, and an off-script result fails the run."""

from __future__ import annotations

from typing import Any

import anthropic
import anyio
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from cubicle.drivers.async_computer import AsyncGuestDriver
from cubicle.drivers.claude_toolset import (
    AsyncClaudeToolset,
    ClaudeToolset,
    aclaude_turns,
    claude_turns,
)
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.gemini_actions import (
    BROWSER_ONLY,
    AsyncGeminiComputer,
    GeminiComputer,
    computer_use_tool,
)
from cubicle.drivers.gemini_turn import async_function_responses, function_responses
from cubicle.drivers.scripted_gemini import GeminiTurn, ScriptedGemini
from cubicle.drivers.scripted_messages import MessagesTurn, ScriptedMessages
from cubicle.drivers.viewport import Viewport
from tests.drivers.conftest import DesktopFactory

pytestmark = pytest.mark.x11

CLAUDE_TURNS: list[MessagesTurn] = [
    [
        ("screenshot", {}),
        ("left_click", {"coordinate": [100, 50]}),
        ("zoom", {"region": [0, 0, 64, 40]}),
    ],
    [("key", {"text": "ctrl+Fnord"}, "error"), ("left_click", {"coordinate": [1, 1]}, "error")],
    [("left_mouse_down", {}), ("mouse_move", {"coordinate": [200, 100]})],
    "done",
]
"""The refused key stops that turn (the runner answers the later call as not executed); the
button the third turn leaves pressed is released when the run ends."""


def allow(_context: object) -> bool:
    return True


def run_claude(model: ScriptedMessages, tools: ClaudeToolset) -> list[Any]:
    client = anthropic.Anthropic(base_url=model.base_url, api_key="drill", max_retries=0)
    runner = client.beta.messages.tool_runner(
        model="drill", max_tokens=256, tools=[tools], messages=[{"role": "user", "content": "go"}]
    )
    return list(claude_turns(runner, tools))


def test_claudes_tool_runner_drives_the_toolset_through_the_stand_in(
    desktop: DesktopFactory,
) -> None:
    running, recorder = desktop(1280, 800)
    driver = GuestDriver.connect(running.agent.socket_path, viewport=Viewport.fit(640, 400))
    with ClaudeToolset(driver, confirm=allow, owns_driver=True) as tools:
        with ScriptedMessages(CLAUDE_TURNS) as model:
            messages = run_claude(model, tools)
        assert not tools.button_down
    assert [block.text for block in messages[-1].content] == ["done"]
    press = recorder.wait_for(lambda e: e.kind == "ButtonPress")
    assert (press.button, press.root_x, press.root_y) == (1, 200, 100)
    drag = recorder.wait_for(lambda e: e.kind == "MotionNotify" and e.root_x == 400)
    assert drag.state & 0x100  # Button1Mask: pressed across calls
    recorder.wait_for(
        lambda e: e.kind == "ButtonRelease" and e.root_x == 400
    )  # released at run end
    (tool,) = model.requests[0]["tools"]
    assert tool["type"] == "computer_toolset_20260801"


def test_an_off_script_result_fails_the_claude_run(desktop: DesktopFactory) -> None:
    running, _recorder = desktop(640, 400)
    driver = GuestDriver.connect(running.agent.socket_path)
    turns: list[MessagesTurn] = [[("left_click", {"coordinate": [700, 10]})], "done"]
    with ClaudeToolset(driver, confirm=allow, owns_driver=True) as tools:
        model = ScriptedMessages(turns)
        with pytest.raises(anthropic.BadRequestError), model:
            run_claude(model, tools)
    assert "is_error=True" in str(model.failures[0])


def test_the_async_runner_drives_the_async_toolset(desktop: DesktopFactory) -> None:
    running, recorder = desktop(1280, 800)
    turns: list[MessagesTurn] = [[("double_click", {"coordinate": [320, 200]})], "done"]

    async def main() -> None:
        driver = await AsyncGuestDriver.connect(
            running.agent.socket_path, viewport=Viewport.fit(640, 400)
        )
        async with AsyncClaudeToolset(driver, confirm=allow, owns_driver=True) as tools:
            with ScriptedMessages(turns) as model:
                client = anthropic.AsyncAnthropic(
                    base_url=model.base_url, api_key="drill", max_retries=0
                )
                runner = client.beta.messages.tool_runner(
                    model="drill",
                    max_tokens=256,
                    tools=[tools],
                    messages=[{"role": "user", "content": "go"}],
                )
                async for _message in aclaude_turns(runner, tools):
                    pass
                await client.close()

    anyio.run(main)
    recorder.wait_until(lambda evs: sum(e.kind == "ButtonPress" for e in evs) == 2)
    assert {(e.root_x, e.root_y) for e in recorder.events if e.kind == "ButtonPress"} == {
        (640, 400)
    }


def run_gemini(model: ScriptedGemini, computer: GeminiComputer) -> types.GenerateContentResponse:
    client = genai.Client(api_key="drill", http_options=types.HttpOptions(base_url=model.base_url))
    config = types.GenerateContentConfig(tools=[computer_use_tool()])
    contents: list[types.Content] = [types.Content(role="user", parts=[types.Part(text="go")])]
    for _ in range(10):
        reply = client.models.generate_content(model="drill", contents=contents, config=config)
        assert reply.candidates and reply.candidates[0].content
        content = reply.candidates[0].content
        contents.append(content)
        calls = [part.function_call for part in content.parts or [] if part.function_call]
        if not calls:
            return reply
        contents.append(types.Content(role="user", parts=function_responses(computer, calls)))
    raise AssertionError("the script did not end")


def test_the_genai_client_drives_gemini_calls_through_the_stand_in(
    desktop: DesktopFactory,
) -> None:
    running, recorder = desktop(1280, 800)
    turns: list[GeminiTurn] = [
        [("click_at", {"x": 500, "y": 250}), ("key_combination", {"keys": "Control+a"})],
        [
            ("navigate", {"url": "https://example.com"}, "error"),
            ("hover_at", {"x": 1, "y": 1}, "error"),
        ],
        [("type_text_at", {"x": 100, "y": 100, "text": "hi", "press_enter": False})],
        "done",
    ]
    with GuestDriver.connect(running.agent.socket_path) as driver, ScriptedGemini(turns) as model:
        reply = run_gemini(model, GeminiComputer(driver))
    assert reply.text == "done"
    press = recorder.wait_for(lambda e: e.kind == "ButtonPress")
    assert (press.root_x, press.root_y) == (640, 200)
    recorder.wait_until(lambda _: recorder.text() == "hi", what="typed text")
    computer_use = model.requests[0]["tools"][0]["computerUse"]
    assert computer_use["environment"] == "ENVIRONMENT_DESKTOP"
    excluded = computer_use.get("excludedPredefinedFunctions") or computer_use.get(
        "excluded_predefined_functions"  # google-genai 3.6 sends this field in snake case
    )
    assert excluded == list(BROWSER_ONLY)


def test_an_off_script_response_fails_the_gemini_run(desktop: DesktopFactory) -> None:
    running, _recorder = desktop(640, 400)
    turns: list[GeminiTurn] = [[("click_at", {"x": 5, "y": 5, "button": "left"})], "done"]
    model = ScriptedGemini(turns)
    with (
        GuestDriver.connect(running.agent.socket_path) as driver,
        pytest.raises(genai_errors.ClientError),
        model,
    ):
        run_gemini(model, GeminiComputer(driver))
    assert "error" in str(model.failures[0])


def test_the_async_genai_client_drives_the_async_gemini_computer(desktop: DesktopFactory) -> None:
    running, recorder = desktop(1280, 800)
    turns: list[GeminiTurn] = [
        [
            ("click_at", {"x": 250, "y": 500}),
            ("drag_and_drop", {"x": 9, "y": 9, "destination_x": 1000, "destination_y": 9}, "error"),
        ],
        [
            (
                "click_at",
                {"x": 999, "y": 0, "safety_decision": {"decision": "require_confirmation"}},
            )
        ],
        "done",
    ]
    asked: list[str] = []

    def confirm(name: str, args: object) -> bool:
        asked.append(name)
        return True

    async def main() -> str | None:
        driver = await AsyncGuestDriver.connect(running.agent.socket_path)
        async with driver:
            computer = AsyncGeminiComputer(driver, confirm=confirm)
            with ScriptedGemini(turns) as model:
                client = genai.Client(
                    api_key="drill", http_options=types.HttpOptions(base_url=model.base_url)
                )
                config = types.GenerateContentConfig(tools=[computer_use_tool()])
                contents = [types.Content(role="user", parts=[types.Part(text="go")])]
                for _ in range(10):
                    reply = await client.aio.models.generate_content(
                        model="drill", contents=contents, config=config
                    )
                    assert reply.candidates and reply.candidates[0].content
                    content = reply.candidates[0].content
                    contents.append(content)
                    calls = [p.function_call for p in content.parts or [] if p.function_call]
                    if not calls:
                        return reply.text
                    parts = await async_function_responses(computer, calls)
                    contents.append(types.Content(role="user", parts=parts))
        raise AssertionError("the script did not end")

    assert anyio.run(main) == "done"
    assert asked == ["click_at"]
    presses = recorder.wait_until(lambda evs: sum(e.kind == "ButtonPress" for e in evs) == 2)
    assert [(e.root_x, e.root_y) for e in presses if e.kind == "ButtonPress"] == [
        (320, 400),
        (1278, 0),
    ]
