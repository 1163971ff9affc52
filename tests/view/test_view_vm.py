"""The live view of a VM sandbox in a real headless browser (Debian's chromium), page CSP enforced.

One VM for the module (a warm restore; the tests run in order, the last one downs it). The VNC
sessions travel over the domain's view channel (a virtio-serial port; no network card, no port
the guest could reach): the canvas shows what a fresh agent screenshot shows; view-only
delivers no input, neither through the page nor from a forged VNC client; a takeover click lands
on the exact guest pixel while the agent's hand-over gate waits; a person's paste lands in the
editor exactly (:func:`tests.view.viewpage.paste_round_trip`); no x11vnc outlives its
session; two sessions share the channel; ``down`` removes the view server, its files and the
view socket with the VM.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page

from cubicle.drivers import ApproveAll
from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.modelrun.run import RunResult
from cubicle.orchestrator.providers import get_provider
from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.providers.vm.domain import VIEW_SOCKET
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.trajectory import read_trajectory
from cubicle.orchestrator.view.control import open_view
from cubicle.orchestrator.view.stream import open_vnc_stream
from cubicle.orchestrator.view_servers import read_state, stop_view_servers, view_server_pids
from cubicle_guest.waiting import Deadline, poll
from tests.support.cli import run_cli
from tests.support.runs import scripted_run
from tests.view.conftest import LEFT_HALF, SCREEN
from tests.view.viewpage import (
    MAX_MAD,
    WaitingAgent,
    assert_strict_csp,
    assert_view_only_again,
    assert_view_only_delivers_no_input,
    browser_paste,
    click_canvas,
    open_page,
    paste_round_trip,
    wait_canvas_matches,
)
from tests.view.vm_recorder import VmGuestRecorder
from tests.vm.conftest import assert_gone, vm_provider

__all__ = ["vm_provider"]

pytestmark = [pytest.mark.vm, pytest.mark.slow]


@pytest.fixture(scope="module")
def vm_sandbox(vm_provider: VmProvider) -> Iterator[Sandbox]:
    """The module's VM (``down`` by the last test; destroyed here whatever happened)."""
    sandbox = Sandbox.create("vm", screen=SCREEN, ready_timeout_s=180)
    try:
        yield sandbox
    finally:
        sandbox.destroy()  # (idempotent; the last test downs it through the command line)
        assert_gone(vm_provider, sandbox.id)
        assert view_server_pids(sandbox.id) == []


@pytest.fixture(autouse=True)
def one_test_one_view_server(vm_sandbox: Sandbox) -> Iterator[None]:
    """Each test's view server (its state lives in the test's own folder) ends with the test."""
    yield
    stop_view_servers(vm_sandbox.id)


@pytest.fixture
def vm_recorder(vm_sandbox: Sandbox) -> Iterator[VmGuestRecorder]:
    with VmGuestRecorder(vm_sandbox, geometry=LEFT_HALF) as rec:
        yield rec


def x11vnc_count(sandbox: Sandbox) -> int:
    done = sandbox.exec(["sh", "-c", "pgrep -c -x x11vnc || true"], timeout=60)
    return int(done.stdout.strip() or 0)


def wait_no_x11vnc(sandbox: Sandbox) -> None:
    for _ in poll(Deadline(30), 0.5):
        if x11vnc_count(sandbox) == 0:
            return
    raise AssertionError("an x11vnc outlived its session in the guest")


def test_vm_page_shows_the_desktop_and_view_only_delivers_no_input(
    page: Page, vm_sandbox: Sandbox, vm_recorder: VmGuestRecorder
) -> None:
    link = open_view(vm_sandbox.id)
    assert link.mode == "view"
    open_page(page, link)
    score = wait_canvas_matches(page, vm_sandbox, timeout_s=60)
    assert score < MAX_MAD, f"canvas differs from the screenshot by {score:.1%}"
    assert_strict_csp(page, link)
    assert_view_only_delivers_no_input(page, link, vm_sandbox, vm_recorder)
    page.goto("about:blank")  # the page leaves: its session and its x11vnc end
    wait_no_x11vnc(vm_sandbox)


def test_vm_takeover_click_lands_on_the_pixel_and_pauses_the_agent(
    page: Page, vm_sandbox: Sandbox, vm_recorder: VmGuestRecorder
) -> None:
    link = open_view(vm_sandbox.id, mode="takeover")
    agent = WaitingAgent(vm_sandbox.id)

    open_page(page, link, mode="takeover")
    wait_canvas_matches(page, vm_sandbox, timeout_s=60)
    click_canvas(page, 123, 456)
    press = vm_recorder.wait_for(lambda e: e["kind"] == "ButtonPress")
    assert (press["root_x"], press["root_y"], press["button"]) == (123, 456, 1)
    assert agent.thread.is_alive() and agent.outcome == [], (
        "the agent acted while a person had control"
    )

    agent.released(page)
    assert_view_only_again(page, vm_sandbox, vm_recorder, timeout_ms=60_000, before=[(123, 456)])


