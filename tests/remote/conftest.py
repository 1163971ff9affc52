"""Fixtures of the remote-engine tests: a second Docker engine this process shares no file with
through cubicle (:mod:`tests.remote.enginebox`), reached over ``tcp://`` with TLS and ``ssh://``.

- ``box`` (session): the engine box, started once, removed at the end — the session fails if
  anything of it is left; boxes of killed earlier runs are swept first.
- ``remote_image`` (session): the guest image, sent to the box by ``cubicle image push --engine``
  over TLS (the box starts empty: no image, no registry).
- ``remote`` (per test, parametrized ``tls`` / ``ssh``): how to reach the box — the engine URL
  and the environment a cubicle process needs (``DOCKER_CERT_PATH`` for TLS; a ``HOME`` whose
  ``.ssh`` has the box's key and host key for ssh; ``XDG_STATE_HOME`` in the box's folder for the
  engine book), applied to this process for the test and passed to CLI subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import docker
import pytest

from cubicle.orchestrator.providers import DOCKER_ENGINE_ENV
from cubicle.orchestrator.providers.docker.engine import Engine, connect
from tests.remote.enginebox import EngineBox, leftovers, sweep_stale
from tests.support.cli import run_cli


@pytest.fixture(scope="session")
def box() -> Iterator[EngineBox]:
    if os.geteuid() != 0:
        pytest.fail("the remote-engine tests start a dockerd in a network namespace: run as root")
    sweep_stale()
    with EngineBox() as started:
        yield started
    left = leftovers(started.name, started.folder, started.host_if)
    assert not left, f"the engine box left {left}"


@dataclass
class Remote:
    """One way to reach the box."""

    transport: str
    url: str
    env: dict[str, str]
    box: EngineBox

    @property
    def engine(self) -> Engine:
        return Engine.parse(self.url, cert_path=self.env.get("DOCKER_CERT_PATH"))

    @property
    def client(self) -> docker.DockerClient:
        """cubicle's own connection to the box (the one the provider uses)."""
        return connect(self.engine)

    def cli(self, *args: str, timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
        """``python -m cubicle.orchestrator.cli ARGS`` with this transport's environment (no
        ``--engine`` added: pass it where the test means to)."""
        return run_cli(*args, timeout=timeout, env=self.env)


def _env(box: EngineBox, transport: str) -> dict[str, str]:
    env = {"XDG_STATE_HOME": str(box.folder / "state")}
    if transport == "tls":
        env["DOCKER_CERT_PATH"] = str(box.client_tls)
    else:
        env["HOME"] = str(box.ssh_home)
    return env


@pytest.fixture(scope="session")
def remote_image(box: EngineBox, docker_image: str) -> str:
    """The guest image, pushed to the box over TLS through the engine API (timed)."""
    tls = Remote("tls", box.tcp_url, _env(box, "tls"), box)
    started = time.monotonic()
    done = tls.cli("image", "push", "--engine", box.tcp_url, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    print(f"image push to the box: {time.monotonic() - started:.1f} s\n{done.stdout}")
    return docker_image


@pytest.fixture(params=["tls", "ssh"])
def remote(
    request: pytest.FixtureRequest,
    box: EngineBox,
    remote_image: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Remote:
    transport: str = request.param
    env = _env(box, transport)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    url = box.tcp_url if transport == "tls" else box.ssh_url
    return Remote(transport, url, env, box)


@pytest.fixture
def on_remote(remote: Remote, monkeypatch: pytest.MonkeyPatch) -> Remote:
    """``remote``, named as this process's engine (``CUBICLE_DOCKER_HOST``) for the test."""
    monkeypatch.setenv(DOCKER_ENGINE_ENV, remote.url)
    return remote


@pytest.fixture
def on_tls(box: EngineBox, remote_image: str, monkeypatch: pytest.MonkeyPatch) -> Remote:
    """The box over TLS only, as this process's engine (for engine-side behaviour such as gc,
    where the transport does not matter)."""
    env = _env(box, "tls")
    for key, value in {**env, DOCKER_ENGINE_ENV: box.tcp_url}.items():
        monkeypatch.setenv(key, value)
    return Remote("tls", box.tcp_url, env, box)
