"""The sandboxes a server's sessions own, on disk, so a restarted server collects them.

Sessions live in memory; their sandboxes are owned by the server process
(:mod:`cubicle.orchestrator.ownership`: lifetime ``owned``, so ``cubicle gc`` also takes them once
that process is gone). To collect them at once and only its own, a server keeps a data folder
(``--data-dir``) holding an exclusive lock (one server per folder), the identity of the server
holding it (``owner``: pid, start ticks, host) and one empty file per sandbox under
``sandboxes/``. At start, the new holder of the lock — the lock says the previous server is gone —
destroys

- every sandbox listed under ``sandboxes/``, and
- every sandbox whose owner label is the previous server's pid on this host, when no process has
  that pid now: this takes the one a server killed *inside* ``Sandbox.create`` left (still
  ``creating``, its id never listed). When the pid is in use again it may own live sandboxes of
  another process, so those are left to ``cubicle gc`` (which reads the start ticks too);

and removes the turn folders of sessions it does not know (all of them).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import socket
from collections.abc import Callable, Iterable
from pathlib import Path

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.ownership import is_sandbox_id
from cubicle.orchestrator.provider import SandboxInfo
from cubicle_guest.errors import CubicleError

__all__ = ["Registry"]

log = logging.getLogger("cubicle.serve")

SANDBOXES = "sandboxes"
SESSIONS = "sessions"
LOCK = "lock"
OWNER = "owner"


class Registry:
    """The data folder of one server (see the module doc). Open with :meth:`open`."""

    def __init__(self, folder: Path, lock_fd: int, previous: L.Owner | None = None) -> None:
        self.folder = folder
        self._lock_fd = lock_fd
        self.previous = previous
        """The server that held the folder before (``None``: none, or unreadable)."""

    @classmethod
    def open(cls, folder: Path) -> Registry:
        """Create (0700) and lock ``folder``.

        :raises ConfigError: another server holds it, or it is not a private folder.
        """
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise ConfigError(
                f"data folder {folder} must belong to this user and be private (mode 0700)"
            )
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(
                f"another cubicle serve uses the data folder {folder}; stop it or pass --data-dir"
            ) from None
        (folder / SANDBOXES).mkdir(mode=0o700, exist_ok=True)
        (folder / SESSIONS).mkdir(mode=0o700, exist_ok=True)
        previous = _read_owner(folder / OWNER)
        me = L.Owner.current()
        tmp = folder / (OWNER + ".tmp")
        tmp.write_text(json.dumps({"pid": me.pid, "start": me.start_ticks, "host": me.host}))
        tmp.replace(folder / OWNER)
        return cls(folder, fd, previous)

    def add(self, sandbox_id: str) -> None:
        (self.folder / SANDBOXES / sandbox_id).touch(mode=0o600)

    def discard(self, sandbox_id: str) -> None:
        (self.folder / SANDBOXES / sandbox_id).unlink(missing_ok=True)

    def session_folder(self, session_id: str) -> Path:
        path = self.folder / SESSIONS / session_id
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    def remove_session_folder(self, session_id: str) -> None:
        shutil.rmtree(self.folder / SESSIONS / session_id, ignore_errors=True)

    def orphans(self, sandboxes: Iterable[SandboxInfo]) -> list[str]:
        """Ids among ``sandboxes`` owned by the previous server, when its pid is free (see the
        module doc)."""
        previous = self.previous
        if previous is None or previous.pid <= 0 or previous.host != socket.gethostname():
            return []
        if L.process_start_ticks(previous.pid) is not None:
            return []  # the pid is someone else's now: leave its sandboxes to cubicle gc
        return sorted(
            info.id
            for info in sandboxes
            if info.owner_pid == previous.pid and info.owner_host == previous.host
        )

    def collect(
        self, destroy: Callable[[str], None], sandboxes: Iterable[SandboxInfo] = ()
    ) -> list[str]:
        """Destroy the previous server's sandboxes (listed ones, and :meth:`orphans` of
        ``sandboxes``), remove its session folders; return the ids destroyed. A failure is
        logged and a listed id kept for the next start."""
        removed: list[str] = []
        listed = {entry.name: entry for entry in (self.folder / SANDBOXES).iterdir()}
        for name in sorted(set(listed) | set(self.orphans(sandboxes))):
            entry = listed.get(name)
            if not is_sandbox_id(name, ""):
                if entry is not None:
                    entry.unlink(missing_ok=True)
                continue
            try:
                destroy(name)
            except CubicleError as exc:
                log.warning("could not remove %s of a previous server: %s", name, exc)
                continue
            if entry is not None:
                entry.unlink(missing_ok=True)
            removed.append(name)
        for entry in (self.folder / SESSIONS).iterdir():
            shutil.rmtree(entry, ignore_errors=True)
        return removed

    def close(self) -> None:
        os.close(self._lock_fd)


def _read_owner(path: Path) -> L.Owner | None:
    try:
        data = json.loads(path.read_text())
        return L.Owner(int(data["pid"]), int(data["start"]), str(data["host"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
