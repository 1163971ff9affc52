"""The drill on a local desktop (Xvfb + openbox + agent on this host): the same code as in a
sandbox, with the real ComputerToolset loop, real mousepad and chromium, verified through the
agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.drill.errors import GuestStepError
from orchestrator.drill.guest_steps import GuestSteps
from orchestrator.drill.runner import run_drill
from orchestrator.drill.task import DrillPaths
from orchestrator.trajectory import read_trajectory
from tests.drill.desktop import LocalDesktop

pytestmark = [pytest.mark.x11, pytest.mark.slow]


def test_drill_passes_on_a_local_desktop(local_desktop: LocalDesktop, tmp_path: Path) -> None:
    result = run_drill(
        local_desktop,
        loop="toolset",
        out=tmp_path / "out",
        workdir=str(tmp_path / "work"),
        port=18801,
    )
    assert result.ok, result.summary()
    assert [c.ok for c in result.checks] == [True, True]
    assert (tmp_path / "work" / "note.txt").read_bytes().decode() == result.checks[0].expected
    events = read_trajectory(tmp_path / "out")
    actions = [e for e in events if e["kind"] == "action"]
    clicks = [a for a in actions if a["type"] == "click"]
    # model view 1024x640 of a 1280x800 screen: every click is scaled by 1.25 on its way
    assert clicks and all(
        (round(a["model"]["x"] * 1.25), round(a["model"]["y"] * 1.25))
        == (a["native"]["x"], a["native"]["y"])
        for a in clicks
    )
    approvals = [e for e in events if e["kind"] == "approval"]
    assert [a["subject"] for a in approvals] == ["safety_check"] and approvals[0]["allowed"]
    assert (tmp_path / "out" / "report.html").is_file()


def test_guest_steps_fail_clearly_and_name_what_they_saw(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    with local_desktop.connect() as client:
        steps = GuestSteps(client, DrillPaths(str(tmp_path / "work"), 18802))
        with pytest.raises(GuestStepError) as waited:
            steps.run({"op": "wait_window", "title": "No Such Window", "timeout_ms": 300})
        assert "no window titled like 'No Such Window' within 300 ms; windows seen: [" in str(
            waited.value
        )
        with pytest.raises(GuestStepError) as unknown:
            steps.run({"op": "sleep", "ms": 100})
        assert "sleep: unknown step; known: launch, wait_window, settle" in str(unknown.value)
        with pytest.raises(GuestStepError) as bad:
            steps.run({"op": "settle", "quiet_ms": -1})
        assert "'quiet_ms' must be a non-negative integer, got -1" in str(bad.value)
        assert steps.launched == []
