"""Files and folders in and out of a sandbox, in chunks over one agent connection.

The host's side of the ``files`` operations (:mod:`cubicle_guest.transfer`); ``Sandbox.upload``
and ``Sandbox.download`` and ``cubicle cp`` call :func:`upload` and :func:`download`.

- Destination, as ``docker cp``: an existing folder receives the copy under the source's name;
  anything else is the copy's own name (its parent must exist). A file replaces a file; a folder
  is never copied over or merged into anything already there.
- Both ways the copy is made under a hidden ``.NAME.XXXXXXXX.part`` name beside the destination
  and renamed into place once complete, so a failure (a full disk on either side, a lost
  connection, an interrupt) leaves nothing under the destination's name.
- Bytes, permission bits and modification times (nanoseconds) are kept; on the host the set-id
  bits of downloaded files are dropped.
- No host path is ever chosen by the guest: a download writes only inside a folder the host
  made, under names it checked (relative, no empty, ``.`` or ``..`` part), creating no links and
  opening every file with ``O_EXCL | O_NOFOLLOW``. A guest folder holding a symbolic link or a
  special file is refused before anything is written (the error names them), and so is a local
  folder holding one on upload.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Final

from cubicle.orchestrator.errors import TransferError
from cubicle_guest import protocol
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError, GuestError

__all__ = ["CHUNK_BYTES", "Copied", "download", "upload", "write_bytes"]

CHUNK_BYTES: Final = protocol.MAX_CHUNK_BYTES
CHUNK_TIMEOUT_S: Final = 120.0
"""Deadline of one chunk's round trip (seconds): 8 MiB through a slow TCG guest's channel."""


@dataclass(frozen=True)
class Copied:
    """What one copy moved: its final path (guest or host), files and bytes."""

    path: str
    files: int
    bytes: int


@dataclass(frozen=True)
class _Entry:
    name: str  # relative, "/"-separated; "" for the root
    kind: str
    mode: int
    mtime_ns: int
    size: int


def _safe_name(name: str, where: str) -> list[str]:
    parts = name.split("/")
    if not name or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise TransferError(
            f"refused: the guest listed an entry named {name!r} in {where}; a name must be "
            "relative, without empty, '.' or '..' parts"
        )
    return parts


# --------------------------------------------------------------------------- upload


def _links_or_special(refused: list[str]) -> str:
    """``N symbolic link(s) or special file(s)``: how many of a tree's entries are refused."""
    return f"{len(refused)} symbolic link(s) or special file(s)"


def _first_names(refused: list[str]) -> str:
    """The first five of ``refused``, comma-separated, with `` ...`` when there are more."""
    return ", ".join(refused[:5]) + (" ..." if len(refused) > 5 else "")


def _local_tree(root: Path) -> tuple[_Entry, list[_Entry]]:
    """The local file or folder ``root`` (a link at the root is followed) and, for a folder,
    its entries, parents first.

    :raises TransferError: missing, or holding links or special files (named).
    """
    try:
        info = root.stat()
    except FileNotFoundError as exc:
        raise TransferError(f"local path {str(root)!r} does not exist") from exc
    if stat.S_ISREG(info.st_mode):
        kind = "file"
    elif stat.S_ISDIR(info.st_mode):
        kind = "dir"
    else:
        raise TransferError(f"local path {str(root)!r} is neither a file nor a folder")
    top = _Entry("", kind, stat.S_IMODE(info.st_mode), info.st_mtime_ns, info.st_size)
    if kind == "file":
        return top, []
    entries: list[_Entry] = []
    refused: list[str] = []
    pending = [""]
    while pending:
        prefix = pending.pop()
        with os.scandir(root / prefix if prefix else root) as items:
            found = sorted(items, key=lambda item: item.name)
        for item in found:
            name = f"{prefix}/{item.name}" if prefix else item.name
            st = item.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                pending.append(name)
                entry_kind = "dir"
            elif stat.S_ISREG(st.st_mode):
                entry_kind = "file"
            else:
                refused.append(name)
                continue
            entries.append(
                _Entry(name, entry_kind, stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_size)
            )
    if refused:
        raise TransferError(
            f"local folder {str(root)!r} holds {_links_or_special(refused)}, which are not "
            f"copied: {_first_names(refused)}",
            hint="copy the files they point to instead",
        )
    return top, entries


