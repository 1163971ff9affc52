"""A real SDK loop (``run_task`` with the scripted model) waits while a person has control of its
Docker sandbox, resumes on release, and its trajectory and report say so."""

from __future__ import annotations

import io
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from playwright.sync_api import Page

from cubicle.drivers import ApproveAll
from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.modelrun.run import RunResult
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.trajectory import read_trajectory
from cubicle.orchestrator.view.control import open_view, set_mode
from tests.support.runs import scripted_run
from tests.view.guest_recorder import GuestRecorder
from tests.view.viewpage import (
    MAX_MAD,
    click_canvas,
    mad,
    open_page,
    presses,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        pause.wait(0.05)


def start_run(
    sandbox: Sandbox, model: ScriptedModel, out: Path, results: list[RunResult], **options: Any
) -> threading.Thread:
    """A run with the scripted model on a thread (its result appended to ``results``)."""
    loop = threading.Thread(
        target=lambda: results.append(
            scripted_run(
                sandbox,
                model,
                out=out,
                safety_policy=ApproveAll(),
                **options,
            )
        )
    )
    loop.start()
    return loop


def test_the_agent_loop_waits_for_the_person_and_the_trajectory_marks_the_handover(
    page: Page, sandbox: Sandbox, recorder: GuestRecorder, tmp_path: Path
) -> None:
    script = parse_script(
        {
            "name": "handover",
            "turns": [
                {
                    "computer_call": {
                        "actions": [{"type": "click", "button": "left", "x": 300, "y": 300}]
                    }
                },
                {"message": "clicked"},
            ],
        }
    )
    out = tmp_path / "run"
    link = open_view(sandbox.id, mode="takeover")
    results: list[RunResult] = []
    with ScriptedModel(script) as model:
        loop = start_run(
            sandbox,
            model,
            out,
            results,
            prompt="click",
            record=(4.0, 44),
        )
        trajectory = out / "trajectory.jsonl"
        wait_until(
            lambda: trajectory.exists() and '"handover"' in trajectory.read_text(),
            60,
            "the run to reach the hand-over gate",
        )
        open_page(page, link, mode="takeover")
        click_canvas(page, 123, 456)  # the person acts ...
        recorder.wait_for(lambda e: e["kind"] == "ButtonPress")
        assert presses(recorder) == [(123, 456)]  # ... the agent does not
        assert loop.is_alive()
        page.click("#toggle")  # give control back
        loop.join(120)
    assert not loop.is_alive()
    [result] = results
    assert result.ok, result.error
    recorder.wait_for(lambda e: e["kind"] == "ButtonPress" and e["root_x"] == 300)
    assert presses(recorder) == [(123, 456), (300, 300)]

    events = read_trajectory(out)
    kinds = [(e["kind"], e.get("state")) for e in events if e["kind"] in ("handover", "action")]
    assert kinds == [("handover", "taken"), ("handover", "released"), ("action", None)]
    released = next(e for e in events if e.get("state") == "released")
    assert released["by"] == "person" and released["held_s"] > 0
    [person] = released["person_actions"]  # the person's click, marked as theirs
    assert (person["kind"], person["button"], person["x"], person["y"]) == ("click", 1, 123, 456)
    report = (out / "report.html").read_text()
    assert 'id="handover"' in report and "a person has control" in report
    assert "click 1 at (123, 456)" in report

    # --record: the video is beside the report, linked, and shows the screen
    [recording] = [e for e in events if e["kind"] == "recording"]
    assert recording["error"] is None and recording["file"] == "recording.mp4"
    assert 'href="recording.mp4"' in report
    assert not (out / "recording-frames").exists()
    last = tmp_path / "last.png"
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-sseof",
            "-0.5",
            "-i",
            str(out / "recording.mp4"),
            "-frames:v",
            "1",
            "-y",
            str(last),
        ],
        check=True,
    )
    _, png = sandbox.screenshot()
    assert mad(Image.open(last), Image.open(io.BytesIO(png))) < MAX_MAD


def test_takeover_on_stall_hands_over_instead_of_stopping(
    sandbox: Sandbox, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    inert = {"type": "click", "button": "left", "x": 1000, "y": 700}
    script = parse_script(
        {
            "name": "stall-then-handover",
            "turns": [
                {"computer_call": {"actions": [inert, inert, inert]}},
                {"computer_call": {"actions": [{"type": "wait"}]}},
                {"message": "resumed"},
            ],
        }
    )
    out = tmp_path / "run"
    results: list[RunResult] = []
    with ScriptedModel(script) as model:
        loop = start_run(
            sandbox,
            model,
            out,
            results,
            prompt="stall",
            stall_limit=3,
            on_stall="takeover",
        )
        trajectory = out / "trajectory.jsonl"

        def handed_over() -> bool:
            return trajectory.exists() and '"taken"' in trajectory.read_text()

        wait_until(lambda: handed_over() or not loop.is_alive(), 90, "the run to hand over")
        assert handed_over() and loop.is_alive(), (
            f"the run did not hand over: {results}; trajectory: "
            + (trajectory.read_text() if trajectory.exists() else "none")
        )
        set_mode(sandbox.id, "view")  # cubicle view ID --release
        loop.join(120)
    [result] = results
    assert result.ok and result.stalled is None, result.error
    assert result.final_message == "resumed"
    events = read_trajectory(out)
    marks = [
        e.get("what") or e.get("state") for e in events if e["kind"] in ("warning", "handover")
    ]
    assert marks == ["stall", "requested", "taken", "released"]
    assert "you have control of " + sandbox.id in capfd.readouterr().err
