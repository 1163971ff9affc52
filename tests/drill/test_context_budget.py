"""The context budget and usage totals of a run (``cubicle run``'s
:func:`~cubicle.orchestrator.modelrun.run.run`) on a local desktop (Xvfb + openbox + the
agent) with the scripted model: the real SDK runner, real screenshots, and the requests as the
model received them.

- 30 steps under the default budget: no request the model received carries more than 8 images
  or more input bytes than the bound; the same task with the budget off (full replay) grows by
  one image a step, and the ``model_request`` records say what was sent;
- a byte bound small enough to act before the image cap: every request stays under it;
- usage: exact sums over the responses, or incomplete with the count when one lacked usage.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Literal

import pytest

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.modelrun.budget import DEFAULT_BUDGET, BudgetSpec, measure_input
from cubicle.orchestrator.modelrun.loop import LoopKind
from cubicle.orchestrator.modelrun.run import RunResult
from cubicle.orchestrator.trajectory import read_trajectory
from cubicle.orchestrator.trajectory.report import render_report
from tests.drill.desktop import LocalDesktop
from tests.support.runs import scripted_run

pytestmark = [pytest.mark.x11, pytest.mark.slow]

STEPS = 30


def _moves(steps: int) -> list[dict[str, Any]]:
    return [
        {"computer_call": {"actions": [{"type": "move", "x": 40 + 30 * i, "y": 60 + 15 * i}]}}
        for i in range(steps)
    ]


def _run(
    desktop: LocalDesktop,
    out: Path,
    turns: list[dict[str, Any]],
    *,
    budget: BudgetSpec | Literal["default"] | None = "default",
    loop: LoopKind = "runner",
) -> tuple[RunResult, list[dict[str, Any]]]:
    script = {"name": "budget", "model_view": [1280, 800], "turns": turns}
    with ScriptedModel(parse_script(script)) as model:
        result = scripted_run(
            desktop,
            model,
            out,
            prompt="move the pointer around",
            loop=loop,
            context_budget=budget,
            max_steps=len(turns) + 1,
            settle=False,
            stall_limit=0,
        )
        assert model.finished, result.error
        return result, list(model.requests)


def _received(requests: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(input bytes, images) of each request as the scripted model received it."""
    return [measure_input(body.get("input")) for body in requests]


def test_thirty_steps_stay_within_the_default_budget_and_full_replay_grows(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    turns = [*_moves(STEPS), {"message": "Moved."}]
    budgeted, sent = _run(local_desktop, tmp_path / "budget", turns)
    assert budgeted.ok, budgeted.error
    received = _received(sent)
    assert len(received) == STEPS + 1
    assert max(images for _, images in received) == DEFAULT_BUDGET.images
    assert all(size <= DEFAULT_BUDGET.bytes for size, _ in received)
    # the recorded model_request events are what the model received, request by request
    events = read_trajectory(tmp_path / "budget")
    recorded = [(e["input_bytes"], e["images"]) for e in events if e["kind"] == "model_request"]
    assert recorded == received
    # compaction dropped batches: the image count fell back below the cap, and the summary of
    # the dropped steps went in front
    falls = [i for i in range(1, len(received)) if received[i][1] < received[i - 1][1]]
    assert falls, received
    first_compacted = sent[falls[0]]["input"]
    assert any("step 1: move 40,60" in str(item.get("content")) for item in first_compacted[:2]), (
        first_compacted[:2]
    )
    run = next(e for e in events if e["kind"] == "run")
    assert run["context_budget"] == DEFAULT_BUDGET.describe()

    full, sent_full = _run(local_desktop, tmp_path / "off", turns, budget=None)
    assert full.ok, full.error
    received_full = _received(sent_full)
    # full replay: request k carries k screenshots
    assert [images for _, images in received_full] == list(range(STEPS + 1))
    assert all(b > a for (a, _), (b, _) in itertools.pairwise(received_full))
    total_budget = sum(images for _, images in received)
    total_full = sum(images for _, images in received_full)
    assert total_full == STEPS * (STEPS + 1) // 2
    assert total_budget * 2 < total_full, (total_budget, total_full)
    off_events = read_trajectory(tmp_path / "off")
    assert next(e for e in off_events if e["kind"] == "run")["context_budget"] == "off"
    assert [e["images"] for e in off_events if e["kind"] == "model_request"] == list(
        range(STEPS + 1)
    )


def test_a_byte_bound_compacts_before_the_image_cap(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    turns = [*_moves(12), {"message": "Moved."}]
    full, sent_full = _run(local_desktop, tmp_path / "off", turns, budget=None)
    assert full.ok, full.error
    sizes = _received(sent_full)
    # a bound of about four screenshots' bytes, well before 8 images
    per_shot = (sizes[-1][0] - sizes[0][0]) // (len(sizes) - 1)
    bound = max(64 * 1024, sizes[0][0] + 4 * per_shot)
    result, sent = _run(
        local_desktop, tmp_path / "bytes", turns, budget=BudgetSpec(images=8, bytes=bound)
    )
    assert result.ok, result.error
    received = _received(sent)
    assert all(size <= bound for size, _ in received), (bound, received)
    assert max(images for _, images in received) < 8


USAGE: list[dict[str, Any]] = [
    {"input_tokens": 1000, "output_tokens": 20, "total_tokens": 1020},
    {
        "input_tokens": 1500,
        "output_tokens": 30,
        "total_tokens": 1530,
        "input_tokens_details": {"cached_tokens": 900},
        "output_tokens_details": {"reasoning_tokens": 12},
    },
    {"input_tokens": 2000, "output_tokens": 7, "total_tokens": 2007},
]


def _usage_turns(usage: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    turns = [*_moves(len(usage) - 1), {"message": "Done."}]
    return [{**turn, "usage": u} for turn, u in zip(turns, usage, strict=True)]


@pytest.mark.parametrize("loop", ["runner", "toolset"])
def test_usage_totals_are_exact_sums(
    local_desktop: LocalDesktop, tmp_path: Path, loop: LoopKind
) -> None:
    result, _ = _run(local_desktop, tmp_path / "run", _usage_turns(list(USAGE)), loop=loop)
    assert result.ok, result.error
    end = next(e for e in read_trajectory(tmp_path / "run") if e["kind"] == "end")
    assert end["usage"] == {
        "input_tokens": 4500,
        "output_tokens": 57,
        "total_tokens": 4557,
        "cached_tokens": 900,
        "reasoning_tokens": 12,
        "requests": 3,
        "incomplete": False,
        "requests_without_usage": 0,
    }
    assert result.usage == end["usage"]
    html = render_report(tmp_path / "run")
    assert "4557" in html and "incomplete" not in html.lower()


def test_a_response_without_usage_makes_the_totals_incomplete_with_the_count(
    local_desktop: LocalDesktop, tmp_path: Path
) -> None:
    usage: list[dict[str, Any] | None] = [USAGE[0], None, USAGE[2]]
    result, _ = _run(local_desktop, tmp_path / "run", _usage_turns(usage))
    assert result.ok, result.error
    end = next(e for e in read_trajectory(tmp_path / "run") if e["kind"] == "end")
    assert end["usage"]["incomplete"] is True
    assert end["usage"]["requests_without_usage"] == 1
    assert end["usage"]["requests"] == 3
    assert (end["usage"]["input_tokens"], end["usage"]["total_tokens"]) == (3000, 3027)
    html = render_report(tmp_path / "run")
    assert "incomplete" in html.lower() and "1 request" in html
