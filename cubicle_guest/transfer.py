"""Chunked file and folder transfer inside the guest: the agent's side of ``Sandbox.upload`` and
``Sandbox.download`` (feature ``files`` of :mod:`cubicle_guest.protocol`).

Upload: ``put_begin`` makes a *staging* entry beside the destination (a hidden
``.NAME.XXXXXXXX.part`` file or folder in the destination's folder); ``put_mkdir`` and
``put_chunk`` fill it, in order (a file's chunks one after the other, from offset 0);
``put_commit`` sets the folders' modes and mtimes (deepest first) and renames the staging entry
into place in one step. ``put_abort``, any failed write (a full disk answers ``no_space``) or a
handle left idle for :data:`IDLE_S` removes the staging entry: the destination is either the
complete copy or untouched, and nothing partial ever carries its name. A file replaces a file of
the same name; a folder never replaces or merges into anything already there.

Download: ``get_list`` describes a file, or a folder tree walked without following symbolic links
(they are listed as ``symlink``: the host decides what to do with them); ``get_chunk`` reads a
piece of one file, opened without following a link.

Paths: the agent runs as the desktop user, so the OS confines every write to what that user may
write. A relative path (and ``~``) is the home's. Names inside a transfer are relative and
``/``-separated; each part is checked (not empty, ``.``, ``..``, no NUL), files are created with
``O_EXCL | O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cubicle_guest import protocol
from cubicle_guest.errors import GuestError

__all__ = ["IDLE_S", "MAX_UPLOADS", "Transfers", "guest_path", "safe_parts"]

IDLE_S: Final = 600.0
"""An upload handle unused this long (seconds) is aborted at the next ``put_begin``."""
MAX_UPLOADS: Final = 16
"""Most uploads in progress at once."""
_FULL_DISK: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


def guest_path(path: str) -> Path:
    """``path`` as an absolute, normalised path; relative and ``~`` paths are the home's."""
    if "\0" in path or not path:
        raise GuestError("bad_args", f"bad path {path!r}: empty or contains NUL")
    expanded = Path(os.path.expanduser(path))
    if not expanded.is_absolute():
        expanded = Path.home() / expanded
    return Path(os.path.normpath(expanded))


def safe_parts(name: str) -> list[str]:
    """The parts of a relative, ``/``-separated ``name``.

    :raises GuestError: ``bad_args`` for an absolute name or a part that is empty, ``.``, ``..``
        or contains NUL.
    """
    parts = name.split("/")
    if not name or any(part in ("", ".", "..") or "\0" in part for part in parts):
        raise GuestError(
            "bad_args",
            f"bad entry name {name!r}: it must be relative, with no empty, '.' or '..' part",
            details={"name": name},
        )
    return parts


def _free_bytes(folder: Path) -> int | None:
    try:
        info = os.statvfs(folder)
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


def _no_space(target: Path, exc: OSError | None, needed: int | None = None) -> GuestError:
    free = _free_bytes(target.parent)
    wanted = f"{needed} bytes are needed, " if needed is not None else ""
    return GuestError(
        "no_space",
        f"the guest's disk is full: copying to {str(target)!r} stopped, {wanted}"
        f"{free if free is not None else 'unknown'} bytes are free there"
        + (f" ({exc.strerror})" if exc is not None else "")
        + "; nothing was left under that name",
        details={"path": str(target), "free": free, "needed": needed},
    )


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def _remove(path: Path) -> None:
    """Remove a staging file or folder, whatever modes were set inside it."""

    def writable(_function: Any, failed: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            os.chmod(failed, 0o700)
            if os.path.isdir(failed) and not os.path.islink(failed):
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)

    if path.is_dir() and not path.is_symlink():
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
        shutil.rmtree(path, onerror=writable)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@dataclass
