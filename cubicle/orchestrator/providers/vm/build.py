"""Build the VM guest image from Debian packages: a read-only base qcow2, a PVH ``vmlinux`` and a
tiny busybox initramfs (see shared/reference/vm-lab.md for why each piece is what it is).

Contents are those of the Docker guest, from the same inputs
(:mod:`cubicle.orchestrator.providers.guest_build`: mirror, package list, desktop, wheelhouse): the
packages of ``images/guest-packages.txt``, the user ``cubicle`` (uid 1000), the desktop of
``images/desktop`` (openbox, the tint2 panel) and the agent installed from a wheelhouse into
``/opt/cubicle/venv``. VM-only pieces live in ``images/vm/``:
the PID 1 script (``cubicle-init``), the reaper, the initramfs ``/init`` and the ``provision``
script that turns a debootstrapped rootfs into the guest (shared with the Vagrant box, which is
made from this disk).

Boot pieces: x86-64 boots ``vmlinux`` (the ELF inside the bzImage's xz payload) through QEMU's PVH
entry, skipping the kernel's self-decompression (seconds under TCG); arm64 boots Debian's gzip'd
``Image`` directly once gunzipped. The initramfs is 2 MB instead of Debian's 35 MB (no udev), see
shared/reference/vm-lab.md section 1.

Slow intermediate results are cached: the debootstrapped+apt-installed rootfs
(``rootfs/<packages hash>.tar``) and the extracted kernel (``kernel/<package>/``). The result is
named by :func:`cubicle.orchestrator.providers.vm.image.image_ref`. Runs as root (debootstrap,
chroot). Subprocesses take argument lists only.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from cubicle.orchestrator.errors import ImageBuildError, ImageMissing
from cubicle.orchestrator.hostdirs import host_folder
from cubicle.orchestrator.provider import ExecResult, Progress
from cubicle.orchestrator.providers import guest_build
from cubicle.orchestrator.providers.guest_build import DEBIAN_MIRROR, REPO_ROOT, SUITE
from cubicle.orchestrator.providers.vm import host_tools
from cubicle.orchestrator.providers.vm.domain import AARCH64_MACHINES
from cubicle.orchestrator.providers.vm.files import HOME_MODE
from cubicle.orchestrator.providers.vm.image import (
    RECIPE_VERSION,
    VmImage,
    guest_packages,
    image_ref,
    load_image,
    vm_home,
)

__all__ = [
    "FONT_CACHE_PROBE",
    "INITRAMFS_MODULES",
    "KERNEL_META_PACKAGE",
    "build",
    "check_font_caches",
    "font_caches",
    "initramfs",
    "kernel",
    "provision_source",
    "run_step",
    "unsigned_module",
]

DISK_HEADROOM = 1.25
DISK_EXTRA_MB = 384
"""The ext4 base is the rootfs size x headroom + this much free space (MiB) for the guest."""

KERNEL_META_PACKAGE = (
    "linux-image-arm64" if platform.machine() in AARCH64_MACHINES else "linux-image-amd64"
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


def _load_groups(modules: Path) -> list[list[str]]:
    """:data:`INITRAMFS_MODULES` in groups that load at once: each group is a set of modules that
    depend on one another (a connected part of the dependency graph), ordered so each module
    comes after its dependencies; no module of a group needs one of another group. The guest's
    boot vCPUs then share the loading (ext4 and its helpers beside the virtio drivers).

    :raises ImageBuildError: a dependency is not in the list (the kernel changed).
    """
    order: list[str] = []
    depends: dict[str, list[str]] = {}

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
        depends[name] = _depends(path)
        for dependency in depends[name]:
            visit(dependency, (name, *chain))
        order.append(name)

    for name in INITRAMFS_MODULES:
        visit(name, ())
    group_of = {name: {name} for name in order}
    for name in order:
        for dependency in depends[name]:
            joined = group_of[name] | group_of[dependency]
            for member in joined:
                group_of[member] = joined
    groups: list[list[str]] = []
    for name in order:
        if name == min(group_of[name], key=order.index):
            groups.append([member for member in order if member in group_of[name]])
    return groups


MODULE_SIGNATURE_MAGIC = b"~Module signature appended~\n"
"""How a signed kernel module ends: ``<module><signature><struct module_signature><magic>``."""
_SIGNATURE_INFO_SIZE = 12
"""``struct module_signature``: 5 bytes of algorithm ids and lengths, 3 of padding, and the
signature's length (big-endian u32)."""


