"""Pointer actions reach a real window at the right pixel with the right button and modifiers."""

from __future__ import annotations

import pytest
from Xlib import X

from cubicle_guest import protocol
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError
from cubicle_guest.protocol import BUTTONS, SCROLL_PIXELS_PER_CLICK
from cubicle_guest.xinput import DRAG_HOLD_S, DRAG_STEP_PX, DRAG_STEP_S, drag_steps
from tests.support.recorder import RecordedEvent, Recorder

pytestmark = pytest.mark.x11


def _buttons(rec: Recorder, kind: str | None = None) -> list[RecordedEvent]:
    return [e for e in rec.events if e.button is not None and (kind is None or e.kind == kind)]


@pytest.mark.parametrize("name", sorted(BUTTONS))
def test_click_delivers_button_at_pixel(client: AgentClient, recorder: Recorder, name: str) -> None:
    client.click(960, 540, button=name)
    events = recorder.wait_until(
        lambda evs: any(e.kind == "ButtonRelease" for e in evs), what=f"{name} release"
    )
    presses = [e for e in events if e.kind == "ButtonPress"]
    releases = [e for e in events if e.kind == "ButtonRelease"]
    assert [(e.button, e.root_x, e.root_y, e.x, e.y) for e in presses] == [
        (BUTTONS[name], 960, 540, 960, 540)
    ]
    assert [(e.button, e.root_x, e.root_y) for e in releases] == [(BUTTONS[name], 960, 540)]


def test_click_defaults_to_left(client: AgentClient, recorder: Recorder) -> None:
    client.click(0, 799)
    press = recorder.wait_for(lambda e: e.kind == "ButtonPress")
    assert (press.button, press.root_x, press.root_y) == (1, 0, 799)


def test_click_with_keys_holds_modifiers_and_releases_them(
    client: AgentClient, recorder: Recorder
) -> None:
    client.click(100, 200, keys=["ctrl", "shift"])
    recorder.wait_until(
        lambda evs: sum(e.kind == "KeyRelease" for e in evs) == 2, what="modifier releases"
    )
    press = next(e for e in recorder.events if e.kind == "ButtonPress")
    assert press.state & X.ControlMask and press.state & X.ShiftMask
    kinds = [
        (e.kind, e.keysym_name or e.button) for e in recorder.events if e.kind != "MotionNotify"
    ]
    assert kinds == [
        ("KeyPress", "Control_L"),
        ("KeyPress", "Shift_L"),
        ("ButtonPress", 1),
        ("ButtonRelease", 1),
        ("KeyRelease", "Shift_L"),
        ("KeyRelease", "Control_L"),
    ]


def test_double_click_sends_two_left_clicks_at_pixel(
    client: AgentClient, recorder: Recorder
) -> None:
    client.double_click(321, 123)
    events = recorder.wait_until(
        lambda evs: len(_buttons_of(evs, "ButtonRelease")) == 2, what="two releases"
    )
    clicks = [(e.kind, e.button, e.root_x, e.root_y) for e in events if e.button is not None]
    assert clicks == [("ButtonPress", 1, 321, 123), ("ButtonRelease", 1, 321, 123)] * 2


def _buttons_of(events: list[RecordedEvent], kind: str) -> list[RecordedEvent]:
    return [e for e in events if e.kind == kind]


def test_move_delivers_motion_to_pixel(client: AgentClient, recorder: Recorder) -> None:
    client.move(5, 6)
    client.move(1279, 799)
    motion = recorder.wait_for(lambda e: e.kind == "MotionNotify" and e.root_x == 1279)
    assert (motion.root_x, motion.root_y) == (1279, 799)
    assert not _buttons(recorder)


def test_drag_presses_at_first_moves_through_path_releases_at_last(
    client: AgentClient, recorder: Recorder
) -> None:
    path = [{"x": 10, "y": 10}, {"x": 200, "y": 50}, {"x": 400, "y": 300}, {"x": 600, "y": 310}]
    client.drag(path)
    events = recorder.wait_until(
        lambda evs: any(e.kind == "ButtonRelease" for e in evs), what="release"
    )
    press = next(e for e in events if e.kind == "ButtonPress")
    release = next(e for e in events if e.kind == "ButtonRelease")
    assert (press.button, press.root_x, press.root_y) == (1, 10, 10)
    assert (release.button, release.root_x, release.root_y) == (1, 600, 310)
    held = [
        (e.root_x, e.root_y) for e in events if e.kind == "MotionNotify" and e.state & X.Button1Mask
    ]
    assert held == drag_steps([(p["x"], p["y"]) for p in path])[1:]
    corners = [held.index((p["x"], p["y"])) for p in path[1:]]
    assert corners == sorted(corners), "through every point of the path, in order"
    steps = zip([(10, 10), *held], held, strict=False)
    assert all(max(abs(x1 - x0), abs(y1 - y0)) <= DRAG_STEP_PX for (x0, y0), (x1, y1) in steps)


