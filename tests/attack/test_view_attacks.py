"""Attacks on the live view's server (``cubicle view``): a viewer's cookie minting links (VW4)
and VNC sessions that open while a person hands control back (VW8). VW5 (files left after
``down``) is checked in tests/view/test_view_docker.py, with the other cleanup."""

from __future__ import annotations

import re
import threading
from functools import partial
from typing import Any

import pytest
import requests

from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.view.control import open_view, set_mode
from cubicle.orchestrator.view_servers import read_state
from tests.view.conftest import recorder, sandbox, view_dir
from tests.view.guest_recorder import GuestRecorder
from tests.view.rfb import rfb_session, session_cookie_for

__all__ = ["recorder", "sandbox", "view_dir"]

pytestmark = [pytest.mark.attack, pytest.mark.docker, pytest.mark.slow]

VIEWERS = 6
RELEASE_AFTER_S = (0.03, 0.06, 0.09)
"""When control is handed back after the sessions start opening (the window the attack used:
a VNC session takes a few hundred milliseconds to open through the engine's exec stream)."""


def _port(url: str) -> int:
    return int(re.match(r"http://127\.0\.0\.1:(\d+)/", url).group(1))  # type: ignore[union-attr]


def test_a_viewer_cookie_with_any_bearer_mints_no_link(sandbox: Sandbox) -> None:
    """VW4: only the control key mints links; a viewer's cookie with a bogus bearer does not."""
    link = open_view(sandbox.id)
    cookie = session_cookie_for(link.url)
    base = link.url.split("#")[0]
    for bearer in ("x", "", cookie):
        reply = requests.post(
            base + "api/mint",
            headers={"Authorization": f"Bearer {bearer}", "X-Cubicle-View": "1"},
            cookies={"cubicle_view": cookie},
            timeout=10,
        )
        assert reply.status_code == 401, (bearer, reply.text)
    state = read_state(sandbox.id)
    assert state is not None
    minted = requests.post(
        base + "api/mint", headers={"Authorization": f"Bearer {state.key}"}, timeout=10
    )
    assert minted.status_code == 200 and len(minted.json()["token"]) >= 20


def _press_at(point: tuple[int, int], event: dict[str, Any]) -> bool:
    return bool(event["kind"] == "ButtonPress" and event["root_x"] == point[0])


def _viewers_during_release(sandbox: Sandbox, round_: int, delay_s: float) -> list[str]:
    """Open :data:`VIEWERS` sessions in takeover mode, give control back ``delay_s`` later, then
    let each session that is still open click (left half, row ``round_``); their outcomes."""
    link = open_view(sandbox.id, mode="takeover")
    cookie = session_cookie_for(link.url)
    released = threading.Event()
    outcomes: list[str] = []

    def viewer(index: int) -> None:
        try:
            with rfb_session(_port(link.url), cookie) as session:
                released.wait(30)
                session.click(20 + 40 * index, 20 + 40 * round_)
                outcomes.append("clicked")
        except Exception as exc:  # closed because the mode changed: what should happen
            outcomes.append(f"closed: {type(exc).__name__}")

    def release() -> None:
        set_mode(sandbox.id, "view")
        released.set()

    viewers = [threading.Thread(target=viewer, args=(i,)) for i in range(VIEWERS)]
    for thread in viewers:
        thread.start()
    timer = threading.Timer(delay_s, release)
    timer.start()
    timer.join()
    for thread in viewers:
        thread.join(60)
    assert len(outcomes) == VIEWERS, outcomes
    return outcomes


def test_sessions_opening_while_control_is_given_back_deliver_nothing(
    sandbox: Sandbox, recorder: GuestRecorder
) -> None:
    """VW8: six VNC sessions open in takeover mode; control is given back 30-90 ms later, while
    they are still opening; each then sends a click. None reaches the guest: a session opened
    for the old mode is closed (or its input dropped) once the mode changed."""
    agent_clicks: list[tuple[int, int]] = []
    for round_, delay_s in enumerate(RELEASE_AFTER_S):
        outcomes = _viewers_during_release(sandbox, round_, delay_s)
        # the barrier: the agent's click arrives after every viewer's click was read
        point = (300 + 40 * round_, 600)
        with sandbox.connect() as client:
            client.hello(timeout=10.0)
            client.click(point[0], point[1])
        agent_clicks.append(point)
        recorder.wait_for(partial(_press_at, point))
        presses = [
            (e["root_x"], e["root_y"]) for e in recorder.events() if e["kind"] == "ButtonPress"
        ]
        assert presses == agent_clicks, f"release after {delay_s * 1000:.0f} ms: {outcomes}"
