"""Host folders cubicle keeps (VM images, run folders, logs) are refused when another user could
write them.

A folder another user can write, or whose parent they can write, lets that user swap what is
inside — a channel socket, a disk overlay, a log — for something of theirs, and cubicle (often
root) would then follow it. :func:`host_folder` creates a folder if needed and checks it and
every parent up to ``/``, on the path as given and on the path with symlinks resolved:

- the folder itself: a directory (not a symlink), owned by the effective user, not writable by
  group or others;
- each parent: owned by the effective user or root, and not writable by group or others — except
  a root-owned *sticky* folder such as ``/tmp`` (others can create entries there but not rename
  or remove ours).

Refusals raise :class:`~cubicle.orchestrator.errors.ConfigError` naming the folder and what is
wrong.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cubicle.orchestrator.errors import ConfigError

__all__ = ["check_host_folder", "host_folder", "read_host_file"]


def host_folder(path: Path, *, mode: int = 0o700) -> Path:
    """Create ``path`` (and missing parents) with ``mode`` if needed, then
    :func:`check_host_folder` it. ``mode`` must not let group or others write.

    :return: ``path``.
    :raises ConfigError: the folder or a parent could be written by another user.
    """
    if mode & 0o022:
        raise ValueError(f"mode {mode:#o} lets group or others write")
    path = Path(os.path.abspath(path))
    missing = []
    for folder in (path, *path.parents):
        if os.path.lexists(folder):
            break
        missing.append(folder)
    # check what exists before creating inside it: never create under a folder someone else owns
    if missing and os.path.lexists(missing[-1].parent):
        _check_parents(missing[-1].parent)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=mode)
        except FileExistsError:
            pass  # created concurrently: checked below like any existing folder
        except OSError as exc:
            raise ConfigError(f"cannot create the folder {folder}: {exc.strerror}") from None
    check_host_folder(path)
    return path


def check_host_folder(path: Path) -> None:
    """Refuse ``path`` unless only the effective user (and root, for parents) can write it.

    :raises ConfigError: naming the first folder that fails and why.
    """
    path = Path(os.path.abspath(path))
    _check_own(path)
    _check_parents(path.parent)
    real = Path(os.path.realpath(path))
    if real != path:
        _check_own(real)
        _check_parents(real.parent)


def read_host_file(path: Path, *, limit: int = 1 << 20) -> str | None:
    """The text of a file cubicle wrote in one of its host folders, checked when read as the
    folder was when written: the folder passes :func:`check_host_folder`; the file is a regular
    file (not a symlink: opened with ``O_NOFOLLOW``), owned by the effective user, writable by
    no one else, and at most ``limit`` bytes.

    :return: the text, or None when there is no such file.
    :raises ConfigError: the folder or the file could have been written by another user, or the
        file is too large or not UTF-8.
    """
    path = Path(os.path.abspath(path))
    check_host_folder(path.parent)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symlink where cubicle writes files
        raise ConfigError(f"refusing the host file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(source.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"refusing the host file {path}: it is not a regular file")
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise ConfigError(
                f"refusing the host file {path}: it is owned by uid {info.st_uid} with mode "
                f"{stat.S_IMODE(info.st_mode):04o}; cubicle writes its files 0600 as uid "
                f"{os.geteuid()}, so another user could have written it"
            )
        data = source.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(f"refusing the host file {path}: it is over {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"refusing the host file {path}: it is not UTF-8 text") from None


def _check_own(path: Path) -> None:
    info = _lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return  # the resolved path is checked by the caller
    if not stat.S_ISDIR(info.st_mode):
        _refuse(path, "is not a directory")
    if info.st_uid != os.geteuid():
        _refuse(path, f"is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})")
    if info.st_mode & 0o022:
        _refuse(path, f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})")


def _check_parents(start: Path) -> None:
    for folder in (start, *start.parents):
        info = _lstat(folder)
        if stat.S_ISLNK(info.st_mode):
            continue  # a link's own folder is checked here; its target by the resolved walk
        if info.st_uid not in (0, os.geteuid()):
            _refuse(folder, f"(a parent) is owned by uid {info.st_uid}, who could replace it")
        writable = info.st_mode & 0o022
        sticky = info.st_mode & stat.S_ISVTX
        if writable and not (sticky and info.st_uid == 0):
            _refuse(
                folder,
                f"(a parent) is writable by group or others without being a root-owned sticky "
                f"folder (mode {stat.S_IMODE(info.st_mode):04o})",
            )


def _lstat(path: Path) -> os.stat_result:
    try:
        return os.lstat(path)
    except OSError as exc:
        raise ConfigError(f"cannot inspect the folder {path}: {exc.strerror}") from None


def _refuse(folder: Path, why: str) -> None:
    raise ConfigError(
        f"refusing the host folder {folder}: it {why}; another user could swap what cubicle "
        "keeps there",
        hint=f"use a folder only you can write (e.g. chmod go-w {folder}, or point CUBICLE_HOME "
        "elsewhere)",
    )