class _Upload:
    kind: str
    final: Path
    staging: Path
    mode: int
    mtime_ns: int
    used: float = field(default_factory=time.monotonic)
    dirs: list[tuple[str, int, int]] = field(default_factory=list)
    current: str | None = None
    """The file being written (its name; ``""``: the root of a file upload)."""
    fd: int | None = None
    written: int = 0
    files: int = 0
    bytes: int = 0


class Transfers:
    """The uploads in progress of one agent (thread-safe) and the download reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uploads: dict[str, _Upload] = {}

    def close(self) -> None:
        """Abort every upload in progress (their staging entries are removed)."""
        with self._lock:
            for handle in list(self._uploads):
                self._drop(handle)

    # -- upload ---------------------------------------------------------------------------

    def stat(self, path: str) -> dict[str, Any]:
        target = guest_path(path)
        try:
            kind: str | None = _kind(os.lstat(target).st_mode)
        except FileNotFoundError:
            kind = None
        except OSError as exc:
            raise GuestError("io_error", f"cannot stat {str(target)!r}: {exc.strerror}") from exc
        if kind == "symlink" and target.is_dir():
            kind = "dir"  # a link to a folder is a folder to copy into, as with docker cp
        return {"path": str(target), "kind": kind}

    def begin(
        self, path: str, kind: str, mode: int, mtime_ns: int, size: int | None
    ) -> dict[str, Any]:
        final = guest_path(path)
        if final.parent == final:
            raise GuestError("bad_args", f"cannot upload onto {str(final)!r}")
        if not final.parent.is_dir():
            raise GuestError(
                "not_found",
                f"folder {str(final.parent)!r} does not exist (the copy's parent must exist)",
                details={"path": str(final)},
            )
        existing = _existing_kind(final)
        if existing == "dir" or (kind == "dir" and existing is not None):
            raise GuestError(
                "io_error",
                f"{str(final)!r} already exists as a {existing}; a {kind} is not copied over or "
                "into it (remove it first, or name another destination)",
                details={"path": str(final), "kind": existing},
            )
        free = _free_bytes(final.parent)
        if size is not None and free is not None and size > free:
            raise _no_space(final, None, size)
        prefix, suffix = f".{final.name[:100]}.", ".part"
        with self._lock:
            self._expire()
            if len(self._uploads) >= MAX_UPLOADS:
                raise GuestError(
                    "too_large", f"{MAX_UPLOADS} uploads are already in progress in this guest"
                )
            try:
                if kind == "dir":
                    staging = Path(tempfile.mkdtemp(dir=final.parent, prefix=prefix, suffix=suffix))
                    fd = None
                else:
                    fd, name = tempfile.mkstemp(dir=final.parent, prefix=prefix, suffix=suffix)
                    staging = Path(name)
            except OSError as exc:
                if exc.errno in _FULL_DISK:
                    raise _no_space(final, exc, size) from exc
                raise GuestError(
                    "io_error", f"cannot write in {str(final.parent)!r}: {exc.strerror}"
                ) from exc
            upload = _Upload(kind, final, staging, mode & 0o7777, mtime_ns)
            if fd is not None:
                upload.fd, upload.current = fd, ""
            handle = secrets.token_hex(12)
            self._uploads[handle] = upload
        return {"handle": handle, "path": str(final)}

    def mkdir(self, handle: str, name: str, mode: int, mtime_ns: int) -> dict[str, Any]:
        with self._lock:
            upload = self._get(handle, "dir")
            parts = safe_parts(name)
            self._guarded(handle, lambda: os.mkdir(upload.staging.joinpath(*parts), 0o700))
            upload.dirs.append((name, mode & 0o7777, mtime_ns))
        return {}

    def chunk(
        self,
        handle: str,
        name: str,
        offset: int,
        data: bytes,
        *,
        last: bool,
        mode: int | None,
        mtime_ns: int | None,
    ) -> dict[str, Any]:
        if len(data) > protocol.MAX_CHUNK_BYTES:
            raise GuestError("too_large", f"a chunk holds at most {protocol.MAX_CHUNK_BYTES} bytes")
        with self._lock:
            upload = self._get(handle)
            if upload.kind == "file" and name != "":
                raise GuestError("bad_args", "a file upload's chunks have the name ''")
            if upload.current != name:
                if offset != 0 or upload.kind == "file":
                    raise GuestError(
                        "bad_args",
                        f"chunk of {name!r} at offset {offset}: the file being written is "
                        f"{upload.current!r} (a new file starts at offset 0)",
                    )
                if upload.fd is not None:
                    raise GuestError(
                        "bad_args", f"{upload.current!r} is not finished (its last chunk is due)"
                    )
                path = upload.staging.joinpath(*safe_parts(name))
                upload.fd = self._guarded(
                    handle,
                    lambda: os.open(
                        path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
                    ),
                )
                upload.current, upload.written = name, 0
            if offset != upload.written:
                raise GuestError(
                    "bad_args", f"chunk of {name!r} at offset {offset}, expected {upload.written}"
                )
            fd = upload.fd
            if fd is None:
                raise GuestError("bad_args", f"{name!r} is already complete")
            self._guarded(handle, lambda: _write_all(fd, data))
            upload.written += len(data)
            upload.bytes += len(data)
            if last:
                self._guarded(handle, lambda: _finish(fd, upload, mode, mtime_ns))
                upload.fd = None
                upload.files += 1
                if upload.kind == "dir":
                    upload.current = None
        return {"size": upload.written}

    def commit(self, handle: str) -> dict[str, Any]:
        with self._lock:
            upload = self._get(handle)
            if upload.fd is not None:
                raise GuestError(
                    "bad_args", f"{upload.current!r} is not finished (its last chunk is due)"
                )
            self._guarded(handle, lambda: _settle_and_rename(upload))
            del self._uploads[handle]
        return {"path": str(upload.final), "files": upload.files, "bytes": upload.bytes}

    def abort(self, handle: str) -> dict[str, Any]:
        with self._lock:
            if handle in self._uploads:
                self._drop(handle)
        return {}

    def _get(self, handle: str, kind: str | None = None) -> _Upload:
        upload = self._uploads.get(handle)
        if upload is None:
            raise GuestError(
                "not_found",
                f"no upload in progress has handle {handle!r} (aborted, failed or idle over "
                f"{IDLE_S:.0f} s)",
            )
        if kind is not None and upload.kind != kind:
            raise GuestError("bad_args", f"upload {handle!r} is a {upload.kind}, not a {kind}")
        upload.used = time.monotonic()
        return upload

    def _guarded(self, handle: str, step: Any) -> Any:
        """Run one write step; on failure abort the upload and answer a GuestError."""
        try:
            return step()
        except GuestError:
            self._drop(handle)
            raise
        except OSError as exc:
            upload = self._uploads[handle]
            self._drop(handle)
            if exc.errno in _FULL_DISK:
                raise _no_space(upload.final, exc) from exc
            raise GuestError(
                "io_error",
                f"copying to {str(upload.final)!r} failed: {exc}; nothing was left under that name",
                details={"path": str(upload.final)},
            ) from exc

    def _drop(self, handle: str) -> None:
        upload = self._uploads.pop(handle)
        if upload.fd is not None:
            with contextlib.suppress(OSError):
                os.close(upload.fd)
        _remove(upload.staging)

    def _expire(self) -> None:
        now = time.monotonic()
        for handle, upload in list(self._uploads.items()):
            if now - upload.used > IDLE_S:
                self._drop(handle)

    # -- download -------------------------------------------------------------------------

    def listing(self, path: str) -> dict[str, Any]:
        root = guest_path(path)
        try:
            info = os.stat(root)  # the root itself may be a link: the guest's own business
        except FileNotFoundError as exc:
            raise GuestError(
                "not_found", f"{str(root)!r} does not exist", details={"path": str(root)}
            ) from exc
        except OSError as exc:
            raise GuestError("io_error", f"cannot stat {str(root)!r}: {exc.strerror}") from exc
        kind = _kind(info.st_mode)
        if kind not in ("file", "dir"):
            raise GuestError(
                "bad_args", f"{str(root)!r} is neither a file nor a folder", details={"kind": kind}
            )
        entries = _walk(root) if kind == "dir" else []
        return {
            "path": str(root),
            "kind": kind,
            "mode": stat.S_IMODE(info.st_mode),
            "mtime_ns": info.st_mtime_ns,
            "size": info.st_size if kind == "file" else 0,
            "entries": entries,
        }

    def read(self, path: str, offset: int, length: int) -> bytes:
        if not 0 <= length <= protocol.MAX_CHUNK_BYTES or offset < 0:
            raise GuestError(
                "bad_args",
                f"get_chunk needs offset >= 0 and length 0..{protocol.MAX_CHUNK_BYTES}",
            )
        target = guest_path(path)
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError as exc:
            raise GuestError("not_found", f"{str(target)!r} does not exist") from exc
        except OSError as exc:
            raise GuestError("io_error", f"cannot read {str(target)!r}: {exc.strerror}") from exc
        try:
            return os.pread(fd, length, offset)
        except OSError as exc:
            raise GuestError("io_error", f"cannot read {str(target)!r}: {exc.strerror}") from exc
        finally:
            os.close(fd)


def _existing_kind(path: Path) -> str | None:
    try:
        return _kind(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _finish(fd: int, upload: _Upload, mode: int | None, mtime_ns: int | None) -> None:
    os.fsync(fd)
    if upload.kind == "file":
        mode, mtime_ns = upload.mode, upload.mtime_ns
    os.fchmod(fd, 0o644 if mode is None else mode & 0o7777)
    if mtime_ns is not None:
        os.utime(fd, ns=(mtime_ns, mtime_ns))
    os.close(fd)


def _settle_and_rename(upload: _Upload) -> None:
    if upload.kind == "dir":
        for name, mode, mtime_ns in sorted(upload.dirs, key=lambda d: -d[0].count("/")):
            path = upload.staging.joinpath(*name.split("/"))
            os.chmod(path, mode)
            os.utime(path, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
        os.chmod(upload.staging, upload.mode)
        os.utime(upload.staging, ns=(upload.mtime_ns, upload.mtime_ns))
        if _existing_kind(upload.final) is not None:
            raise GuestError(
                "io_error", f"{str(upload.final)!r} appeared while copying; the copy is dropped"
            )
        os.rename(upload.staging, upload.final)
    else:
        os.replace(upload.staging, upload.final)


def _walk(root: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    pending = [""]
    while pending:
        prefix = pending.pop()
        folder = root / prefix if prefix else root
        try:
            with os.scandir(folder) as items:
                found = sorted(items, key=lambda item: item.name)
        except OSError as exc:
            raise GuestError("io_error", f"cannot list {str(folder)!r}: {exc.strerror}") from exc
        for item in found:
            info = item.stat(follow_symlinks=False)
            kind = _kind(info.st_mode)
            try:
                item.name.encode("utf-8")
                name = f"{prefix}/{item.name}" if prefix else item.name
            except UnicodeEncodeError:
                kind = "other"  # a name that is not UTF-8 cannot travel in JSON
                raw = item.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                name = f"{prefix}/{raw}" if prefix else raw
            entries.append(
                {
                    "name": name,
                    "kind": kind,
                    "mode": stat.S_IMODE(info.st_mode),
                    "mtime_ns": info.st_mtime_ns,
                    "size": info.st_size if kind == "file" else 0,
                }
            )
            if len(entries) > protocol.MAX_LIST_ENTRIES:
                raise GuestError(
                    "too_large",
                    f"{str(root)!r} holds over {protocol.MAX_LIST_ENTRIES} entries; copy its "
                    "folders one by one",
                    details={"limit": protocol.MAX_LIST_ENTRIES},
                )
            if kind == "dir":
                pending.append(name)
    return entries
