"""Read a container's cgroup files from the host (cgroup v1 or v2), found through its init pid."""

from __future__ import annotations

from pathlib import Path

import docker.models.containers

ROOT = Path("/sys/fs/cgroup")


def cgroup_file(container: docker.models.containers.Container, controller: str, name: str) -> Path:
    """The host path of ``name`` (e.g. ``pids.current``) in the container's ``controller``."""
    container.reload()
    pid = container.attrs["State"]["Pid"]
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return ROOT / controller / path.lstrip("/") / name  # v1: one hierarchy per controller
    for line in lines:
        if line.startswith("0::"):
            return ROOT / line[3:].lstrip("/") / name  # v2: the unified hierarchy
    raise AssertionError(f"no {controller} cgroup for pid {pid}: {lines}")


def stat_field(path: Path, key: str) -> int:
    """One ``key value`` line of a cgroup ``*.stat`` file."""
    for line in path.read_text().splitlines():
        field, _, value = line.partition(" ")
        if field == key:
            return int(value)
    raise AssertionError(f"{path} has no {key!r}: {path.read_text()!r}")


def cpu_seconds(container: docker.models.containers.Container) -> float:
    """CPU time the container's processes used so far (seconds)."""
    legacy = cgroup_file(container, "cpuacct", "cpuacct.usage")
    if legacy.exists():
        return int(legacy.read_text()) / 1e9
    return stat_field(cgroup_file(container, "cpu", "cpu.stat"), "usage_usec") / 1e6