def unsigned_module(data: bytes, name: str) -> bytes:
    """``data`` (a kernel module) without its appended signature; unchanged if it has none.

    The initramfs loads Debian's modules unsigned: the guest kernel then verifies nothing as it
    loads them (a SHA-256 of each file and an RSA check, ~0.4 s of a cold boot's single vCPU
    under TCG for these 2.8 MB). The modules were verified when apt downloaded the kernel
    package, and the initramfs is as much the host's as the kernel it boots with; the kernel
    enforces no signature (no ``module.sig_enforce``, no lockdown without Secure Boot).

    :raises ImageBuildError: the trailer names a signature longer than the file (``name``
        says which module).
    """
    if not data.endswith(MODULE_SIGNATURE_MAGIC):
        return data
    info_end = len(data) - len(MODULE_SIGNATURE_MAGIC)
    info = data[info_end - _SIGNATURE_INFO_SIZE : info_end]
    signature_size = int.from_bytes(info[8:12], "big")
    module_end = info_end - _SIGNATURE_INFO_SIZE - signature_size
    if len(info) != _SIGNATURE_INFO_SIZE or module_end <= 0:
        raise ImageBuildError(
            f"kernel module {name}: its signature trailer names {signature_size} bytes of "
            f"signature, more than the {len(data)}-byte file holds"
        )
    return data[:module_end]


def initramfs(kernel_tree: Path, work: Path, target: Path) -> None:
    """busybox-static + the modules (:func:`unsigned_module`) + ``images/vm/initramfs-init``,
    as a gzip'd newc cpio."""
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
    shutil.copyfile(REPO_ROOT / "images" / "vm" / "initramfs-init", stage / "init")
    os.chmod(stage / "init", 0o755)  # noqa: S103 — an executable in the initramfs
    (stage / "modules").mkdir()
    for module in sorted((kernel_tree / "modules").glob("*.ko")):
        (stage / "modules" / module.name).write_bytes(
            unsigned_module(module.read_bytes(), module.name)
        )
    # one line per group of modules that depend on one another, each in load order
    groups = _load_groups(stage / "modules")
    (stage / "modules.order").write_text("".join(" ".join(group) + "\n" for group in groups))
    os.mknod(stage / "dev" / "console", 0o600 | 0o020000, os.makedev(5, 1))
    names = sorted(str(p.relative_to(stage)) for p in stage.rglob("*"))
    archive = run_step(
        "cpio",
        [busybox, "cpio", "-o", "-H", "newc"],
        cwd=stage,
        stdin=("\n".join(names) + "\n").encode(),
    )
    target.write_bytes(gzip.compress(archive, compresslevel=6))


# --------------------------------------------------------------------------- steps


@contextmanager
def _mounted_proc(rootfs: Path) -> Iterator[None]:
    """``proc`` mounted in the rootfs for a chroot (apt, dpkg triggers); always unmounted."""
    target = rootfs / "proc"
    run_step("mount proc", ["mount", "-t", "proc", "proc", target])
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
        run_step("unpack rootfs", ["tar", "--numeric-owner", "-xpf", cache, "-C", rootfs])
        return rootfs
    started = time.monotonic()
    progress(f"rootfs: debootstrap {SUITE} minbase from {DEBIAN_MIRROR} (a few minutes)")
    run_step("debootstrap", guest_build.debootstrap_argv(rootfs))
    progress(f"rootfs: apt-get install {len(packages)} packages (--no-install-recommends)")
    sources = rootfs / "etc" / "apt" / "sources.list.d" / guest_build.SECURITY_LIST
    sources.write_text(guest_build.SECURITY_SOURCES)
    shutil.copyfile("/etc/resolv.conf", rootfs / "etc" / "resolv.conf")
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LANG": "C.UTF-8",
    }
    with _mounted_proc(rootfs):
        run_step("apt-get update", ["chroot", rootfs, "apt-get", "update", "-q"], env=env)
        run_step(
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
        run_step("apt-get clean", ["chroot", rootfs, "apt-get", "clean"], env=env)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".tmp{os.getpid()}")
    run_step("cache rootfs", ["tar", "--numeric-owner", "-cpf", partial, "-C", rootfs, "."])
    partial.replace(cache)
    progress(f"rootfs: done in {time.monotonic() - started:.0f} s (cached as {cache.name})")
    return rootfs


