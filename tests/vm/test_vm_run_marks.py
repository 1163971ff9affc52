"""The marks of a VM run folder (:mod:`cubicle.orchestrator.providers.vm.run_marks`; no libvirt
needed): made once, the claim won by exactly one of many racing claimers, never seen
half-written."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cubicle.orchestrator.providers.vm import run_marks

ROUNDS = 150
RACERS = 8


def test_racing_claims_have_exactly_one_winner_every_time(tmp_path: Path) -> None:
    for round_ in range(ROUNDS):
        run = tmp_path / f"vm-{round_:04d}"
        run.mkdir()
        start = threading.Barrier(RACERS)

        def race(racer: int, run: Path = run, start: threading.Barrier = start) -> bool:
            start.wait()
            return run_marks.claim(run, {"io.cubicle.owner-pid": str(racer)})

        with ThreadPoolExecutor(RACERS) as workers:
            wins = list(workers.map(race, range(RACERS)))
        assert wins.count(True) == 1, f"round {round_}: {wins}"
        labels = run_marks.claim_labels(run)
        assert labels == {"io.cubicle.owner-pid": str(wins.index(True))}  # the winner's, whole
        assert sorted(p.name for p in run.iterdir()) == [run_marks.CLAIM]  # no temporary left


def test_a_claim_is_never_read_half_written(tmp_path: Path) -> None:
    big = {f"label-{i}": "x" * 200 for i in range(500)}  # ~100 kB: many writes if not atomic
    seen: list[dict[str, str] | None] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            if (tmp_path / run_marks.CLAIM).exists():
                seen.append(run_marks.claim_labels(tmp_path))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert run_marks.claim(tmp_path, big)
    finally:
        done.set()
        reader.join()
    assert all(labels == big for labels in seen)
    assert json.loads((tmp_path / run_marks.CLAIM).read_text()) == big


def test_marks_are_made_once_and_a_member_names_its_pool(tmp_path: Path) -> None:
    assert run_marks.make_once(tmp_path / run_marks.READY)
    assert not run_marks.make_once(tmp_path / run_marks.READY)
    assert run_marks.member_key(tmp_path) is None
    run_marks.write_member(tmp_path, "0123456789ab")
    run_marks.write_member(tmp_path, "0123456789ab")  # the same pool again: a no-op
    assert run_marks.member_key(tmp_path) == "0123456789ab"
    with pytest.raises(FileExistsError, match="names another pool"):
        run_marks.write_member(tmp_path, "ba9876543210")
    with pytest.raises(FileNotFoundError):
        run_marks.claim(tmp_path / "gone", {})
