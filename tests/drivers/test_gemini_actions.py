"""Gemini's computer-use calls (cubicle.drivers.gemini_actions) on a real agent on Xvfb: every
served call mapped from the 0-999 grid at two screen sizes (one of them a cropped, scaled view),
effects read in a recorder window; malformed, unknown and browser-only calls refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.errors import ActionCancelled, ActionRejected
from cubicle.drivers.gemini_actions import (
    BROWSER_ONLY,
    FUNCTIONS,
    GeminiComputer,
    computer_use_tool,
)
from cubicle.drivers.viewport import Rect, Viewport
from tests.drivers.conftest import DesktopFactory
from tests.support.recorder import RecordedEvent, Recorder

pytestmark = pytest.mark.x11

SCREENS = [
    pytest.param((1280, 800), Viewport.native(), Rect(0, 0, 1280, 800), id="1280x800-native"),
    pytest.param(
        (1600, 1200),
        Viewport.fit(500, 350, crop=Rect(200, 100, 1000, 700)),
        Rect(200, 100, 1000, 700),
        id="1600x1200-cropped-scaled",
    ),
]


def on_grid(crop: Rect, x: int, y: int) -> tuple[int, int]:
    """Where grid point (x, y) must land: the grid spans the crop the model was shown."""
    return crop.x + x * crop.width // 1000, crop.y + y * crop.height // 1000


def buttons(recorder: Recorder, count: int, kind: str = "ButtonPress") -> list[RecordedEvent]:
    events = recorder.wait_until(
        lambda evs: sum(e.kind == kind for e in evs) >= count, what=f"{count} {kind}"
    )
    return [e for e in events if e.kind == kind]


@pytest.mark.parametrize(("screen", "viewport", "crop"), SCREENS)
def test_every_call_lands_on_the_grid_mapped_pixel(
    desktop: DesktopFactory, screen: tuple[int, int], viewport: Viewport, crop: Rect
) -> None:
    running, recorder = desktop(*screen)
    with GuestDriver.connect(running.agent.socket_path, viewport=viewport) as driver:
        gemini = GeminiComputer(driver)
        gemini.execute("click_at", {"x": 0, "y": 0})
        gemini.execute("click_at", {"x": 999, "y": 999, "intent": "the far corner"})
        gemini.execute("click_at", {"x": 500, "y": 250})
        got = [(e.button, e.root_x, e.root_y) for e in buttons(recorder, 3)]
        assert got == [
            (1, crop.x, crop.y),
            (1, *on_grid(crop, 999, 999)),
            (1, *on_grid(crop, 500, 250)),
        ]
        far_x, far_y = on_grid(crop, 999, 999)  # inside the crop, in its last grid cell
        assert crop.x + crop.width - 2 <= far_x < crop.x + crop.width
        assert crop.y + crop.height - 2 <= far_y < crop.y + crop.height

        recorder.clear()
        gemini.execute("hover_at", {"x": 123, "y": 456})
        target = on_grid(crop, 123, 456)
        recorder.wait_for(lambda e: e.kind == "MotionNotify" and (e.root_x, e.root_y) == target)

        recorder.clear()
        gemini.execute(
            "drag_and_drop", {"x": 100, "y": 100, "destination_x": 800, "destination_y": 600}
        )
        release = buttons(recorder, 1, "ButtonRelease")[0]
        press = buttons(recorder, 1)[0]
        assert (press.root_x, press.root_y) == on_grid(crop, 100, 100)
        assert (release.root_x, release.root_y) == on_grid(crop, 800, 600)

        recorder.clear()
        gemini.execute("scroll_document", {"direction": "down"})
        center = (crop.x + crop.width // 2, crop.y + crop.height // 2)
        clicks = crop.height // 2 // 100
        wheel = buttons(recorder, clicks)
        assert {(e.button, e.root_x, e.root_y) for e in wheel} == {(5, *center)}

        recorder.clear()
        gemini.execute("scroll_at", {"x": 900, "y": 100, "direction": "left", "magnitude": 400})
        clicks = 400 * crop.width // 1000 // 100
        wheel = buttons(recorder, clicks)
        assert [(e.button, e.root_x, e.root_y) for e in wheel] == [
            (6, *on_grid(crop, 900, 100))
        ] * clicks

        recorder.clear()
        gemini.execute("type_text_at", {"x": 300, "y": 300, "text": "héllo ✓"})
        recorder.wait_until(lambda _: recorder.text() == "héllo ✓\n", what="typed text + Return")
        press = buttons(recorder, 1)[0]
        assert (press.root_x, press.root_y) == on_grid(crop, 300, 300)
        names = [e.keysym_name for e in recorder.key_events()]
        assert names[:3] == ["Control_L", "a", "BackSpace"]  # cleared first by default

        recorder.clear()
        gemini.execute(
            "type_text_at",
            {"x": 1, "y": 1, "text": "x", "press_enter": False, "clear_before_typing": False},
        )
        recorder.wait_until(lambda _: recorder.text() == "x", what="x")
        gemini.execute("key_combination", {"keys": "Control+Shift+T"})
        chord = recorder.wait_for(lambda e: e.kind == "KeyPress" and e.keysym_name in ("t", "T"))
        assert chord.modifiers >= {"control", "shift"}
        assert [e.keysym_name for e in recorder.key_events()][:1] == ["x"]


def test_bad_unknown_and_browser_only_calls_are_refused_by_name(desktop: DesktopFactory) -> None:
    running, recorder = desktop(640, 480)
    with GuestDriver.connect(running.agent.socket_path) as driver:
        gemini = GeminiComputer(driver)
        cases: list[tuple[str, Any, str]] = [
            ("click_at", {"x": 1000, "y": 5}, "x must be 0..999"),
            ("click_at", {"x": 5, "y": -1}, "y must be 0..999"),
            ("click_at", {"x": 5}, "y is required"),
            ("click_at", {"x": 5, "y": 5, "button": "right"}, "unknown field 'button'"),
            ("click_at", {"x": True, "y": 5}, "x must be int"),
            ("click_at", {"x": "5", "y": 5}, "x must be int"),
            (
                "drag_and_drop",
                {"x": 1, "y": 1, "destination_x": 1, "destination_y": 1000},
                "destination_y",
            ),
            ("type_text_at", {"x": 1, "y": 1, "text": 7}, "text must be str"),
            ("type_text_at", {"x": 1, "y": 1, "text": "a", "press_enter": "yes"}, "press_enter"),
            ("key_combination", {"keys": "Control+Fnord"}, "'Fnord'"),
            ("scroll_document", {"direction": "sideways"}, "direction"),
            ("scroll_at", {"x": 1, "y": 1, "direction": "up", "magnitude": 0}, "magnitude"),
            ("double_click_at", {"x": 1, "y": 1}, "unknown function"),
            ("navigate", {"url": "https://example.com"}, "browser-only"),
            (
                "click_at",
                {"x": 1, "y": 1, "safety_decision": {"decision": "require_confirmation"}},
                "confirmation",
            ),
        ]
        for name, args, named in cases:
            with pytest.raises(ActionRejected) as caught:
                gemini.execute(name, args)
            assert name in str(caught.value) and named in str(caught.value), (
                name,
                str(caught.value),
            )
        for name in BROWSER_ONLY:
            with pytest.raises(ActionRejected, match="browser-only"):
                gemini.execute(name, {})
        assert not recorder.events  # nothing reached the screen
        approved = GeminiComputer(driver, confirm=lambda name, args: name == "click_at")
        approved.execute(
            "click_at", {"x": 0, "y": 0, "safety_decision": {"decision": "require_confirmation"}}
        )
        buttons(recorder, 1)
        with pytest.raises(ActionCancelled):
            GeminiComputer(driver, cancelled=lambda: True).execute("wait_5_seconds", {})


def test_the_tool_entry_runs_on_the_desktop_without_the_browser_functions() -> None:
    tool = computer_use_tool().model_dump(mode="json", exclude_none=True)
    assert tool == {
        "computer_use": {
            "environment": "ENVIRONMENT_DESKTOP",
            "excluded_predefined_functions": list(BROWSER_ONLY),
        }
    }
    assert not set(BROWSER_ONLY) & set(FUNCTIONS)
