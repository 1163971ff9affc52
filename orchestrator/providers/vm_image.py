"""Build the VM guest image from Debian packages: a read-only base qcow2, a PVH ``vmlinux`` and a
tiny busybox initramfs (see shared/reference/vm-lab.md for why each piece is what it is).

Contents are those of the Docker guest: the packages of ``images/guest-packages.txt``, the user
``cubicle`` (uid 1000), the desktop of ``images/desktop`` (openbox, the tint2 panel) and the agent
installed from a wheelhouse into ``/opt/cubicle/venv``. VM-only pieces live in ``images/vm/``:
the PID 1 script (``cubicle-init``), the reaper, the initramfs ``/init`` and the ``provision``
script that turns a debootstrapped rootfs into the guest (shared with the Vagrant box, which is
made from this disk).

Content-addressed: :func:`image_ref` hashes every input (package lists, scripts, the guest agent's
sources, this module's :data:`RECIPE_VERSION`); an image directory ``<home>/images/<ref>/`` that
has a ``manifest.json`` is complete, so an unchanged rebuild is a no-op. Slow intermediate results
are cached too: the debootstrapped+apt-installed rootfs (``rootfs/<packages hash>.tar``) and the
extracted kernel (``kernel/<package>/``).

Runs as root (debootstrap, chroot). Subprocesses take argument lists only.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import desktop
from orchestrator.errors import ImageBuildError, ImageMissing, ProviderError
from orchestrator.hostdirs import host_folder
from orchestrator.provider import Progress
from orchestrator.providers import vm_boot
from orchestrator.providers.vm_boot import run_step as _run
from orchestrator.providers.vm_files import HOME_MODE, FileAccess

__all__ = [
    "DEBIAN_MIRROR",
    "RECIPE_VERSION",
    "VmImage",
    "build",
    "create_overlay",
    "image_ref",
    "load_image",
    "repo_root",
    "vm_home",
]

RECIPE_VERSION = "1"
"""Bump when the build steps change in a way the hashed inputs do not show."""
SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("CUBICLE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
VM_EXTRA_PACKAGES = ("iproute2",)
"""Packages the VM guest needs beyond the shared list: ``ip`` (lo, the optional NIC)."""
DISK_HEADROOM = 1.25
DISK_EXTRA_MB = 384
"""The ext4 base is the rootfs size x headroom + this much free space (MiB) for the guest."""


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
    """The checkout holding ``images/`` and ``guest/`` (this file is orchestrator/providers/…)."""
    return Path(__file__).resolve().parents[2]


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
        Path(vm_boot.__file__).resolve(),
    ]
    files += sorted((root / "images" / "vm").glob("*"))
    files += list(desktop.desktop_files(root).values())
    files += sorted(p for p in (root / "guest").rglob("*.py") if not _skipped(p.relative_to(root)))
    return [f for f in files if f.is_file()]


def _skipped(relative: Path) -> bool:
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


# --------------------------------------------------------------------------- steps


@contextmanager
def _mounted_proc(rootfs: Path) -> Iterator[None]:
    """``proc`` mounted in the rootfs for a chroot (apt, dpkg triggers); always unmounted."""
    target = rootfs / "proc"
    _run("mount proc", ["mount", "-t", "proc", "proc", target])
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", os.fspath(target)], check=False)


def _rootfs(home: Path, work: Path, packages: list[str], progress: Progress) -> Path:
    """Debootstrap minbase + apt-get install the packages; cached as a tar by package-list hash."""
    key = hashlib.sha256(
        f"{SUITE};{DEBIAN_MIRROR};{platform.machine()};{' '.join(packages)}".encode()
    ).hexdigest()[:16]
    cache = home / "rootfs" / f"{key}.tar"
    rootfs = work / "rootfs"
    rootfs.mkdir()
    if cache.is_file():
        progress(f"rootfs: reusing {cache}")
        _run("unpack rootfs", ["tar", "--numeric-owner", "-xpf", cache, "-C", rootfs])
        return rootfs
    started = time.monotonic()
    progress(f"rootfs: debootstrap {SUITE} minbase from {DEBIAN_MIRROR} (a few minutes)")
    _run("debootstrap", ["debootstrap", "--variant=minbase", SUITE, rootfs, DEBIAN_MIRROR])
    progress(f"rootfs: apt-get install {len(packages)} packages (--no-install-recommends)")
    (rootfs / "etc" / "apt" / "sources.list.d" / "cubicle-security.list").write_text(
        f"deb http://deb.debian.org/debian-security {SUITE}-security main\n"
    )
    shutil.copyfile("/etc/resolv.conf", rootfs / "etc" / "resolv.conf")
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LANG": "C.UTF-8",
    }
    with _mounted_proc(rootfs):
        _run("apt-get update", ["chroot", rootfs, "apt-get", "update", "-q"], env=env)
        _run(
            "apt-get install",
            [
                "chroot",
                rootfs,
                "apt-get",
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                *packages,
            ],
            env=env,
        )
        _run("apt-get clean", ["chroot", rootfs, "apt-get", "clean"], env=env)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".tmp{os.getpid()}")
    _run("cache rootfs", ["tar", "--numeric-owner", "-cpf", partial, "-C", rootfs, "."])
    partial.replace(cache)
    progress(f"rootfs: done in {time.monotonic() - started:.0f} s (cached as {cache.name})")
    return rootfs


def _wheelhouse(root: Path, work: Path, progress: Progress) -> Path:
    """Wheels of the guest agent and its dependencies (the guest has no PyPI)."""
    wheels = work / "stage" / "wheels"
    wheels.mkdir(parents=True)
    progress("agent: building the wheelhouse (cubicle-guest + python-xlib, mss, pillow)")
    source = work / "guest-src"  # pip builds in-tree: build from a copy, never in guest/
    shutil.copytree(
        root / "guest", source, ignore=lambda d, names: [n for n in names if _skipped(Path(n))]
    )
    _run(
        "pip wheel",
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "--wheel-dir",
            wheels,
            source,
        ],
    )
    return wheels


def _disk(rootfs: Path, work: Path, target: Path) -> None:
    """``mkfs.ext4 -d`` (no loop mount) into a raw file, then convert it to qcow2."""
    used = sum(p.lstat().st_size for p in rootfs.rglob("*"))
    size_mb = int(used * DISK_HEADROOM / 2**20) + DISK_EXTRA_MB
    raw = work / "base.img"
    _run(
        "mkfs.ext4",
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-L",
            "cubicle-root",
            "-E",
            "root_owner=0:0",
            "-d",
            rootfs,
            raw,
            f"{size_mb}M",
        ],
    )
    _run("qemu-img convert", ["qemu-img", "convert", "-O", "qcow2", raw, target])
    raw.unlink()


def build(*, progress: Progress, force: bool = False, home: Path | None = None) -> VmImage:
    """Build the image for the current inputs unless it exists (then return it at once).

    :param force: rebuild even if the image exists (the cached rootfs and kernel are reused).
    :raises ImageBuildError: a step failed (its name, the command and the log tail).
    """
    home = home or vm_home()
    root = repo_root()
    ref = image_ref(root)
    if not force:
        try:
            image = load_image(ref, home)
        except ImageMissing:
            pass
        else:
            progress(f"VM image {ref} is up to date ({image.directory})")
            return image
    if sys.platform != "linux":
        raise ImageBuildError(
            f"building the VM image needs Linux (debootstrap, chroot, mkfs.ext4 -d); this is "
            f"{sys.platform}",
            hint="build it on a Linux host or VM of the same architecture and copy "
            f"{home}/images/<ref>/ here (see README, VM backend on Apple silicon)",
        )
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building the VM image needs root (debootstrap, chroot, mkfs.ext4 -d)",
            hint="run: sudo cubicle image build --backend vm",
        )
    for tool in ("debootstrap", "qemu-img", "mkfs.ext4", "dpkg-deb", "apt-get", "tar"):
        if shutil.which(tool) is None:
            raise ImageBuildError(
                f"building the VM image needs {tool}, which is not installed",
                hint="run: scripts/ensure-host-packages (see scripts/host-packages/vm.txt)",
            )
    host_folder(home, mode=HOME_MODE)  # refused when another user could write it or a parent
    if home.parent.is_dir():
        os.chmod(home.parent, 0o755)  # noqa: S103 — QEMU (libvirt-qemu) must pass through
    os.chmod(home, HOME_MODE)  # pass through only: run/ and warm/ are QEMU's group's alone
    started = time.monotonic()
    timings: dict[str, float] = {}
    packages = guest_packages(root)
    progress(f"VM image {ref}: building ({len(packages)} packages) under {home}")
    work = Path(tempfile.mkdtemp(prefix=f"build-{ref}-", dir=home))
    try:
        mark = time.monotonic()
        rootfs = _rootfs(home, work, packages, progress)
        timings["rootfs_s"] = time.monotonic() - mark
        mark = time.monotonic()
        stage = work / "stage"
        _wheelhouse(root, work, progress)
        for name in ("cubicle-init", "cubicle-reap"):
            shutil.copyfile(root / "images" / "vm" / name, stage / name)
        for name, source in desktop.desktop_files(root).items():
            (stage / "desktop" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, stage / "desktop" / name)
        progress("provision: user, init, desktop configuration, agent venv, trim")
        _run("provision", [root / "images" / "vm" / "provision", rootfs, stage])
        timings["provision_s"] = time.monotonic() - mark
        mark = time.monotonic()
        kernel_package, kernel_tree = vm_boot.kernel(home, progress)
        out = work / "out"
        out.mkdir()
        shutil.copyfile(kernel_tree / "vmlinux", out / "vmlinux")
        vm_boot.initramfs(kernel_tree, work, out / "initrd.img")
        timings["kernel_initramfs_s"] = time.monotonic() - mark
        mark = time.monotonic()
        progress("disk: mkfs.ext4 -d + qemu-img convert")
        _disk(rootfs, work, out / "base.qcow2")
        timings["disk_s"] = time.monotonic() - mark
        manifest = {
            "ref": ref,
            "recipe": RECIPE_VERSION,
            "suite": SUITE,
            "kernel_package": kernel_package,
            "packages": packages,
            "arch": platform.machine(),
            "built_at": time.time(),
            "build_s": round(time.monotonic() - started, 1),
            "timings": {k: round(v, 1) for k, v in timings.items()},
            "base_bytes": (out / "base.qcow2").stat().st_size,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        for path in out.iterdir():
            os.chmod(path, 0o444)
        os.chmod(out, 0o755)  # noqa: S103 — QEMU (libvirt-qemu) must read
        final = home / "images" / ref
        final.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(final.parent, 0o755)  # noqa: S103 — QEMU (libvirt-qemu) must read
        if final.exists():
            shutil.rmtree(final)
        out.replace(final)
    finally:
        proc = work / "rootfs" / "proc"
        if proc.is_dir() and os.path.ismount(proc):
            subprocess.run(["umount", "-l", os.fspath(proc)], check=False)
        if not (proc.is_dir() and os.path.ismount(proc)):  # never recurse into a live /proc
            shutil.rmtree(work, ignore_errors=True)
    progress(f"VM image {ref}: built in {time.monotonic() - started:.0f} s ({final})")
    return load_image(ref, home)


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
