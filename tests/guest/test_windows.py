"""``windows`` lists real top-level windows with titles, classes, geometry, pid and focus."""

from __future__ import annotations

import pytest

from cubicle_guest.client import AgentClient
from tests.guest.paint import Painter
from tests.support.recorder import Recorder
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11


def test_windows_lists_mapped_top_levels(client: AgentClient, xserver: Xvfb) -> None:
    with Painter(xserver.display) as painter:
        window = painter.rect(
            40,
            30,
            300,
            200,
            0x123456,
            title="Grêmio — 日本",
            wm_class=("editor", "Editor"),
            pid=4242,
        )
        listed = client.windows().result["windows"]
        entry = next(w for w in listed if w["id"] == window.id)
        assert entry == {
            "id": window.id,
            "title": "Grêmio — 日本",
            "wm_class": ["editor", "Editor"],
            "type": "normal",
            "x": 40,
            "y": 30,
            "width": 300,
            "height": 200,
            "pid": 4242,
            "focused": False,
        }
    after = client.windows().result["windows"]
    assert all(w["id"] != window.id for w in after)


def test_windows_marks_the_focused_window(client: AgentClient, recorder: Recorder) -> None:
    listed = client.windows().result["windows"]
    entry = next(w for w in listed if w["id"] == recorder.window_id)
    assert entry["focused"] is True
    assert entry["title"] == "cubicle-recorder"
    assert "pid" not in entry
