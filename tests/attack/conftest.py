"""Attack and regression tests (marker ``attack``): each reproduces a hole found by attacking the
sandboxes and asserts the effect that closes it. The Docker fixtures are the orchestrator tests'
(every sandbox destroyed and checked gone, even when a test fails)."""

from __future__ import annotations

from tests.orchestrator.conftest import cli, engine, provider, sandboxes

__all__ = ["cli", "engine", "provider", "sandboxes"]
