"""Warm starts for VM sandboxes: saved "golden" guest states restored onto fresh overlays.

Design (libvirt refuses a different ``<name>``/``<uuid>`` on restore, so one saved state can run
as one live domain at a time): a *slot* is one saved state with its own domain name. A sandbox
takes the first slot whose domain is not running and is restored from it (~1 s under TCG). Slot 0
is made by booting a guest and saving it; the other slots are copies of slot 0 renamed to their
own domain (:func:`cubicle.orchestrator.providers.vm.saved_state.clone_saved_state`, ~0.1 s, the
golden disk hard-linked). When every slot is busy, the sandbox is restored from a copy of a slot's
state made for it in its run folder (domain ``cubicle-<id>``), removed once restored; it
cold-boots (~10-20 s under TCG) only when no valid slot exists or the copy fails. Slots are per
(image, screen, memory, vCPUs, pids limit, accelerator) — a different screen size needs its own
golden state.

Files of a slot, ``<home>/warm/<image ref>/<key>/slot<N>/``::

    golden.qcow2   the golden guest's overlay of the base; frozen (0440) once saved
    state.save     libvirt's saved memory/device state (dom.save); read-only (0440), shared
    meta.json      written last (the commit mark): image ref + build time, key, name, saved_at

Like run directories, slots are root's and QEMU's group's alone (``0750`` directories; see
:mod:`cubicle.orchestrator.providers.vm.files`).

Each warm sandbox gets a new overlay backed by ``golden.qcow2``; the state is only read.
A slot whose ``meta.json`` names another image build is stale and is rebuilt (a cold boot then
a save). Known limit: restored guests share the golden guest's clock offset and RNG state
(reseeding needs a root helper in the guest; see the report of issue #6).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cubicle.orchestrator.providers.vm.files import FileAccess
from cubicle.orchestrator.providers.vm.image import VmImage

__all__ = ["WarmKey", "WarmSlot", "slots_for"]

DOMAIN_RECIPE = 4
"""Bump when the domain XML changes in a way a saved state must match (2: ``<genid/>``; 3: boots
with :data:`~cubicle.orchestrator.providers.vm.provider.BOOT_VCPUS` vCPUs and keeps ``cpus``
online; 4: the vCPUs are cores of one socket, and x86 guests route PCI interrupts without ACPI)."""


@dataclass(frozen=True)
class WarmKey:
    """What a saved state is only valid for (besides the image): the guest's shape."""

    screen: tuple[int, int]
    memory_mb: int
    vcpus: int
    pids_limit: int
    accelerator: str

    def text(self) -> str:
        width, height = self.screen
        shape = f"m{self.memory_mb}-c{self.vcpus}-p{self.pids_limit}"
        return f"{width}x{height}-{shape}-{self.accelerator}-d{DOMAIN_RECIPE}"


@dataclass(frozen=True)
class WarmSlot:
    """One saved golden state and the domain name every sandbox restored from it carries."""

    directory: Path
    name: str
    index: int

    @property
    def golden(self) -> Path:
        return self.directory / "golden.qcow2"

    @property
    def state(self) -> Path:
        return self.directory / "state.save"

    @property
    def meta_path(self) -> Path:
        return self.directory / "meta.json"

    def meta(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def valid_for(self, image: VmImage) -> bool:
        """Saved, complete and made from exactly this image build (ref and build time)."""
        meta = self.meta()
        return (
            meta is not None
            and meta.get("image_ref") == image.ref
            and meta.get("image_built_at") == image.manifest.get("built_at")
            and self.state.is_file()
            and self.golden.is_file()
        )

    def reset(self) -> None:
        """Remove a stale or half-made slot (never while its domain runs: the caller checks)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def freeze(self, access: FileAccess) -> None:
        """Make the golden overlay and the state read-only for root and QEMU's group only."""
        access.restrict(self.golden, 0o440)
        access.restrict(self.state, 0o440)

    def commit(self, image: VmImage, key: WarmKey, uuid: str, access: FileAccess) -> None:
        """Freeze the golden overlay and state, then write meta.json (the commit mark)."""
        self.freeze(access)
        meta = {
            "image_ref": image.ref,
            "image_built_at": image.manifest.get("built_at"),
            "key": key.text(),
            "name": self.name,
            "uuid": uuid,
            "saved_at": time.time(),
        }
        partial = self.meta_path.with_suffix(".tmp")
        access.write_text(partial, json.dumps(meta, indent=2) + "\n")
        partial.replace(self.meta_path)


def slots_for(home: Path, image: VmImage, key: WarmKey, count: int) -> list[WarmSlot]:
    """The ``count`` slots of this image and key (directories are created lazily by the caller)."""
    tag = hashlib.sha256(key.text().encode()).hexdigest()[:6]
    base = home / "warm" / image.ref / key.text()
    return [
        WarmSlot(base / f"slot{index}", f"cubicle-warm-{image.ref[:8]}-{tag}-{index}", index)
        for index in range(count)
    ]
