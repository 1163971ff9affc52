"""Fixtures shared by every test folder.

``docker_image``: the cubicle Docker guest image for the current sources, built once per test
run if missing (a no-op when up to date), and pinned for the whole run through
``CUBICLE_DOCKER_IMAGE`` (so sources edited during the run do not make it "missing"; CLI
subprocesses inherit it). Tests that use it are marked ``docker``; without a Docker engine they
fail with the engine's hint (deselect them with ``-m "not docker"``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cubicle.orchestrator.errors import EngineUnavailable
from cubicle.orchestrator.providers.docker.provider import IMAGE_ENV, DockerProvider


@pytest.fixture(scope="session")
def docker_image() -> Iterator[str]:
    """Reference of the built guest image (``cubicle-guest:<content hash>``)."""
    provider = DockerProvider()
    try:
        ref = provider.build_image(progress=lambda line: print(line, flush=True))
    except EngineUnavailable as exc:
        pytest.fail(f"{exc}\nhint: {exc.hint}")
    patch = pytest.MonkeyPatch()
    patch.setenv(IMAGE_ENV, ref)
    yield ref
    patch.undo()
