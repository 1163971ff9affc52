"""Start, reuse and steer a sandbox's view server (``cubicle view``).

:func:`open_view` returns a fresh one-time URL of the sandbox's view server, starting the server
(a detached background process, :mod:`cubicle.orchestrator.view.server`) when none runs. Starting is
serialized per sandbox with a lock file, so two ``cubicle view`` at once share one server.
:func:`set_mode` hands control to a person (``takeover``) or back to the agent (``view``).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import selectors
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Final

import requests

from cubicle.orchestrator.errors import OrchestratorError
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.view_servers import (
    MODES,
    Mode,
    ViewState,
    check_sandbox_id,
    lock_path,
    log_path,
    read_state,
    server_argv,
)

__all__ = ["ViewError", "ViewLink", "open_view", "set_mode"]

START_TIMEOUT_S: Final = 20.0
HTTP_TIMEOUT_S: Final = 10.0


class ViewError(OrchestratorError):
    """The view server could not be started or did not answer."""


@dataclass(frozen=True)
class ViewLink:
    """A one-time link to a sandbox's live view: ``url`` carries its token in the fragment."""

    url: str
    mode: Mode
    sandbox_id: str
    pid: int

    def as_json(self) -> dict[str, Any]:
        return {"url": self.url, "mode": self.mode}


def open_view(sandbox_id: str, *, mode: Mode | None = None) -> ViewLink:
    """A new one-time URL to the view of ``sandbox_id`` (starting its server if needed); with
    ``mode``, switch to it first (``takeover`` pauses the agent's hand-over gate).

    :raises SandboxNotFound: no such sandbox.
    :raises ViewError: the server did not start or answer.
    """
    check_sandbox_id(sandbox_id)
    Sandbox.attach(sandbox_id)  # exists, and is no unclaimed warm-pool member
    state = _ensure_server(sandbox_id, mode or "view")
    if mode is not None and mode != state.mode:
        state = set_mode(sandbox_id, mode)
    token = _call(state, "POST", "api/mint")["token"]
    return ViewLink(f"{state.base_url}#t={token}", state.mode, sandbox_id, state.pid)


def set_mode(sandbox_id: str, mode: Mode) -> ViewState:
    """Switch the running view server of ``sandbox_id`` to ``mode``.

    :raises ViewError: no view server runs for it, or it refused.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    state = read_state(sandbox_id)
    if state is None:
        raise ViewError(
            f"no view server runs for {sandbox_id}",
            hint=f"start one with: cubicle view {sandbox_id}",
        )
    reply = _call(state, "POST", "api/mode", {"mode": mode})
    return ViewState(state.sandbox_id, state.pid, state.port, state.key, reply["mode"])


def _call(state: ViewState, method: str, path: str, body: object = None) -> dict[str, Any]:
    try:
        response = requests.request(
            method,
            state.base_url + path,
            json=body,
            headers={"Authorization": f"Bearer {state.key}"},
            timeout=HTTP_TIMEOUT_S,
        )
    except requests.RequestException as exc:
        raise ViewError(f"the view server of {state.sandbox_id} did not answer: {exc}") from exc
    if response.status_code != 200:
        raise ViewError(
            f"the view server of {state.sandbox_id} refused {path}: "
            f"{response.status_code} {response.text[:200]}"
        )
    data: dict[str, Any] = response.json()
    return data


def _ensure_server(sandbox_id: str, mode: Mode) -> ViewState:
    lock_fd = os.open(lock_path(sandbox_id), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        state = read_state(sandbox_id)
        return state if state is not None else _start_server(sandbox_id, mode)
    finally:
        os.close(lock_fd)


def _start_server(sandbox_id: str, mode: Mode) -> ViewState:
    key = secrets.token_urlsafe(32)
    log_fd = os.open(log_path(sandbox_id), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        process = subprocess.Popen(
            server_argv(sandbox_id),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_fd,
            start_new_session=True,  # outlives `cubicle view`; ended by down/gc or its watchdog
            close_fds=True,
        )
    finally:
        os.close(log_fd)
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps({"key": key, "mode": mode}).encode() + b"\n")
        process.stdin.close()
        line = _read_line(process, START_TIMEOUT_S)
    except BaseException:
        process.kill()
        process.wait()
        raise
    finally:
        process.stdout.close()
    if not line.startswith(b"ready "):
        process.kill()
        process.wait()
        raise ViewError(
            f"the view server of {sandbox_id} did not start (exit {process.returncode}); "
            f"see {log_path(sandbox_id)}"
        )
    state = read_state(sandbox_id)
    if state is None or state.pid != process.pid:
        raise ViewError(f"the view server of {sandbox_id} started but recorded no state")
    # reaped when it ends (down, gc, its watchdog), so no zombie stays while this process runs
    threading.Thread(target=process.wait, name=f"reap-view-{sandbox_id}", daemon=True).start()
    return state


def _read_line(process: subprocess.Popen[bytes], timeout: float) -> bytes:
    """The server's first stdout line, or b"" when it exits or ``timeout`` passes."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            return b""
    return process.stdout.readline()
