"""Claude's computer toolset (cubicle.drivers.claude_toolset) against a real agent on Xvfb: every
member through the SDK's own ``call`` pipeline, effects read in a recorder window (the button, the
screen pixel, the keysym), the held button across calls, zoom's native detail, the key table."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from anthropic.tools import BetaToolsetCallContext, ToolError
from PIL import Image, ImageChops, ImageStat
from Xlib import X, display

from cubicle.drivers.async_computer import AsyncGuestDriver
from cubicle.drivers.claude_keys import CLAUDE_KEYS
from cubicle.drivers.claude_toolset import AsyncClaudeToolset, ClaudeToolset, claude_turns
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.records import ActionRecord
from cubicle.drivers.viewport import Viewport
from cubicle_guest.keys import keysym_number
from tests.drivers.conftest import Desktop, DesktopFactory
from tests.support.recorder import RecordedEvent, Recorder

pytestmark = pytest.mark.x11

CONTEXT = BetaToolsetCallContext()


def allow(_context: object) -> bool:
    return True


def toolset(desktop: Desktop, viewport: Viewport, **options: Any) -> ClaudeToolset:
    driver = GuestDriver.connect(desktop.agent.socket_path, viewport=viewport, **options)
    return ClaudeToolset(driver, confirm=allow, owns_driver=True)


def call(tools: ClaudeToolset, member: str, **member_input: Any) -> Any:
    return tools.call(CONTEXT, member, member_input)


def refusal(tools: ClaudeToolset, member: str, **member_input: Any) -> str:
    with pytest.raises(ToolError) as caught:
        call(tools, member, **member_input)
    content = caught.value.content
    return content if isinstance(content, str) else " ".join(str(b.get("text")) for b in content)


def presses(recorder: Recorder, kind: str = "ButtonPress") -> list[RecordedEvent]:
    return [e for e in recorder.events if e.kind == kind]


def wait_presses(recorder: Recorder, count: int, kind: str = "ButtonPress") -> list[RecordedEvent]:
    recorder.wait_until(
        lambda events: sum(e.kind == kind for e in events) >= count, what=f"{count} {kind}"
    )
    return presses(recorder, kind)


@pytest.fixture
def scaled(desktop: DesktopFactory) -> Iterator[tuple[ClaudeToolset, Recorder]]:
    """A 1600x1200 screen seen as 800x600 (every screenshot pixel is 2x2 screen pixels)."""
    running, recorder = desktop(1600, 1200)
    with toolset(running, Viewport.fit(800, 600)) as tools:
        yield tools, recorder


def test_every_click_member_lands_its_button_on_the_mapped_pixel(
    scaled: tuple[ClaudeToolset, Recorder],
) -> None:
    tools, recorder = scaled
    records: list[ActionRecord] = []
    tools.driver.on_action = records.append
    call(tools, "left_click", coordinate=[100, 50])
    call(tools, "right_click", coordinate=[101, 51])
    call(tools, "middle_click", coordinate=[102, 52])
    call(tools, "double_click", coordinate=[103, 53])
    call(tools, "triple_click", coordinate=[104, 54])
    call(tools, "left_click", coordinate=[105, 55], text="ctrl+shift")
    call(tools, "left_click")  # at the pointer, which the last click left at (210, 110)
    got = [(e.button, e.root_x, e.root_y) for e in wait_presses(recorder, 10)]
    assert got == [
        (1, 200, 100),
        (3, 202, 102),
        (2, 204, 104),
        (1, 206, 106),
        (1, 206, 106),
        (1, 208, 108),
        (1, 208, 108),
        (1, 208, 108),
        (1, 210, 110),
        (1, 210, 110),
    ]
    assert presses(recorder)[8].modifiers >= {"control", "shift"}
    assert "control" not in presses(recorder)[9].modifiers
    # the double and triple clicks are bursts the toolkit counts as one gesture (ms apart)
    triple = presses(recorder)[5:8]
    assert triple[-1].time - triple[0].time < 200
    kinds = [r.kind for r in records]
    assert kinds[:5] == [
        "left_click",
        "right_click",
        "middle_click",
        "double_click",
        "triple_click",
    ]
    assert all(r.outcome == "done" and r.receipt is not None for r in records)
    assert records[0].model_points == ((100, 50),) and records[0].native_points == ((200, 100),)


def test_move_drag_scroll_and_cursor_position_in_screenshot_pixels(
    scaled: tuple[ClaudeToolset, Recorder],
) -> None:
    tools, recorder = scaled
    call(tools, "mouse_move", coordinate=[123, 77])
    recorder.wait_for(lambda e: e.kind == "MotionNotify" and (e.root_x, e.root_y) == (246, 154))
    assert call(tools, "cursor_position") == [{"type": "text", "text": "X=123,Y=77"}]
    call(tools, "left_click_drag", start_coordinate=[10, 20], coordinate=[300, 200])
    release = recorder.wait_for(lambda e: e.kind == "ButtonRelease" and e.button == 1)
    press = presses(recorder)[0]
    assert (press.button, press.root_x, press.root_y) == (1, 20, 40)
    assert (release.root_x, release.root_y) == (600, 400)
    call(tools, "scroll", coordinate=[50, 60], scroll_direction="down", scroll_amount=3)
    call(tools, "scroll", scroll_direction="left", scroll_amount=2)  # at the pointer
    wheel = [e for e in wait_presses(recorder, 6) if e.button != 1]
    assert [(e.button, e.root_x, e.root_y) for e in wheel] == [(5, 100, 120)] * 3 + [
        (6, 100, 120)
    ] * 2


def test_left_mouse_down_holds_across_calls_until_up_turn_end_error_or_close(
    desktop: DesktopFactory,
) -> None:
    running, recorder = desktop(800, 600)
    tools = toolset(running, Viewport.native())
    call(tools, "mouse_move", coordinate=[100, 100])
    call(tools, "left_mouse_down")
    call(tools, "mouse_move", coordinate=[300, 200])
    motion = recorder.wait_for(lambda e: e.kind == "MotionNotify" and e.root_x == 300)
    assert motion.state & X.Button1Mask  # still pressed while the pointer moved, a call later
    assert not presses(recorder, "ButtonRelease")
    call(tools, "left_mouse_up")
    release = recorder.wait_for(lambda e: e.kind == "ButtonRelease")
    assert (release.button, release.root_x, release.root_y) == (1, 300, 200)
    assert not tools.button_down
    assert "left_mouse_up" in refusal(tools, "left_mouse_up")  # nothing pressed: refused

    def pressed_then(release_it: Any) -> None:
        recorder.clear()
        call(tools, "left_mouse_down")
        recorder.wait_for(lambda e: e.kind == "ButtonPress")
        release_it()
        recorder.wait_for(lambda e: e.kind == "ButtonRelease" and e.button == 1)
        assert not tools.button_down

    # a failed member releases it (the click is refused: outside the 800x600 screenshot)
    pressed_then(lambda: refusal(tools, "left_click", coordinate=[900, 10]))
    pressed_then(tools.end_turn)
    pressed_then(lambda: list(claude_turns(iter(["one turn"]), tools)))
    pressed_then(tools.close)


def test_keys_chords_repeat_hold_and_unicode_typing(desktop: DesktopFactory) -> None:
    running, recorder = desktop(800, 600)
    with toolset(running, Viewport.native()) as tools:
        call(tools, "key", text="ctrl+shift+Escape")
        escape = recorder.wait_for(lambda e: e.kind == "KeyPress" and e.keysym_name == "Escape")
        assert escape.modifiers >= {"control", "shift"}
        recorder.clear()
        call(tools, "key", text="ctrl+a ctrl+c")
        call(tools, "key", text="Down", repeat=3)
        names = [e.keysym_name for e in wait_presses(recorder, 7, "KeyPress")]
        assert names == ["Control_L", "a", "Control_L", "c", "Down", "Down", "Down"]
        recorder.clear()
        call(tools, "hold_key", text="shift", duration=1)
        down = recorder.wait_for(lambda e: e.kind == "KeyPress" and e.keysym_name == "Shift_L")
        up = recorder.wait_for(lambda e: e.kind == "KeyRelease" and e.keysym_name == "Shift_L")
        assert 950 <= up.time - down.time <= 3000  # X server milliseconds
        recorder.clear()
        call(tools, "type", text="héllo 日本 ✓")
        recorder.wait_until(lambda _: recorder.text() == "héllo 日本 ✓", what="typed text")


def test_the_whole_claude_key_table_presses_its_keysym(desktop: DesktopFactory) -> None:
    running, recorder = desktop(640, 480)
    with toolset(running, Viewport.native(), settle=False) as tools:
        missed = []
        for name, keysym in sorted(CLAUDE_KEYS.items()):
            recorder.clear()
            spelled = name.upper() if name.isalpha() and len(name) > 1 else name
            call(tools, "key", text=spelled)  # names are case-insensitive
            wanted = keysym_number(keysym)
            try:
                recorder.wait_until(
                    lambda evs, wanted=wanted: any(  # type: ignore[misc]
                        e.kind == "KeyPress" and e.keysym == wanted for e in evs
                    ),
                    timeout=2,
                )
            except AssertionError:
                missed.append(
                    (name, keysym, [e.keysym_name for e in presses(recorder, "KeyPress")])
                )
        assert not missed
        recorder.clear()
        call(tools, "key", text="XF86CALCULATOR aacute")  # any X keysym name, any case
        calculator, aacute = keysym_number("XF86Calculator"), keysym_number("aacute")
        recorder.wait_until(
            lambda evs: [e.keysym for e in evs if e.kind == "KeyPress"][-2:] == [calculator, aacute]
        )


def test_bad_inputs_are_refused_naming_the_member_and_field(
    scaled: tuple[ClaudeToolset, Recorder],
) -> None:
    tools, recorder = scaled
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("key", {"text": "ctrl+Fnord"}, "Fnord"),
        ("key", {"text": "ctrl++ Return", "repeat": 0}, "repeat"),
        ("key", {"text": "   "}, "text"),
        ("hold_key", {"text": "shift ctrl", "duration": 1}, "text"),
        ("hold_key", {"text": "shift", "duration": 61}, "duration"),
        ("left_click", {"coordinate": [800, 10]}, "outside the 800x600 screenshot"),
        ("left_click", {"coordinate": [-1, 10]}, "coordinate"),
        ("left_click", {"coordinate": [10, 10], "text": "ctrl+a"}, "text"),
        ("left_click_drag", {"start_coordinate": [1, 1], "coordinate": [10, 900]}, "(10, 900)"),
        ("scroll", {"scroll_direction": "down", "scroll_amount": 0}, "scroll_amount"),
        ("wait", {"duration": 61}, "duration"),
        ("zoom", {"region": [10, 10, 5, 20]}, "region"),
        ("zoom", {"region": [0, 0, 801, 600]}, "region"),
    ]
    for member, member_input, named in cases:
        text = refusal(tools, member, **member_input)
        assert member in text and named in text, (member, member_input, text)
    # the SDK's own schema check names the field too, and nothing reached the screen
    assert "coordinate" in refusal(tools, "mouse_move", coordinate=[1, 2, 3])
    assert "scroll_direction" in refusal(
        tools, "scroll", scroll_direction="sideways", scroll_amount=1
    )
    assert not presses(recorder) and not presses(recorder, "KeyPress")


def _stripes_window(display_name: str, width: int, height: int) -> Any:
    """A window at (0, 0) whose background is 1-pixel black and white vertical stripes over its
    left half and solid gray over its right half."""
    conn = display.Display(display_name)
    screen = conn.screen()
    pixmap = screen.root.create_pixmap(width, height, screen.root_depth)
    white = pixmap.create_gc(foreground=screen.white_pixel)
    black = pixmap.create_gc(foreground=screen.black_pixel)
    pixmap.fill_rectangle(white, 0, 0, width, height)
    for x in range(0, width // 2, 2):
        pixmap.fill_rectangle(black, x, 0, 1, height)
    window = screen.root.create_window(
        0,
        0,
        width,
        height,
        0,
        screen.root_depth,
        background_pixmap=pixmap,
        override_redirect=True,
    )
    window.map()
    conn.sync()
    return conn


def test_zoom_captures_native_detail_the_scaled_screenshot_lacks(desktop: DesktopFactory) -> None:
    running, _recorder = desktop(1600, 1200)
    conn = _stripes_window(running.display, 800, 600)
    try:
        with toolset(running, Viewport.fit(800, 600)) as tools:
            shot = call(tools, "screenshot")[0]
            full = Image.open(io.BytesIO(_b64(shot))).convert("L")
            assert full.size == (800, 600)
            zoom = call(tools, "zoom", region=[100, 75, 300, 225])[0]
            zoomed = Image.open(io.BytesIO(_b64(zoom))).convert("L")
            # 200x150 screenshot px = 400x300 screen px, scaled up to fit the 800x600 view
            assert zoomed.size == (800, 600)
            crop = full.crop((100, 75, 300, 225))
            back = zoomed.resize(crop.size, Image.Resampling.LANCZOS)
            difference = ImageStat.Stat(ImageChops.difference(back, crop)).mean[0]
            assert difference < 0.03 * 255, difference
            # the stripes (x < 200 screenshot px) are gray in the screenshot, sharp in the zoom
            detail_zoom = ImageStat.Stat(zoomed.crop((0, 0, 100, 600))).stddev[0]
            detail_shot = ImageStat.Stat(crop.crop((0, 0, 50, 150))).stddev[0]
            assert detail_zoom > 80 and detail_shot < 20, (detail_zoom, detail_shot)
    finally:
        conn.close()


def _b64(block: dict[str, Any]) -> bytes:
    assert block["type"] == "image" and block["source"]["media_type"] == "image/png"
    return base64.b64decode(block["source"]["data"])


def test_async_toolset_serves_the_same_members(desktop: DesktopFactory) -> None:
    running, recorder = desktop(1600, 1200)

    async def main() -> Any:
        driver = await AsyncGuestDriver.connect(
            running.agent.socket_path, viewport=Viewport.fit(800, 600)
        )
        async with AsyncClaudeToolset(driver, confirm=allow, owns_driver=True) as tools:
            await tools.call(CONTEXT, "left_click", {"coordinate": [100, 50]})
            await tools.call(CONTEXT, "left_mouse_down", {})
            with pytest.raises(ToolError):
                await tools.call(CONTEXT, "mouse_move", {"coordinate": [900, 10]})
            assert not tools.button_down  # released on the error
            await tools.call(CONTEXT, "key", {"text": "alt+Tab"})
            return await tools.call(CONTEXT, "cursor_position", {})

    position = anyio.run(main)
    assert position == [{"type": "text", "text": "X=100,Y=50"}]
    first = wait_presses(recorder, 1)[0]
    assert (first.button, first.root_x, first.root_y) == (1, 200, 100)
    recorder.wait_for(lambda e: e.kind == "ButtonRelease" and e.button == 1 and e.root_x == 200)
    recorder.wait_for(lambda e: e.kind == "KeyPress" and e.keysym_name == "Tab")
