"""The VM guest image as the backend uses it: its content hash (:func:`image_ref`), a built image
on disk (:class:`VmImage`, :func:`load_image`) and per-sandbox overlays on it. Building it is
:mod:`cubicle.orchestrator.providers.vm.build`.

Content-addressed: :func:`image_ref` hashes every input — what every guest is built from
(:func:`cubicle.orchestrator.providers.guest_build.input_hash`: package list, desktop, agent
sources and pinned dependencies, the wheelhouse recipe) and this backend's own files
(``images/vm``, the build steps), the machine and :data:`RECIPE_VERSION`; an image directory
``<home>/images/<ref>/`` that has a ``manifest.json`` is complete, so an unchanged rebuild is a
no-op.
"""

from __future__ import annotations

import json
import os
import platform
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cubicle.orchestrator.errors import ConfigError, ImageMissing, ProviderError
from cubicle.orchestrator.providers import guest_build
from cubicle.orchestrator.providers.vm import host_tools
from cubicle.orchestrator.providers.vm.files import FileAccess

__all__ = [
    "RECIPE_VERSION",
    "SHARED_HOME",
    "VmImage",
    "create_overlay",
    "guest_packages",
    "image_ref",
    "load_image",
    "vm_home",
]

RECIPE_VERSION = "1"
"""Bump when the build steps change in a way the hashed inputs do not show."""
VM_EXTRA_PACKAGES = ("iproute2",)
"""Packages the VM guest needs beyond the shared list: ``ip`` (lo, the optional NIC)."""


@dataclass(frozen=True)
class VmImage:
    """A built image: ``ref`` (content hash) and its files. The base disk is read-only, shared."""

    ref: str
    directory: Path
    base: Path
    kernel: Path
    initrd: Path
    manifest: dict[str, Any]


def vm_home() -> Path:
    """Where the VM backend keeps images, warm states and per-sandbox files.

    ``$CUBICLE_HOME/vm`` if set; ``/var/lib/cubicle/vm`` for root; else the user's own
    ``$XDG_CACHE_HOME/cubicle/vm`` (``~/.cache/cubicle/vm`` when unset or not absolute, as the XDG
    base directory spec says). The directories must be readable by the QEMU user (libvirt-qemu),
    so they are mode 0755; :func:`cubicle.orchestrator.hostdirs.host_folder` refuses them (and
    any parent) when another user could write them.
    """
    if os.environ.get("CUBICLE_HOME"):
        return Path(os.environ["CUBICLE_HOME"]) / "vm"
    if os.geteuid() == 0:
        return Path("/var/lib/cubicle/vm")
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if os.path.isabs(cache) else Path.home() / ".cache"
    return base / "cubicle" / "vm"


def guest_packages(root: Path = guest_build.REPO_ROOT) -> list[str]:
    """The shared guest package list (``images/guest-packages.txt``) plus the VM extras."""
    return guest_build.guest_packages(VM_EXTRA_PACKAGES, root)


def own_inputs(root: Path = guest_build.REPO_ROOT) -> dict[str, Path]:
    """This backend's image inputs beside the shared ones (name → file): ``images/vm`` (init,
    reaper, initramfs ``/init``, provision script) and the build steps (this module and
    :mod:`.build`)."""
    folder = root / "images" / "vm"
    files = {f"vm/{path.name}": path for path in folder.glob("*") if path.is_file()}
    here = Path(__file__).resolve()
    files["vm/image.py"] = here
    files["vm/build.py"] = here.with_name("build.py")
    return files


def image_ref(root: Path = guest_build.REPO_ROOT) -> str:
    """Content hash of every build input (16 hex digits); the image's name."""
    return guest_build.input_hash(
        own_inputs(root),
        [f"recipe={RECIPE_VERSION}", f"arch={platform.machine()}"],
        root,
    )


SHARED_HOME = Path("/var/lib/cubicle/vm")
"""Root's VM home: a user who has not built ``ref`` uses root's build of it from here."""


def _trusted(directory: Path) -> bool:
    """Whether only root (or we) can change the image folder ``directory``: its manifest, the
    folder and every parent owned by root or us, not symlinks, and not writable by group or
    others — a parent may be a root-owned sticky folder such as ``/tmp``."""
    manifest = directory / "manifest.json"
    try:
        for path in (manifest, directory, *directory.parents):
            info = path.lstat()
            sticky = path not in (manifest, directory) and info.st_mode & stat.S_ISVTX
            if info.st_uid not in (0, os.geteuid()) or stat.S_ISLNK(info.st_mode):
                return False
            if info.st_mode & 0o022 and not (sticky and info.st_uid == 0):
                return False
    except OSError:
        return False
    return True


def _shared_image(ref: str) -> Path | None:
    """``SHARED_HOME/images/<ref>/`` when it is complete and :func:`_trusted`; else None."""
    directory = SHARED_HOME / "images" / ref
    return directory if _trusted(directory) else None


def load_image(ref: str | None = None, home: Path | None = None) -> VmImage:
    """The built image ``ref`` (default: the one matching the current inputs): the build in
    ``home`` (default :func:`vm_home`), else — for a user other than root — root's build in
    :data:`SHARED_HOME` (:func:`_shared_image`: only when no one but root can change it).
    ``ref`` may also be an image folder's absolute path (``CUBICLE_VM_IMAGE=/…/images/<ref>``),
    used when :func:`_trusted`.

    :raises ImageMissing: it has not been built (hint: the build command).
    :raises ConfigError: ``ref`` is a path to a folder someone else could change.
    """
    if ref is not None and os.path.isabs(ref):
        directory = Path(ref)
        if (directory / "manifest.json").is_file() and not _trusted(directory):
            raise ConfigError(
                f"refusing the VM image folder {directory}: someone other than root or you could "
                "change it (it, a parent or its manifest is theirs or writable by others)"
            )
        wanted = directory.name
    else:
        wanted = ref or image_ref()
        directory = (home or vm_home()) / "images" / wanted
    manifest_path = directory / "manifest.json"
    if not manifest_path.is_file() and (shared := _shared_image(wanted)) is not None:
        directory, manifest_path = shared, shared / "manifest.json"
    if not manifest_path.is_file():
        raise ImageMissing(
            f"VM image {wanted} is not built (no {manifest_path}, nor a build of root's in "
            f"{SHARED_HOME / 'images' / wanted})",
            hint="build it with: cubicle image build --backend vm (as root, to share it)",
        )
    manifest = json.loads(manifest_path.read_text())
    return VmImage(
        ref=wanted,
        directory=directory,
        base=directory / "base.qcow2",
        kernel=directory / "vmlinux",
        initrd=directory / "initrd.img",
        manifest=manifest,
    )


def create_overlay(backing: Path, overlay: Path, access: FileAccess) -> None:
    """A qcow2 overlay at ``overlay`` backed by the qcow2 ``backing`` (base disk or a golden
    overlay), mode ``0660`` for its owner and QEMU's group only (``access``), never readable by
    others; the caller owns (removes) it.

    :raises ProviderError: with qemu-img's words.
    """
    done = subprocess.run(
        [
            host_tools.require_tool("qemu-img", needed_for="per-sandbox disk overlays"),
            "create",
            "-q",
            "-f",
            "qcow2",
            "-F",
            "qcow2",
            "-b",
            str(backing),
            str(overlay),
        ],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        raise ProviderError(
            f"qemu-img could not create the overlay {overlay} on {backing}: "
            f"{done.stderr.decode('utf-8', 'replace').strip()}"
        )
    access.restrict(overlay, 0o660)
