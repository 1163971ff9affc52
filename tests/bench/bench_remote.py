"""Remote Docker engines: create -> first screenshot and click round trip, local vs tcp:// vs ssh://.

The remote engine is the test box (tests/remote/enginebox.py): a second dockerd in its own
network namespace, reached over a veth pair — the same machine, so the differences are the
transport's (TLS or ssh framing, the relay thread, no shared filesystem), not a network's.
The guest image is sent with ``image push`` first (timed). Paths alternate in rounds so load on
the shared machine hits all alike.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from cubicle.orchestrator.providers import DOCKER_ENGINE_ENV
from cubicle.orchestrator.providers.docker.engine import Engine
from cubicle.orchestrator.providers.docker.provider import IMAGE_ENV, DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from tests.bench.bench_docker import docker_or_skip
from tests.bench.bench_transport import _click_times, _line
from tests.bench.report import Report, Sample
from tests.remote.enginebox import EngineBox

CREATES = 5
CLICKS = 300
ROUNDS = 3


def _apply(values: dict[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@contextlib.contextmanager
def _env(values: dict[str, str | None]) -> Iterator[None]:
    """Set (``None``: unset) environment variables for the block."""
    saved = {key: os.environ.get(key) for key in values}
    try:
        _apply(values)
        yield
    finally:
        _apply(saved)


def _first_screenshot(engine: str | None) -> float:
    with _env({DOCKER_ENGINE_ENV: engine}):
        start = time.perf_counter()
        with Sandbox.create(screen=(1280, 800)) as sandbox:
            sandbox.screenshot()
            return time.perf_counter() - start


def run(report: Report) -> None:
    if os.geteuid() != 0:
        raise Report.Skip("the engine box needs root (network namespaces, a second dockerd)")
    local = docker_or_skip()
    ref = local.build_image(progress=lambda _line: None)
    with (
        EngineBox() as box,
        _env(
            {
                "XDG_STATE_HOME": str(box.folder / "state"),
                "DOCKER_CERT_PATH": str(box.client_tls),
                "HOME": str(box.ssh_home),
                IMAGE_ENV: ref,
            }
        ),
    ):
        started = time.perf_counter()
        DockerProvider(engine=Engine.parse(box.tcp_url)).push_image(progress=lambda _l: None)
        report.line(
            f"image push (docker save -> TLS -> docker load): {time.perf_counter() - started:.1f} s"
        )
        paths = {"local": None, "tcp+tls": box.tcp_url, "ssh": box.ssh_url}
        creates = {name: Sample(f"{name}: create -> first screenshot", []) for name in paths}
        for _ in range(CREATES):
            for name, engine in paths.items():
                creates[name].seconds.append(_first_screenshot(engine))
        for sample in creates.values():
            _line(report, sample)
        clicks = {name: Sample(f"{name}: click round trip", []) for name in paths}
        with contextlib.ExitStack() as stack:
            agents = {}
            for name, engine in paths.items():
                with _env({DOCKER_ENGINE_ENV: engine}):
                    sandbox = stack.enter_context(Sandbox.create(screen=(1280, 800)))
                    agents[name] = stack.enter_context(sandbox.connect())
                    _click_times(agents[name], 10)  # warm-up
            for _ in range(ROUNDS):
                for name, agent in agents.items():
                    clicks[name].seconds += _click_times(agent, CLICKS // ROUNDS)
        for sample in clicks.values():
            _line(report, sample)
        for name in ("tcp+tls", "ssh"):
            report.line(
                f"ratio {name} / local: create {creates[name].p50 / creates['local'].p50:.2f}x, "
                f"click {clicks[name].p50 / clicks['local'].p50:.2f}x (p50)"
            )
