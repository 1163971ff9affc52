"""Where a sandbox's view server is: its state file, its process label, and how it is stopped.

A view server is a background process of the host (``python -m cubicle.orchestrator.view.server
--sandbox ID``), one per sandbox, listening on 127.0.0.1 only. It is *labelled* by its command
line: :func:`view_server_pids` finds the processes of the effective user whose argv is exactly
that module with that sandbox id, so :func:`stop_view_servers` ends them (by pid) even when their
state file is gone — whatever moment the process that started them was killed at. The server
also exits by itself once its sandbox is gone (:mod:`cubicle.orchestrator.view.server`).

The state file (``<view dir>/<sandbox id>.json``, mode 0600 in a folder only we can write,
:func:`cubicle.orchestrator.hostdirs.host_folder`) holds the pid, the port, the mode and the
server's *control key* (which mints one-time page tokens and switches the mode). The key never
appears in a command line, a URL or a log.

This module sits below the providers (it imports only the core: errors, host folders, host
processes): :meth:`~cubicle.orchestrator.provider.Provider.destroy` stops a sandbox's servers, one
step before any backend's own clean-up, without importing the view.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final, Literal

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.hostdirs import host_folder
from cubicle.orchestrator.hostprocs import module_pids, stop_pids

__all__ = [
    "MODES",
    "SERVER_MODULE",
    "Mode",
    "ViewState",
    "check_sandbox_id",
    "input_path",
    "lock_path",
    "log_path",
    "read_state",
    "server_argv",
    "state_path",
    "stop_view_servers",
    "view_dir",
    "view_server_pids",
    "write_state",
]

Mode = Literal["view", "takeover"]
MODES: Final[tuple[Mode, ...]] = ("view", "takeover")
SERVER_MODULE: Final = "cubicle.orchestrator.view.server"
DIR_ENV: Final = "CUBICLE_VIEW_DIR"
"""Overrides the folder of view state files (default ``~/.cache/cubicle/view``)."""
STOP_TIMEOUT_S: Final = 3.0
_SANDBOX_ID = re.compile(r"[a-z]{2}-[0-9a-f]{1,64}\Z")


@dataclass(frozen=True)
class ViewState:
    """A running view server, as its state file records it."""

    sandbox_id: str
    pid: int
    port: int
    key: str
    mode: Mode

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


def check_sandbox_id(sandbox_id: str) -> str:
    """:raises ConfigError: ``sandbox_id`` is not a cubicle sandbox id (it names files)."""
    if not _SANDBOX_ID.match(sandbox_id):
        raise ConfigError(
            f"not a sandbox id: {sandbox_id!r}", hint="list sandboxes with: cubicle ls"
        )
    return sandbox_id


def _base_dir() -> Path:
    override = os.environ.get(DIR_ENV)
    return Path(override) if override else Path.home() / ".cache" / "cubicle" / "view"


def view_dir() -> Path:
    """The folder of view state files and logs (created 0700, checked)."""
    return host_folder(_base_dir())


def state_path(sandbox_id: str) -> Path:
    return view_dir() / f"{check_sandbox_id(sandbox_id)}.json"


def log_path(sandbox_id: str) -> Path:
    return view_dir() / f"{check_sandbox_id(sandbox_id)}.log"


def lock_path(sandbox_id: str) -> Path:
    """The lock that serializes starting the sandbox's view server
    (:mod:`cubicle.orchestrator.view.control`)."""
    return view_dir() / f".{check_sandbox_id(sandbox_id)}.lock"


def input_path(sandbox_id: str) -> Path:
    """Where the view server notes a person's inputs (:mod:`cubicle.orchestrator.view.inputs`)."""
    return view_dir() / f"{check_sandbox_id(sandbox_id)}.input.jsonl"


def write_state(state: ViewState) -> None:
    """Write the state file atomically, mode 0600."""
    path = state_path(state.sandbox_id)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(state), out)
    os.replace(tmp, path)


def read_state(sandbox_id: str) -> ViewState | None:
    """The live view server of ``sandbox_id``, or None (no file, or its process is gone).
    Cheap when no view was ever opened (one ``stat``): the agent's gate calls it per action."""
    if not (_base_dir() / f"{check_sandbox_id(sandbox_id)}.json").exists():
        return None
    path = state_path(sandbox_id)
    try:
        with open(path, encoding="utf-8") as source:
            data = json.load(source)
        state = ViewState(
            sandbox_id=str(data["sandbox_id"]),
            pid=int(data["pid"]),
            port=int(data["port"]),
            key=str(data["key"]),
            mode="takeover" if data["mode"] == "takeover" else "view",
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if state.sandbox_id != sandbox_id or state.pid not in view_server_pids(sandbox_id):
        return None
    return state


def server_argv(sandbox_id: str) -> list[str]:
    """The command line that labels the view server of ``sandbox_id``."""
    return [sys.executable, "-m", SERVER_MODULE, "--sandbox", check_sandbox_id(sandbox_id)]


def view_server_pids(sandbox_id: str | None = None) -> list[int]:
    """Pids of this user's view servers (of ``sandbox_id``, or of every sandbox)."""
    return module_pids(SERVER_MODULE, "--sandbox", sandbox_id)


def stop_view_servers(sandbox_id: str) -> list[int]:
    """End the view servers of ``sandbox_id`` (SIGTERM, then SIGKILL after
    :data:`STOP_TIMEOUT_S`) and remove every file of its view: state, inputs, lock and log.
    Idempotent; called first by
    :meth:`~cubicle.orchestrator.provider.Provider.destroy` (so ``down`` and ``gc`` too). Touches
    no other sandbox's server.

    :return: the pids that were signalled.
    """
    check_sandbox_id(sandbox_id)
    pids = view_server_pids(sandbox_id)
    stop_pids(pids, STOP_TIMEOUT_S)
    # not created here: a sandbox that never had a view leaves no folder behind
    base = _base_dir()
    for name in (f"{sandbox_id}.json", f"{sandbox_id}.input.jsonl", f"{sandbox_id}.log"):
        (base / name).unlink(missing_ok=True)
    (base / f".{sandbox_id}.lock").unlink(missing_ok=True)
    return pids
