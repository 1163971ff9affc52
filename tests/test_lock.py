"""The lock (requirements/*.txt, written by `make lock`) is what runs: it agrees with pyproject's
bounds, pins every file by hash, gives the guest the host's versions, and the venv running these
tests holds exactly its versions."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from cubicle.orchestrator.providers.guest_build import GUEST_LOCK, guest_requirements

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ("build", "host", "peers", "guest")
HOST_EXTRAS = ("dev", "vm", "bench", "agents")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def pins(name: str) -> dict[str, tuple[Version, Marker | None, int]]:
    """``requirements/NAME.txt``: package → (version, marker, number of hashes)."""
    found: dict[str, tuple[Version, Marker | None, int]] = {}
    current = None
    for line in (ROOT / "requirements" / f"{name}.txt").read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = canonicalize_name(match[1])
            marker = Marker(match[3]) if match[3] else None
            found[current] = (Version(match[2]), marker, 0)
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            version, marker, hashes = found[current]
            found[current] = (version, marker, hashes + 1)
    return found


def project_requirements(path: Path, extras: tuple[str, ...] = ()) -> list[Requirement]:
    project = tomllib.loads(path.read_text())["project"]
    written = list(project["dependencies"])
    for extra in extras:
        written += project["optional-dependencies"][extra]
    return [Requirement(text) for text in written]


@pytest.mark.parametrize("name", LOCKS)
def test_every_pin_is_exact_and_hashed(name: str) -> None:
    locked = pins(name)
    assert locked, f"requirements/{name}.txt pins nothing"
    unhashed = sorted(package for package, (_, _, hashes) in locked.items() if hashes == 0)
    assert not unhashed, f"requirements/{name}.txt: no hash for {unhashed}"


def test_the_host_lock_is_within_pyprojects_bounds() -> None:
    locked = pins("host")
    for requirement in project_requirements(ROOT / "pyproject.toml", HOST_EXTRAS):
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} is not in requirements/host.txt: run make lock"
        version = locked[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements/host.txt pins {name}=={version}, outside pyproject's {requirement}: "
            "run make lock"
        )


def test_the_guest_runs_the_host_versions() -> None:
    host, guest = pins("host"), pins("guest")
    for requirement in project_requirements(ROOT / "cubicle_guest" / "pyproject.toml"):
        name = canonicalize_name(requirement.name)
        assert name in guest, f"{requirement} is not in requirements/guest.txt: run make lock"
        assert requirement.specifier.contains(guest[name][0])
    for package, (version, _, _) in guest.items():
        assert package in host and host[package][0] == version, (
            f"the guest's {package}=={version} is not the host's {host.get(package)}"
        )
    # the wheelhouse downloads exactly these (and the image's content hash covers the lock)
    assert {canonicalize_name(line.split("==")[0]) for line in guest_requirements()} == set(guest)
    assert (ROOT / GUEST_LOCK).is_file()


def test_this_venv_holds_exactly_the_locked_versions() -> None:
    """What `make test` runs with is the lock (scripts/ensure-venv installs it with hashes)."""
    wrong = []
    for lock in ("build", "host", "peers"):
        for name, (version, marker, _) in pins(lock).items():
            if marker is not None and not marker.evaluate():
                continue
            try:
                installed = Version(importlib.metadata.version(name))
            except importlib.metadata.PackageNotFoundError:
                wrong.append(f"{name}: not installed (locked {version})")
                continue
            if installed != version:
                wrong.append(f"{name}: {installed} installed, {version} locked")
    assert not wrong, "the venv is not the lock (scripts/ensure-venv): " + "; ".join(wrong)