def provision_source(staging: Path, progress: Progress, root: Path = REPO_ROOT) -> list[str]:
    """Fill ``staging`` (created), the ``SRC`` folder of ``images/vm/provision``: the init and
    the reaper, what every guest gets (:func:`.guest_build.stage`: package list, desktop,
    security source) and ``wheels/`` (:func:`.guest_build.build_wheelhouse` for this machine).
    Returns the wheels' file names (the manifest records them)."""
    guest_build.build_wheelhouse(
        staging / "wheels", machine=platform.machine(), progress=progress, root=root
    )
    own = {name: root / "images" / "vm" / name for name in ("cubicle-init", "cubicle-reap")}
    guest_build.stage({**guest_build.guest_files(root), **own}, staging)
    return sorted(path.name for path in (staging / "wheels").iterdir())


def _disk(rootfs: Path, work: Path, target: Path) -> None:
    """``mkfs.ext4 -d`` (no loop mount) into a raw file, then convert it to qcow2."""
    used = sum(p.lstat().st_size for p in rootfs.rglob("*"))
    size_mb = int(used * DISK_HEADROOM / 2**20) + DISK_EXTRA_MB
    raw = work / "base.img"
    run_step(
        "mkfs.ext4",
        [
            host_tools.require_tool("mkfs.ext4", needed_for="the VM image's root file system"),
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
    qemu_img = host_tools.require_tool("qemu-img", needed_for="the VM image's base disk")
    run_step("qemu-img convert", [qemu_img, "convert", "-O", "qcow2", raw, target])
    raw.unlink()


SYSTEM_FONT_CACHES = Path("var", "cache", "fontconfig")
"""fontconfig's system cache folder, relative to the guest's root (images/guest-setup ``fonts``
writes it)."""


def font_caches(rootfs: Path) -> dict[str, str]:
    """The guest's fontconfig system caches (:data:`SYSTEM_FONT_CACHES`): file name → SHA-256.
    The manifest records them; :func:`check_font_caches` compares the golden guest's."""
    folder = rootfs / SYSTEM_FONT_CACHES
    if not folder.is_dir():
        return {}
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if path.is_file()
    }


FONT_CACHE_PROBE = r"""
import glob, hashlib, json, os, re, subprocess, tempfile
system = {}
for path in sorted(glob.glob("/var/cache/fontconfig/*")):
    with open(path, "rb") as cache:
        system[os.path.basename(path)] = hashlib.sha256(cache.read()).hexdigest()
written = {}
for path in sorted(glob.glob(os.path.expanduser("~/.cache/fontconfig/*.cache-*"))):
    said = subprocess.run(["fc-cat", "-v", path], stdout=subprocess.PIPE, text=True).stdout
    written[path] = next((line[11:] for line in said.splitlines()
                          if line.startswith("Directory: ")), "?")
with tempfile.TemporaryDirectory() as fresh:
    debug = subprocess.run(["fc-list"], env=dict(os.environ, XDG_CACHE_HOME=fresh, FC_DEBUG="16"),
                           stdout=subprocess.PIPE, text=True, check=True).stdout
    probe = sorted(os.path.basename(p) for p in glob.glob(fresh + "/fontconfig/*.cache-*"))
valid = re.compile(r'FcCacheTimeValid dir "(.*)" cache checksum (\S+) dir checksum (\S+)$')
stale = sorted({m.groups() for m in map(valid.match, debug.splitlines()) if m and m[2] != m[3]})
print(json.dumps({"system": system, "written": written, "stale": stale, "probe": probe}))
"""
"""Run in a booted guest as the desktop user: prints its fontconfig system caches (name →
SHA-256), the caches the desktop's programs wrote in the user's ``~/.cache/fontconfig`` (path →
the font folder it is for, as ``fc-cat`` names it), and what a new ``fc-list`` with a fresh cache
folder judged stale (``FC_DEBUG=16``: the folder, the mtime its system cache recorded and the
folder's) and wrote. fontconfig writes a user cache only for a folder whose system cache it
found stale, after rescanning that folder's fonts."""


def check_font_caches(image: VmImage, run: Callable[[list[str]], ExecResult]) -> None:
    """The image's fontconfig caches held in a booted guest (``run`` runs a program in it, as the
    desktop user: one :data:`FONT_CACHE_PROBE`): the desktop's start wrote no cache in the user's
    home, a new program finds every system cache valid, and the system caches are the ones the
    build wrote (the manifest's ``font_caches``).

    :raises ImageBuildError: naming each cache file and font folder that did not hold.
    """
    done = run(["python3", "-I", "-c", FONT_CACHE_PROBE])
    if done.exit_code != 0:
        raise ImageBuildError(
            f"VM image {image.ref}: the font cache probe failed in its golden guest "
            f"(exit {done.exit_code})",
            log_tail=done.stderr[-2000:],
        )
    seen = json.loads(done.stdout)
    problems = [
        f"the desktop wrote {path} (a rescan of {folder})"
        for path, folder in seen["written"].items()
    ]
    problems += [
        f"the system cache of {folder} is stale: it records the folder's mtime {recorded}, the "
        f"folder's is {actual} (FC_DEBUG=16 fc-list)"
        for folder, recorded, actual in seen["stale"]
    ]
    if seen["probe"]:
        problems.append(f"a new fc-list wrote the caches {', '.join(seen['probe'])}")
    built = image.manifest.get("font_caches")
    if built is not None and seen["system"] != built:
        changed = sorted(
            name
            for name in set(built) | set(seen["system"])
            if built.get(name) != seen["system"].get(name)
        )
        problems.append(
            f"the system caches in /{SYSTEM_FONT_CACHES} are not the build's: {', '.join(changed)}"
        )
    if problems:
        raise ImageBuildError(
            f"VM image {image.ref}: fontconfig's caches did not hold in its golden boot, so every "
            "desktop program would rescan those font folders at each start:\n  "
            + "\n  ".join(problems),
            hint="a font folder's mtime changed after images/guest-setup's fonts step wrote the "
            "caches (or a folder fontconfig reads was not cut to whole seconds); "
            "FC_DEBUG=16 fc-list in a guest names each stale folder",
        )


def build(*, progress: Progress, force: bool = False, home: Path | None = None) -> VmImage:
    """Build the image for the current inputs unless it exists (then return it at once).

    :param force: rebuild even if the image exists (the cached rootfs and kernel are reused).
    :raises ImageBuildError: a step failed (its name, the command and the log tail).
    """
    home = home or vm_home()
    root = REPO_ROOT
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
            f"{home}/images/<ref>/ here (see docs/backends.md, On a Mac)",
        )
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building the VM image needs root (debootstrap, chroot, mkfs.ext4 -d)",
            hint="run: sudo cubicle image build --backend vm",
        )
    for tool in ("debootstrap", "qemu-img", "mkfs.ext4", "dpkg-deb", "apt-get", "tar"):
        if host_tools.find_tool(tool) is None:  # PATH, then /usr/sbin, /sbin, Homebrew kegs
            raise ImageBuildError(
                f"building the VM image needs {tool}, which is not installed",
                hint=host_tools.install_line(tool)
                + " (or run scripts/ensure-host-packages: scripts/host-packages/vm.txt)",
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
        staging = work / "stage"
        wheels = provision_source(staging, progress, root)
        progress("provision: user, init, desktop configuration, agent venv, trim")
        run_step("provision", [root / "images" / "vm" / "provision", rootfs, staging])
        caches = font_caches(rootfs)
        timings["provision_s"] = time.monotonic() - mark
        mark = time.monotonic()
        kernel_package, kernel_tree = kernel(home, progress)
        out = work / "out"
        out.mkdir()
        shutil.copyfile(kernel_tree / "vmlinux", out / "vmlinux")
        initramfs(kernel_tree, work, out / "initrd.img")
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
            "debian_packages": guest_build.debian_packages(rootfs),
            "wheels": wheels,
            "arch": platform.machine(),
            "built_at": time.time(),
            "build_s": round(time.monotonic() - started, 1),
            "timings": {k: round(v, 1) for k, v in timings.items()},
            "base_bytes": (out / "base.qcow2").stat().st_size,
            "font_caches": caches,
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
