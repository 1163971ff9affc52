"""The VM guest image as the backend uses it: its content hash (:func:`image_ref`), a built image
on disk (:class:`VmImage`, :func:`load_image`) and per-sandbox overlays on it. Building it is
:mod:`orchestrator.providers.vm.build`.

Content-addressed: :func:`image_ref` hashes every input (package lists, scripts, the guest agent's
sources, the build steps and :data:`RECIPE_VERSION`); an image directory ``<home>/images/<ref>/``
that has a ``manifest.json`` is complete, so an unchanged rebuild is a no-op.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import desktop
from orchestrator.errors import ImageBuildError, ImageMissing, ProviderError
from orchestrator.providers.vm.files import FileAccess

__all__ = [
    "RECIPE_VERSION",
    "VmImage",
    "create_overlay",
    "guest_packages",
    "image_ref",
    "is_build_by_product",
    "load_image",
    "repo_root",
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


def repo_root() -> Path:
    """The checkout holding ``images/`` and ``guest/`` (three levels above this file)."""
    return Path(__file__).resolve().parents[3]


def vm_home() -> Path:
    """Where the VM backend keeps images, warm states and per-sandbox files.

    ``$CUBICLE_HOME/vm`` if set; ``/var/lib/cubicle/vm`` for root; else ``~/.cache/cubicle/vm``.
    The directories must be readable by the QEMU user (libvirt-qemu), so they are mode 0755.
    """
    if os.environ.get("CUBICLE_HOME"):
        return Path(os.environ["CUBICLE_HOME"]) / "vm"
    if os.geteuid() == 0:
        return Path("/var/lib/cubicle/vm")
    return Path.home() / ".cache" / "cubicle" / "vm"


def guest_packages(root: Path | None = None) -> list[str]:
    """The shared guest package list (``images/guest-packages.txt``) plus the VM extras."""
    path = (root or repo_root()) / "images" / "guest-packages.txt"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ImageBuildError(f"cannot read the guest package list {path}: {exc}") from None
    names = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return sorted({name for name in names if name} | set(VM_EXTRA_PACKAGES))


def _input_files(root: Path) -> list[Path]:
    files = [
        root / "images" / "guest-packages.txt",
        root / "guest" / "pyproject.toml",
        Path(__file__).resolve(),
        Path(__file__).with_name("build.py").resolve(),
    ]
    files += sorted((root / "images" / "vm").glob("*"))
    files += list(desktop.desktop_files(root).values())
    files += sorted(
        p for p in (root / "guest").rglob("*.py") if not is_build_by_product(p.relative_to(root))
    )
    return [f for f in files if f.is_file()]


def is_build_by_product(relative: Path) -> bool:
    """Build by-products and caches that are not inputs of the guest package."""
    return any(
        part in ("__pycache__", "build", "dist") or part.endswith(".egg-info")
        for part in relative.parts
    )


def image_ref(root: Path | None = None) -> str:
    """Content hash of every build input (16 hex digits); the image's name."""
    base = root or repo_root()
    digest = hashlib.sha256(f"recipe={RECIPE_VERSION};arch={platform.machine()};".encode())
    for path in _input_files(base):
        digest.update(
            str(path.relative_to(base) if path.is_relative_to(base) else path.name).encode()
        )
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def load_image(ref: str | None = None, home: Path | None = None) -> VmImage:
    """The built image ``ref`` (default: the one matching the current inputs).

    :raises ImageMissing: it has not been built (hint: the build command).
    """
    wanted = ref or image_ref()
    directory = (home or vm_home()) / "images" / wanted
    manifest_path = directory / "manifest.json"
    if not manifest_path.is_file():
        raise ImageMissing(
            f"VM image {wanted} is not built (no {manifest_path})",
            hint="build it with: cubicle image build --backend vm",
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
            "qemu-img",
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
