"""cubicle serve: 20 concurrent sessions, create -> environment ready, and the memory they use.

Ours: 20 threads each ``client.beta.agents.sessions.create`` then follow the session's events
until ``agent.session.environment.ready`` (through the real openai client and a real server).
Baseline: 20 threads each ``Sandbox.create`` directly (the same sandboxes, no API). Memory: the
server process's RSS and the sandboxes' containers (cgroup usage) once all are ready.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.sandbox import Sandbox
from tests.bench.report import Report, Sample
from tests.serve.support import DRILL_ENV
from tests.support.serve_process import Server, start_server

SESSIONS = 20


def _concurrently(fn: Callable[[int], float]) -> list[float]:
    results: list[float] = [0.0] * SESSIONS
    errors: list[BaseException] = []

    def one(index: int) -> None:
        try:
            results[index] = fn(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(SESSIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _containers_mb(engine: docker.DockerClient, owner_pid: int) -> float:
    total = 0
    for container in engine.containers.list(filters={"label": f"{L.OWNER_PID}={owner_pid}"}):
        stats: Any = container.stats(stream=False)
        total += int(stats.get("memory_stats", {}).get("usage", 0))
    return total / (1024 * 1024)


def _ours(server: Server, report: Report, engine: docker.DockerClient) -> Sample:
    client = server.client()
    ids: list[str] = []

    def one(_index: int) -> float:
        start = time.perf_counter()
        session = client.beta.agents.sessions.create(
            environment=DRILL_ENV, agent={"model": "cubicle-drill"}
        )
        ids.append(session.id)
        with client.beta.agents.sessions.events.stream(session.id) as stream:
            for event in stream:
                if event.type == "agent.session.environment.ready":
                    return time.perf_counter() - start
                if event.type in ("agent.session.environment.failed", "agent.session.failed"):
                    raise RuntimeError(f"session {session.id} failed: {event}")
        raise RuntimeError("the event stream ended")

    try:
        sample = Sample(
            f"serve: {SESSIONS} concurrent create -> environment ready", _concurrently(one)
        )
        report.line(
            f"memory with {SESSIONS} ready sessions: "
            f"server RSS {_rss_mb(server.process.pid):.0f} MiB, "
            f"sandboxes {_containers_mb(engine, server.process.pid):.0f} MiB"
        )
    finally:
        start = time.perf_counter()
        for session_id in ids:
            client.beta.agents.sessions.delete(session_id)
        report.line(f"delete {len(ids)} sessions one by one: {time.perf_counter() - start:.1f} s")
    return sample


def _baseline() -> Sample:
    sandboxes: list[Sandbox] = []
    lock = threading.Lock()

    def one(_index: int) -> float:
        start = time.perf_counter()
        sandbox = Sandbox.create("docker")
        with lock:
            sandboxes.append(sandbox)
        return time.perf_counter() - start

    try:
        return Sample(f"baseline: {SESSIONS} concurrent Sandbox.create", _concurrently(one))
    finally:
        for sandbox in sandboxes:
            sandbox.destroy()


def _line(report: Report, sample: Sample) -> None:
    report.samples.append(sample)
    report.line(
        f"{sample.name:<58} p50 {sample.p50 * 1000:9.0f} ms   p95 {sample.p95 * 1000:9.0f} ms"
        f"   (n={len(sample.seconds)})"
    )


def run(report: Report) -> None:
    try:
        engine = docker.from_env()
        engine.ping()
    except docker.errors.DockerException as exc:
        raise Report.Skip(f"no Docker engine: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="cubicle-bench-serve-") as folder:
        server = start_server(Path(folder) / "data", "--max-sessions", str(SESSIONS))
        try:
            ours = _ours(server, report, engine)
        finally:
            server.stop()
    _line(report, ours)
    base = _baseline()
    _line(report, base)
    report.line(
        f"ratio ours / baseline: {ours.p50 / base.p50:.2f}x (p50; the API's cost over bare creates)"
    )
    engine.close()