def test_vm_paste_lands_exactly_in_control_and_not_at_all_when_view_only(
    page: Page, vm_sandbox: Sandbox
) -> None:
    paste_round_trip(page, vm_sandbox, timeout_s=60)


def test_vm_paste_reaches_the_agent_while_a_run_waits_at_the_handover(
    page: Page, vm_sandbox: Sandbox, tmp_path: Path
) -> None:
    """A real run (the scripted model) paused at the hand-over lets go of the VM's one agent
    connection, so the person's paste reaches the guest meanwhile; on release the run carries on
    over a new connection and its click lands."""
    script = parse_script(
        {
            "name": "handover-paste",
            "turns": [
                {
                    "computer_call": {
                        "actions": [{"type": "click", "button": "left", "x": 40, "y": 40}]
                    }
                },
                {"message": "clicked"},
            ],
        }
    )
    text = "während der Übergabe 🙂 漢字\n"
    link = open_view(vm_sandbox.id, mode="takeover")
    page.context.grant_permissions(
        ["clipboard-read", "clipboard-write"], origin=link.url.split("/#")[0]
    )
    out = tmp_path / "run"
    trajectory = out / "trajectory.jsonl"
    results: list[RunResult] = []
    with ScriptedModel(script) as model:
        loop = threading.Thread(
            target=lambda: results.append(
                scripted_run(vm_sandbox, model, out=out, prompt="click", safety_policy=ApproveAll())
            )
        )
        loop.start()
        try:
            for _ in poll(Deadline(180), 0.1):
                if trajectory.exists() and '"handover"' in trajectory.read_text():
                    break
            open_page(page, link, mode="takeover")
            browser_paste(page, text)
            page.wait_for_function("() => window.cubicleView.pasted === 1", timeout=60_000)
            assert page.inner_text("#status") == f"pasted {len(text)} characters"
            assert vm_sandbox.get_clipboard() == text  # another connection, while held
            assert loop.is_alive()
            page.click("#toggle")  # give control back
        finally:
            loop.join(180)
    assert not loop.is_alive()
    [result] = results
    assert result.ok, result.error
    events = read_trajectory(out)
    kinds = [(e["kind"], e.get("state")) for e in events if e["kind"] in ("handover", "action")]
    assert kinds == [("handover", "taken"), ("handover", "released"), ("action", None)]
    released = next(e for e in events if e.get("state") == "released")
    # the person's Ctrl reaches the guest as a key press; the paste is theirs, once
    assert [a["kind"] for a in released["person_actions"] if a["kind"] != "key"] == ["paste"]
    page.goto("about:blank")  # the page leaves: its session and its x11vnc end
    wait_no_x11vnc(vm_sandbox)


def test_vm_sessions_share_the_channel_and_end_in_the_guest(vm_sandbox: Sandbox) -> None:
    wait_no_x11vnc(vm_sandbox)  # the earlier tests' sessions ended in the guest
    provider = get_provider("vm")
    first = open_vnc_stream(provider, vm_sandbox.id, view_only=True)
    second = open_vnc_stream(provider, vm_sandbox.id, view_only=False)
    try:
        for stream in (first, second):
            assert stream.sock.recv(12) == b"RFB 003.008\n"
        assert x11vnc_count(vm_sandbox) == 2
    finally:
        first.sock.close()
        second.sock.close()
    wait_no_x11vnc(vm_sandbox)


@pytest.mark.attack
def test_vm_down_removes_everything_of_the_view(
    vm_sandbox: Sandbox, vm_provider: VmProvider, view_dir: Path
) -> None:
    link = open_view(vm_sandbox.id)
    assert view_server_pids(vm_sandbox.id) == [link.pid]
    view_socket = vm_provider.run_dir(vm_sandbox.id) / VIEW_SOCKET
    assert view_socket.is_socket()
    assert oct(view_socket.stat().st_mode & 0o777) == oct(0o660)

    done = run_cli("down", vm_sandbox.id, timeout=180)
    assert done.returncode == 0, done.stderr
    assert view_server_pids(vm_sandbox.id) == []
    assert read_state(vm_sandbox.id) is None
    assert sorted(p.name for p in view_dir.iterdir() if vm_sandbox.id in p.name) == []
    assert not view_socket.exists()
    assert_gone(vm_provider, vm_sandbox.id)