def upload(client: AgentClient, local: str | os.PathLike[str], guest_path: str) -> Copied:
    """Copy the local file or folder ``local`` to ``guest_path`` (module docstring).

    :raises TransferError: the local side refused (missing, links inside).
    :raises GuestError: the guest refused: ``no_space`` (its disk is full), ``not_found`` (no
        parent folder), ``io_error`` (not the desktop user's to write, already there); nothing
        is left under the destination's name.
    """
    source = Path(local)
    top, entries = _local_tree(source)
    target = client.file_stat(guest_path).result
    destination = str(target["path"])
    if target["kind"] == "dir":
        if not source.resolve().name:
            raise TransferError(f"cannot name the copy of {str(source)!r} inside {destination}")
        destination = str(PurePosixPath(destination) / source.resolve().name)
    total = top.size if top.kind == "file" else sum(e.size for e in entries if e.kind == "file")
    begun = client.put_begin(destination, top.kind, top.mode, top.mtime_ns, size=total).result
    handle = str(begun["handle"])
    try:
        if top.kind == "file":
            _send_file(client, handle, "", source, top)
        for entry in entries:
            if entry.kind == "dir":
                client.put_mkdir(handle, entry.name, entry.mode, entry.mtime_ns)
            else:
                _send_file(
                    client, handle, entry.name, source.joinpath(*entry.name.split("/")), entry
                )
        done = client.put_commit(handle, timeout=CHUNK_TIMEOUT_S).result
    except BaseException:
        with contextlib.suppress(CubicleError):
            client.put_abort(handle)
        raise
    return Copied(str(done["path"]), int(done["files"]), int(done["bytes"]))


def write_bytes(client: AgentClient, guest_path: str, data: bytes, *, mode: int = 0o644) -> Copied:
    """Write ``data`` to the guest file ``guest_path`` exactly (its folder must exist; a file
    there is replaced, a folder refused), in chunks, complete or absent: what task files'
    ``content`` and serve's ``environment.files`` use.

    :raises GuestError: as :func:`upload`'s.
    """
    entry = _Entry("", "file", mode, time.time_ns(), len(data))
    begun = client.put_begin(guest_path, "file", mode, entry.mtime_ns, size=len(data)).result
    handle = str(begun["handle"])
    try:
        _send_stream(client, handle, "", io.BytesIO(data), entry)
        done = client.put_commit(handle, timeout=CHUNK_TIMEOUT_S).result
    except BaseException:
        with contextlib.suppress(CubicleError):
            client.put_abort(handle)
        raise
    return Copied(str(done["path"]), 1, len(data))


def _send_file(client: AgentClient, handle: str, name: str, path: Path, entry: _Entry) -> None:
    with open(path, "rb") as stream:
        _send_stream(client, handle, name, stream, entry)


def _send_stream(
    client: AgentClient, handle: str, name: str, stream: IO[bytes], entry: _Entry
) -> None:
    """The chunks of ``stream``, two in flight (:meth:`AgentClient.pipeline`); the last one
    carries the mode and mtime."""

    def chunks() -> Iterator[tuple[str, dict[str, Any], bytes]]:
        offset = 0
        chunk = stream.read(CHUNK_BYTES)
        while True:
            following = stream.read(CHUNK_BYTES) if len(chunk) == CHUNK_BYTES else b""
            last = not following
            args: dict[str, Any] = {"handle": handle, "name": name, "offset": offset}
            if last:
                args.update(last=True, mode=entry.mode, mtime_ns=entry.mtime_ns)
            yield "put_chunk", args, chunk
            if last:
                return
            offset += len(chunk)
            chunk = following

    for _reply in client.pipeline(chunks(), timeout=CHUNK_TIMEOUT_S):
        pass


# --------------------------------------------------------------------------- download


def _guest_tree(listing: dict[str, Any]) -> tuple[_Entry, list[_Entry]]:
    """The listing checked: names safe, parents before children, no link or special file.

    :raises TransferError: naming what was refused.
    """
    where = str(listing.get("path"))
    kind = listing.get("kind")
    if kind not in ("file", "dir"):
        raise TransferError(f"refused: the guest describes {where!r} as {kind!r}")
    top = _Entry("", kind, int(listing["mode"]), int(listing["mtime_ns"]), int(listing["size"]))
    entries: list[_Entry] = []
    folders = {""}
    names: set[str] = set()
    refused: list[str] = []
    for raw in listing.get("entries") or []:
        entry = _Entry(
            str(raw["name"]),
            str(raw["kind"]),
            int(raw["mode"]),
            int(raw["mtime_ns"]),
            int(raw["size"]),
        )
        parts = _safe_name(entry.name, where)
        if "/".join(parts[:-1]) not in folders or entry.name in names:
            raise TransferError(
                f"refused: the guest listed {entry.name!r} in {where!r} before its folder, or twice"
            )
        names.add(entry.name)
        if entry.kind == "dir":
            folders.add(entry.name)
        elif entry.kind != "file" or entry.size < 0:
            refused.append(f"{entry.name} ({entry.kind})")
            continue
        entries.append(entry)
    if refused:
        raise TransferError(
            f"refused: guest folder {where!r} holds {_links_or_special(refused)}, which a "
            f"download never writes or follows: {_first_names(refused)}",
            hint="download the files they point to instead, or remove the links first",
        )
    return top, entries


