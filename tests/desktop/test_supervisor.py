"""images/desktop/supervisor.py — the desktop start-up of both backends — run here, on a private
display, as it runs in a guest: Xvfb, openbox, the panel (our tint2rc), the forked first agent.

What both guests rely on: the agent answers only once the desktop is drawn; the programs it
starts make files only their user can read (umask 077); openbox that dies is restarted; Xvfb that
dies ends the supervisor with status 1 and SIGTERM with 0, each leaving none of its children;
bad parameters are refused, naming the variable."""

from __future__ import annotations

import contextlib
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cubicle_guest.client import connect_unix
from cubicle_guest.waiting import Deadline, poll
from tests.orchestrator.conftest import REPO

pytestmark = pytest.mark.x11

SUPERVISOR = REPO / "images" / "desktop" / "supervisor.py"
CHECKER = REPO / "images" / "desktop" / "desktop_ready.py"
START_S = 60.0
PANEL = str(REPO / "images" / "desktop" / "tint2rc")


def _free_display() -> str:
    """A display number with no X lock or socket (well away from the ones tests usually get)."""
    for number in random.sample(range(300, 900), 600):
        if not any(
            Path(p).exists() for p in (f"/tmp/.X{number}-lock", f"/tmp/.X11-unix/X{number}")
        ):
            return f":{number}"
    raise RuntimeError("no free X display number in 300-899")


class Desktop:
    """One supervisor process (in a session of its own) and its log file."""

    def __init__(
        self, tmp: Path, env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()
    ) -> None:
        self.socket = tmp / "run" / "agent.sock"
        self.log_path = tmp / "supervisor.log"
        self.display = _free_display()
        settings = {
            "CUBICLE_SCREEN": "640x480",
            "CUBICLE_DISPLAY": self.display,
            "CUBICLE_AGENT_LISTEN": f"unix:{self.socket}",
            "CUBICLE_PANEL_CONFIG": PANEL,
            "CUBICLE_DESKTOP_READY_S": "30",
            "HOME": str(tmp),
        }
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(SUPERVISOR)],
                env={**os.environ, **settings, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=pass_fds,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, pattern: str, *, after: int = 0) -> re.Match[str]:
        """The first match of ``pattern`` in the log from offset ``after``, waiting for it."""
        for _ in poll(Deadline(START_S), 0.05):
            found = re.compile(pattern).search(self.log(), after)
            if found:
                return found
            if self.process.poll() is not None:
                break
        raise AssertionError(f"no {pattern!r} in the supervisor's log:\n{self.log()}")

    def pids(self, name: str) -> list[int]:
        """Every pid the log says it started as ``name``."""
        return [int(p) for p in re.findall(rf"started {name} \(pid (\d+)\)", self.log())]

    def stop(self) -> None:
        """End the supervisor's whole session (only processes this test started)."""
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def _alive(pid: int) -> bool:
    """``pid`` runs (not gone, not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.fixture
def desktop(tmp_path: Path) -> Iterator[Desktop]:
    started = Desktop(tmp_path)
    try:
        yield started
    finally:
        started.stop()


def test_the_agent_answers_once_the_desktop_is_drawn_and_runs_programs_privately_at_home(
    desktop: Desktop, tmp_path: Path
) -> None:
    with connect_unix(desktop.socket, timeout=START_S) as client:
        client.hello(timeout=30)
        log = desktop.log()
        # hello came after the first agent saw openbox, then the panel, drawn
        assert re.search(r"openbox ready in .*panel ready in .*desktop ready in", log, re.S), log
        made = tmp_path / "made-by-the-user"
        done = client.exec(["sh", "-c", f'pwd && umask && touch "{made}"'], timeout_ms=10000).result
    assert (done["exit_code"], done["stdout"].split()) == (0, [str(tmp_path), "0077"]), done
    assert made.stat().st_mode & 0o777 == 0o600
    assert desktop.socket.parent.stat().st_mode & 0o777 == 0o700  # made by the supervisor


def test_openbox_that_dies_is_restarted_and_manages_the_screen_again(desktop: Desktop) -> None:
    desktop.wait_log(r"desktop ready in")
    (first,) = desktop.pids("openbox")
    os.kill(first, signal.SIGKILL)
    mark = desktop.wait_log(r"openbox exited with status -9; restarting in 0\.5 s").end()
    desktop.wait_log(r"started openbox \(pid \d+\)", after=mark)
    second = desktop.pids("openbox")[-1]
    assert second != first and _alive(second)
    managed = subprocess.run(
        [sys.executable, str(CHECKER), "wm", "30"],
        env={**os.environ, "DISPLAY": desktop.display},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert managed.returncode == 0, managed.stderr


def test_xvfb_that_dies_ends_the_supervisor_with_status_1_and_nothing_left(
    desktop: Desktop,
) -> None:
    desktop.wait_log(r"desktop ready in")
    children = [pid for name in ("openbox", "panel", "agent") for pid in desktop.pids(name)]
    xvfb = int(
        subprocess.run(
            ["pgrep", "-s", str(desktop.process.pid), "-x", "Xvfb"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    os.kill(xvfb, signal.SIGKILL)
    assert desktop.process.wait(timeout=30) == 1
    assert "Xvfb exited with status -9; the desktop is gone" in desktop.log()
    assert [pid for pid in children if _alive(pid)] == []


def test_sigterm_stops_every_child_and_exits_0(desktop: Desktop) -> None:
    desktop.wait_log(r"desktop ready in")
    children = [pid for name in ("openbox", "panel", "agent") for pid in desktop.pids(name)]
    desktop.process.terminate()
    assert desktop.process.wait(timeout=30) == 0
    assert desktop.log().rstrip().endswith("[supervisor] stopped")
    assert [pid for pid in children if _alive(pid)] == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CUBICLE_SCREEN", "1280"),
        ("CUBICLE_SCREEN", "10x10"),
        ("CUBICLE_AGENT_LISTEN", "tcp:0.0.0.0:1"),
        ("CUBICLE_DESKTOP_READY_S", "soon"),
        ("CUBICLE_DESKTOP_READY_S", "-1"),
        ("CUBICLE_DISPLAY", "host:0"),
        ("CUBICLE_BOOT_DONE_FD", "2"),
        ("CUBICLE_BOOT_DONE_FD", "fd3"),
        ("CUBICLE_BOOT_DONE_FD", "999"),  # not open in the supervisor
    ],
)
def test_a_bad_parameter_exits_2_naming_it(tmp_path: Path, name: str, value: str) -> None:
    refused = Desktop(tmp_path, {name: value})
    try:
        assert refused.process.wait(timeout=30) == 2
    finally:
        refused.stop()
    assert f"[supervisor] {name}={value!r}: " in refused.log()


def _on_path(tmp_path: Path, name: str, script: str) -> str:
    """A PATH with ``name`` first: a shell script of ``script``'s lines."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    program = folder / name
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


