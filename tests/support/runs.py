"""A run (:func:`cubicle.orchestrator.modelrun.run.run`) against a local scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cubicle.drivers.scripted_model import ScriptedModel
from cubicle.orchestrator.modelrun import Desktop
from cubicle.orchestrator.modelrun.responses_model import ResponsesModel
from cubicle.orchestrator.modelrun.run import RunResult, RunSpec, run


def scripted_run(
    desktop: Desktop, model: ScriptedModel, out: Path, *, prompt: str = "", **spec: Any
) -> RunResult:
    """Run ``prompt`` on ``desktop`` with ``model`` (as ``cubicle run`` would with
    ``OPENAI_BASE_URL`` at it); ``spec``: the other :class:`RunSpec` fields."""
    return run(
        desktop,
        RunSpec(out=out, prompt=prompt, **spec),
        ResponsesModel("scripted", api_key="offline", base_url=model.base_url),
    )
