"""Agent transport: click round trip over the Docker exec bridge vs a host-local unix socket.

Same run, side by side: a Docker sandbox's agent reached through ``docker exec`` of the stdio
bridge (cubicle_guest/bridge.py, the only way the host reaches a container's agent), and an agent
on a local Xvfb reached on its unix socket (the floor: no engine, no bridge). Target: bridge click
p50 <= 1 ms. Also: opening a connection (one ``docker exec``), and the async client on both.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import anyio

from cubicle.drivers.async_client import AsyncAgentClient, connect_unix_async
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.client import AgentClient
from tests.bench.bench_docker import docker_or_skip
from tests.bench.report import Report, Sample
from tests.support.agent import start_agent
from tests.support.xvfb import Xvfb, XvfbUnavailable

CLICK_TARGET_S = 0.001
CLICKS = 400
ROUNDS = 4
"""The two paths alternate in rounds, so load on the shared machine hits both alike."""


def _click_times(client: AgentClient, repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        client.click(640, 400)
        seconds.append(time.perf_counter() - start)
    return seconds


def _line(report: Report, sample: Sample) -> None:
    report.samples.append(sample)
    report.line(
        f"{sample.name:<58} p50 {sample.p50 * 1000:9.3f} ms   "
        f"p95 {sample.p95 * 1000:9.3f} ms   (n={len(sample.seconds)})"
    )


def _interleaved(report: Report, bridged: AgentClient, local: AgentClient) -> None:
    bridge = Sample("click via docker exec bridge (round trip)", [])
    floor = Sample("click via host-local unix socket (round trip)", [])
    _click_times(bridged, 10)  # warm-up
    _click_times(local, 10)
    for _ in range(ROUNDS):
        bridge.seconds += _click_times(bridged, CLICKS // ROUNDS)
        floor.seconds += _click_times(local, CLICKS // ROUNDS)
    _line(report, bridge)
    _line(report, floor)
    report.line(f"ratio bridge / local socket: {bridge.p50 / floor.p50:.2f}x (p50)")
    report.target(bridge, CLICK_TARGET_S)


async def _async_clicks(report: Report, name: str, client: AsyncAgentClient) -> None:
    async with client:
        for _ in range(5):
            await client.click(640, 400)
        seconds = []
        for _ in range(CLICKS // 2):
            start = anyio.current_time()
            await client.click(640, 400)
            seconds.append(anyio.current_time() - start)
    _line(report, Sample(name, seconds))


def run(report: Report) -> None:
    docker_or_skip()
    if shutil.which("Xvfb") is None:
        raise Report.Skip("Xvfb is not installed (scripts/host-packages/x11.txt)")
    with tempfile.TemporaryDirectory(prefix="cbl-bench-") as scratch:
        try:
            xserver = Xvfb(1280, 800).start()
        except XvfbUnavailable as exc:
            raise Report.Skip(str(exc)) from exc
        try:
            with (
                Sandbox.create() as sandbox,
                start_agent(xserver.display, Path(scratch) / "agent") as agent,
                sandbox.connect() as bridged,
                agent.client() as local,
            ):
                _interleaved(report, bridged, local)
                report.measure(
                    "open a connection: docker exec of the bridge + hello",
                    lambda: sandbox.connect().close(),
                    repeat=10,
                    warmup=1,
                )

                async def both() -> None:
                    await _async_clicks(
                        report, "async click via docker exec bridge", await sandbox.connect_async()
                    )
                    client = await connect_unix_async(agent.socket_path)
                    await client.hello()
                    await _async_clicks(report, "async click via host-local unix socket", client)

                anyio.run(both)
        finally:
            xserver.stop()
