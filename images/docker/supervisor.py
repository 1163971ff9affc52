"""cubicle guest supervisor: the container's main process (under docker-init, which reaps orphans).

Contract (read by orchestrator/providers/docker/provider.py and the drill):

- ``CUBICLE_SCREEN=WxH`` (pixels) sets the Xvfb screen; default 1280x800, depth 24.
- Stale X lock files (``/tmp/.X0-lock``, ``/tmp/.X11-unix/X0``) are removed before Xvfb starts,
  so a restarted container never finds its display "in use".
- Starts Xvfb on ``:0`` and waits until it reports the display, paints the root window, starts
  openbox and waits until it manages the screen, starts the panel (tint2) and waits until it is
  drawn (``desktop_ready.py wm|panel``, each at most :data:`DESKTOP_READY_TIMEOUT_S`; lateness is
  logged, not fatal; one checker, ``desktop_ready.py wm panel``, started with openbox, so its
  start-up overlaps openbox's), then lets the guest agent ``python3 -m guest --listen
  unix:/run/cubicle/agent.sock`` go on: the agent is started right after Xvfb, loads its
  libraries meanwhile and waits on a pipe (``--wait-fd``) that is closed here before it opens the
  display and listens. So the agent's hello means the first screenshot shows the desktop a model
  will drive, and the agent's start-up overlaps the desktop's.
- The agent, openbox and the panel are restarted when they exit (back-off 0.5 s → 5 s); Xvfb
  exiting ends the supervisor with status 1 (the desktop is gone; the host sees the container
  exit). Between events it sleeps (woken by SIGCHLD/SIGTERM or a due restart), never polls.
- Xvfb runs without GLX (nothing uses it; it costs ~11 MiB per desktop).
- SIGTERM/SIGINT stop every child (TERM, then KILL after 3 s) and exit 0.
- Every line it writes starts with ``[supervisor]``; children inherit stdout/stderr, so
  ``docker logs`` (``cubicle logs ID``) shows X, openbox and agent output in one stream.

Runs as the unprivileged desktop user; standard library only (it runs before anything else;
``desktop_ready.py`` runs as a child with the agent's venv, which has python-xlib).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

DISPLAY = ":0"
SOCKET_DIR = Path("/run/cubicle")
AGENT_SOCKET = SOCKET_DIR / "agent.sock"
XVFB_READY_TIMEOUT_S = 30.0
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.5, 5.0
STOP_GRACE_S = 3.0
DESKTOP_READY_TIMEOUT_S = 10.0
DESKTOP_READY = "/opt/cubicle/desktop_ready.py"
ROOT_PATTERN = ["xsetroot", "-mod", "4", "4", "-fg", "#3b4252", "-bg", "#2e3440"]


def log(text: str) -> None:
    print(f"[supervisor] {text}", flush=True)


def screen_size() -> tuple[int, int]:
    raw = os.environ.get("CUBICLE_SCREEN", "1280x800")
    try:
        width_text, height_text = raw.lower().split("x")
        width, height = int(width_text), int(height_text)
    except ValueError:
        log(f"CUBICLE_SCREEN={raw!r} is not WxH (e.g. 1280x800)")
        sys.exit(2)
    if not (64 <= width <= 8192 and 64 <= height <= 8192):
        log(f"CUBICLE_SCREEN={raw!r}: width and height must be 64-8192 pixels")
        sys.exit(2)
    return width, height


def remove_stale_x_locks() -> None:
    number = DISPLAY.lstrip(":")
    for path in (Path(f"/tmp/.X{number}-lock"), Path(f"/tmp/.X11-unix/X{number}")):
        if path.exists() or path.is_symlink():
            path.unlink()
            log(f"removed stale {path}")
    Path("/tmp/.X11-unix").mkdir(mode=0o1777, exist_ok=True)


def start_xvfb(width: int, height: int) -> subprocess.Popen[bytes]:
    read_fd, write_fd = os.pipe()
    process = subprocess.Popen(
        [
            "Xvfb",
            DISPLAY,
            "-screen",
            "0",
            f"{width}x{height}x24",
            "-nolisten",
            "tcp",
            "-noreset",
            "+extension",
            "XTEST",
            # GLX loads Mesa (~11 MiB per desktop) that nothing here uses: Chromium renders
            # WebGL with SwiftShader and composites in software, GTK draws with cairo
            "-extension",
            "GLX",
            "-ac",
            "-displayfd",
            str(write_fd),
        ],
        pass_fds=(write_fd,),
    )
    os.close(write_fd)
    deadline = time.monotonic() + XVFB_READY_TIMEOUT_S
    data = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        os.set_blocking(read_fd, False)
        while not data.endswith(b"\n"):
            if process.poll() is not None:
                log(f"Xvfb exited with status {process.returncode} before reporting its display")
                sys.exit(1)
            if time.monotonic() > deadline:
                log(f"Xvfb did not report its display within {XVFB_READY_TIMEOUT_S:.0f} s")
                process.kill()
                sys.exit(1)
            chunk = pipe.read(64)
            if chunk:
                data += chunk
            else:
                time.sleep(0.01)
    log(f"Xvfb ready on {DISPLAY} at {width}x{height}")
    return process


class Child:
    """A restartable child process with exponential back-off."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.argv = argv
        self.process: subprocess.Popen[bytes] | None = None
        self.backoff = BACKOFF_MIN_S
        self.next_start = 0.0
        self.started_at = 0.0

    def start(self, gate: int | None = None) -> None:
        """Start it; ``gate``: a pipe's read end it waits on (``--wait-fd``) before starting."""
        if self.name == "agent" and (AGENT_SOCKET.exists() or AGENT_SOCKET.is_symlink()):
            AGENT_SOCKET.unlink()
        if gate is None:
            self.process = subprocess.Popen(self.argv)
        else:
            argv = [*self.argv, "--wait-fd", str(gate)]
            self.process = subprocess.Popen(argv, pass_fds=(gate,))
        self.started_at = time.monotonic()
        log(f"started {self.name} (pid {self.process.pid})")

    def poll(self) -> float | None:
        """Start or reap as due; seconds until this child next needs a look (None: when it
        exits, which wakes the supervisor)."""
        now = time.monotonic()
        if self.process is None:
            if now < self.next_start:
                return self.next_start - now
            self.start()
            return None
        status = self.process.poll()
        if status is None:
            return None
        if now - self.started_at > 10 * BACKOFF_MAX_S:
            self.backoff = BACKOFF_MIN_S  # it ran a good while: a fresh failure, not a loop
        log(f"{self.name} exited with status {status}; restarting in {self.backoff:.1f} s")
        self.process = None
        self.next_start = now + self.backoff
        self.backoff = min(BACKOFF_MAX_S, self.backoff * 2)
        return self.next_start - now

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()


