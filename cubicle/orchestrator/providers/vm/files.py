"""Who may touch the VM backend's files: their owner (root) and libvirt's QEMU user, nobody else.

The QEMU processes of ``qemu:///system`` run as libvirt's DAC base label — on Debian
``libvirt-qemu:libvirt-qemu``, read from the host capabilities by :func:`qemu_access` — so the
paths QEMU must reach belong to ``root:<QEMU's group>`` and give others nothing:

=====================================  =========================================================
path (under ``<home>``)                 mode
=====================================  =========================================================
``<home>`` itself                       ``0711``: others may pass through, not list
``proxy/<hash>/egress.pyz``             ``0755``/``0644``: the ``allow:`` proxy runs as nobody
``images/<ref>/``                       ``0755``/``0444``: the base disk is public content
``run/``, ``run/<id>/``                 ``0750`` root:QEMU
``run/<id>/overlay.qcow2``              ``0660`` root:QEMU (libvirt hands it to QEMU's user
                                        while the domain runs)
``run/<id>/state.save``                 ``0440`` root:QEMU: a copy of a warm slot's state, only
                                        while the sandbox is restored from it
other ``run/<id>/`` files               ``0640`` root:QEMU or ``0600`` (labels, proxy log)
``warm/`` … ``slotN/``                  ``0750`` root:QEMU
``golden.qcow2``, ``state.save``        ``0440`` root:QEMU (frozen once saved)
=====================================  =========================================================

When QEMU runs as ourselves (``qemu:///session``) or as root, the group is not needed: the same
paths are owner-only (the group bits are dropped).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cubicle.orchestrator.errors import ProviderError

__all__ = ["HOME_MODE", "FileAccess", "qemu_access"]

HOME_MODE: Final = 0o711
"""The backend's home: traversable (QEMU, the proxy's ``nobody``), not listable."""


@dataclass(frozen=True)
class FileAccess:
    """Makes paths private to their owner and QEMU's group ``gid`` (``None``: owner only)."""

    gid: int | None

    def restrict(self, path: Path, mode: int) -> None:
        """Give ``path`` to the QEMU group with ``mode`` (group bits dropped without a group).

        :raises ProviderError: the group cannot be set (not root, not a member).
        """
        if self.gid is None:
            os.chmod(path, mode & 0o700)
            return
        try:
            if os.stat(path).st_gid != self.gid:
                os.chown(path, -1, self.gid)
        except PermissionError as exc:
            raise ProviderError(
                f"cannot give {path} to QEMU's group (gid {self.gid}): {exc.strerror}",
                hint="run cubicle as root for qemu:///system, or use qemu:///session",
            ) from None
        os.chmod(path, mode)

    def directories(self, base: Path, path: Path) -> Path:
        """Create ``path`` (below ``base``, which must exist) and every directory between them,
        each ``0750``; return ``path``."""
        parts = path.relative_to(base).parts
        for depth in range(1, len(parts) + 1):
            current = base.joinpath(*parts[:depth])
            current.mkdir(mode=0o700, exist_ok=True)
            self.restrict(current, 0o750)
        return path

    def write_text(self, path: Path, text: str, mode: int = 0o640) -> None:
        """Write ``path`` so that it is never readable by others, not even for a moment."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(text)
        self.restrict(path, mode)


def qemu_access(conn: Any, domain_type: str) -> FileAccess:
    """The :class:`FileAccess` for the QEMU processes of ``conn`` (libvirt's DAC base label of
    ``domain_type``, e.g. ``+64055:+64055``)."""
    root = ET.fromstring(conn.getCapabilities())  # noqa: S314 — XML from our own libvirtd
    labels = {
        label.get("type"): (label.text or "")
        for model in root.iterfind("host/secmodel")
        if model.findtext("model") == "dac"
        for label in model.iterfind("baselabel")
    }
    text = labels.get(domain_type) or next(iter(labels.values()), "")
    uid_text, _, gid_text = text.partition(":")
    try:
        uid, gid = int(uid_text.lstrip("+")), int(gid_text.lstrip("+"))
    except ValueError:
        return FileAccess(None)  # no DAC driver: QEMU runs as root
    if uid in (0, os.geteuid()):
        return FileAccess(None)
    return FileAccess(gid)
