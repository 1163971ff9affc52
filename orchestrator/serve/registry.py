"""The sandboxes a server's sessions own, on disk, so a restarted server collects them.

Sessions live in memory; their sandboxes are owned by the server process
(:mod:`orchestrator.ownership`: lifetime ``owned``, so ``cubicle gc`` also takes them once that
process is gone). To collect them at once and only its own, a server keeps a data folder
(``--data-dir``) holding an exclusive lock (one server per folder) and one empty file per
sandbox under ``sandboxes/``. At start, the new holder of the lock destroys every sandbox listed
there — no live server owns them: the lock says the previous one is gone — and removes the turn
folders of sessions it does not know (all of them).

A server killed *while* ``Sandbox.create`` ran, before the id was known, leaves a sandbox in
``creating`` state owned by a dead process; ``cubicle gc`` removes it (its owner is gone).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from guest.errors import CubicleError
from orchestrator.errors import ConfigError
from orchestrator.ownership import is_sandbox_id

__all__ = ["Registry"]

log = logging.getLogger("cubicle.serve")

SANDBOXES = "sandboxes"
SESSIONS = "sessions"
LOCK = "lock"


class Registry:
    """The data folder of one server (see the module doc). Open with :meth:`open`."""

    def __init__(self, folder: Path, lock_fd: int) -> None:
        self.folder = folder
        self._lock_fd = lock_fd

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
        return cls(folder, fd)

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

    def collect(self, destroy: Callable[[str], None]) -> list[str]:
        """Destroy every sandbox a previous server listed, remove its session folders; return
        the ids destroyed. A failure is logged and the id kept for the next start."""
        removed: list[str] = []
        for entry in sorted((self.folder / SANDBOXES).iterdir()):
            if not is_sandbox_id(entry.name, ""):
                entry.unlink(missing_ok=True)
                continue
            try:
                destroy(entry.name)
            except CubicleError as exc:
                log.warning("could not remove %s of a previous server: %s", entry.name, exc)
                continue
            entry.unlink(missing_ok=True)
            removed.append(entry.name)
        for entry in (self.folder / SESSIONS).iterdir():
            shutil.rmtree(entry, ignore_errors=True)
        return removed

    def close(self) -> None:
        os.close(self._lock_fd)
