"""What every guest image is built from, whatever the backend: the Debian mirror, the inputs and
their content hash, and the wheelhouse of the guest agent.

The Docker image (:mod:`cubicle.orchestrator.providers.docker.image`) and the VM image
(:mod:`cubicle.orchestrator.providers.vm.build`) hold the same guest: the Debian packages of
``images/guest-packages.txt`` (bookworm, from :data:`DEBIAN_MIRROR` plus the security archive of
:data:`SECURITY_SOURCES`), the desktop of ``images/desktop`` and the agent installed from a
wheelhouse into ``/opt/cubicle/venv``. Each backend adds its own files (Docker: Dockerfile,
supervisor, egress proxy; VM: init, reaper, initramfs, provision script and its Python build
steps) and says them to :func:`input_hash`, which hashes them with :func:`guest_files`, the
agent's sources, the guest lock and this module (the wheelhouse recipe).

The wheelhouse is built on the host because guests cannot reach PyPI: the agent's dependencies
at the versions and sha256 hashes of the lock :data:`GUEST_LOCK` (``make lock`` writes it at the
host lock's versions, so the guest runs what the host's tests ran), as binary wheels for the
guest's Python (:data:`GUEST_PYTHON`, Debian bookworm's ``python3``) and machine, and the agent's
own wheel. Sources are read from :data:`REPO_ROOT`: the checkout, or an installed wheel's copies.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from cubicle.orchestrator import desktop, shipped
from cubicle.orchestrator.errors import ImageBuildError, ImageMissing
from cubicle.orchestrator.provider import Progress

__all__ = [
    "DEBIAN_MIRROR",
    "GUEST_LOCK",
    "GUEST_PYTHON",
    "LOG_TAIL_LINES",
    "REPO_ROOT",
    "SECURITY_LIST",
    "SECURITY_SOURCES",
    "SUITE",
    "build_wheelhouse",
    "debian_packages",
    "debootstrap_argv",
    "guest_files",
    "guest_packages",
    "guest_requirements",
    "guest_sources",
    "input_hash",
    "run_streaming",
    "stage",
]

REPO_ROOT: Final = shipped.source_root()
"""The folder holding ``images/``, ``requirements/`` and ``cubicle_guest/``: the checkout, or an
installed wheel's copies (:func:`cubicle.orchestrator.shipped.source_root`)."""
SUITE: Final = "bookworm"
DEBIAN_MIRROR: Final = os.environ.get("CUBICLE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
"""Where a base is bootstrapped from (``CUBICLE_DEBIAN_MIRROR`` overrides Debian's own)."""
SECURITY_SOURCES: Final = f"deb http://deb.debian.org/debian-security {SUITE}-security main\n"
"""The APT source line of the security archive every guest installs its packages with."""
SECURITY_LIST: Final = "cubicle-security.list"
"""Its file name, in ``/etc/apt/sources.list.d`` and in a build's staging folder."""
GUEST_LOCK: Final = Path("requirements") / "guest.txt"
"""The guest agent's dependencies, locked (exact versions and hashes; relative to the checkout)."""
GUEST_PYTHON: Final = "3.11"
"""The guest's Python (Debian bookworm's ``python3``): the wheelhouse is built for it."""
MANYLINUX_TAGS: Final = ("manylinux_2_28", "manylinux_2_17", "manylinux2014")
"""Wheel platforms a bookworm guest (glibc 2.36) installs, newest first, without the machine."""
LOG_TAIL_LINES: Final = 40


def guest_packages(extra: Iterable[str] = (), root: Path = REPO_ROOT) -> list[str]:
    """The Debian packages of every guest (``images/guest-packages.txt``, ``#`` comments) plus
    a backend's ``extra``, sorted.

    :raises ImageBuildError: the list cannot be read.
    """
    path = root / "images" / "guest-packages.txt"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ImageBuildError(f"cannot read the guest package list {path}: {exc}") from None
    names = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return sorted({name for name in names if name} | set(extra))


def guest_files(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Files that go into every guest, by their name in a build's staging folder: the package
    list, the set-up steps after it (``guest-setup``) and the desktop's configuration
    (``desktop/<path in images/desktop>``)."""
    files = {
        "guest-packages.txt": root / "images" / "guest-packages.txt",
        "guest-setup": root / "images" / "guest-setup",
    }
    files.update((f"desktop/{name}", path) for name, path in desktop.desktop_files(root).items())
    return files


def guest_sources(root: Path = REPO_ROOT) -> list[Path]:
    """The guest agent's package files: what ``pip wheel ./cubicle_guest`` packs
    (``pyproject.toml`` and the modules of the flat ``cubicle_guest`` package)."""
    guest_dir = root / "cubicle_guest"
    return sorted([guest_dir / "pyproject.toml", *guest_dir.glob("*.py")])


def guest_requirements(root: Path = REPO_ROOT) -> list[str]:
    """The agent's dependencies as the lock :data:`GUEST_LOCK` pins them (``name==version``, with
    a line's environment marker when it has one), in the lock's order.

    :raises ImageMissing: the lock cannot be read or pins nothing (``make lock`` writes it).
    """
    path = root / GUEST_LOCK
    try:
        text = path.read_text()
    except OSError as exc:
        raise ImageMissing(
            f"cannot read the guest agent's lock {path}: {exc.strerror}",
            hint="`make lock` writes the lock (in a checkout)",
        ) from None
    pinned = [
        line.removesuffix("\\").strip()
        for line in text.splitlines()
        if re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*==", line)
    ]
    if not pinned:
        raise ImageMissing(f"the guest agent's lock {path} pins no package (run `make lock`)")
    return pinned


def input_hash(own: Mapping[str, Path], extra: Sequence[str] = (), root: Path = REPO_ROOT) -> str:
    """Content hash (16 hex digits) of an image's inputs: :func:`guest_files`, the backend's
    ``own`` files (name → file; their names must not clash with the shared ones), the agent's
    sources, the lock :data:`GUEST_LOCK` (versions and hashes), this module (the wheelhouse
    recipe) and ``extra`` strings (e.g. the base image id, the machine, a recipe version).

    :raises ImageMissing: an input file is missing (not a checkout), naming them.
    """
    shared = guest_files(root)
    clash = sorted(set(shared) & set(own))
    if clash:
        raise ImageBuildError(f"image inputs named twice: {', '.join(clash)}")
    entries = {
        **shared,
        **own,
        "cubicle/orchestrator/providers/guest_build.py": Path(__file__),
        str(GUEST_LOCK): root / GUEST_LOCK,
    }
    entries.update((f"cubicle_guest/{path.name}", path) for path in guest_sources(root))
    missing = sorted(str(path) for path in entries.values() if not path.is_file())
    if missing:
        raise ImageMissing(
            f"the image sources are not available: {', '.join(missing)}",
            hint="build from a cubicle checkout or an installed cubicle wheel",
        )
    digest = hashlib.sha256()
    for name, path in sorted(entries.items()):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    for text in extra:
        digest.update(text.encode() + b"\0")
    return digest.hexdigest()[:16]


def stage(files: Mapping[str, Path], folder: Path) -> None:
    """Copy ``files`` (name → source) into ``folder`` under their names, and the security
    archive's source line as :data:`SECURITY_LIST`."""
    for name, source in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, folder / name)
    (folder / SECURITY_LIST).write_text(SECURITY_SOURCES)
    os.chmod(folder / SECURITY_LIST, 0o644)  # APT reads it as any user, whatever the umask


def debian_packages(rootfs: Path) -> dict[str, str]:
    """The Debian packages installed in ``rootfs`` and their versions (``dpkg-query`` on its
    package database, without entering it): what an image's manifest records.

    :raises ImageBuildError: dpkg-query failed.
    """
    try:
        done = subprocess.run(
            [
                "dpkg-query",
                f"--admindir={rootfs / 'var' / 'lib' / 'dpkg'}",
                "--show",
                "--showformat=${db:Status-Abbrev}\t${Package}\t${Version}\n",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageBuildError(f"listing the image's Debian packages: {exc}") from None
    if done.returncode != 0:
        raise ImageBuildError(
            f"listing the image's Debian packages: dpkg-query exited {done.returncode}",
            log_tail=done.stderr[-2000:],
        )
    rows = (line.split("\t") for line in done.stdout.splitlines())
    return {row[1]: row[2] for row in rows if len(row) == 3 and row[0].startswith("ii")}


def debootstrap_argv(rootfs: Path) -> list[str]:
    """The command that bootstraps a minimal :data:`SUITE` into ``rootfs`` from the mirror."""
    return ["debootstrap", "--variant=minbase", SUITE, str(rootfs), DEBIAN_MIRROR]


def run_streaming(argv: Sequence[str], progress: Progress, what: str) -> None:
    """Run ``argv``, passing each output line to ``progress``.

    :raises ImageBuildError: it failed (``what``, the exit status and the log's last lines).
    """
    tail: list[str] = []
    try:
        process = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except OSError as exc:
        raise ImageBuildError(f"{what}: cannot run {argv[0]}: {exc}") from None
    with process:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip()
            tail = [*tail[-LOG_TAIL_LINES + 1 :], line]
            progress(f"  {line}")
        status = process.wait()
    if status != 0:
        raise ImageBuildError(f"{what} failed with exit status {status}", log_tail="\n".join(tail))


def build_wheelhouse(
    wheels: Path, *, machine: str, progress: Progress, root: Path = REPO_ROOT
) -> None:
    """Fill ``wheels`` (created) with the agent's locked dependencies (:data:`GUEST_LOCK`, every
    file checked against the lock's hashes) as binary wheels for CPython :data:`GUEST_PYTHON` on
    manylinux ``machine`` (``x86_64``, ``aarch64``) and the agent's own wheel, built from a copy
    of its sources (the checkout is left as it was).

    :raises ImageBuildError: pip failed (its log's last lines), e.g. a file's hash is not the
        lock's.
    """
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    wheels.mkdir(parents=True)
    requirements = guest_requirements(root)
    progress(
        f"wheelhouse: downloading {', '.join(requirements)} for CPython {GUEST_PYTHON} "
        f"manylinux {machine}"
    )
    pip = [sys.executable, "-m", "pip"]
    quiet = ["--quiet", "--disable-pip-version-check"]
    platforms = [arg for tag in MANYLINUX_TAGS for arg in ("--platform", f"{tag}_{machine}")]
    run_streaming(
        [
            *pip,
            "download",
            *quiet,
            "--only-binary=:all:",
            "--python-version",
            GUEST_PYTHON,
            "--implementation",
            "cp",
            *platforms,
            "--dest",
            str(wheels),
            "--require-hashes",
            "--requirement",
            str(root / GUEST_LOCK),
        ],
        progress,
        "downloading the guest's wheels",
    )
    progress("wheelhouse: building the cubicle-guest wheel")
    with tempfile.TemporaryDirectory(prefix="cubicle-guest-src-") as source:
        for path in guest_sources(root):
            shutil.copy2(path, Path(source) / path.name)
        run_streaming(
            [*pip, "wheel", *quiet, "--no-deps", "--wheel-dir", str(wheels), source],
            progress,
            "building the cubicle-guest wheel",
        )
