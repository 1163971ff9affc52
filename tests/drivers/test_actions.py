"""Action validation and mapping before anything is sent (pure; the SDK's own models)."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import computer_action as modern
from openai.types.responses import response_computer_tool_call as legacy

from cubicle.drivers.actions import plan_action
from cubicle.drivers.errors import ActionRejected, CoordinateOutOfView
from cubicle.drivers.viewport import Rect, Viewport

GEOMETRY = Viewport.fit(800, 600, crop=Rect(0, 0, 1600, 1200)).geometry(1600, 1200)


def test_click_is_mapped_and_keeps_button_and_keys() -> None:
    plan = plan_action(
        "click", modern.Click(type="click", button="right", x=10, y=20, keys=["CTRL"]), GEOMETRY
    )
    assert plan.op == "click"
    assert plan.args == {"x": 20, "y": 40, "button": "right", "keys": ["CTRL"]}
    assert plan.model_points == ((10, 20),)
    assert plan.native_points == ((20, 40),)


def test_legacy_actions_are_accepted() -> None:
    plan = plan_action("move", legacy.ActionMove(type="move", x=1, y=2), GEOMETRY)
    assert plan.args == {"x": 2, "y": 4}


def test_every_drag_point_is_mapped() -> None:
    path = [modern.DragPath(x=0, y=0), modern.DragPath(x=100, y=50), modern.DragPath(x=799, y=599)]
    plan = plan_action("drag", modern.Drag(type="drag", path=path), GEOMETRY)
    assert plan.args["path"] == [{"x": 0, "y": 0}, {"x": 200, "y": 100}, {"x": 1598, "y": 1198}]


def test_scroll_point_and_distance_are_mapped() -> None:
    action = modern.Scroll(type="scroll", x=5, y=6, scroll_x=-30, scroll_y=150)
    plan = plan_action("scroll", action, GEOMETRY)
    assert plan.args == {"x": 10, "y": 12, "scroll_x": -60, "scroll_y": 300}


def test_wait_is_done_by_the_driver() -> None:
    assert plan_action("wait", modern.Wait(type="wait"), GEOMETRY).op is None


@pytest.mark.parametrize(
    ("kind", "action", "expected"),
    [
        ("click", {"type": "click", "button": "left", "x": True, "y": 1}, "x must be an integer"),
        ("click", {"type": "click", "button": "left", "x": 1.5, "y": 1}, "x must be an integer"),
        ("click", {"type": "click", "button": "middle", "x": 1, "y": 1}, "button must be one of"),
        ("keypress", {"type": "keypress", "keys": []}, "keys is empty"),
        ("keypress", {"type": "keypress", "keys": ["ctrl", "NoSuchKey"]}, "keys[1]: unknown key"),
        (
            "click",
            {"type": "click", "button": "left", "x": 1, "y": 1, "keys": ["Hyperdrive"]},
            "unknown key",
        ),
        ("drag", {"type": "drag", "path": [{"x": 1, "y": 1}]}, "a drag needs at least 2"),
        (
            "drag",
            {"type": "drag", "path": [{"x": 1, "y": 1}, {"x": "2", "y": 1}]},
            "path[1].x must be an integer",
        ),
        ("type", {"type": "type", "text": "x" * 100_001}, "over the limit of 100000"),
        ("type", {"type": "type", "text": None}, "text must be a string"),
        ("move", {"type": "click", "x": 1, "y": 1}, "passed to move()"),
        ("zoom", {"type": "zoom"}, "unknown action type"),
    ],
    ids=[
        "bool-coordinate",
        "float-coordinate",
        "middle-button",
        "empty-chord",
        "unknown-key",
        "unknown-held-key",
        "one-point-drag",
        "string-in-path",
        "text-too-long",
        "text-none",
        "type-mismatch",
        "unknown-type",
    ],
)
def test_invalid_actions_are_rejected_with_the_reason(
    kind: str, action: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ActionRejected) as caught:
        plan_action(kind, action, GEOMETRY)
    assert expected in str(caught.value)
    assert str(caught.value).startswith(kind)


def test_a_drag_leaving_the_image_is_refused_whole() -> None:
    path = [{"x": 1, "y": 1}, {"x": 800, "y": 1}]
    with pytest.raises(CoordinateOutOfView, match=r"\(800, 1\) is outside the 800x600"):
        plan_action("drag", {"type": "drag", "path": path}, GEOMETRY)
