"""A task's work on the guest outside the model loop: set-up before the first turn, clean-up.

Nothing here runs between model turns: the drill is pixels-only once the model has started
(:mod:`cubicle.orchestrator.drill.runner`). :class:`GuestSteps` does, through the agent:

- :meth:`GuestSteps.prepare` — a task's ``[setup]``: the helper files (``launch.py``, the form
  server and its page) in a hidden helper folder; the files the checks read are removed (a run
  in a guest used before must not pass on an earlier run's files); the task's files (content
  and mode), the form
  server, the apps to open (and the URL), each waited for until its window is focused, then a
  settle so the model's first screenshot shows a still screen;
- :meth:`GuestSteps.start_browser` — a task's browser, when the agent has the ``signin`` feature:
  the agent's own (its DevTools protocol on a pipe, :mod:`cubicle_guest.signin_ops`);
- :meth:`GuestSteps.launch` — start a program detached (``launch.py`` in the guest); its process
  group is remembered and ended by :meth:`GuestSteps.stop_launched`;
- :meth:`GuestSteps.wait_window` — poll the agent's ``windows`` until a top-level window's title
  contains a text and/or its class matches (and, with ``focused``, it has the input focus); fails
  naming the windows seen.

Every step is timed into the trajectory as ``guest_wait``.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from cubicle.orchestrator import file_transfer
from cubicle.orchestrator.desktop import PANEL
from cubicle.orchestrator.modelrun.errors import GuestStepError, RunCancelled
from cubicle.orchestrator.tasks import Task, fill
from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder
from cubicle_guest.client import AgentClient

__all__ = ["APP_COMMANDS", "GuestSteps", "TaskGuest", "guest_home"]

POLL_S = 0.1
DEFAULT_WINDOW_TIMEOUT_MS = 30_000
BROWSER_WINDOW_TIMEOUT_MS = 60_000
GUEST_FILES = ("launch.py", "form_server.py", "form.html")
SERVER_READY_TIMEOUT_MS = 10_000
HELPER_FOLDER = ".cubicle-task"
"""Under the guest user's home: the drill's helpers and the form server's data (not the task's
folder, so a model listing its work folder sees only the task's files)."""
APP_COMMANDS: dict[str, list[str]] = {
    "terminal": ["cubicle-terminal"],
    "editor": ["mousepad"],
    "browser": ["chromium"],
    "files": ["thunar"],
}
"""What each panel launcher runs (images/desktop/applications), for a task's ``setup.open``."""

_WAIT_FOR_PORT = """
import socket, sys, time
deadline = time.monotonic() + float(sys.argv[2])
while True:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5).close()
        sys.exit(0)
    except OSError as exc:
        if time.monotonic() > deadline:
            print(exc)
            sys.exit(1)
        time.sleep(0.05)
"""

_KILL_GROUPS = """
import os, signal, sys
for pgid in sys.argv[1:]:
    try:
        os.killpg(int(pgid), signal.SIGTERM)
    except ProcessLookupError:
        pass
"""


def guest_home(client: AgentClient) -> str:
    """The home folder of the user the guest agent runs as (asked through ``exec``)."""
    reply = client.exec(
        ["python3", "-c", "import pathlib; print(pathlib.Path.home())"],
        timeout_ms=10_000,
        timeout=20,
    ).result
    home = str(reply.get("stdout", "")).strip()
    if reply.get("exit_code") != 0 or not home.startswith("/"):
        raise GuestStepError(
            "prepare",
            f"could not find the guest user's home folder: exit code "
            f"{reply.get('exit_code')}, output {home!r:.200}",
        )
    return home


@dataclass(frozen=True)
class TaskGuest:
    """A task prepared in one guest: its folders and placeholder values.

    :param values: ``{"{WORKDIR}": ..., "{HOME}": ..., "{PORT}": ...}``.
    :param helpers: the helper folder (form server's page and data, the apps' log).
    """

    task: Task
    values: dict[str, str]
    helpers: str
    tool_outputs: list[str] = field(default_factory=list)
    """The function tool outputs the model received during the run, in order (a check's
    ``{TOOL_OUTPUT}`` is the latest)."""

    @property
    def workdir(self) -> str:
        return self.values["{WORKDIR}"]

    @property
    def prompt(self) -> str:
        """The task's prompt with its placeholders filled."""
        return str(fill(self.task.prompt, self.values))

    @property
    def form_data(self) -> str:
        """Where the form server stores what the page submitted."""
        return f"{self.helpers}/form-data.json"

    def path(self, text: str) -> str:
        """A task path in the guest: placeholders filled; ``~/`` is the home; a relative path
        is under the work folder."""
        filled = str(fill(text, self.values))
        if filled == "~" or filled.startswith("~/"):
            filled = self.values["{HOME}"] + filled[1:]
        if not filled.startswith("/"):
            filled = posixpath.join(self.workdir, filled)
        return posixpath.normpath(filled)


