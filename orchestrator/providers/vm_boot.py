"""The boot pieces of the VM image: Debian's kernel (uncompressed for direct boot) and a tiny
busybox initramfs that loads the virtio/ext4 modules and switch_roots to ``/sbin/cubicle-init``.

x86-64: ``vmlinux`` (the ELF inside the bzImage's xz payload) boots through QEMU's PVH entry,
skipping the kernel's self-decompression (seconds under TCG). arm64: Debian's ``vmlinuz`` is a
gzip'd ``Image``, which ``-M virt`` boots directly once gunzipped. The initramfs is 2 MB instead
of Debian's 35 MB (no udev), see shared/reference/vm-lab.md section 1.
"""

from __future__ import annotations

import gzip
import lzma
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import ImageBuildError
from orchestrator.provider import Progress

__all__ = ["INITRAMFS_MODULES", "KERNEL_META_PACKAGE", "initramfs", "kernel", "run_step"]

KERNEL_META_PACKAGE = (
    "linux-image-arm64" if platform.machine() in ("aarch64", "arm64") else "linux-image-amd64"
)
INITRAMFS_MODULES = (
    "virtio",
    "virtio_ring",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "virtio_mmio",
    "virtio_blk",
    "virtio_console",
    "crc16",
    "mbcache",
    "jbd2",
    "crc32c_generic",
    "ext4",
    "failover",
    "net_failover",
    "virtio_net",
)
"""Kernel modules the tiny initramfs loads (ordered by their dependencies at build time); the
rest of the guest needs no module."""


def run_step(
    step: str,
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
) -> bytes:
    """Run one build command; on failure raise ImageBuildError with the step and its log tail."""
    try:
        done = subprocess.run(
            [os.fspath(a) for a in argv],
            cwd=cwd,
            env=env,
            input=stdin,
            capture_output=True,
            check=False,
        )
    except OSError as exc:
        raise ImageBuildError(
            f"VM image build step {step!r}: cannot run {os.fspath(argv[0])}: {exc}"
        ) from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).decode("utf-8", "replace").strip().splitlines()[-25:]
        raise ImageBuildError(
            f"VM image build step {step!r} failed: {os.fspath(argv[0])} exited with "
            f"{done.returncode}",
            log_tail="\n".join(tail),
        )
    return done.stdout


def kernel(home: Path, progress: Progress) -> tuple[str, Path]:
    """The Debian kernel package (name, extracted tree), downloaded with apt-get on the host."""
    depends = run_step("apt-cache depends", ["apt-cache", "depends", KERNEL_META_PACKAGE]).decode()
    names = [
        line.split(":", 1)[1].strip()
        for line in depends.splitlines()
        if line.strip().startswith("Depends:") and "linux-image-" in line
    ]
    if not names:
        raise ImageBuildError(
            f"apt-cache depends {KERNEL_META_PACKAGE} names no kernel package:\n{depends}"
        )
    package = names[0]
    tree = home / "kernel" / package
    if (tree / "vmlinux").is_file():
        progress(f"kernel: reusing {package}")
        return package, tree
    progress(f"kernel: downloading {package}")
    download = Path(tempfile.mkdtemp(prefix="kernel-", dir=home))
    try:
        shutil.chown(download, user="_apt")  # apt-get download drops privileges to _apt
        run_step("apt-get download", ["apt-get", "download", "-q", package], cwd=download)
        debs = list(download.glob("*.deb"))
        if len(debs) != 1:
            raise ImageBuildError(
                f"apt-get download {package} left {len(debs)} .deb files in {download}"
            )
        extracted = download / "tree"
        run_step("dpkg-deb -x", ["dpkg-deb", "-x", debs[0], extracted])
        vmlinuz = next(iter((extracted / "boot").glob("vmlinuz-*")), None)
        if vmlinuz is None:
            raise ImageBuildError(f"{debs[0].name} has no /boot/vmlinuz-*")
        partial = home / "kernel" / f"{package}.tmp{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        (partial / "modules").mkdir(parents=True)
        _uncompressed_kernel(vmlinuz, partial / "vmlinux")
        found = {
            p.name.removesuffix(".ko"): p
            for p in extracted.joinpath("lib", "modules").rglob("*.ko")
        }
        missing = [m for m in INITRAMFS_MODULES if m not in found]
        if missing:
            raise ImageBuildError(
                f"{package} lacks the modules {', '.join(missing)} the initramfs needs"
            )
        for name in INITRAMFS_MODULES:
            shutil.copyfile(found[name], partial / "modules" / f"{name}.ko")
        shutil.rmtree(tree, ignore_errors=True)
        partial.replace(tree)
    finally:
        shutil.rmtree(download, ignore_errors=True)
    return package, tree