def report(child: Child, said: bytes, started: float) -> None:
    """Log how long ``child``'s part of the desktop took, from the checker's line about it
    (``<what> ready``; anything else — late, or the checker gone — is logged, not fatal)."""
    waited_ms = (time.monotonic() - started) * 1000
    if said.split()[1:2] == [b"ready"]:
        log(f"{child.name} ready in {waited_ms:.0f} ms")
    else:
        log(f"{child.name} is not ready after {waited_ms:.0f} ms; going on")


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> int:
    os.umask(0o077)
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        log(f"received signal {signum}; stopping")
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # the main loop sleeps until a signal (a child exiting, or a stop) or a restart is due: an
    # idle desktop costs the supervisor no wake-ups. Each signal writes a byte to this pipe.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)

    width, height = screen_size()
    remove_stale_x_locks()
    os.environ["DISPLAY"] = DISPLAY
    # GTK's overlay scrollbars fade in and out a second after content changes: a change on screen
    # with no input, which a model would see late. Classic scrollbars stay put (and show a model
    # that there is more to scroll).
    os.environ["GTK_OVERLAY_SCROLLING"] = "0"
    xvfb = start_xvfb(width, height)
    root = subprocess.Popen(ROOT_PATTERN)  # paints while the agent and openbox start
    desktop = [
        Child("openbox", ["openbox", "--sm-disable"]),
        Child("panel", ["tint2", "-c", "/etc/xdg/tint2/tint2rc"]),
    ]
    # the agent starts now and loads its libraries while the desktop starts, but opens the
    # display and listens only once the gate closes (below): its hello still means a drawn desktop
    agent = Child("agent", [sys.executable, "-m", "guest", "--listen", f"unix:{AGENT_SOCKET}"])
    gate_r, gate_w = os.pipe()
    agent.start(gate=gate_r)
    os.close(gate_r)
    wm, panel = desktop
    started = time.monotonic()
    wm.start()
    # one checker for both parts (one python-xlib start-up, on the sandbox's one core): it says
    # "wm ready|late" once openbox manages the screen (then the panel starts), then waits for the
    # panel to be drawn
    check = subprocess.Popen(
        [sys.executable, DESKTOP_READY, "wm", "panel", f"{DESKTOP_READY_TIMEOUT_S:g}"],
        stdout=subprocess.PIPE,
    )
    assert check.stdout is not None
    report(wm, check.stdout.readline(), started)
    started = time.monotonic()
    panel.start()
    report(panel, check.stdout.readline(), started)
    check.stdout.close()
    check.wait()
    root.wait()
    os.close(gate_w)
    children = [*desktop, agent]
    status = 0
    while not stopping:
        if xvfb.poll() is not None:
            log(f"Xvfb exited with status {xvfb.returncode}; the desktop is gone")
            status = 1
            break
        due = [t for t in (child.poll() for child in children) if t is not None]
        select.select([wake_r], [], [], min(due) if due else None)
        with contextlib.suppress(BlockingIOError):
            while os.read(wake_r, 512):
                pass
    stop_all([c.process for c in children if c.process is not None] + [xvfb])
    log("stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
