"""Docker sandboxes: image size, create -> screenshot, teardown, idle footprint, capacity,
agent vs exec.

Targets: create -> first screenshot p50 <= 1.5 s; teardown p50 <= 1 s. Peer: one trivial
command through a new ``docker exec`` each time (what several peers do per action) vs our
agent's connection (itself one long-lived ``docker exec`` of the bridge, opened once).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from cubicle.orchestrator.errors import EngineUnavailable, ImageMissing
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from tests.bench.report import Report, Sample

CYCLES = 8
IDLE_SANDBOXES = 3
IDLE_SETTLE_S = 5.0
MIB = 1024 * 1024


def _cycles(report: Report) -> None:
    first_shot, teardown = [], []
    for _ in range(CYCLES):
        started = time.perf_counter()
        sandbox = Sandbox.create(pool=False)  # cold: a pool of this shape would be claimed
        try:
            sandbox.screenshot()
            first_shot.append(time.perf_counter() - started)
        finally:
            stopping = time.perf_counter()
            sandbox.destroy()
            teardown.append(time.perf_counter() - stopping)
    for name, seconds, limit in (
        ("docker: create -> first screenshot", first_shot, 1.5),
        ("docker: teardown (destroy)", teardown, 1.0),
    ):
        sample = Sample(name, seconds)
        report.samples.append(sample)
        report.line(
            f"{name:<58} p50 {sample.p50 * 1000:9.2f} ms   "
            f"p95 {sample.p95 * 1000:9.2f} ms   (n={CYCLES})"
        )
        report.target(sample, limit)


def _memory_and_cpu(provider: DockerProvider, sandbox_id: str) -> tuple[float, float]:
    """Idle cgroup memory (MiB, without page cache) and CPU use (fraction of one core)."""
    container = provider._guest(sandbox_id)
    stats: dict[str, Any] = container.stats(stream=False)  # type: ignore[assignment]
    memory = stats["memory_stats"]
    cache = memory.get("stats", {}).get("inactive_file", memory.get("stats", {}).get("cache", 0))
    used_mib = (memory["usage"] - cache) / MIB
    cpu = (
        stats["cpu_stats"]["cpu_usage"]["total_usage"]
        - stats["precpu_stats"]["cpu_usage"]["total_usage"]
    )
    system = stats["cpu_stats"].get("system_cpu_usage", 0)
    system -= stats["precpu_stats"].get("system_cpu_usage", 0)
    cores = stats["cpu_stats"].get("online_cpus") or os.cpu_count() or 1
    share = (cpu / system) * cores if system > 0 else 0.0
    return used_mib, share


def _mem_available_mib() -> float:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _footprint(report: Report, provider: DockerProvider) -> None:
    sandboxes = []
    available_before = _mem_available_mib()
    try:
        for _ in range(IDLE_SANDBOXES):
            sandboxes.append(Sandbox.create(pool=False))
        time.sleep(IDLE_SETTLE_S)
        figures = [_memory_and_cpu(provider, s.id) for s in sandboxes]
        host_delta = (available_before - _mem_available_mib()) / IDLE_SANDBOXES
    finally:
        for sandbox in sandboxes:
            sandbox.destroy()
    cgroup = statistics.median(m for m, _ in figures)
    memory = max(cgroup, host_delta)
    cpu = statistics.median(c for _, c in figures)
    total_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MIB
    by_memory = int(total_mib * 0.8 // memory) if memory else 0
    report.line(
        f"idle sandbox memory: cgroup (no page cache) median {cgroup:.1f} MiB; host MemAvailable "
        f"drop per sandbox {host_delta:.1f} MiB (n={IDLE_SANDBOXES}, side by side)"
    )
    report.line(f"idle sandbox CPU, median of {IDLE_SANDBOXES}: {cpu * 100:.2f} % of one core")
    report.line(
        f"capacity estimate on this host ({os.cpu_count()} cores, {total_mib / 1024:.1f} GiB): "
        f"~{by_memory} idle sandboxes by memory (80 % of RAM); CPU is the limit once agents act"
        f" (~{max(1, int((os.cpu_count() or 1) / 0.5))} busy at 0.5 core each)"
    )


def _exec_paths(report: Report, provider: DockerProvider) -> None:
    with Sandbox.create() as sandbox:
        with sandbox.connect() as client:
            info = report.measure(
                "agent connection: info op (trivial round trip)",
                client.info,
                repeat=50,
            )
            ours = report.measure(
                "agent connection: exec ['true']",
                lambda: client.exec(["true"]),
                repeat=30,
            )
        peer = report.measure(
            "peer docker exec ['true'] (exec per action)",
            lambda: provider.docker_exec(sandbox.id, ["true"]),
            repeat=30,
        )
        report.ratio(ours, peer)
        report.ratio(info, peer)


def _image_size(report: Report, provider: DockerProvider, ref: str) -> None:
    size = int(provider.client.images.get(ref).attrs["Size"])
    report.line(f"guest image {ref}: {size / 1e6:.0f} MB (uncompressed, all layers)")


def docker_or_skip() -> DockerProvider:
    """The Docker provider, or :class:`Report.Skip` saying why the engine or image is missing."""
    provider = DockerProvider()
    try:
        provider.default_image()
    except (EngineUnavailable, ImageMissing) as exc:
        raise Report.Skip(f"{exc} ({exc.hint})") from None
    return provider


def run(report: Report) -> None:
    provider = docker_or_skip()
    _image_size(report, provider, provider.default_image())
    _cycles(report)
    _exec_paths(report, provider)
    _footprint(report, provider)