def test_the_first_agent_sets_up_on_the_display_while_the_panel_is_still_starting(
    tmp_path: Path,
) -> None:
    """The agent's X set-up (keymap, XTEST, DAMAGE, the grabber) needs only the X server: it is
    done while the desktop starts, not after it, and the hello still waits for the panel."""
    path = _on_path(tmp_path, "tint2", f'sleep 3\nexec {shutil.which("tint2")} "$@"')
    desktop = Desktop(tmp_path, {"PATH": path})
    try:
        with connect_unix(desktop.socket, timeout=START_S) as client:
            client.hello(timeout=30)
            drawn = _panel_drawn(desktop)
        log = desktop.wait_log(r"panel ready in").string
    finally:
        desktop.stop()
    assert log.index("XTEST input on") < log.index("panel ready in"), log
    # the hello waited for the panel (the supervisor's log line about it may come later: two
    # processes write that log)
    assert drawn.returncode == 0, f"the agent answered before the panel was drawn: {drawn.stderr}"


def test_xvfb_that_cannot_start_ends_the_supervisor_and_its_first_agent(tmp_path: Path) -> None:
    """The first agent is forked before Xvfb starts: when Xvfb fails, it goes too."""
    refused = Desktop(tmp_path, {"PATH": _on_path(tmp_path, "Xvfb", "exit 1")})
    try:
        assert refused.process.wait(timeout=30) == 1
        session = str(refused.process.pid)
        for _ in poll(Deadline(10), 0.05):
            left = subprocess.run(
                ["pgrep", "-s", session], capture_output=True, text=True, check=False
            )
            if not left.stdout.strip():
                break
        assert left.stdout.strip() == "", f"left in the session: {left.stdout}"
    finally:
        refused.stop()
    assert "Xvfb exited with status 1 before reporting its display" in refused.log()


def test_the_first_agent_says_the_boot_is_done_once_the_desktop_is_drawn_and_keeps_no_copy(
    tmp_path: Path,
) -> None:
    """CUBICLE_BOOT_DONE_FD (a VM's init takes the boot's extra vCPUs offline on its word): one
    line once the panel is drawn, then EOF — neither the supervisor nor the desktop's programs
    keep the descriptor — and the agent serves."""
    read_end, write_end = os.pipe()
    desktop = Desktop(tmp_path, {"CUBICLE_BOOT_DONE_FD": str(write_end)}, (write_end,))
    os.close(write_end)
    try:
        said = b""
        deadline = Deadline(START_S)
        while chunk := _read_within(read_end, deadline):
            said += chunk
            if said == b"boot done\n":
                drawn = _panel_drawn(desktop)
                assert drawn.returncode == 0, f"the panel is not drawn yet: {drawn.stderr}"
        assert said == b"boot done\n", desktop.log()
        with connect_unix(desktop.socket, timeout=START_S) as client:
            client.hello(timeout=30)
    finally:
        os.close(read_end)
        desktop.stop()


def _panel_drawn(desktop: Desktop) -> subprocess.CompletedProcess[str]:
    """desktop_ready's panel check on ``desktop``'s display, now (exit 0: the panel is drawn)."""
    return subprocess.run(
        [sys.executable, str(CHECKER), "panel", "0.5"],
        env={**os.environ, "DISPLAY": desktop.display, "CUBICLE_PANEL_CONFIG": PANEL},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _read_within(fd: int, deadline: Deadline) -> bytes:
    """What ``fd`` gives next (b"" at EOF); fails when nothing comes before ``deadline``."""
    ready, _, _ = select.select([fd], [], [], deadline.remaining())
    assert ready, "no word and no EOF on the boot-done pipe in time"
    return os.read(fd, 64)
