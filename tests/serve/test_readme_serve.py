"""docs/serve.md's ``cubicle serve`` example runs as printed against a real server."""

from __future__ import annotations

import contextlib
import io
import re

import docker
import pytest
from openai import OpenAI

from cubicle.orchestrator import labels as L
from tests.orchestrator.support import leftovers
from tests.serve.conftest import TOKEN, Server, engine, server
from tests.test_readme import REPO

__all__ = ["engine", "server"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SERVE_DOC = REPO / "docs" / "serve.md"


def serve_example() -> str:
    section = SERVE_DOC.read_text(encoding="utf-8").split("(`cubicle serve`)", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/serve.md has no python code block"
    return match.group(1)


def test_the_serve_example_runs(server: Server, engine: docker.DockerClient) -> None:
    code = serve_example()
    placeholders = ('"http://127.0.0.1:8377/v1"', '"<the token cubicle serve printed>"')
    for text in placeholders:
        assert text in code
    code = code.replace(placeholders[0], repr(server.base_url)).replace(
        placeholders[1], repr(TOKEN)
    )
    output = io.StringIO()
    namespace: dict[str, object] = {"__name__": "readme"}
    try:
        with contextlib.redirect_stdout(output):
            exec(compile(code, str(SERVE_DOC), "exec"), namespace)
    finally:
        client = namespace.get("client")
        if isinstance(client, OpenAI):
            client.close()
    lines = output.getvalue().splitlines()
    assert "agent.session.requires_action" in lines
    assert "agent.session.turn.output_text.done" in lines
    assert any(line.startswith("computer_use_call ") for line in lines)
    assert leftovers(engine, {L.OWNER_PID: str(server.process.pid)}) == []
