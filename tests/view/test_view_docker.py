"""The live view of a Docker sandbox in a real headless browser (Debian's chromium).

What the person sees is what the model sees (the page's canvas against a cubicle screenshot);
view-only delivers no input (through the page, and from a forged VNC client); a takeover click
lands on the right pixel while the agent's hand-over gate waits, until release; wrong tokens
see nothing; the server listens on loopback only; no log holds a token; ``down`` and ``gc``
remove the view server of their sandbox and of no other.
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import Page

from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.view.control import open_view, set_mode
from cubicle.orchestrator.view.handover import HandoverGate
from cubicle.orchestrator.view_servers import read_state, view_server_pids
from tests.orchestrator.conftest import CliRun, Tracker
from tests.orchestrator.support import bridge_gateway
from tests.view.guest_recorder import GuestRecorder
from tests.view.viewpage import (
    MAX_MAD,
    WaitingAgent,
    assert_strict_csp,
    assert_view_only_again,
    assert_view_only_delivers_no_input,
    click_canvas,
    forged_pointer_click,
    open_page,
    session_cookie,
    wait_canvas_matches,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# ------------------------------------------------------------------------------------ tests


def test_page_shows_the_desktop_and_view_only_delivers_no_input(
    page: Page, sandbox: Sandbox, recorder: GuestRecorder
) -> None:
    link = open_view(sandbox.id)
    assert link.mode == "view"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/#t=[\w-]{20,}", link.url), link.url
    open_page(page, link)
    assert page.evaluate("location.href").endswith(":" + link.url.split(":")[2].split("/")[0] + "/")
    score = wait_canvas_matches(page, sandbox)
    assert score < MAX_MAD, f"canvas differs from the screenshot by {score:.1%}"
    assert_strict_csp(page, link)
    assert_view_only_delivers_no_input(page, link, sandbox, recorder)


def test_takeover_click_lands_on_the_pixel_and_pauses_the_agent(
    page: Page, sandbox: Sandbox, recorder: GuestRecorder
) -> None:
    link = open_view(sandbox.id, mode="takeover")
    assert link.mode == "takeover"
    agent = WaitingAgent(sandbox.id)

    open_page(page, link, mode="takeover")
    wait_canvas_matches(page, sandbox)
    click_canvas(page, 123, 456)
    press = recorder.wait_for(lambda e: e["kind"] == "ButtonPress")
    assert (press["root_x"], press["root_y"], press["button"]) == (123, 456, 1)
    assert agent.thread.is_alive() and agent.outcome == [], (
        "the agent acted while a person had control"
    )

    cancelled_gate = HandoverGate(sandbox.id, cancelled=lambda: True)
    assert cancelled_gate.wait() is False, "a cancelled run must stop waiting"

    agent.released(page)
    assert agent.events[1][1]["held_s"] > 0
    assert_view_only_again(page, sandbox, recorder, timeout_ms=30_000, before=[(123, 456)])


def test_wrong_token_loopback_only_and_no_token_in_any_log(
    page: Page, sandbox: Sandbox, provider: DockerProvider, view_dir: Any
) -> None:
    link = open_view(sandbox.id)
    base, token = link.url.split("#t=")

    page.goto(base + "#t=" + "x" * len(token))
    page.wait_for_function("() => window.cubicleView && window.cubicleView.refused")
    assert page.locator("#screen canvas").count() == 0
    assert "wrong" in page.inner_text("#status")

    assert requests.get(base + "api/state", timeout=10).status_code == 401
    assert requests.post(base + "api/mint", timeout=10).status_code == 401
    forged = requests.post(
        base + "api/mode", json={"mode": "takeover"}, headers={"X-Cubicle-View": "1"}, timeout=10
    )
    assert forged.status_code == 401
    with pytest.raises(Exception, match=r"403|401|rejected|1008"):
        forged_pointer_click(link, "not-a-session", 1, 1)
    rebound = requests.get(base.replace("127.0.0.1", "localhost"), timeout=10)
    assert rebound.status_code == 400, "a Host other than 127.0.0.1 must be refused"

    page = page.context.new_page()  # (a fragment change alone would not reload the page)
    open_page(page, link)  # the real token works once ...
    spent = requests.post(
        base + "api/session", json={"token": token}, headers={"X-Cubicle-View": "1"}, timeout=10
    )
    assert spent.status_code == 401  # ... and only once
    cookie = session_cookie(page)

    state = read_state(sandbox.id)
    assert state is not None
    gateway = bridge_gateway(provider.client)
    for address in (gateway, socket.gethostbyname(socket.gethostname())):
        if address.startswith("127."):
            continue
        with pytest.raises(OSError):
            socket.create_connection((address, state.port), timeout=5).close()

    logs = "".join(p.read_text(errors="replace") for p in view_dir.glob("*.log"))
    logs += provider.logs(sandbox.id, tail=10_000)
    assert "WebSocket /websockify" in logs or "GET / " in logs, "the access log is not there"
    for secret in (token, cookie, state.key):
        assert secret not in logs


@pytest.mark.attack
def test_down_and_gc_remove_the_view_server_of_their_sandbox_only(
    sandboxes: Tracker, provider: DockerProvider, cli: CliRun, view_dir: Path
) -> None:
    """... and every file of its view: state, inputs, lock and log (VW5: the lock and log were
    left behind)."""
    keep, down, expiring = sandboxes.create(), sandboxes.create(), sandboxes.create(ttl_s=1.0)
    for sandbox in (keep, down, expiring):
        open_view(sandbox.id)
        assert len(view_server_pids(sandbox.id)) == 1
    again = open_view(keep.id)  # reused, not a second server
    assert view_server_pids(keep.id) == [again.pid]

    done = cli("down", down.id)
    assert done.returncode == 0, done.stderr
    assert view_server_pids(down.id) == []
    assert read_state(down.id) is None
    assert _files_of(view_dir, down.id) == []
    assert _files_of(view_dir, keep.id) == [f".{keep.id}.lock", f"{keep.id}.json", f"{keep.id}.log"]

    while not _past(expiring.info.expires_at, wall=True):
        _, _ = keep.screenshot()  # time passes doing something useful
    assert expiring.id in provider.gc()
    assert view_server_pids(expiring.id) == []
    assert _files_of(view_dir, expiring.id) == []
    assert view_server_pids(keep.id) == [again.pid], "gc touched another sandbox's view"
    set_mode(keep.id, "takeover")  # still answering
    assert read_state(keep.id).mode == "takeover"  # type: ignore[union-attr]


def _files_of(folder: Path, sandbox_id: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if sandbox_id in p.name)


def _past(deadline: float, *, wall: bool = False) -> bool:
    return (time.time() if wall else time.monotonic()) > deadline
