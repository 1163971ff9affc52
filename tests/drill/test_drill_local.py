"""The drill on a local desktop (Xvfb + openbox + agent on this host): the same code as in a
sandbox, with the real ComputerToolset loop, real mousepad and chromium, verified through the
agent."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.drill.errors import GuestStepError
from orchestrator.drill.guest_steps import GuestSteps
from orchestrator.drill.runner import SLOW_GUEST_TIME_SCALE, guest_time_scale, run_drill
from orchestrator.drill.task import DrillPaths
from orchestrator.provider import SandboxInfo
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
    assert [c.ok for c in result.checks] == [True, True, True]
    assert result.checks[2].name == "stale model-visible screenshots"
    assert "stale model-visible screenshots: 0 of 5 checked" in result.summary()
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
    # every state-changing action was paced on the app and says what it did to the screen
    assert all(a["receipt"]["settled"] for a in actions), actions
    stale = [e for e in events if e["kind"] == "stale_check"]
    assert len(stale) == 5 and not any(e["stale"] for e in stale)
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


def test_a_slow_guest_scales_every_scripted_wait(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    with local_desktop.connect() as client:
        steps = GuestSteps(client, DrillPaths(str(tmp_path / "work"), 18803), time_scale=4.0)
        with pytest.raises(GuestStepError) as waited:
            steps.run({"op": "wait_window", "title": "No Such Window", "timeout_ms": 250})
        assert "within 1000 ms" in str(waited.value)
        with pytest.raises(ValueError, match=r"time_scale must be >= 1\.0"):
            GuestSteps(client, DrillPaths(str(tmp_path / "work"), 18803), time_scale=0.5)
    assert guest_time_scale(replace(_INFO, detail={"accelerator": "tcg"})) == SLOW_GUEST_TIME_SCALE
    assert guest_time_scale(replace(_INFO, detail={"accelerator": "kvm"})) == 1.0
    assert guest_time_scale(_INFO) == 1.0


_INFO = SandboxInfo(
    id="dk-0000000000",
    provider="docker",
    state="running",
    created_at=0.0,
    expires_at=0.0,
    owner_pid=1,
    owner_host="host",
    network="none",
    screen=(1280, 800),
)
