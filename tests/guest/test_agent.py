"""The agent process: handshake, concurrency, clean shutdown, socket handling, transports."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tty
from pathlib import Path

import pytest

from cubicle_guest import protocol
from cubicle_guest.client import AgentClient, connect_unix
from cubicle_guest.errors import GuestError
from cubicle_guest.transport import find_virtio_port
from tests.support.agent import REPO_ROOT, RunningAgent, start_agent
from tests.support.recorder import Recorder
from tests.support.xvfb import Xvfb

pytestmark = pytest.mark.x11


def test_hello_and_info_describe_the_agent(client: AgentClient, agent: RunningAgent) -> None:
    hello = client.hello()
    assert hello["protocol"] == protocol.PROTOCOL_VERSION
    assert hello["screen"] == {"width": 1280, "height": 800}
    assert sorted(hello["ops"]) == sorted(protocol.OPS)
    assert hello["pid"] == agent.pid
    assert hello["screenshot_method"] == "incremental"  # this Xvfb has DAMAGE
    # not a VM guest: the host's /proc is no sandbox's, so the programs alone count
    assert hello["settle_signals"] == "programs"
    assert isinstance(hello["speed"], float) and hello["speed"] >= 1.0
    info = client.info().result
    assert info["uptime_ms"] > 0 and isinstance(info["keysyms_remapped"], int)


def test_wait_defaults_and_bounds(client: AgentClient) -> None:
    assert client.wait(ms=0).result["waited_ms"] >= 0
    assert client.wait(ms=50).result["waited_ms"] >= 50
    assert client.wait().result["waited_ms"] >= protocol.DEFAULT_WAIT_MS


def test_concurrent_connections_are_all_served(agent: RunningAgent, recorder: Recorder) -> None:
    errors: list[BaseException] = []

    def worker(row: int) -> None:
        try:
            with agent.client() as own:
                for column in range(25):
                    own.click(10 + column * 40, 100 + row * 100)
                    own.screenshot(max_width=64) if column % 10 == 0 else None
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(row,)) for row in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    events = recorder.wait_until(
        lambda evs: sum(e.kind == "ButtonRelease" for e in evs) == 100, what="100 clicks"
    )
    presses = [(e.root_x, e.root_y) for e in events if e.kind == "ButtonPress"]
    # serialized: every press lands where its own request pointed (no interleaved motion)
    assert sorted(presses) == sorted(
        (10 + c * 40, 100 + r * 100) for r in range(4) for c in range(25)
    )


def test_release_all_releases_keys_held_by_anyone(
    client: AgentClient, recorder: Recorder, xserver: Xvfb
) -> None:
    subprocess.run(["xdotool", "keydown", "shift", "mousedown", "1"], env=xserver.env(), check=True)
    recorder.wait_for(lambda e: e.kind == "ButtonPress")
    released = client.release_all().result["released"]
    assert len(released) == 2
    recorder.wait_for(lambda e: e.kind == "KeyRelease" and e.keysym_name == "Shift_L")
    recorder.wait_for(lambda e: e.kind == "ButtonRelease" and e.button == 1)
    assert client.release_all().result["released"] == []


def test_sigterm_stops_cleanly_and_removes_the_socket(xserver: Xvfb, tmp_path: Path) -> None:
    with start_agent(xserver.display, tmp_path) as running:
        with running.client() as own:
            own.type("日")  # binds a spare keycode, restored on exit
        pid = running.pid
        os.kill(pid, signal.SIGTERM)
        assert running.stop() == 0
        assert not running.socket_path.exists()
        assert "stopping on SIGTERM" in running.log_text()


def test_stale_socket_is_replaced_and_a_live_one_is_refused(xserver: Xvfb, tmp_path: Path) -> None:
    stale = tmp_path / "agent.sock"
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(stale))
    leftover.close()  # a socket file nobody listens on
    with start_agent(xserver.display, tmp_path) as running:
        second = subprocess.run(
            [sys.executable, "-m", "cubicle_guest", "--listen", f"unix:{running.socket_path}"],
            env={**xserver.env(), "PYTHONPATH": str(REPO_ROOT)},
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert second.returncode == 1
        assert "already listening" in second.stderr
        with running.client() as own:
            own.info()


def test_missing_display_is_a_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    result = subprocess.run(
        [sys.executable, "-m", "cubicle_guest", "--listen", f"unix:{tmp_path}/a.sock"],
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2 and "DISPLAY" in result.stderr


def _read_frames(
    fd: int, decoder: protocol.FrameDecoder, count: int, timeout: float = 10.0
) -> list[protocol.Frame]:
    frames: list[protocol.Frame] = []
    deadline = time.monotonic() + timeout
    while len(frames) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(frames)} of {count} frames")
        try:
            frames.extend(decoder.feed(os.read(fd, 65536)))
        except BlockingIOError:
            time.sleep(0.01)
    return frames


def test_virtio_transport_over_a_character_device(xserver: Xvfb, tmp_path: Path) -> None:
    # a raw pty stands in for the virtio-serial port: a character device opened O_RDWR
    host, guest_end = os.openpty()
    tty.setraw(guest_end)
    device = os.ttyname(guest_end)
    log = open(tmp_path / "agent.log", "wb")  # noqa: SIM115 - closed in finally
    process = subprocess.Popen(
        [sys.executable, "-m", "cubicle_guest", "--listen", f"virtio:{device}"],
        env={**xserver.env(), "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        os.set_blocking(host, False)
        decoder = protocol.FrameDecoder()
        # garbage first (a host joining mid-stream), then two requests
        os.write(
            host,
            b"\x00junk"
            + protocol.encode_frame(
                protocol.request(1, "hello", {"protocol": protocol.PROTOCOL_VERSION})
            )
            + protocol.encode_frame(protocol.request(2, "screenshot", {"max_width": 32})),
        )
        frames = _read_frames(host, decoder, 3, timeout=20)
        assert frames[0].message["error"]["code"] == "bad_frame"
        assert frames[1].message["result"]["screen"] == {"width": 1280, "height": 800}
        assert frames[2].message["result"]["width"] == 32 and frames[2].blob[:4] == b"\x89PNG"
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
        os.close(host)
        os.close(guest_end)
    assert process.returncode == 0, (tmp_path / "agent.log").read_text()


def test_virtio_port_is_found_by_name_or_named_in_the_error() -> None:
    with pytest.raises(GuestError) as caught:
        find_virtio_port("/dev/virtio-ports/org.cubicle.nope", timeout=0)
    assert caught.value.code == "not_found" and "org.cubicle.nope" in caught.value.reason


def test_stdio_transport(xserver: Xvfb) -> None:
    request = protocol.encode_frame(protocol.request(7, "info")) + protocol.encode_frame(
        protocol.request(8, "keypress", {"keys": ["nope"]})
    )
    result = subprocess.run(
        [sys.executable, "-m", "cubicle_guest", "--stdio"],
        input=request,
        env={**xserver.env(), "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=30,
        check=True,
    )
    frames = protocol.FrameDecoder().feed(result.stdout)
    assert [f.message["id"] for f in frames] == [7, 8]
    assert frames[0].message["result"]["screen"] == {"width": 1280, "height": 800}
    with pytest.raises(GuestError) as caught:
        protocol.parse_reply(frames[1].message)
    assert caught.value.code == "unknown_key" and "'nope'" in caught.value.reason
    assert b"nope" not in result.stderr  # key names never reach the log


def test_client_reconnects_after_agent_restart(xserver: Xvfb, tmp_path: Path) -> None:
    with start_agent(xserver.display, tmp_path) as first:
        path = first.socket_path
    with start_agent(xserver.display, tmp_path), connect_unix(path) as again:
        assert again.hello()["protocol"] == protocol.PROTOCOL_VERSION
