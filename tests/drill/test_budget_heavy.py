"""cubicle's ``compact`` under the real ``ResponsesToolRunner`` with heavy screenshots, and
``--context-budget`` parsing.

The driver here returns screenshots PNG cannot compress (random pixels, ~1 MB as base64 each):
only two fit the byte bound, fewer than the three recent ones cubicle prefers to keep, so the
compactor must drop recent ones too; every request the scripted model received stays within
the bound and the run completes.
"""

from __future__ import annotations

import base64
import io
import os
from typing import Any

import pytest
from openai import ComputerToolset, OpenAI
from openai.lib.responses_tool_runner import ResponsesToolRunner
from openai.types.responses import ResponseComputerToolCallOutputScreenshotParam
from PIL import Image

from cubicle.drivers.scripted_model import ScriptedModel, parse_script
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.modelrun.budget import (
    DEFAULT_BUDGET,
    BudgetSpec,
    measure_input,
    parse_context_budget,
)

VIEW = (640, 400)


class NoiseScreen:
    """A computer driver whose screen is random pixels (every action does nothing)."""

    def screenshot(self) -> ResponseComputerToolCallOutputScreenshotParam:
        image = Image.frombytes("RGB", VIEW, os.urandom(VIEW[0] * VIEW[1] * 3))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
        return {"type": "computer_screenshot", "image_url": url}

    def _nothing(self, action: Any) -> None:
        return None

    click = double_click = drag = keypress = move = scroll = type = wait = _nothing


def test_heavy_screenshots_are_dropped_down_to_the_byte_bound() -> None:
    steps = 6
    turns: list[dict[str, Any]] = [
        {"computer_call": {"actions": [{"type": "move", "x": 10 * i, "y": 10}]}}
        for i in range(steps)
    ]
    script = {"name": "heavy", "model_view": list(VIEW), "turns": [*turns, {"message": "ok"}]}
    bound = 2_500_000
    with ScriptedModel(parse_script(script)) as model:
        client = OpenAI(base_url=model.base_url, api_key="offline", max_retries=0)
        try:
            runner = ResponsesToolRunner(computer=ComputerToolset(NoiseScreen()))
            response = runner.run(
                client,
                {"model": "scripted", "input": "move"},
                max_steps=steps + 1,
                context_budget=BudgetSpec(images=8, bytes=bound).context_budget(),
            )
        finally:
            client.close()
        received = [measure_input(body.get("input")) for body in model.requests]
    assert response.output_text == "ok"
    assert len(received) == steps + 1
    assert all(size <= bound for size, _ in received), received
    # two heavy screenshots do not fit with a third: at most two went in any request
    assert max(images for _, images in received) == 2


def test_parse_context_budget() -> None:
    assert parse_context_budget("off") is None
    assert parse_context_budget("images=5") == BudgetSpec(5, DEFAULT_BUDGET.bytes)
    assert parse_context_budget("bytes=2M,images=3") == BudgetSpec(3, 2 * 1024 * 1024)
    assert parse_context_budget("bytes=512K") == BudgetSpec(DEFAULT_BUDGET.images, 512 * 1024)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("images=0", "images must be at least 1"),
        ("bytes=1000", "bytes=1000 cannot hold one screenshot"),
        ("frames=3", "'frames=3' is not images=N or bytes=M"),
        ("images=three", "images must be a whole number, got 'three'"),
        ("", "'' is not images=N or bytes=M"),
    ],
)
def test_a_bad_context_budget_is_named(text: str, names: str) -> None:
    with pytest.raises(ConfigError, match="--context-budget") as caught:
        parse_context_budget(text)
    assert names in str(caught.value)