def test_a_two_point_drag_moves_in_paced_steps_as_toolkit_drag_and_drop_needs(
    client: AgentClient, recorder: Recorder
) -> None:
    """Models send a drag as two points; GTK's drag-and-drop (Thunar) drops only when the
    pointer moved over the target in steps and rested there before the release."""
    client.drag([{"x": 700, "y": 100}, {"x": 100, "y": 100}])
    events = recorder.wait_until(
        lambda evs: any(e.kind == "ButtonRelease" for e in evs), what="release"
    )
    press = next(e for e in events if e.kind == "ButtonPress")
    release = next(e for e in events if e.kind == "ButtonRelease")
    held = [e for e in events if e.kind == "MotionNotify" and e.state & X.Button1Mask]
    assert len(held) == 600 // DRAG_STEP_PX + 1 and (held[-1].root_x, held[-1].root_y) == (100, 100)
    hold_ms = DRAG_HOLD_S * 1000 - 5  # X server times are whole milliseconds
    assert held[0].time - press.time >= hold_ms, "a rest after the press"
    assert release.time - held[-1].time >= hold_ms, "a rest over the target before the release"
    assert held[-1].time - held[0].time >= (len(held) - 1) * DRAG_STEP_S * 1000 - 5


def test_scroll_converts_pixels_to_wheel_clicks_and_carries_remainder(
    client: AgentClient, recorder: Recorder
) -> None:
    first = client.scroll(50, 60, 0, 250).result
    second = client.scroll(50, 60, 0, 50).result
    third = client.scroll(50, 60, -130, -99).result
    fourth = client.scroll(50, 60, 300, 0).result
    assert SCROLL_PIXELS_PER_CLICK == 100
    assert (first["clicks_y"], second["clicks_y"], third["clicks_y"]) == (2, 1, 0)
    assert (third["clicks_x"], fourth["clicks_x"]) == (-1, 2)  # -130 → -1 (carry -30); 270 → 2
    events = recorder.wait_until(
        lambda evs: len(_buttons_of(evs, "ButtonRelease")) == 6, what="6 wheel clicks"
    )
    presses = [e.button for e in events if e.kind == "ButtonPress"]
    assert presses == [5, 5, 5, 6, 7, 7]
    assert all((e.root_x, e.root_y) == (50, 60) for e in _buttons(recorder))


@pytest.mark.parametrize(
    ("op", "args", "code", "named"),
    [
        ("click", {"x": 1280, "y": 0}, "out_of_bounds", "1280"),
        ("click", {"x": -1, "y": 10}, "out_of_bounds", "-1"),
        ("click", {"x": 10, "y": 800}, "out_of_bounds", "1280x800"),
        ("click", {"x": 10, "y": 10, "button": "middle"}, "unknown_button", "'middle'"),
        ("click", {"x": 10, "y": 10, "keys": ["ctrl", "hyperdrive"]}, "unknown_key", "hyperdrive"),
        ("double_click", {"x": 5000, "y": 10}, "out_of_bounds", "5000"),
        ("move", {"x": 0, "y": 900}, "out_of_bounds", "900"),
        ("drag", {"path": [{"x": 1, "y": 1}]}, "bad_args", "at least 2"),
        ("drag", {"path": [{"x": 1, "y": 1}, {"x": 2000, "y": 1}]}, "out_of_bounds", "2000"),
        ("scroll", {"x": 10, "y": 1000, "scroll_x": 0, "scroll_y": 100}, "out_of_bounds", "1000"),
        ("click", {"x": 1.5, "y": 10}, "bad_args", "'x'"),
        ("click", {"x": True, "y": 10}, "bad_args", "'x'"),
    ],
)
def test_bad_pointer_input_is_rejected_before_anything_happens(
    client: AgentClient, recorder: Recorder, op: str, args: dict[str, object], code: str, named: str
) -> None:
    sock = client._sock  # send raw so host-side validation cannot hide the agent's answer
    sock.sendall(protocol.encode_frame(protocol.request("raw", op, args)))
    decoder = protocol.FrameDecoder()
    frames: list[protocol.Frame] = []
    while not frames:
        frames = decoder.feed(sock.recv(65536))
    with pytest.raises(GuestError) as caught:
        protocol.parse_reply(frames[0].message, op=op)
    assert caught.value.code == code
    assert named in caught.value.reason
    client.move(700, 700)  # a marker: everything before it was delivered
    recorder.wait_for(lambda e: e.kind == "MotionNotify" and e.root_x == 700)
    assert [e for e in recorder.events if e.kind != "MotionNotify"] == []
