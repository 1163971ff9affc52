"""The run's ledger files (cubicle/orchestrator/modelrun/ledger.py) and ``--resume``'s refusals
before any sandbox is touched (cubicle/orchestrator/modelrun/resumable.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from openai.lib.responses_tool_runner import ResponsesToolCheckpoint

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.modelrun.ledger import (
    LEDGER_FILE,
    PENDING_FILE,
    RunLedger,
    load_ledger,
)
from cubicle.orchestrator.modelrun.resumable import RESUME_FILE, reattach

CLICK = {"type": "click", "button": "left", "x": 1, "y": 2}


def _checkpoint(phase: str, revision: int, calls: int, *, attempted: int | None = None) -> Any:
    history: list[dict[str, Any]] = [{"role": "user", "content": "do it"}]
    for n in range(calls):
        history.append({"type": "computer_call", "call_id": f"c{n}", "actions": [CLICK]})
        history.append({"type": "computer_call_output", "call_id": f"c{n}", "output": {}})
    ids = [f"c{n}" for n in range(calls)]
    tried = [f"c{n}" for n in range(attempted if attempted is not None else calls)]
    return cast(
        ResponsesToolCheckpoint,
        {
            "version": 1,
            "run_id": "run-1",
            "revision": revision,
            "phase": phase,
            "max_steps": 10,
            "consumed_requests": calls + 1,
            "tools": [],
            "output_override_names": [],
            "history": history,
            "attempted_call_ids": tried,
            "returned_call_ids": ids,
            "pending_items": [{"type": "computer_call", "call_id": f"c{calls}", "actions": [CLICK]}]
            if phase == "pending"
            else [],
            "returned_outputs": [],
            "final_response": None,
        },
    )


def test_boundaries_and_pending_saves_are_private_and_name_the_uncertain_call(
    tmp_path: Path,
) -> None:
    completed: list[int] = []
    ledger = RunLedger(tmp_path, "run-1", on_turn_completed=lambda: completed.append(1))
    ledger.save(_checkpoint("boundary", 1, 0))
    assert completed == [], "no turn completed yet"
    ledger.save(_checkpoint("boundary", 2, 2))
    assert completed == [1]
    ledger.save(_checkpoint("pending", 3, 2, attempted=3))
    for name in (LEDGER_FILE, PENDING_FILE):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
    saved = load_ledger(tmp_path)
    assert saved.run_id == "run-1" and saved.checkpoint["revision"] == 2
    assert saved.completed_turns == 2 and saved.remaining_steps == 7
    assert saved.uncertain == [{"call_id": "c2", "actions": [CLICK]}]
    ledger.save(_checkpoint("boundary", 4, 3))
    assert not (tmp_path / PENDING_FILE).exists()
    assert load_ledger(tmp_path).uncertain == []


def test_a_finished_run_and_a_folder_without_ledger_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no ledger \(ledger.json\)"):
        load_ledger(tmp_path)
    ledger = RunLedger(tmp_path, "run-1")
    ledger.save(_checkpoint("boundary", 1, 1))
    ledger.save(_checkpoint("final", 2, 1))
    with pytest.raises(ConfigError, match="already ended"):
        load_ledger(tmp_path)


def _resume_file(folder: Path, command: str, loop: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"command": command, "sandbox": "dk-0123", "backend": "docker"}
    (folder / RESUME_FILE).write_text(json.dumps({**data, "settings": {"loop": loop}}))


def test_resume_refuses_a_toolset_run_by_name(tmp_path: Path) -> None:
    _resume_file(tmp_path, "drill", "toolset")
    with pytest.raises(ConfigError, match="a --loop toolset run cannot be resumed"):
        reattach(tmp_path, "drill", 60)


def test_resume_refuses_what_is_not_an_interrupted_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"no {RESUME_FILE} there"):
        reattach(tmp_path, "run", 60)
    _resume_file(tmp_path, "drill", "runner")
    with pytest.raises(ConfigError, match="resume it with cubicle drill --resume"):
        reattach(tmp_path, "run", 60)
    RunLedger(tmp_path, "run-1").save(_checkpoint("boundary", 1, 0))
    with pytest.raises(ConfigError, match="never completed a turn"):
        reattach(tmp_path, "drill", 60)
