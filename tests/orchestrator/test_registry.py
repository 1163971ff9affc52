"""The provider registry and ids → backends."""

from __future__ import annotations

import pytest

from cubicle.orchestrator.errors import ConfigError, SandboxNotFound
from cubicle.orchestrator.providers import PROVIDERS, backend_of, get_provider
from cubicle.orchestrator.providers.docker.provider import DockerProvider


def test_get_provider_by_name() -> None:
    assert isinstance(get_provider("docker"), DockerProvider)


def test_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown backend 'podman'; known backends: docker, vm"):
        get_provider("podman")


def test_a_provider_whose_module_is_missing_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PROVIDERS, "ghost", "cubicle.orchestrator.providers.ghost:GhostProvider")
    with pytest.raises(
        ConfigError,
        match=r"backend .ghost. is not available: its module "
        r"cubicle\.orchestrator\.providers\.ghost",
    ):
        get_provider("ghost")


def test_ids_carry_their_backend() -> None:
    assert backend_of("dk-0123456789") == "docker"
    assert backend_of("vm-0123456789") == "vm"
    with pytest.raises(SandboxNotFound, match="'xx-1' is not a cubicle sandbox id"):
        backend_of("xx-1")
