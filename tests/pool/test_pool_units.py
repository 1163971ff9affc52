"""Warm pools without an engine: names, whose stamp counts, pool records, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cubicle.orchestrator import claims
from cubicle.orchestrator import labels as L
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.pool import registry
from cubicle.orchestrator.pool.claim import claim
from cubicle.orchestrator.pool.registry import PoolRecord, PoolShape
from cubicle.orchestrator.provider import Provider, SandboxSpec
from tests.orchestrator.conftest import REPO


def _labels(sandbox_id: str, role: L.Role, pid: int, lifetime: str, ttl: float) -> dict[str, str]:
    return L.create_labels(
        sandbox_id,
        role,
        owner=L.Owner(pid, 7, "host"),
        ttl_s=ttl,
        lifetime="detached" if lifetime == "detached" else "owned",
        network="none",
        screen=(800, 600),
    )


def test_member_names_carry_the_pool_key() -> None:
    name = marks.member_name("dk-0123456789", "abcdef012345")
    assert name == "cubicle-dk-0123456789.pool.abcdef012345"
    assert marks.member_key(name) == "abcdef012345"
    assert marks.member_key("/" + name) == "abcdef012345"
    for other in ("cubicle-dk-0123456789", "cubicle-dk-01-creating", "x.pool.ABCDEF012345"):
        assert marks.member_key(other) is None
    with pytest.raises(ValueError, match="not a pool key"):
        marks.member_name("dk-01", "../etc")


def test_a_claim_markers_stamp_wins_whatever_the_order() -> None:
    member = _labels("dk-aa", "guest", 11, "detached", 100)
    network = _labels("dk-aa", "network", 11, "detached", 100)
    claim = _labels("dk-aa", "claim", 22, "owned", 5000)
    other = _labels("dk-bb", "guest", 33, "owned", 100)
    for order in ([member, claim, network, other], [claim, network, member, other]):
        stamps = marks.effective_stamps([("obj", labels) for labels in order], "dk-")
        assert stamps["dk-aa"].owner.pid == 22
        assert stamps["dk-aa"].lifetime == "owned"
        assert stamps["dk-aa"].expires_at == pytest.approx(time.time() + 5000, abs=5)
        assert stamps["dk-bb"].owner.pid == 33
    unclaimed = marks.effective_stamps([("obj", member), ("obj", network)], "dk-")
    assert unclaimed["dk-aa"].lifetime == "detached" and unclaimed["dk-aa"].owner.pid == 11


def test_a_malformed_claim_marker_is_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    member = _labels("dk-aa", "guest", 11, "detached", 100)
    bad = {**_labels("dk-aa", "claim", 22, "owned", 5000), L.EXPIRES_AT: "soon"}
    stamps = marks.effective_stamps([("the marker", bad), ("member", member)], "dk-")
    assert stamps["dk-aa"].owner.pid == 11
    assert "skipping the marker" in caplog.text and "soon" in caplog.text


def _shape(**changes: object) -> PoolShape:
    base = SandboxSpec(screen=(1000, 700), cpus=1.0)
    shape = PoolShape.of("docker", "", "cubicle-guest:abc", base)
    return PoolShape(**{**shape.__dict__, **changes})


def test_every_part_of_the_shape_is_in_the_key() -> None:
    keys = {
        _shape().key,
        _shape(screen=(1000, 701)).key,
        _shape(network="open").key,
        _shape(image="cubicle-guest:def").key,
        _shape(engine="tcp://other:2376").key,
        _shape(cpus=2.0).key,
        _shape(memory_mb=1024).key,
        _shape(pids_limit=10).key,
        _shape(backend="vm").key,
    }
    assert len(keys) == 9
    assert _shape().key == _shape().key and len(_shape().key) == 12


def test_records_round_trip_and_has_pools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.DIR_ENV, str(tmp_path / "pools"))
    assert not registry.has_pools(), "no folder yet: no pools, and nothing created"
    assert not (tmp_path / "pools").exists()
    record = PoolRecord(shape=_shape(), size=3, expires_at=1234.5)
    registry.write(record)
    assert registry.has_pools()
    assert registry.read(record.key) == record
    assert registry.records() == [record]
    assert (tmp_path / "pools" / f"{record.key}.json").stat().st_mode & 0o777 == 0o600
    registry.remove(record.key)
    assert registry.read(record.key) is None and not registry.has_pools()
    with pytest.raises(ConfigError, match="not a pool key"):
        registry.read("../../etc/passwd")


def test_the_filler_lock_is_exclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.DIR_ENV, str(tmp_path))
    key = _shape().key
    with registry.fill_lock(key, wait_s=0) as held:
        assert held
        assert not registry.lock_free(key)
        with registry.fill_lock(key, wait_s=0.1) as second:
            assert not second
    assert registry.lock_free(key)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["0"], "at least 1 member"),
        (["2", "--ttl", "30"], "too short"),
        (["2", "--backend", "vm", "--cpus", "999"], "more vCPUs than this host's"),
        (["2", "--size", "10x10"], "outside 320x200"),
    ],
)
def test_bad_fill_requests_are_refused_naming_the_problem(
    args: list[str], says: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cubicle.orchestrator.cli", "pool", "fill", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, registry.DIR_ENV: str(tmp_path)},
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert says in result.stderr, result.stderr
    assert not list(tmp_path.glob("*.json")), "a refused pool was recorded"


def test_the_pool_claimer_is_found_by_name_and_others_can_register() -> None:
    def mine(_provider: Provider, _spec: SandboxSpec) -> claims.Claim | None:
        return None

    assert claims.claimers()[0] is claim
    claims.register(mine)
    try:
        assert claims.claimers() == [claim, mine]
    finally:
        claims.unregister(mine)
    assert mine not in claims.claimers()


def test_an_absent_claimer_plugin_is_skipped_and_a_broken_one_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claims, "_plugins", None)
    monkeypatch.setattr(claims, "PLUGINS", ("cubicle_absent_plugin.claim:claim",))
    assert claims.claimers() == []
    (tmp_path / "cubicle_broken_claimer.py").write_text("import cubicle_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(claims, "_plugins", None)
    monkeypatch.setattr(claims, "PLUGINS", ("cubicle_broken_claimer:claim",))
    with pytest.raises(ImportError, match="cubicle_absent_dependency"):
        claims.claimers()


def test_sandbox_imports_nothing_of_the_pool() -> None:
    code = (
        "import sys, cubicle.orchestrator.sandbox\n"
        "print(sorted(m for m in sys.modules if m.startswith('cubicle.orchestrator.pool')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_the_pool_package_imports_no_backend() -> None:
    """Each backend's members are behind ``Provider.pool_members()``: ``pool/`` reaches a backend
    only through the provider interface and the registry's ``get_provider``, lazily or not."""
    from tests.test_import_cycles import import_graph  # noqa: PLC0415

    graph = import_graph()
    pool = [m for m in graph if m.startswith("cubicle.orchestrator.pool.")]
    assert "cubicle.orchestrator.pool.admin" in pool
    backends = ("cubicle.orchestrator.providers.docker", "cubicle.orchestrator.providers.vm")
    found = sorted(f"{m} imports {t}" for m in pool for t in graph[m] if t.startswith(backends))
    assert found == []


def test_a_backend_without_pools_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interface's default ``pool_members`` refuses; the claimer then answers None (a cold
    start) without asking that backend anything else, even with pools recorded."""
    from tests.orchestrator.test_provider_gc import Place  # noqa: PLC0415 — a backend, no pools

    with pytest.raises(ConfigError, match="pools on the place backend are not supported"):
        Place({}).pool_members()
    monkeypatch.setenv(registry.DIR_ENV, str(tmp_path))
    registry.write(PoolRecord(shape=_shape(backend="place"), size=1, expires_at=time.time() + 600))
    assert registry.has_pools()
    assert claim(Place({}), SandboxSpec()) is None
