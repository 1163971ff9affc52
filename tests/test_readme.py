"""The README's Python API example runs as printed, against a real Docker sandbox."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import docker
import pytest

from cubicle.orchestrator import labels as L

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def python_api_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## The Python API", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README's Python API section has no python code block"
    return match.group(1)


@pytest.mark.docker
@pytest.mark.slow
def test_the_python_api_example_runs_and_maps_coordinates(docker_image: str) -> None:
    engine = docker.from_env()
    # this process's sandboxes only: other checkouts may run sandboxes on the same engine
    mine: dict[str, str | list[str] | bool] = {"label": [L.SANDBOX, f"{L.OWNER_PID}={os.getpid()}"]}
    before = {c.id for c in engine.containers.list(all=True, filters=mine)}
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(python_api_example(), str(README), "exec"), {"__name__": "readme"})
    lines = output.getvalue().splitlines()
    assert lines[0] == "Done."
    # the click at model (512, 320) was approved and mapped to screen (640, 400)
    assert "action click True ((640, 400),)" in lines
    after = {c.id for c in engine.containers.list(all=True, filters=mine)}
    engine.close()
    assert after <= before, "the README example left its sandbox behind"
