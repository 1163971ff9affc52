"""Fixtures of the warm-pool tests: a private pool folder, and pools of a shape no other test
(or engineer) asks for, drained at teardown with every sandbox they gave out checked gone."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from cubicle.orchestrator import labels as L
from cubicle.orchestrator.pool import admin, refill, registry
from cubicle.orchestrator.pool.registry import PoolRecord
from cubicle.orchestrator.provider import Provider, SandboxSpec
from cubicle.orchestrator.providers.docker.provider import DockerProvider
from cubicle.orchestrator.sandbox import Sandbox
from tests.orchestrator.conftest import cli, engine, provider
from tests.orchestrator.support import leftovers

__all__ = ["Pools", "cli", "engine", "pools", "provider"]

# screen heights no one else uses: a pool of this test run is never claimed by another test
_HEIGHTS = itertools.count(611 + os.getpid() % 97 * 3)


class Pools:
    """Pools a test made, and every sandbox id it saw (members and claims)."""

    def __init__(self, provider: Provider, backend: str = "docker") -> None:
        self.provider: Any = provider
        self.backend = backend
        self.records: list[PoolRecord] = []
        self.ids: set[str] = set()

    def spec(self, **changes: object) -> SandboxSpec:
        """A spec of a fresh shape (unique screen height), or with ``changes``."""
        fields: dict[str, object] = {"screen": (1000, next(_HEIGHTS)), "ttl_s": 900.0}
        fields.update(changes)
        return SandboxSpec(**fields)  # type: ignore[arg-type]

    def fill(self, spec: SandboxSpec, size: int) -> PoolRecord:
        record, made = admin.start(self.backend, spec, size, progress=print)
        self.records.append(record)
        self.ids.update(made)
        return record

    def claim(self, spec: SandboxSpec, **kwargs: object) -> Sandbox:
        sandbox = Sandbox.create(self.backend, spec=spec, **kwargs)  # type: ignore[arg-type]
        self.ids.add(sandbox.id)
        return sandbox


@pytest.fixture
def pools(
    provider: DockerProvider,
    engine: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Pools]:
    monkeypatch.setenv(registry.DIR_ENV, str(tmp_path_factory.mktemp("pools")))
    made = Pools(provider)
    yield made
    for record in made.records:
        made.ids.update(admin.drain(record.key))
    assert not refill.refill_pids(), "a refiller outlived its drained pool"
    for sandbox_id in made.ids:
        provider.destroy(sandbox_id)
    left = {i: leftovers(engine, {L.SANDBOX: i}) for i in made.ids}
    left = {i: objects for i, objects in left.items() if objects}
    assert not left, f"pool sandboxes left objects behind: {left}"
