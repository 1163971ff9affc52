"""The base class's ``gc`` (no engine needed): each part of ``gc_scopes`` judges its own
sandboxes with its own ``doomed`` and removes them with its own ``destroy`` — the hook that lets
Docker remove a sandbox on the engine it was found on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from cubicle.orchestrator.provider import (
    AgentStream,
    DoctorCheck,
    Progress,
    Provider,
    SandboxInfo,
    SandboxSpec,
)


class Place(Provider):
    """A backend over one place: its sandboxes and their verdicts, what it destroyed."""

    name: ClassVar[str] = "place"

    def __init__(self, verdicts: dict[str, str | None]) -> None:
        self.verdicts = verdicts
        self.destroyed: list[str] = []

    def doomed(self) -> Iterator[tuple[str, str]]:
        for sandbox_id, reason in sorted(self.verdicts.items()):
            if reason is not None:
                yield sandbox_id, reason

    def remove_objects(self, sandbox_id: str) -> None:
        assert sandbox_id in self.verdicts, f"{sandbox_id} destroyed where it does not live"
        self.destroyed.append(sandbox_id)

    # the rest of the interface: gc must not use it
    def doctor(self) -> list[DoctorCheck]:
        raise AssertionError("gc used doctor")

    def build_image(self, *, progress: Progress, force: bool = False) -> str:
        raise AssertionError("gc used build_image")

    def create(self, spec: SandboxSpec) -> SandboxInfo:
        raise AssertionError("gc used create")

    def validate(self, spec: SandboxSpec) -> None:
        raise AssertionError("gc used validate")

    def default_image(self) -> str:
        raise AssertionError("gc used default_image")

    def open_stream(self, sandbox_id: str, *, timeout: float) -> AgentStream:
        raise AssertionError("gc used open_stream")

    def logs(self, sandbox_id: str, *, tail: int = 50) -> str:
        raise AssertionError("gc used logs")

    def mark_ready(self, sandbox_id: str) -> None:
        raise AssertionError("gc used mark_ready")

    def list(self) -> list[SandboxInfo]:
        raise AssertionError("gc used list")


class Spanning(Place):
    """A backend over several places (like Docker's engines)."""

    def __init__(self, places: list[Place]) -> None:
        super().__init__({})
        self.places = places

    def gc_scopes(self) -> list[Place]:
        return self.places


def test_gc_removes_what_doomed_names_on_the_provider_itself() -> None:
    place = Place({"dk-a": "expired", "dk-b": None, "dk-c": "orphan: owner gone"})
    assert place.gc() == ["dk-a", "dk-c"]
    assert place.destroyed == ["dk-a", "dk-c"]


def test_gc_removes_each_sandbox_in_the_scope_that_found_it() -> None:
    first, second = Place({"dk-a": "expired", "dk-b": None}), Place({"dk-c": "expired"})
    spanning = Spanning([first, second])
    assert spanning.gc() == ["dk-a", "dk-c"]
    assert (first.destroyed, second.destroyed, spanning.destroyed) == (["dk-a"], ["dk-c"], [])
