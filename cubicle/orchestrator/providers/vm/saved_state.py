"""libvirt's saved-state files (what ``virDomainSave`` writes), copied under a new domain identity.

libvirt restores a saved state only as the domain it was saved from: the restore XML must keep
its name and UUID, and two live domains never share them. So one file runs as one live domain at
a time. :func:`clone_saved_state` writes a copy of a state whose XML names another domain; the
copy restores beside the original (QEMU's migration stream, the bulk of the file, carries no
name or UUID and is copied unchanged, in the kernel: ``copy_file_range``, ~0.1 s for ~200 MB).

The file format (libvirt's qemu driver, ``qemu_saveimage.h``, version 2, unchanged since libvirt
0.9): a 92-byte header — the magic ``LibvirtQemudSave`` (16 bytes), then 19 native-endian uint32:
version, ``data_len``, ``was_running``, ``compressed``, ``cookieOffset``, 14 unused — then
``data_len`` bytes: the domain XML (NUL-terminated), the migration cookie at ``cookieOffset``
(NUL-terminated, optional) and zeros (libvirt leaves 64 KiB so the XML can be edited in place),
then QEMU's migration stream to the end of the file. A copy keeps ``data_len``, so the stream
starts at the same offset. Only uncompressed states (cubicle's) are cloned.
"""

from __future__ import annotations

import os
import struct
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cubicle.orchestrator.errors import ProviderError

__all__ = ["SavedState", "SavedStateError", "clone_saved_state", "read_saved_state"]

MAGIC: Final = b"LibvirtQemudSave"
VERSION: Final = 2
HEADER: Final = struct.Struct("=16s19I")
"""magic, version, data_len, was_running, compressed, cookieOffset, 14 unused."""


class SavedStateError(ProviderError):
    """A saved-state file is not one this module can read or clone (the path and why)."""


@dataclass(frozen=True)
class SavedState:
    """The parts of a saved-state file before QEMU's stream (which starts at ``stream_offset``)."""

    fields: tuple[int, ...]
    """The header's 19 integers, as read."""
    xml: str
    cookie: bytes | None
    """The migration cookie's bytes (without its NUL), or None when the file has none."""

    @property
    def data_len(self) -> int:
        return self.fields[1]

    @property
    def stream_offset(self) -> int:
        return HEADER.size + self.data_len

    def data_block(self, xml: str) -> bytes:
        """The ``data_len`` bytes of a copy whose domain XML is ``xml`` (same cookie).

        :raises SavedStateError: ``xml`` and the cookie do not fit in ``data_len``.
        """
        block = xml.encode() + b"\0"
        cookie_offset = 0
        if self.cookie is not None:
            cookie_offset = len(block)
            block += self.cookie + b"\0"
        if len(block) > self.data_len:
            raise SavedStateError(
                f"a domain XML of {len(xml)} bytes does not fit the saved state's "
                f"{self.data_len}-byte data block"
            )
        fields = list(self.fields)
        fields[4] = cookie_offset
        return HEADER.pack(MAGIC, *fields) + block.ljust(self.data_len, b"\0")


def read_saved_state(path: Path) -> SavedState:
    """Read the header, XML and cookie of a saved-state file.

    :raises SavedStateError: not a complete, uncompressed version-2 libvirt save (named).
    """
    with path.open("rb") as file:
        raw = file.read(HEADER.size)
        if len(raw) < HEADER.size:
            raise SavedStateError(f"{path}: {len(raw)} bytes is too short for a saved state")
        magic, *fields = HEADER.unpack(raw)
        if magic != MAGIC:
            raise SavedStateError(f"{path}: magic {magic!r} is not a complete libvirt save")
        version, data_len, _running, compressed, cookie_offset = fields[:5]
        if version != VERSION:
            raise SavedStateError(f"{path}: save format version {version}, not {VERSION}")
        if compressed != 0:
            raise SavedStateError(f"{path}: compressed (format {compressed}); cannot clone")
        data = file.read(data_len)
    if len(data) < data_len:
        raise SavedStateError(f"{path}: the data block is cut short")
    xml_end = data.find(b"\0")
    if xml_end < 0 or (cookie_offset and not xml_end < cookie_offset < data_len):
        raise SavedStateError(f"{path}: the data block holds no NUL-terminated XML and cookie")
    cookie = None
    if cookie_offset:
        cookie_end = data.find(b"\0", cookie_offset)
        if cookie_end < 0:
            raise SavedStateError(f"{path}: the migration cookie is not NUL-terminated")
        cookie = data[cookie_offset:cookie_end]
    return SavedState(tuple(fields), data[:xml_end].decode(), cookie)


def renamed_xml(xml: str, *, name: str, uuid: str) -> str:
    """``xml`` with its domain ``<name>`` and ``<uuid>`` replaced, every other byte kept.

    :raises SavedStateError: the XML has not exactly one of each.
    """
    root = ET.fromstring(xml)  # noqa: S314 — XML from our own saved state
    old_name, old_uuid = root.findtext("name"), root.findtext("uuid")
    if not old_name or not old_uuid:
        raise SavedStateError("the saved domain XML has no <name> or <uuid>")
    for tag, old, new in (("name", old_name, name), ("uuid", old_uuid, uuid)):
        element = f"<{tag}>{old}</{tag}>"
        if xml.count(element) != 1:
            raise SavedStateError(f"the saved domain XML has {xml.count(element)} {element}")
        xml = xml.replace(element, f"<{tag}>{new}</{tag}>")
    return xml


def clone_saved_state(source: Path, target: Path, *, name: str, uuid: str) -> None:
    """Write ``target`` (new, mode ``0600``): ``source`` as saved by a domain named ``name``
    with UUID ``uuid``.

    The caller owns ``target`` (and removes it; a failed clone removes its partial file).
    :raises SavedStateError: ``source`` cannot be cloned (see :func:`read_saved_state`).
    :raises OSError: reading or writing failed (e.g. the disk is full; ``target`` exists).
    """
    state = read_saved_state(source)
    try:
        block = state.data_block(renamed_xml(state.xml, name=name, uuid=uuid))
    except SavedStateError as exc:
        raise SavedStateError(f"{source}: {exc}") from None
    fd_out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with open(source, "rb") as src:
            length = os.fstat(src.fileno()).st_size - state.stream_offset
            os.pwrite(fd_out, block, 0)
            src_offset, dst_offset = state.stream_offset, len(block)
            while length > 0:
                copied = os.copy_file_range(src.fileno(), fd_out, length, src_offset, dst_offset)
                if copied == 0:
                    raise SavedStateError(f"{source} ended while it was being copied")
                src_offset, dst_offset, length = (
                    src_offset + copied,
                    dst_offset + copied,
                    length - copied,
                )
    except BaseException:
        os.close(fd_out)
        target.unlink(missing_ok=True)
        raise
    os.close(fd_out)
