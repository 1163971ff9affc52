"""docker-py failures become cubicle errors with a hint, in one place; every class is mapped."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import docker.errors
import pytest

from cubicle.orchestrator.errors import EngineUnavailable, ImageMissing
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers.docker.errors import MAPPED, map_docker_errors
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from tests.orchestrator.conftest import REPO


def test_every_docker_exception_is_mapped() -> None:
    foreign = {
        cls
        for _, cls in inspect.getmembers(docker.errors, inspect.isclass)
        if issubclass(cls, docker.errors.DockerException)
    }
    assert foreign - set(MAPPED) == set()


def test_mapping_keeps_the_engine_words() -> None:
    with (
        pytest.raises(ImageMissing, match="image missing while pulling x: no such image") as caught,
        map_docker_errors("pulling x"),
    ):
        raise docker.errors.ImageNotFound("no such image")
    assert caught.value.hint == "build it with: cubicle image build"
    assert isinstance(caught.value.__cause__, docker.errors.ImageNotFound)


def test_missing_engine_is_reported_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    provider = DockerProvider()
    where = re.escape("unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnavailable, match=where) as caught:
        provider.list()
    assert caught.value.hint is not None and "scripts/ensure-docker" in caught.value.hint
    checks = provider.doctor()
    assert [c.ok for c in checks] == [False] and checks[0].fix


def test_cli_exit_codes_for_a_missing_engine() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cubicle.orchestrator.cli", "up"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 3, done.stderr
    assert "hint: start the Docker engine" in done.stderr


@pytest.mark.docker
def test_missing_image_is_reported_with_the_fix(provider: DockerProvider) -> None:
    spec = SandboxSpec(image="cubicle-test-absent:nothing", network=NetworkPolicy.none())
    with pytest.raises(ImageMissing) as caught:
        provider.create(spec)
    assert caught.value.hint == "build it with: cubicle image build"
