"""cubicle's desktop supervisor: the one start-up of the guest desktop, in both backends.

Who starts it (always as the unprivileged desktop user, with the agent's venv Python, from
``/opt/cubicle``, where ``images/desktop/install`` puts it beside ``desktop_ready.py``):

- Docker: the container's main process (``ENTRYPOINT``, under docker-init, which reaps orphans);
  its parameters come from the container's environment
  (cubicle/orchestrator/providers/docker/provider.py).
- VM: the guest's PID 1 (images/vm/cubicle-init) does root's part only (file systems, network, the
  agent's virtio port, the process limit, the proxy environment, reaping) and starts it with the
  parameters of the kernel command line; when it exits, init powers the VM off, as a container
  stops when its main process exits.

Parameters (environment; a bad value exits 2 with one line naming it):

- ``CUBICLE_SCREEN=WxH`` (pixels, 64-8192 each) the Xvfb screen, depth 24; default 1280x800.
- ``CUBICLE_AGENT_LISTEN`` the agent's ``--listen`` address; default
  ``unix:/run/cubicle/agent.sock`` (a VM passes ``virtio:/dev/virtio-ports/org.cubicle.agent``).
  A unix socket's folder is made (mode 0700) if missing; a stale socket file is removed.
- ``CUBICLE_DESKTOP_READY_S`` how long openbox, then the panel, may take before the supervisor
  logs it late and goes on; default 10 (a VM under TCG passes 60).
- ``CUBICLE_DISPLAY=:N`` the X display; default ``:0``.
- ``CUBICLE_PANEL_CONFIG`` the panel's tint2 configuration (also read by ``desktop_ready.py``);
  default ``/etc/xdg/tint2/tint2rc``.
- ``CUBICLE_BOOT_DONE_FD=N`` (VM) an open descriptor (>= 3) on which the first agent writes one
  line once the desktop is drawn and the agent built, just before it serves, and which it then
  closes: the VM's init then takes the vCPUs the boot had beyond the sandbox's ``cpus`` offline
  (images/vm/cubicle-init). No other process keeps it; default: none.

What it does:

- Stale X lock files of its display are removed before Xvfb starts, so a restarted container
  never finds its display "in use".
- Starts Xvfb (no GLX: nothing uses it; it costs ~11 MiB per desktop) and waits until it reports
  the display (``-displayfd``); then, all at once: openbox; the root window's pattern; and the
  first guest agent, forked from the supervisor (:func:`start_first_agent`): it checks the
  desktop with ``desktop_ready.py``'s waits while a thread loads the agent's libraries, then
  serves (``--listen ADDRESS``) — one process, one python-xlib, no interpreter start. When it
  says openbox manages the screen (``wm ready``; a tint2 started earlier would re-initialise when
  the window manager appears) the panel (tint2) starts; it then waits until the panel is drawn
  before it listens, so the agent's hello means the first screenshot shows the desktop a model
  will drive. Each part waits at most ``CUBICLE_DESKTOP_READY_S``; lateness is logged, not
  fatal. A restarted agent is ``python -m cubicle_guest --listen ADDRESS``.
- The agent, openbox and the panel are restarted when they exit (back-off 0.5 s -> 5 s); Xvfb
  exiting ends the supervisor with status 1 (the desktop is gone). Between events it sleeps
  (woken by SIGCHLD/SIGTERM or a due restart), never polls.
- Its children run with umask 077 (files the user's programs create are the user's alone), in
  ``$HOME``, with the environment it was given (both launchers give the same: ``HOME``, ``PATH``
  with the agent's venv first, ``LANG=C.UTF-8``, the proxy variables of ``allow:``) plus
  ``DISPLAY`` and ``GTK_OVERLAY_SCROLLING=0``.
- SIGTERM/SIGINT stop every child (TERM, then KILL after 3 s) and exit 0.
- Every line it writes starts with ``[supervisor]``; children inherit stdout/stderr, so the
  sandbox's log (``docker logs``, the VM's console) shows X, openbox and agent output in one
  stream. Start-up lines carry the milliseconds since it started.

Standard library only in this process (the forked first agent imports python-xlib and the agent).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

# subprocess (with what it imports: ~0.35 s of a cold VM's boot under TCG) is imported once Xvfb
# and the first agent are on their way (main), not before them; typing never at run time
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import NoReturn

XVFB_READY_TIMEOUT_S = 30.0
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.5, 5.0
STOP_GRACE_S = 3.0
ROOT_PATTERN = ["xsetroot", "-mod", "4", "4", "-fg", "#3b4252", "-bg", "#2e3440"]
STARTED = time.monotonic()


def log(text: str) -> None:
    print(f"[supervisor] {text}", flush=True)


def since_start() -> str:
    return f"{(time.monotonic() - STARTED) * 1000:.0f} ms"


class Settings:
    """The parameters of one desktop (see the module's docstring)."""

    def __init__(
        self,
        *,
        width: int,
        height: int,
        listen: str,
        ready_s: float,
        display: str,
        panel: str,
        boot_done_fd: int | None = None,
    ) -> None:
        self.width, self.height = width, height
        self.listen = listen
        self.ready_s = ready_s
        self.display = display
        self.panel_config = panel
        self.boot_done_fd = boot_done_fd

    @property
    def agent_socket(self) -> str | None:
        """The agent's unix socket file (None for a virtio port)."""
        return self.listen[len("unix:") :] if self.listen.startswith("unix:") else None


def refuse(name: str, value: str, why: str) -> NoReturn:
    log(f"{name}={value!r}: {why}")
    sys.exit(2)


def _digits(text: str) -> bool:
    """ASCII digits only, at least one (``str.isdigit`` also takes other scripts' digits)."""
    return text.isascii() and text.isdigit()


def settings(environ: dict[str, str]) -> Settings:
    """The parameters from ``environ``; exits 2 naming the first bad one."""
    screen = environ.get("CUBICLE_SCREEN", "1280x800")
    found = screen.replace("X", "x").split("x")
    if len(found) != 2 or not all(_digits(part) for part in found):
        refuse("CUBICLE_SCREEN", screen, "not WxH (e.g. 1280x800)")
    width, height = int(found[0]), int(found[1])
    if not (64 <= width <= 8192 and 64 <= height <= 8192):
        refuse("CUBICLE_SCREEN", screen, "width and height must be 64-8192 pixels")
    listen = environ.get("CUBICLE_AGENT_LISTEN", "unix:/run/cubicle/agent.sock")
    scheme, _, rest = listen.partition(":/")
    if scheme not in ("unix", "virtio") or not rest or "\n" in rest:
        refuse("CUBICLE_AGENT_LISTEN", listen, "not unix:/PATH or virtio:/DEVICE")
    ready = environ.get("CUBICLE_DESKTOP_READY_S", "10")
    try:
        ready_s = float(ready)
    except ValueError:
        ready_s = float("nan")
    if not 0 < ready_s <= 3600:
        refuse("CUBICLE_DESKTOP_READY_S", ready, "not a number of seconds in (0, 3600]")
    display = environ.get("CUBICLE_DISPLAY", ":0")
    if not (display[:1] == ":" and _digits(display[1:]) and len(display) <= 5):
        refuse("CUBICLE_DISPLAY", display, "not :N (a local display number)")
    boot_done = environ.get("CUBICLE_BOOT_DONE_FD")
    boot_done_fd = None
    if boot_done is not None:
        if not (_digits(boot_done) and len(boot_done) <= 6) or int(boot_done) < 3:
            refuse("CUBICLE_BOOT_DONE_FD", boot_done, "not a descriptor number >= 3")
        boot_done_fd = int(boot_done)
        try:
            os.fstat(boot_done_fd)
        except OSError:
            refuse("CUBICLE_BOOT_DONE_FD", boot_done, "not an open descriptor")
    return Settings(
        width=width,
        height=height,
        listen=listen,
        ready_s=ready_s,
        display=display,
        panel=environ.get("CUBICLE_PANEL_CONFIG", "/etc/xdg/tint2/tint2rc"),
        boot_done_fd=boot_done_fd,
    )


def remove_stale_x_locks(display: str) -> None:
    number = display.lstrip(":")
    for path in (f"/tmp/.X{number}-lock", f"/tmp/.X11-unix/X{number}"):
        if os.path.lexists(path):
            os.unlink(path)
            log(f"removed stale {path}")
    os.makedirs("/tmp/.X11-unix", mode=0o1777, exist_ok=True)


def spawn_xvfb(config: Settings) -> tuple[Forked, int]:
    """Start Xvfb on ``config.display`` (``posix_spawn``: no subprocess import before it); the
    caller waits for it with :func:`wait_xvfb`.

    :returns: the process, and the read end of its ``-displayfd`` pipe (``wait_xvfb`` closes it).
    """
    read_fd, write_fd = os.pipe()
    os.set_inheritable(write_fd, True)  # the pipes made here are not passed on, this one is
    argv = [
        "Xvfb",
        config.display,
        "-screen",
        "0",
        f"{config.width}x{config.height}x24",
        "-nolisten",
        "tcp",
        "-noreset",
        "+extension",
        "XTEST",
        # GLX loads Mesa (~11 MiB per desktop, and more saved memory in a VM's warm state)
        # that nothing here uses: Chromium renders WebGL with SwiftShader and composites in
        # software, GTK draws with cairo
        "-extension",
        "GLX",
        "-ac",
        "-displayfd",
        str(write_fd),
    ]
    try:
        # signals at their defaults, as Popen's restore_signals (Python ignores these two)
        defaults = (signal.SIGPIPE, signal.SIGXFSZ)
        pid = os.posix_spawnp("Xvfb", argv, os.environ, setsigdef=defaults)
    except OSError as exc:
        log(f"cannot start Xvfb: {exc.strerror}")
        sys.exit(1)
    finally:
        os.close(write_fd)
    return Forked(pid), read_fd


def wait_xvfb(config: Settings, process: Forked, read_fd: int) -> None:
    """Wait until ``process`` has reported its display on ``read_fd`` (exits 1 if it does not
    within :data:`XVFB_READY_TIMEOUT_S`); closes ``read_fd``."""
    deadline = time.monotonic() + XVFB_READY_TIMEOUT_S
    data = b""
    try:
        while not data.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log(f"Xvfb did not report its display within {XVFB_READY_TIMEOUT_S:.0f} s")
                process.kill()
                sys.exit(1)
            if select.select([read_fd], [], [], remaining)[0]:
                chunk = os.read(read_fd, 64)
                if not chunk:
                    status = process.wait()
                    log(f"Xvfb exited with status {status} before reporting its display")
                    sys.exit(1)
                data += chunk
    finally:
        os.close(read_fd)
    log(f"Xvfb ready on {config.display} at {config.width}x{config.height} in {since_start()}")


class Child:
    """A restartable child process with exponential back-off."""

    def __init__(self, name: str, argv: list[str], socket: str | None = None) -> None:
        self.name = name
        self.argv = argv
        self.socket = socket
        """A unix socket file it creates: a stale one is removed before each start."""
        self.process: subprocess.Popen[bytes] | Forked | None = None
        self.backoff = BACKOFF_MIN_S
        self.next_start = 0.0
        self.started_at = 0.0

    def start(self) -> None:
        import subprocess  # noqa: PLC0415 — loaded by main() while Xvfb starts

        if self.socket is not None and os.path.lexists(self.socket):
            os.unlink(self.socket)
        self.process = subprocess.Popen(self.argv)
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


class Forked:
    """A child made by :func:`os.fork` or :func:`os.posix_spawnp`, with the part of ``Popen``'s
    interface used here."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (status := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                import subprocess  # noqa: PLC0415 — loaded by main() while Xvfb starts

                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return status

    def terminate(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def start_first_agent(config: Settings, close: list[int]) -> tuple[Forked, int, int]:
    """The first agent, forked from this process before Xvfb starts: it checks the desktop, then
    serves.

    One process imports python-xlib and the agent's libraries for two jobs (a second interpreter
    and a second python-xlib would cost about a second of a cold VM's boot under TCG). It imports
    them while Xvfb starts, and touches the display only once the caller writes ``x`` to the
    returned *X-up* descriptor (EOF without it: the X server failed, and the child exits 1).
    Then, with ``desktop_ready`` (python-xlib, from the agent's venv, beside this file), it waits
    until openbox manages the screen, then until the panel is drawn, announcing each on the
    returned *said* pipe (``wm ready|late``, then ``panel ready|late``; EOF if it failed), while
    a thread builds the agent on the display (``cubicle_guest.__main__.prepare``: its X connections,
    keymap and screen grabber); then it says so on ``config.boot_done_fd`` (if any) and serves
    (``--listen ADDRESS``) and exits with its status. So its hello means a drawn desktop.
    Restarts are plain ``python -m cubicle_guest``.

    :param close: descriptors the child must not keep (the wake-up pipe).
    :returns: the child, the read end of *said*, the write end of *X-up* (the caller closes both).
    """
    said_r, said_w = os.pipe()
    x_up_r, x_up_w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(said_w)
        os.close(x_up_r)
        return Forked(pid), said_r, x_up_w
    status = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        for fd in (said_r, x_up_w, *close):
            os.close(fd)
        status = _check_then_serve(config, said_w, x_up_r)
    except BaseException as exc:  # the child must never return into main()
        print(f"[supervisor] the first agent failed: {exc!r}", file=sys.stderr, flush=True)
    finally:
        os._exit(status)


def _check_then_serve(config: Settings, said: int, x_up: int) -> int:
    import threading  # noqa: PLC0415 — the forked agent's alone

    loaded: dict[str, object] = {}
    display_up = threading.Event()

    def load_agent() -> None:
        # the import needs nothing; the agent's X set-up (its connections, the keymap, DAMAGE,
        # the screen grabber) needs only the X server: both overlap the desktop's start
        try:
            import cubicle_guest.__main__  # noqa: PLC0415

            loaded["serve"] = cubicle_guest.__main__.serve
            log(f"first agent: libraries loaded (at {since_start()})")
            display_up.wait()
            loaded["prepared"] = cubicle_guest.__main__.prepare(["--listen", config.listen])
            log(f"first agent: built on the display (at {since_start()})")
        except BaseException as exc:
            loaded["error"] = exc

    loader = threading.Thread(target=load_agent, name="agent-start", daemon=True)
    loader.start()
    try:
        import desktop_ready  # noqa: PLC0415 — python-xlib: the forked agent's alone

        with os.fdopen(x_up, "rb") as told:
            if told.read(1) != b"x":
                return 1  # Xvfb did not come up: the supervisor says why and exits
        display_up.set()
        dpy = desktop_ready.display.Display()
        try:
            for what in ("wm", "panel"):
                ready = desktop_ready.wait_for(dpy, what, config.ready_s)
                os.write(said, f"{what} {'ready' if ready else 'late'}\n".encode())
        finally:
            dpy.close()
    finally:
        os.close(said)
    loader.join()
    if "error" in loaded:
        raise loaded["error"]  # type: ignore[misc]
    if config.boot_done_fd is not None:
        say_boot_done(config.boot_done_fd)
    serve = loaded["serve"]
    return int(serve(loaded["prepared"]))  # type: ignore[operator]


def say_boot_done(fd: int) -> None:
    """One line on ``fd`` (the boot's parallel work is over), then close it. Nobody listening
    (EPIPE) is not an error: the VM's init reads it only to take extra vCPUs offline."""
    import contextlib  # noqa: PLC0415 — the first agent's, which has it loaded

    with contextlib.suppress(OSError):
        os.write(fd, b"boot done\n")
    os.close(fd)


def report(name: str, said: bytes, started: float) -> None:
    """Log how long ``name``'s part of the desktop took, from the checker's line about it
    (``<what> ready``; anything else — late, or the checker gone — is logged, not fatal)."""
    waited = f"{(time.monotonic() - started) * 1000:.0f} ms"
    if said.split()[1:2] == [b"ready"]:
        log(f"{name} ready in {waited} (at {since_start()})")
    else:
        log(f"{name} is not ready after {waited}; going on")


def stop_all(processes: list[subprocess.Popen[bytes] | Forked]) -> None:
    import subprocess  # noqa: PLC0415 — loaded by main() while Xvfb starts

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


def paint_root() -> subprocess.Popen[bytes] | None:
    """The root window's pattern (screenshots are never one flat colour), painted meanwhile."""
    import subprocess  # noqa: PLC0415 — loaded by main() while Xvfb starts

    try:
        return subprocess.Popen(ROOT_PATTERN)
    except FileNotFoundError:
        log("xsetroot is not installed: the root window keeps X's default")
        return None


def main() -> int:
    os.umask(0o077)
    config = settings(dict(os.environ))
    home = os.environ.get("HOME")
    if home and os.path.isdir(home):
        os.chdir(home)
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

    remove_stale_x_locks(config.display)
    os.environ["DISPLAY"] = config.display
    os.environ["CUBICLE_PANEL_CONFIG"] = config.panel_config
    # GTK's overlay scrollbars fade in and out a second after content changes: a change on screen
    # with no input, which a model would see late. Classic scrollbars stay put (and show a model
    # that there is more to scroll).
    os.environ["GTK_OVERLAY_SCROLLING"] = "0"
    wm = Child("openbox", ["openbox", "--sm-disable"])
    panel = Child("panel", ["tint2", "-c", config.panel_config])
    agent = Child(
        "agent",
        [sys.executable, "-m", "cubicle_guest", "--listen", config.listen],
        config.agent_socket,
    )
    if config.agent_socket is not None:  # a tmpfs mount in Docker; made here where it is not
        os.makedirs(os.path.dirname(config.agent_socket), mode=0o700, exist_ok=True)
        if os.path.lexists(config.agent_socket):
            os.unlink(config.agent_socket)
    # the first agent imports its libraries while Xvfb starts; it touches X once told it is up
    agent.process, said, x_up = start_first_agent(config, [wake_r, wake_w])
    if config.boot_done_fd is not None:
        os.close(config.boot_done_fd)  # the first agent's alone: EOF if it exits without a word
    agent.started_at = time.monotonic()
    xvfb, displayfd = spawn_xvfb(config)
    import subprocess  # noqa: F401, PLC0415 — its import overlaps Xvfb's start, not before it

    wait_xvfb(config, xvfb, displayfd)
    os.write(x_up, b"x")
    os.close(x_up)
    started = time.monotonic()
    wm.start()
    log(f"started {agent.name} (pid {agent.process.pid}), first checking the desktop")
    root = paint_root()
    with os.fdopen(said, "rb") as lines:
        report(wm.name, lines.readline(), started)
        started = time.monotonic()
        panel.start()
        report(panel.name, lines.readline(), started)
    if root is not None:
        root.wait()
    log(f"desktop ready in {since_start()}; the agent goes on")
    children = [wm, panel, agent]
    status = 0
    while not stopping:
        if xvfb.poll() is not None:
            log(f"Xvfb exited with status {xvfb.returncode}; the desktop is gone")
            status = 1
            break
        due = [t for t in (child.poll() for child in children) if t is not None]
        select.select([wake_r], [], [], min(due) if due else None)
        try:
            while os.read(wake_r, 512):
                pass
        except BlockingIOError:
            pass
    stop_all([c.process for c in children if c.process is not None] + [xvfb])
    log("stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