class GuestSteps:
    """Set-up and clean-up against one guest.

    :param client: a connected agent client (hello done); the caller owns and closes it.
    :param recorder: where ``guest_wait`` events go (optional).
    :param cancelled: polled during waits; when true a step raises :class:`RunCancelled`.
    :param time_scale: multiplies every wait's timeout and quiet period (slow guests: a VM under
        TCG emulation).
    """

    def __init__(
        self,
        client: AgentClient,
        *,
        recorder: TrajectoryRecorder | None = None,
        cancelled: Callable[[], bool] = lambda: False,
        time_scale: float = 1.0,
    ) -> None:
        if not time_scale >= 1.0:
            raise ValueError(f"time_scale must be >= 1.0, got {time_scale!r}")
        self.client = client
        self.time_scale = time_scale
        self.recorder = recorder
        self.cancelled = cancelled
        self.launched: list[int] = []
        self.agent_browser = False
        """Whether :meth:`start_browser` started the agent's browser (ended by stop_launched)."""
        self.wait_s = 0.0
        """Total seconds spent in steps (waiting on the guest)."""
        self.notes: list[str] = []
        """Things the drill had to work around in the guest, for the summary."""
        self._lock = threading.Lock()
        hello = client.hello_result or {}
        screen = hello.get("screen") or {}
        self.screen = (int(screen.get("width", 0)), int(screen.get("height", 0)))
        self.features = frozenset(hello.get("features") or ())
        """The agent's optional protocol features (:data:`cubicle_guest.protocol.FEATURES`)."""
        self.home = guest_home(client)
        self.helpers = f"{self.home}/{HELPER_FOLDER}"
        self.log = f"{self.helpers}/apps.log"
        self._helpers_written = False

    # -- set-up and clean-up -----------------------------------------------------------------

    def install_helpers(self) -> None:
        """Write ``launch.py``, the form server and its page into the helper folder (once)."""
        if self._helpers_written:
            return
        folder = resources.files("cubicle.orchestrator.modelrun.guest_files")
        for name in GUEST_FILES:
            with self._lock:
                self.client.write_file(
                    f"{self.helpers}/{name}",
                    folder.joinpath(name).read_bytes(),
                    mkdirs=True,
                    timeout=30,
                )
        self._helpers_written = True

    def prepare(self, task: Task) -> TaskGuest:
        """Bring the guest to the task's starting state (module docstring)."""
        started = time.monotonic()
        self.install_helpers()
        guest = TaskGuest(task, task.placeholders(self.home), self.helpers)
        self._exec(["mkdir", "-p", "--", guest.workdir], timeout_ms=10_000)
        # what the checks read must come from this run, not an earlier one in the same guest
        stale = [guest.path(c.file) for c in task.checks if c.file is not None]
        self._exec(["rm", "-f", "--", guest.form_data, *stale], timeout_ms=10_000)
        for item in task.setup.files:  # the path of Sandbox.upload: chunks, complete or absent
            target = guest.path(item.path)
            source = None if item.source is None else task.source_path(item)
            folder = target if item.path.endswith("/") else posixpath.dirname(target)
            self._exec(["mkdir", "-p", "--", folder], timeout_ms=10_000)
            with self._lock:
                if source is not None:
                    file_transfer.upload(self.client, source, target)
                else:
                    assert item.content is not None
                    file_transfer.write_bytes(
                        self.client, target, item.content.encode("utf-8"), mode=item.file_mode
                    )
        if task.signin is not None:
            self._write_signin_digests(task)
        if task.port is not None:
            self.start_form_server(task.port, guest.workdir)
        self._timed("prepare", f"{len(task.setup.files)} files in {guest.workdir}", started)
        for app in task.setup.apps:
            argv = list(APP_COMMANDS[app])
            url = None
            if app == "browser" and task.setup.url is not None:
                url = str(fill(task.setup.url, guest.values))
                argv.append(url)
            started = time.monotonic()
            if app == "browser" and "signin" in self.features:
                self.start_browser(url)
            else:
                self.launch(argv)
            timeout = BROWSER_WINDOW_TIMEOUT_MS if app == "browser" else DEFAULT_WINDOW_TIMEOUT_MS
            wm_class = PANEL.launcher(app).wm_class
            if url is None:
                self.wait_window(wm_class=wm_class, timeout_ms=self._scaled(timeout), focused=True)
            else:
                self.wait_page(wm_class, url, self._scaled(timeout))
            self._timed("open", app, started)
        if task.setup.apps:
            # a long quiet period: the model's first screenshot is not settled by any action
            # (measured on a TCG VM: Chromium drew its page 2-3 s after a 2 s quiet period —
            # busy meanwhile: so the screen counts as quiet only once the programs are idle)
            self.settle(quiet_ms=1000, timeout_ms=15_000, until_idle=True)
        return guest

    def reattach(self, task: Task) -> TaskGuest:
        """``task`` as an earlier, interrupted run prepared it in this guest (``--resume``): its
        values and folders, no set-up step run again."""
        return TaskGuest(task, task.placeholders(self.home), self.helpers)

    def wait_page(self, wm_class: str, url: str, timeout_ms: int) -> None:
        """Wait until the browser just started with ``url`` shows a loaded page (it titles the
        window; on a TCG VM "Untitled - Chromium" stays for seconds after the window is drawn).
        If it has not within half of ``timeout_ms``, give ``url`` to the running browser once
        more (it opens a tab) and wait the other half.

        Why: under TCG, Chromium has lost the navigation given on its command line — its
        network service was restarted during start-up, the tab stayed "Untitled" and no
        request reached the server — while the same URL given to the running browser loaded.
        This is set-up, before the model's first turn."""
        first = timeout_ms // 2
        try:
            self.wait_window(wm_class=wm_class, timeout_ms=first, focused=True, loaded=True)
            return
        except GuestStepError:
            pass
        started = time.monotonic()
        self.launch([*APP_COMMANDS["browser"], url])
        self._timed("reopen", f"{url}: no page loaded after {first} ms; opened again", started)
        self.wait_window(
            wm_class=wm_class, timeout_ms=timeout_ms - first, focused=True, loaded=True
        )

    def _write_signin_digests(self, task: Task) -> None:
        """The form server's sign-in site checks the task's test credentials against their
        SHA-256 digests (``signin.json`` in the helper folder): the values never enter the guest
        but through the browser's form."""
        assert task.signin is not None
        digests = {
            name: hashlib.sha256(getattr(task.signin, name).encode("utf-8")).hexdigest()
            for name in ("email", "password", "code")
        }
        with self._lock:
            self.client.write_file(
                f"{self.helpers}/signin.json", json.dumps(digests).encode(), mkdirs=True, timeout=30
            )

    def start_form_server(self, port: int, pages: str | None = None) -> None:
        """Start the form server on guest loopback ``port`` (serving the task's own pages,
        ``/NAME.html``, from the folder ``pages``: its work folder); wait until it accepts."""
        argv = ["python3", f"{self.helpers}/form_server.py", str(port), self.helpers]
        self.launch(argv if pages is None else [*argv, pages])
        result = self._exec(
            ["python3", "-c", _WAIT_FOR_PORT, str(port), str(SERVER_READY_TIMEOUT_MS / 1000)],
            timeout_ms=SERVER_READY_TIMEOUT_MS + 5000,
        )
        if result.get("exit_code") != 0:
            raise GuestStepError(
                "prepare",
                f"the form server did not accept connections on 127.0.0.1:{port} within "
                f"{SERVER_READY_TIMEOUT_MS} ms ({str(result.get('stdout', '')).strip()})",
                hint=f"see the guest log {self.log}",
            )

    def start_browser(self, url: str | None) -> None:
        """Start the agent's own browser (``browser_start``: the DevTools protocol on a pipe only
        the agent holds, what sign-in detection reads, docs/security.md)."""
        with self._lock:
            self.client.browser_start(url=url, timeout=30)
        self.agent_browser = True

    def stop_launched(self) -> None:
        """SIGTERM the process group of every program this object launched, and end the agent's
        browser when this object started it (best effort)."""
        if self.agent_browser:
            self.agent_browser = False
            with self._lock:
                self.client.browser_stop(timeout=30)
        groups, self.launched = self.launched, []
        if groups:
            self._exec(["python3", "-c", _KILL_GROUPS, *map(str, groups)], timeout_ms=10_000)

    # -- steps ------------------------------------------------------------------------------------

    def launch(self, argv: list[str]) -> int:
        """Start ``argv`` detached (own session, output to the apps' log); return its pid."""
        self.install_helpers()
        result = self._exec(
            ["python3", f"{self.helpers}/launch.py", self.log, "--", *argv], timeout_ms=10_000
        )
        text = str(result.get("stdout", "")).strip()
        if result.get("exit_code") != 0 or not text.isdigit():
            raise GuestStepError(
                "launch",
                f"could not start {argv[0]!r}: exit code {result.get('exit_code')}, "
                f"stderr {str(result.get('stderr', '')).strip()[:300]!r}",
            )
        pid = int(text)
        self.launched.append(pid)
        return pid

    def settle(self, *, quiet_ms: int, timeout_ms: int, until_idle: bool = False) -> bool:
        """The agent's ``settle`` (scaled); True when the screen was quiet in time.
        ``until_idle``: quiet only once the focused program and the window manager are idle
        too (where the agent has feature ``settle_until_idle``; else the screen alone)."""
        started = time.monotonic()
        quiet, timeout = self._scaled(quiet_ms), self._scaled(timeout_ms)
        idle = True if until_idle and "settle_until_idle" in self.features else None
        with self._lock:
            result = self.client.settle(
                quiet_ms=quiet, timeout_ms=timeout, until_idle=idle, timeout=timeout / 1000 + 10
            ).result
        settled = bool(result.get("settled"))
        self._timed(
            "settle", "settled" if settled else f"still changing after {timeout} ms", started
        )
        return settled

    def _scaled(self, milliseconds: int) -> int:
        return round(milliseconds * self.time_scale)

    def wait_window(
        self,
        title: str | None = None,
        *,
        wm_class: str | None = None,
        timeout_ms: int,
        focused: bool = False,
        loaded: bool = False,
    ) -> dict[str, Any]:
        """Poll until a top-level window's title contains ``title`` and/or its class is
        ``wm_class`` (and it has the focus, when ``focused``; and a page's title, not Chromium's
        ``Untitled``/``New Tab``, when ``loaded``); return that window."""
        if title is None and wm_class is None:
            raise ValueError("wait_window needs a title or a wm_class")
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._check_cancelled()
            with self._lock:
                windows = self.client.windows(timeout=30).result.get("windows") or []
            for window in windows:
                if (
                    isinstance(window, dict)
                    and (title is None or title in str(window.get("title") or ""))
                    and (wm_class is None or wm_class in (window.get("wm_class") or []))
                    and (window.get("focused") or not focused)
                    and not (loaded and _unloaded(str(window.get("title") or "")))
                ):
                    return window
            if time.monotonic() >= deadline:
                seen = [
                    f"{w.get('title')}{' (focused)' if w.get('focused') else ''}"
                    for w in windows
                    if isinstance(w, dict)
                ]
                wanted = " and ".join(
                    part
                    for part in (
                        f"titled like {title!r}" if title else "",
                        f"of class {wm_class!r}" if wm_class else "",
                        "showing a loaded page (a title other than Untitled/New Tab)"
                        if loaded
                        else "",
                    )
                    if part
                )
                raise GuestStepError(
                    "wait_window",
                    f"no {'focused ' if focused else ''}window {wanted} within "
                    f"{timeout_ms} ms; windows seen: {seen}",
                    hint=f"the applications' output is in the guest file {self.log}",
                )
            time.sleep(POLL_S)

    # -- internals -----------------------------------------------------------------------------

    def _exec(self, argv: list[str], *, timeout_ms: int) -> dict[str, Any]:
        with self._lock:
            return self.client.exec(
                argv, timeout_ms=timeout_ms, timeout=timeout_ms / 1000 + 5
            ).result

    def _timed(self, op: str, detail: str, started: float) -> None:
        elapsed = time.monotonic() - started
        self.wait_s += elapsed
        if self.recorder is not None:
            self.recorder.event(
                "guest_wait", op=op, detail=detail, duration_ms=round(elapsed * 1000, 1)
            )

    def _check_cancelled(self) -> None:
        if self.cancelled():
            raise RunCancelled("the run was cancelled while waiting on the guest")


def _unloaded(title: str) -> bool:
    """A browser window title before its page has loaded."""
    return not title or title.startswith(("Untitled", "New Tab", "about:blank"))