def _uncompressed_kernel(vmlinuz: Path, target: Path) -> None:
    """Write the uncompressed kernel: the ELF in a bzImage's xz payload (x86-64, PVH boot), or
    the gunzipped arm64 ``Image``.

    Under TCG the kernel's own decompressor costs seconds per boot; the ELF boots at once.
    """
    data = vmlinuz.read_bytes()
    if data.startswith(b"\x1f\x8b"):  # arm64: a gzip'd Image, booted as is once gunzipped
        target.write_bytes(gzip.decompress(data))
        return
    start = data.find(b"\xfd7zXZ\x00")
    if start < 0:
        raise ImageBuildError(f"{vmlinuz} has no xz payload; cannot extract vmlinux for PVH boot")
    elf = lzma.LZMADecompressor().decompress(data[start:])
    if not elf.startswith(b"\x7fELF"):
        raise ImageBuildError(f"the xz payload of {vmlinuz} is not an ELF kernel")
    target.write_bytes(elf)


def _depends(module: Path) -> list[str]:
    """The ``depends=`` list of a kernel module's ``.modinfo`` section."""
    data = module.read_bytes()
    start = data.find(b"\0depends=")
    if start < 0:
        return []
    end = data.index(b"\0", start + 1)
    text = data[start + len(b"\0depends=") : end].decode()
    return [name.replace("-", "_") for name in text.split(",") if name]


def _load_order(modules: Path) -> list[str]:
    """:data:`INITRAMFS_MODULES` ordered so each module comes after its dependencies.

    :raises ImageBuildError: a dependency is not in the list (the kernel changed).
    """
    order: list[str] = []

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in order:
            return
        path = modules / f"{name}.ko"
        if not path.is_file():
            raise ImageBuildError(
                f"kernel module {name} (needed by {' <- '.join(chain) or 'the initramfs'}) "
                "is not in "
                f"the initramfs list; add it to INITRAMFS_MODULES"
            )
        for dependency in _depends(path):
            visit(dependency, (name, *chain))
        order.append(name)

    for name in INITRAMFS_MODULES:
        visit(name, ())
    return order


def initramfs(kernel_tree: Path, work: Path, target: Path) -> None:
    """busybox-static + the modules + ``images/vm/initramfs-init``, as a gzip'd newc cpio."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    file_tool = shutil.which("file")
    check = subprocess.run([file_tool or "true", "-b", busybox], capture_output=True, check=False)
    if file_tool and b"statically linked" not in check.stdout:
        raise ImageBuildError(f"{busybox} is not statically linked; install busybox-static")
    stage = work / "initramfs"
    (stage / "bin").mkdir(parents=True)
    (stage / "dev").mkdir()
    shutil.copyfile(busybox, stage / "bin" / "busybox")
    os.chmod(stage / "bin" / "busybox", 0o755)  # noqa: S103 — an executable in the initramfs
    shutil.copyfile(
        Path(__file__).resolve().parents[2] / "images" / "vm" / "initramfs-init", stage / "init"
    )
    os.chmod(stage / "init", 0o755)  # noqa: S103 — an executable in the initramfs
    shutil.copytree(kernel_tree / "modules", stage / "modules")
    (stage / "modules.order").write_text("\n".join(_load_order(stage / "modules")) + "\n")
    os.mknod(stage / "dev" / "console", 0o600 | 0o020000, os.makedev(5, 1))
    names = sorted(str(p.relative_to(stage)) for p in stage.rglob("*"))
    archive = run_step(
        "cpio",
        [busybox, "cpio", "-o", "-H", "newc"],
        cwd=stage,
        stdin=("\n".join(names) + "\n").encode(),
    )
    target.write_bytes(gzip.compress(archive, compresslevel=6))
