"""The agent's held-input ops (protocol feature ``hold``): ``mouse_down``/``mouse_up`` keep a
button pressed across requests, ``hold_keys`` releases its chord in the same request,
``pointer`` reports the pointer, ``click``'s ``count`` is one burst; bad arguments are refused
naming them, and ``release_all`` lets go of a held button."""

from __future__ import annotations

import pytest
from Xlib import X

from cubicle_guest import protocol
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError
from tests.support.recorder import Recorder

pytestmark = pytest.mark.x11


def test_hello_lists_the_hold_feature(client: AgentClient) -> None:
    assert (
        "hold" in client.call("hello", {"protocol": protocol.PROTOCOL_VERSION}).result["features"]
    )


def test_a_button_stays_down_across_requests_until_mouse_up(
    client: AgentClient, recorder: Recorder
) -> None:
    client.move(40, 50)
    client.mouse_down()
    with pytest.raises(GuestError, match="already down"):
        client.mouse_down()
    client.move(90, 80)
    moved = recorder.wait_for(lambda e: e.kind == "MotionNotify" and e.root_x == 90)
    assert moved.state & X.Button1Mask
    assert client.pointer().result == {"x": 90, "y": 80}
    client.mouse_up()
    release = recorder.wait_for(lambda e: e.kind == "ButtonRelease")
    assert (release.button, release.root_x, release.root_y) == (1, 90, 80)
    with pytest.raises(GuestError, match="not down"):
        client.mouse_up()
    client.mouse_down(button="right")
    assert "button3" in client.release_all().result["released"]


def test_hold_keys_holds_for_its_time_and_releases(client: AgentClient, recorder: Recorder) -> None:
    client.hold_keys(["shift"], 300)
    down = recorder.wait_for(lambda e: e.kind == "KeyPress" and e.keysym_name == "Shift_L")
    up = recorder.wait_for(lambda e: e.kind == "KeyRelease" and e.keysym_name == "Shift_L")
    assert 250 <= up.time - down.time <= 2000
    for ms in (-1, protocol.MAX_WAIT_MS + 1):
        with pytest.raises(GuestError, match="hold_keys ms"):
            client.hold_keys(["shift"], ms)
    with pytest.raises(GuestError, match="Fnord"):
        client.hold_keys(["Fnord"], 10)


def test_click_count_is_one_burst_and_bounded(client: AgentClient, recorder: Recorder) -> None:
    client.click(30, 30, count=3)
    presses = recorder.wait_until(lambda evs: sum(e.kind == "ButtonPress" for e in evs) == 3)
    times = [e.time for e in presses if e.kind == "ButtonPress"]
    assert times[-1] - times[0] < 200
    for count in (0, 4):
        with pytest.raises(GuestError, match="click count"):
            client.click(30, 30, count=count)
