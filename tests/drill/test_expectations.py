"""A scripted turn's ``sees``: parsed strictly, judged on the screenshot the turn was sent."""

from __future__ import annotations

from typing import Any

import pytest
from PIL import Image, ImageDraw

from cubicle.drivers.errors import ScriptError
from cubicle.drivers.scripted_model import parse_script
from cubicle.drivers.scripted_model.expect import parse_sees

WINDOWS: list[dict[str, Any]] = [
    {"title": "note.txt - Mousepad", "wm_class": ["mousepad", "Mousepad"], "focused": True},
    {"title": "tint2", "wm_class": ["tint2", "Tint2"], "type": "dock"},
    {"title": "New Tab - Chromium", "wm_class": ["chromium", "Chromium"], "focused": False},
]


def _one(spec: dict[str, Any]) -> Any:
    return parse_sees([spec], "s.json", 1)[0]


def test_window_expectations_match_title_class_and_focus_and_name_what_they_saw() -> None:
    shot = Image.new("RGB", (10, 10))
    assert (
        _one({"window": {"title": "note.txt", "focused": True}}).failure(shot, None, WINDOWS)
        is None
    )
    assert _one({"window": {"class": "Chromium"}}).failure(shot, None, WINDOWS) is None
    missing = _one({"window": {"class": "Chromium", "focused": True}, "why": "browser on top"})
    problem = missing.failure(shot, None, WINDOWS)
    assert problem == "windows seen: 'note.txt - Mousepad' (focused), 'New Tab - Chromium'"
    assert missing.describe() == "a window of class 'Chromium', focused (browser on top)"


def test_pixel_expectations_hold_within_their_tolerance() -> None:
    shot = Image.new("RGB", (20, 20), (0x20, 0x24, 0x2C))
    near = _one({"pixel": [3, 4], "rgb": "#22262e", "tolerance": 4})
    assert near.failure(shot, None, []) is None
    far = _one({"pixel": [3, 4], "rgb": "#ffffff", "tolerance": 8})
    assert far.failure(shot, None, []) == "the pixel is #20242c"
    outside = _one({"pixel": [30, 4], "rgb": "#ffffff"})
    assert "outside the 20x20 screenshot" in str(outside.failure(shot, None, []))


def test_changed_and_unchanged_compare_with_the_previous_screenshot() -> None:
    before = Image.new("RGB", (100, 100), "white")
    after = before.copy()
    ImageDraw.Draw(after).rectangle((10, 10, 29, 29), fill="black")
    changed = _one({"changed": [0, 0, 50, 50]})
    assert changed.failure(after, before, []) is None
    assert changed.failure(before, before, []) == "0 pixels changed there"
    assert _one({"unchanged": [50, 50, 100, 100]}).failure(after, before, []) is None
    assert _one({"unchanged": [0, 0, 50, 50]}).failure(after, before, []) == (
        "400 pixels changed there"
    )
    assert "no earlier screenshot" in str(changed.failure(after, None, []))


@pytest.mark.parametrize(
    ("spec", "wanted"),
    [
        ({}, "needs exactly one of window, pixel, changed, unchanged"),
        ({"window": {}}, "needs a title or a class"),
        ({"window": {"title": "x", "size": 3}}, "takes title, class, focused"),
        ({"pixel": [1], "rgb": "#000000"}, "pixel must be [x, y]"),
        ({"pixel": [1, 2], "rgb": "red"}, "rgb must be '#rrggbb'"),
        ({"changed": [5, 0, 1, 10]}, "left<right"),
        ({"changed": [0, 0, 1, 1], "colour": 1}, "unknown key 'colour' for changed"),
    ],
)
def test_malformed_expectations_are_refused_naming_the_turn_and_entry(
    spec: dict[str, Any], wanted: str
) -> None:
    with pytest.raises(ScriptError) as error:
        parse_sees([spec], "s.json", 2)
    assert "script s.json turn 2: sees[0]" in str(error.value) and wanted in str(error.value)


def test_the_first_turn_cannot_expect_anything() -> None:
    script = {
        "name": "x",
        "turns": [{"sees": [{"changed": [0, 0, 1, 1]}], "message": "done"}],
    }
    with pytest.raises(ScriptError, match="the first turn is sent no screenshot"):
        parse_script(script)
