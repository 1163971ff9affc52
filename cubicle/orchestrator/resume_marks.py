"""Which sandboxes are *resumable*: kept past their owner's death until a deadline, for
``cubicle run --resume`` / ``cubicle drill --resume`` (issue 45).

A run that completed its first turn marks its sandbox resumable: one small file per sandbox,
``<resume dir>/<sandbox id>.json`` (mode 0600, in a folder only this user can write,
:func:`cubicle.orchestrator.hostdirs.host_folder`), holding the **deadline** (unix seconds), the
**holder** (the process running the run now: pid, start ticks, host) and the run folder. The run
moves the deadline forward after every completed turn; a resumed run writes itself as holder.

What ``gc`` does with it (:func:`cubicle.orchestrator.ownership.verdict` asks :func:`spares`): a
ready sandbox whose owner process is gone is kept while its mark's holder lives or its deadline
has not passed, and taken after (the reason names the passed window). Its TTL still ends it; a
sandbox still creating is never resumable. Labels never change, so the mark lives on the host
of the run (where ``gc`` judges pids too) — the same host rule as the stamps.

The folder is ``$CUBICLE_RESUME_DIR`` or ``$XDG_STATE_HOME/cubicle/resumable`` (default
``~/.local/state/cubicle/resumable``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.hostdirs import host_folder, read_host_file

__all__ = [
    "DEFAULT_RESUME_WINDOW_S",
    "ResumeMark",
    "clear_mark",
    "read_mark",
    "read_mark_quietly",
    "resume_dir",
    "spares",
    "write_mark",
]

DEFAULT_RESUME_WINDOW_S: Final = 30 * 60.0
"""How long after its last completed turn a resumable sandbox is kept (``--resume-window``)."""
DIR_ENV: Final = "CUBICLE_RESUME_DIR"


def resume_dir() -> Path:
    """The folder of resume marks (module docstring), not created here."""
    given = os.environ.get(DIR_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(base) / "cubicle" / "resumable"


@dataclass(frozen=True)
class ResumeMark:
    """One sandbox's resume mark."""

    sandbox_id: str
    deadline: float
    """Unix seconds; after it (and without a live holder) ``gc`` takes the sandbox."""
    holder: L.Owner
    """The process running the run now (the first run, or the one that resumed it)."""
    out: str
    """The run folder (``--out``) a ``--resume`` reads."""

    def holder_alive(self) -> bool:
        """The holder runs (only judged on this host; another host's holder counts as gone)."""
        if self.holder.host != socket.gethostname() or self.holder.pid <= 0:
            return False
        return L.owner_alive(
            {
                L.OWNER_PID: str(self.holder.pid),
                L.OWNER_START: str(self.holder.start_ticks),
                L.OWNER_HOST: self.holder.host,
            }
        )


def _path(sandbox_id: str) -> Path:
    if not sandbox_id or "/" in sandbox_id or sandbox_id.startswith("."):
        raise ConfigError(f"{sandbox_id!r} is not a sandbox id")
    return resume_dir() / f"{sandbox_id}.json"


def write_mark(
    sandbox_id: str, *, window_s: float, out: Path, holder: L.Owner | None = None
) -> ResumeMark:
    """Mark ``sandbox_id`` resumable until ``window_s`` from now, held by ``holder`` (default:
    this process), atomically: a reader sees the old mark or the new one.

    :raises ConfigError: ``window_s`` is not positive; the folder is not private.
    """
    if not window_s > 0:
        raise ConfigError(f"the resume window must be a positive number of seconds: {window_s!r}")
    mark = ResumeMark(sandbox_id, time.time() + window_s, holder or L.Owner.current(), str(out))
    folder = host_folder(resume_dir())
    data = {
        "sandbox": mark.sandbox_id,
        "deadline": mark.deadline,
        "holder": {
            "pid": mark.holder.pid,
            "start": mark.holder.start_ticks,
            "host": mark.holder.host,
        },
        "out": mark.out,
    }
    target = _path(sandbox_id)
    temporary = folder / f".{sandbox_id}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(temporary, target)
    return mark


def read_mark(sandbox_id: str) -> ResumeMark | None:
    """The mark of ``sandbox_id``, or None when it has none (or it does not parse: a mark is
    never trusted half-written).

    :raises ConfigError: the folder or the file could have been written by another user.
    """
    folder = resume_dir()
    if not folder.is_dir():
        return None
    text = read_host_file(_path(sandbox_id))
    if text is None:
        return None
    try:
        data = json.loads(text)
        holder = data["holder"]
        return ResumeMark(
            str(data["sandbox"]),
            float(data["deadline"]),
            L.Owner(int(holder["pid"]), int(holder["start"]), str(holder["host"])),
            str(data["out"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def clear_mark(sandbox_id: str) -> None:
    """Remove the mark (idempotent): the run finished or its sandbox is being torn down."""
    with contextlib.suppress(FileNotFoundError):
        _path(sandbox_id).unlink()


def read_mark_quietly(sandbox_id: str) -> ResumeMark | None:
    """:func:`read_mark`, with a mark that cannot be trusted (another user could have written
    it) counted as none: ``gc`` then judges the sandbox as if it had no mark."""
    try:
        return read_mark(sandbox_id)
    except ConfigError:
        return None


def spares(mark: ResumeMark, now: float) -> str | None:
    """Why ``gc`` keeps the ready sandbox of ``mark`` whose owner is gone (the mark's holder
    lives, or its deadline is ahead), or None."""
    if mark.holder_alive():
        return f"resumed by process {mark.holder.pid}"
    if mark.deadline > now:
        return f"resumable until {time.strftime('%H:%M:%S', time.localtime(mark.deadline))}"
    return None
