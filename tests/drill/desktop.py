"""A local test desktop for the drill: private Xvfb + openbox (the guest image's config) + agent.

It satisfies :class:`cubicle.orchestrator.modelrun.Desktop`, so the drill's own code runs against it
exactly as against a sandbox. Everything runs as this user with HOME in a temporary folder; the
owner stops it with :meth:`LocalDesktop.stop` (``with``), which ends the agent, openbox and Xvfb
by the pids it started.

The drill starts chromium with its sandbox on, as in a guest. Chromium refuses to run as root
with its sandbox, so when this host test runs as root (CI) the agent's PATH starts with a
``chromium`` wrapper adding ``--no-sandbox``: a browser a test runs on the host as root, outside
the guest rule (docs/security.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from cubicle_guest.client import AgentClient
from tests.support.agent import RunningAgent, start_agent
from tests.support.processes import stop_process
from tests.support.xvfb import Xvfb

__all__ = ["LocalDesktop", "app", "missing_apps", "wait_for_window"]

REPO = Path(__file__).resolve().parents[2]
OPENBOX_RC = REPO / "images" / "desktop" / "openbox-rc.xml"
ROOT_CHROMIUM = """#!/bin/sh
# the local drill desktop runs as root on the host: chromium's sandbox cannot run as root
exec {chromium} --no-sandbox "$@"
"""
APPS = ("openbox", "mousepad", "chromium", "Xvfb")


def missing_apps() -> list[str]:
    """Programs the local drill desktop needs that are not installed."""
    return [name for name in APPS if shutil.which(name) is None]


class LocalDesktop:
    """Xvfb at ``screen`` + openbox + the guest agent, under ``root`` (a temporary folder)."""

    def __init__(self, root: Path, screen: tuple[int, int] = (1280, 800)) -> None:
        self.root = root
        self.home = root / "home"
        self.screen = screen
        self._xvfb: Xvfb | None = None
        self._openbox: subprocess.Popen[bytes] | None = None
        self.agent: RunningAgent | None = None

    def start(self) -> Self:
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            runtime = self.root / "runtime"
            runtime.mkdir(mode=0o700, exist_ok=True)
            env = {
                "HOME": str(self.home),
                "XDG_RUNTIME_DIR": str(runtime),
                "NO_AT_BRIDGE": "1",
                "GTK_OVERLAY_SCROLLING": "0",
                "XDG_CONFIG_HOME": str(self.home / ".config"),
                "XDG_CACHE_HOME": str(self.home / ".cache"),
            }
            if os.geteuid() == 0:
                env["PATH"] = f"{self._root_chromium()}:{os.environ.get('PATH', os.defpath)}"
            self._xvfb = Xvfb(*self.screen).start()
            with (self.root / "openbox.log").open("wb") as log:
                self._openbox = subprocess.Popen(
                    ["openbox", "--config-file", str(OPENBOX_RC)],
                    env={**os.environ, **env, "DISPLAY": self._xvfb.display},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            self.agent = start_agent(self._xvfb.display, self.root / "agent", extra_env=env)
        except BaseException:
            self.stop()
            raise
        return self

    def _root_chromium(self) -> Path:
        """A folder holding the ``chromium`` wrapper for root (see the module's docstring)."""
        folder = self.root / "root-bin"
        folder.mkdir(exist_ok=True)
        wrapper = folder / "chromium"
        wrapper.write_text(ROOT_CHROMIUM.format(chromium=shutil.which("chromium")))
        wrapper.chmod(0o755)
        return folder

    def connect(self, timeout: float = 10.0) -> AgentClient:
        """A new agent connection with hello done; the caller closes it."""
        assert self.agent is not None, "LocalDesktop is not started"
        return self.agent.client()

    def stop(self) -> None:
        """Stop the agent, openbox and Xvfb this object started (idempotent)."""
        agent, self.agent = self.agent, None
        if agent is not None:
            agent.stop()
        openbox, self._openbox = self._openbox, None
        if openbox is not None:
            stop_process(openbox, timeout=5)
        xvfb, self._xvfb = self._xvfb, None
        if xvfb is not None:
            xvfb.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextmanager
def app(desktop: LocalDesktop, *argv: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` on ``desktop`` as its user would (its display and home); end it on exit."""
    assert desktop.agent is not None
    env = {
        **os.environ,
        "DISPLAY": desktop.agent.display,
        "HOME": str(desktop.home),
        "XDG_CONFIG_HOME": str(desktop.home / ".config"),
        "XDG_CACHE_HOME": str(desktop.home / ".cache"),
        "NO_AT_BRIDGE": "1",
        "GTK_OVERLAY_SCROLLING": "0",
    }
    process = subprocess.Popen(
        list(argv), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield process
    finally:
        stop_process(process)


def wait_for_window(desktop: LocalDesktop, title: str) -> None:
    """Set-up before the first model turn: the app's window is up and drawn."""
    with desktop.connect() as client:
        for _ in range(300):
            windows = client.windows().result["windows"]
            if any(title in w["title"] and w["focused"] for w in windows):
                client.settle(quiet_ms=500, timeout_ms=10_000, timeout=20)
                return
            client.wait(ms=100)
    raise AssertionError(f"no focused window titled like {title!r}")
