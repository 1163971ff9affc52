"""Start the real guest agent (``python -m cubicle_guest``) on a test's Xvfb.

    with Xvfb(1280, 800) as x, start_agent(x.display, tmp_path) as agent:
        with agent.client() as client:
            client.click(10, 10)

The :class:`RunningAgent` owns the process it started and stops it (by its pid) on exit, even
when the body fails; the agent's stderr is kept in ``socket_dir/agent.log`` and attached to
start-up errors.
"""

from __future__ import annotations

import os
import subprocess
import sys
from io import BytesIO
from pathlib import Path
from types import TracebackType
from typing import Self

from PIL import Image

from cubicle_guest.client import AgentClient, connect_unix
from tests.support.processes import stop_process

__all__ = ["AgentStartError", "RunningAgent", "pixel_at", "start_agent"]

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_UNIX_PATH = 107
"""Longest unix socket path (bytes) Linux accepts (sun_path is 108 bytes with the NUL)."""


class AgentStartError(RuntimeError):
    """The agent did not come up; the message carries its log tail."""


class RunningAgent:
    """A ``python -m cubicle_guest --listen unix:...`` process serving ``display``.

    :param socket_path: where the agent listens (its directory must exist).
    :param log_path: file receiving the agent's stderr.
    """

    def __init__(
        self,
        display: str,
        socket_path: Path,
        log_path: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.display = display
        self.socket_path = socket_path
        self.log_path = log_path
        self._extra_env = extra_env or {}
        self._process: subprocess.Popen[bytes] | None = None
        self.hello: dict[str, object] = {}

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("agent is not running")
        return self._process.pid

    def start(self, timeout: float = 20.0) -> Self:
        env = {**os.environ, "DISPLAY": self.display, **self._extra_env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cubicle_guest",
                    "--listen",
                    f"unix:{self.socket_path}",
                    "--log-level",
                    "DEBUG",
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=REPO_ROOT,
            )
        try:
            with connect_unix(self.socket_path, timeout=timeout) as client:
                self.hello = client.hello(timeout=timeout)
        except Exception as exc:
            code = self._process.poll()
            self.stop()
            raise AgentStartError(
                f"agent on {self.display} did not answer hello at {self.socket_path} within "
                f"{timeout} s (exit code {code}): {exc}\n"
                f"--- agent log ---\n{self.log_text()[-4000:]}"
            ) from exc
        return self

    def client(self, timeout: float = 30.0) -> AgentClient:
        """A new connected client with hello done; the caller closes it."""
        client = connect_unix(self.socket_path, timeout=5.0, request_timeout=timeout)
        try:
            client.hello()
        except BaseException:
            client.close()
            raise
        return client

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> int | None:
        """Terminate the agent this object started (idempotent); return its exit code."""
        process, self._process = self._process, None
        if process is None:
            return None
        return stop_process(process)

    def __enter__(self) -> Self:
        return self if self._process is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_agent(
    display: str,
    socket_dir: Path,
    *,
    timeout: float = 20.0,
    extra_env: dict[str, str] | None = None,
) -> RunningAgent:
    """Spawn the agent on ``display`` listening in ``socket_dir`` and wait for its hello.

    Use as a context manager (``with start_agent(...) as agent``) so the process is stopped.
    """
    socket_dir.mkdir(parents=True, exist_ok=True)
    socket_path = socket_dir / "agent.sock"
    if len(os.fsencode(socket_path)) > MAX_UNIX_PATH:
        size = len(os.fsencode(socket_path))
        raise ValueError(
            f"socket path {socket_path} is {size} bytes, over the unix socket "
            f"limit of {MAX_UNIX_PATH}; use a shorter socket_dir"
        )
    agent = RunningAgent(display, socket_path, socket_dir / "agent.log", extra_env)
    return agent.start(timeout=timeout)


def pixel_at(client: AgentClient, x: int, y: int) -> tuple[int, ...]:
    """The RGB colour of screen pixel (``x``, ``y``), read through the agent's ``screenshot``."""
    reply = client.screenshot(format="png", region={"x": x, "y": y, "width": 1, "height": 1})
    with Image.open(BytesIO(reply.blob)) as image:
        return tuple(image.convert("RGB").getpixel((0, 0)))  # type: ignore[arg-type]
