"""The clients' typed methods and the protocol's op table name the same operations and
arguments (cubicle_guest/client_ops.py), and a method sends exactly what its arguments say."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import pytest

from cubicle.drivers.async_client import AsyncAgentClient
from cubicle_guest.client import AgentClient
from cubicle_guest.client_ops import AgentOps
from cubicle_guest.protocol import OPS

OWN_SIGNATURE = {"hello"}
"""Operations whose method is the client's own (the handshake also checks the reply)."""


def _arguments(method: Any) -> set[str]:
    names = set(inspect.signature(method).parameters) - {"self", "timeout"}
    return names


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_operation_is_a_method_with_exactly_its_arguments(op: str) -> None:
    for client in (AgentClient, AsyncAgentClient):
        assert callable(getattr(client, op, None)), f"{client.__name__} has no method {op}"
    if op in OWN_SIGNATURE:
        return
    spec = OPS[op]
    expected = set(spec.required) | set(spec.optional) | ({"blob"} if spec.takes_blob else set())
    assert _arguments(getattr(AgentOps, op)) == expected


def test_every_method_is_an_operation() -> None:
    methods = {
        name
        for name, member in vars(AgentOps).items()
        if callable(member) and not name.startswith("_") and name != "call"
    }
    assert methods <= set(OPS)


class Recorder(AgentOps[tuple[str, dict[str, Any], bytes]]):
    def call(
        self,
        op: str,
        args: Mapping[str, Any] | None = None,
        *,
        blob: bytes = b"",
        timeout: float | None = None,
    ) -> tuple[str, dict[str, Any], bytes]:
        return op, dict(args or {}), blob


def test_a_method_sends_its_arguments_and_leaves_out_the_unset_ones() -> None:
    ops = Recorder()
    assert ops.screenshot(format="jpeg", region={"x": 0, "y": 0, "width": 8, "height": 8}) == (
        "screenshot",
        {"format": "jpeg", "region": {"x": 0, "y": 0, "width": 8, "height": 8}},
        b"",
    )
    assert ops.click(3, 4) == ("click", {"x": 3, "y": 4}, b"")
    assert ops.write_file("/tmp/a", b"xy", mkdirs=True) == (
        "write_file",
        {"path": "/tmp/a", "mkdirs": True},
        b"xy",
    )
    assert ops.drag([{"x": 1, "y": 2}]) == ("drag", {"path": [{"x": 1, "y": 2}]}, b"")
