"""Fixtures of the eval tests: ``cubicle_containers`` (the containers a process created, by its
owner label) is the drill tests' own."""

from __future__ import annotations

from tests.drill.conftest import cubicle_containers

__all__ = ["cubicle_containers"]