def download(client: AgentClient, guest_path: str, local: str | os.PathLike[str]) -> Copied:
    """Copy the guest file or folder ``guest_path`` to ``local`` (module docstring).

    :raises TransferError: refused (a link or special file inside, a bad name, the destination
        folder already there) or the file changed size while being copied.
    :raises GuestError: the guest could not read it (``not_found``, ``io_error``).
        A host write that fails (its disk full...) is a TransferError too; nothing is left.
    """
    listing = client.get_list(guest_path).result
    top, entries = _guest_tree(listing)
    root = str(listing["path"])
    destination = Path(local)
    if destination.is_dir():
        name = PurePosixPath(root).name
        if name in ("", ".", "..") or "\0" in name:
            raise TransferError(f"cannot name the copy of {root!r} inside {str(destination)!r}")
        destination = destination / name
    if not destination.parent.is_dir():
        raise TransferError(f"local folder {str(destination.parent)!r} does not exist")
    if destination.is_dir() or (top.kind == "dir" and os.path.lexists(destination)):
        raise TransferError(
            f"local {str(destination)!r} already exists; a download is not copied over or into it",
            hint="remove it first, or name another destination",
        )
    prefix, suffix = f".{destination.name[:100]}.", ".part"
    if top.kind == "file":
        fd, name = tempfile.mkstemp(dir=destination.parent, prefix=prefix, suffix=suffix)
        staging = Path(name)
        try:
            _fetch_file(client, root, top, fd)
            os.replace(staging, destination)
        except OSError as exc:
            staging.unlink(missing_ok=True)
            raise TransferError(
                f"writing {str(destination)!r} on the host failed: {exc}; nothing was left there"
            ) from exc
        except BaseException:
            staging.unlink(missing_ok=True)
            raise
        return Copied(str(destination), 1, top.size)
    staging = Path(tempfile.mkdtemp(dir=destination.parent, prefix=prefix, suffix=suffix))
    try:
        total = 0
        for entry in entries:
            path = staging.joinpath(*entry.name.split("/"))
            if entry.kind == "dir":
                os.mkdir(path, 0o700)
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            _fetch_file(client, f"{root}/{entry.name}", entry, fd)
            total += entry.size
        for entry in sorted(
            (e for e in entries if e.kind == "dir"), key=lambda e: -e.name.count("/")
        ):
            path = staging.joinpath(*entry.name.split("/"))
            os.chmod(path, entry.mode & 0o1777)
            os.utime(path, ns=(entry.mtime_ns, entry.mtime_ns))
        os.chmod(staging, top.mode & 0o1777)
        os.utime(staging, ns=(top.mtime_ns, top.mtime_ns))
        os.rename(staging, destination)
    except OSError as exc:
        _remove_tree(staging)
        raise TransferError(
            f"writing {str(destination)!r} on the host failed: {exc}; nothing was left there"
        ) from exc
    except BaseException:
        _remove_tree(staging)
        raise
    return Copied(str(destination), sum(e.kind == "file" for e in entries), total)


def _fetch_file(client: AgentClient, path: str, entry: _Entry, fd: int) -> None:
    """Write the guest file ``path`` (``entry.size`` bytes) into ``fd``, then its mode and
    mtime; ``fd`` is closed."""
    with os.fdopen(fd, "wb") as stream:
        pieces = [
            (offset, min(CHUNK_BYTES, entry.size - offset))
            for offset in range(0, entry.size, CHUNK_BYTES)
        ]
        calls = (
            ("get_chunk", {"path": path, "offset": offset, "length": length}, b"")
            for offset, length in pieces
        )
        try:
            for (offset, wanted), reply in zip(
                pieces, client.pipeline(calls, timeout=CHUNK_TIMEOUT_S), strict=True
            ):
                if len(reply.blob) != wanted:
                    raise TransferError(
                        f"guest file {path!r} changed size while being copied (expected "
                        f"{entry.size} bytes, got {offset + len(reply.blob)} at most); nothing "
                        "was kept"
                    )
                stream.write(reply.blob)
        except GuestError as exc:
            raise TransferError(f"reading {path!r} from the guest failed: {exc}") from exc
        stream.flush()
        os.fchmod(stream.fileno(), entry.mode & 0o1777)
        os.utime(stream.fileno(), ns=(entry.mtime_ns, entry.mtime_ns))


def _remove_tree(path: Path) -> None:
    def writable(_function: Any, failed: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, 0o700)
                shutil.rmtree(failed, ignore_errors=True)
            else:
                os.unlink(failed)

    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    shutil.rmtree(path, onerror=writable)
