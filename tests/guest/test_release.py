"""Keys and buttons an action holds are released even when the action fails midway."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from Xlib import display

from cubicle_guest.errors import GuestError
from cubicle_guest.xinput import XInput
from tests.support.recorder import Recorder
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11


class _FailingMotion(XInput):
    """Real XTEST input whose pointer motion breaks after ``allowed`` moves (fault injection:
    the X server refusing mid-action)."""

    allowed = 1

    def _motion(self, x: int, y: int) -> None:
        if self.allowed <= 0:
            raise GuestError("x11_error", "injected failure: X server refused a motion")
        self.allowed -= 1
        super()._motion(x, y)


@pytest.fixture
def failing(xserver: Xvfb) -> Iterator[_FailingMotion]:
    failing_input = _FailingMotion(xserver.display)
    try:
        yield failing_input
    finally:
        failing_input.close()


def _nothing_held(display_name: str) -> bool:
    connection = display.Display(display_name)
    try:
        keys_down = any(connection.query_keymap())
        buttons = int(connection.screen().root.query_pointer().mask) & 0x1F00
        return not keys_down and not buttons
    finally:
        connection.close()


def test_drag_failing_midway_releases_button_and_held_keys(
    failing: _FailingMotion, recorder: Recorder, xserver: Xvfb
) -> None:
    with pytest.raises(GuestError, match="injected failure"):
        failing.drag([(10, 10), (100, 100), (200, 200)], keys=["ctrl", "shift"])
    events = recorder.wait_until(
        lambda evs: (
            any(e.kind == "ButtonRelease" for e in evs)
            and sum(e.kind == "KeyRelease" for e in evs) == 2
        ),
        what="releases after failure",
    )
    kinds = [(e.kind, e.keysym_name or e.button) for e in events if e.kind != "MotionNotify"]
    assert kinds == [
        ("KeyPress", "Control_L"),
        ("KeyPress", "Shift_L"),
        ("ButtonPress", 1),
        ("ButtonRelease", 1),
        ("KeyRelease", "Shift_L"),
        ("KeyRelease", "Control_L"),
    ]
    assert _nothing_held(xserver.display)
    assert failing.release_all() == []  # nothing of ours left to release


def test_click_failing_before_the_press_still_releases_held_keys(
    failing: _FailingMotion, recorder: Recorder, xserver: Xvfb
) -> None:
    failing.allowed = 0
    with pytest.raises(GuestError, match="injected failure"):
        failing.click(50, 50, keys=["alt"])
    recorder.wait_for(lambda e: e.kind == "KeyRelease" and e.keysym_name == "Alt_L")
    assert not [e for e in recorder.events if e.button is not None]
    assert _nothing_held(xserver.display)
