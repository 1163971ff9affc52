"""The drill's work on the guest outside the model loop: set-up, scripted waits, clean-up.

A :class:`GuestSteps` runs the ``before`` steps of the scripted model's turns through the agent
(the scripted model server calls it before answering a turn), so the model never guesses: it
answers only once the window it is about to act on exists and the screen has settled. Steps:

- ``{"op": "launch", "argv": [...]}`` — start a program detached (``launch.py`` in the guest);
  its process group is remembered and ended by :meth:`GuestSteps.stop_launched`.
- ``{"op": "wait_window", "title": "…", "timeout_ms": N, "focused": true}`` — poll the agent's
  ``windows`` until a top-level window's title contains the text (and, with ``focused``, that
  window has the input focus, so typed keys reach it); fails naming the titles seen.
- ``{"op": "settle", "quiet_ms": N, "timeout_ms": N}`` — the agent's ``settle``.
- ``{"op": "check_page_layout"}`` — the form page reported its viewport at the screen's origin,
  at the screen's size and a device pixel ratio of 1, so the script's CSS-pixel coordinates hold.

Every step is timed into the trajectory as ``guest_wait``. The agent client is shared with the
driver; the SDK is blocked on the HTTP request while steps run, so the two never overlap.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

from guest.client import AgentClient
from guest.errors import GuestError
from orchestrator.drill.errors import DrillCancelled, GuestStepError
from orchestrator.drill.task import DrillPaths
from orchestrator.trajectory.recorder import TrajectoryRecorder

__all__ = ["GuestSteps", "guest_home"]

POLL_S = 0.1
DEFAULT_WINDOW_TIMEOUT_MS = 20_000
GUEST_FILES = ("launch.py", "form_server.py", "form.html")
SERVER_READY_TIMEOUT_MS = 10_000

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
    reply = client.call(
        "exec",
        {
            "argv": ["python3", "-c", "import pathlib; print(pathlib.Path.home())"],
            "timeout_ms": 10_000,
        },
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


class GuestSteps:
    """Runs drill steps against one guest.

    :param client: a connected agent client (hello done); the caller owns and closes it.
    :param paths: the guest folder and port this drill run owns.
    :param recorder: where ``guest_wait`` events go (optional).
    :param cancelled: polled during waits; when true a step raises :class:`DrillCancelled`.
    """

    def __init__(
        self,
        client: AgentClient,
        paths: DrillPaths,
        *,
        recorder: TrajectoryRecorder | None = None,
        cancelled: Callable[[], bool] = lambda: False,
        time_scale: float = 1.0,
    ) -> None:
        if not time_scale >= 1.0:
            raise ValueError(f"time_scale must be >= 1.0, got {time_scale!r}")
        self.client = client
        self.time_scale = time_scale
        """Multiplies every scripted step's ``timeout_ms`` and ``quiet_ms``: a slow guest (a VM
        under TCG emulation) draws a dialog's contents long after its window maps, so it needs
        longer quiet periods as well as longer deadlines."""
        self.paths = paths
        self.recorder = recorder
        self.cancelled = cancelled
        self.launched: list[int] = []
        self.wait_s = 0.0
        """Total seconds spent in steps (waiting on the guest)."""
        self.notes: list[str] = []
        """Things the drill had to work around in the guest, for the summary."""
        self._lock = threading.Lock()
        hello = client.hello_result or {}
        screen = hello.get("screen") or {}
        self.screen = (int(screen.get("width", 0)), int(screen.get("height", 0)))

    # -- set-up and clean-up -----------------------------------------------------------------

    def prepare(self) -> None:
        """Write the drill's files into ``paths.workdir`` and start the form server."""
        started = time.monotonic()
        folder = resources.files("orchestrator.drill.guest_files")
        for name in GUEST_FILES:
            data = folder.joinpath(name).read_bytes()
            self._call(
                "write_file", {"path": f"{self.paths.workdir}/{name}", "mkdirs": True}, blob=data
            )
        self._launch(
            [
                "python3",
                f"{self.paths.workdir}/form_server.py",
                str(self.paths.port),
                self.paths.workdir,
            ]
        )
        result = self._exec(
            [
                "python3",
                "-c",
                _WAIT_FOR_PORT,
                str(self.paths.port),
                str(SERVER_READY_TIMEOUT_MS / 1000),
            ],
            timeout_ms=SERVER_READY_TIMEOUT_MS + 5000,
        )
        if result.get("exit_code") != 0:
            raise GuestStepError(
                "prepare",
                f"the form server did not accept connections on 127.0.0.1:{self.paths.port} within "
                f"{SERVER_READY_TIMEOUT_MS} ms ({str(result.get('stdout', '')).strip()})",
                hint=f"see the guest log {self.paths.log}",
            )
        self._timed(
            "prepare", f"files in {self.paths.workdir}, form server on {self.paths.port}", started
        )

    def stop_launched(self) -> None:
        """SIGTERM the process group of every program this object launched (best effort)."""
        groups, self.launched = self.launched, []
        if groups:
            self._exec(["python3", "-c", _KILL_GROUPS, *map(str, groups)], timeout_ms=10_000)

    # -- scripted steps ----------------------------------------------------------------------

    def run_all(self, steps: object) -> None:
        """Run a turn's ``before`` list in order."""
        if steps is None:
            return
        if not isinstance(steps, list):
            raise GuestStepError("before", f"expected a list of steps, got {type(steps).__name__}")
        for step in steps:
            self.run(step)

    def run(self, step: object) -> None:
        """Run one step (see the module docstring); raise :class:`GuestStepError` on failure."""
        if not isinstance(step, Mapping) or not isinstance(step.get("op"), str):
            raise GuestStepError(
                "before", f"a step must be an object with a string 'op', got {step!r:.120}"
            )
        self._check_cancelled()
        op = step["op"]
        started = time.monotonic()
        if op == "launch":
            argv = step.get("argv")
            if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
                raise GuestStepError(
                    "launch", f"'argv' must be a non-empty list of strings, got {argv!r:.120}"
                )
            self._launch(argv)
            detail = argv[0]
        elif op == "wait_window":
            title = step.get("title")
            if not isinstance(title, str) or not title:
                raise GuestStepError(
                    "wait_window", f"'title' must be a non-empty string, got {title!r}"
                )
            focused = step.get("focused", False)
            if not isinstance(focused, bool):
                raise GuestStepError("wait_window", f"'focused' must be a boolean, got {focused!r}")
            self.wait_window(
                title,
                timeout_ms=self._scaled(_int(step, "timeout_ms", DEFAULT_WINDOW_TIMEOUT_MS)),
                focused=focused,
            )
            detail = title
        elif op == "settle":
            quiet = self._scaled(_int(step, "quiet_ms", 300))
            timeout = self._scaled(_int(step, "timeout_ms", 5000))
            result = self._call(
                "settle", {"quiet_ms": quiet, "timeout_ms": timeout}, timeout_s=timeout / 1000 + 10
            )
            detail = "settled" if result.get("settled") else f"still changing after {timeout} ms"
        elif op == "check_page_layout":
            self.check_page_layout(timeout_ms=self._scaled(_int(step, "timeout_ms", 10_000)))
            detail = "viewport at the screen origin"
        else:
            raise GuestStepError(
                op, "unknown step; known: launch, wait_window, settle, check_page_layout"
            )
        self._timed(op, detail, started)

    def _scaled(self, milliseconds: int) -> int:
        return round(milliseconds * self.time_scale)

    def wait_window(self, title: str, *, timeout_ms: int, focused: bool = False) -> dict[str, Any]:
        """Poll until a top-level window's title contains ``title`` (and it has the focus, when
        ``focused``); return that window."""
        deadline = time.monotonic() + timeout_ms / 1000
        seen: list[str] = []
        while True:
            self._check_cancelled()
            windows = self._call("windows", {}).get("windows") or []
            seen = [
                f"{w.get('title')}{' (focused)' if w.get('focused') else ''}"
                for w in windows
                if isinstance(w, dict)
            ]
            for window in windows:
                if (
                    isinstance(window, dict)
                    and title in str(window.get("title") or "")
                    and (window.get("focused") or not focused)
                ):
                    return window
            if time.monotonic() >= deadline:
                raise GuestStepError(
                    "wait_window",
                    f"no {'focused ' if focused else ''}window titled like {title!r} within "
                    f"{timeout_ms} ms; windows seen: {seen}",
                    hint=f"the applications' output is in the guest file {self.paths.log}",
                )
            time.sleep(POLL_S)

    def check_page_layout(self, *, timeout_ms: int = 10_000) -> None:
        """Wait until the layout the form page reported matches the screen (module docstring)."""
        width, height = self.screen
        wanted = {
            "screenX": 0,
            "screenY": 0,
            "innerWidth": width,
            "innerHeight": height,
            "devicePixelRatio": 1,
        }
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._check_cancelled()
            try:
                raw = self.client.call("read_file", {"path": self.paths.layout}, timeout=10).blob
                layout = json.loads(raw.decode("utf-8"))
            except (GuestError, ValueError) as exc:
                layout = {"error": str(exc)}
            wrong = {
                key: layout.get(key) for key, value in wanted.items() if layout.get(key) != value
            }
            if not wrong:
                return
            if time.monotonic() >= deadline:
                raise GuestStepError(
                    "check_page_layout",
                    f"the form page is not where the script's coordinates expect it after "
                    f"{timeout_ms} ms: wanted {wanted}, got {wrong}",
                    hint="chromium must run with --kiosk --force-device-scale-factor=1 on a window "
                    "manager that lets it cover the screen",
                )
            time.sleep(POLL_S)

    # -- internals -----------------------------------------------------------------------------

    def _launch(self, argv: list[str]) -> int:
        result = self._exec(
            ["python3", f"{self.paths.workdir}/launch.py", self.paths.log, "--", *argv],
            timeout_ms=10_000,
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

    def _exec(self, argv: list[str], *, timeout_ms: int) -> dict[str, Any]:
        return self._call(
            "exec", {"argv": argv, "timeout_ms": timeout_ms}, timeout_s=timeout_ms / 1000 + 5
        )

    def _call(
        self, op: str, args: dict[str, Any], *, blob: bytes = b"", timeout_s: float = 30.0
    ) -> dict[str, Any]:
        with self._lock:
            return self.client.call(op, args, blob=blob, timeout=timeout_s).result

    def _timed(self, op: str, detail: str, started: float) -> None:
        elapsed = time.monotonic() - started
        self.wait_s += elapsed
        if self.recorder is not None:
            self.recorder.event(
                "guest_wait", op=op, detail=detail, duration_ms=round(elapsed * 1000, 1)
            )

    def _check_cancelled(self) -> None:
        if self.cancelled():
            raise DrillCancelled("the drill was cancelled while waiting on the guest")


def _int(step: Mapping[str, object], name: str, default: int) -> int:
    value = step.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise GuestStepError(
            str(step.get("op")), f"{name!r} must be a non-negative integer, got {value!r}"
        )
    return value
