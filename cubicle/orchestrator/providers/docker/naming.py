"""Names of the Docker backend's sandboxes, and their info from what a listing knows.

A sandbox id is ``dk-<10 hex>`` (:data:`ID_PREFIX`); its guest container is named
``cubicle-<id>-creating`` until the sandbox is ready, then ``cubicle-<id>`` (the ready mark,
:func:`guest_name`), or ``cubicle-<id>.pool.<key>`` for an unclaimed warm-pool member
(:mod:`cubicle.orchestrator.pool_marks`). :func:`guest_info` reads a guest container's labels, name
and state as a :class:`~cubicle.orchestrator.provider.SandboxInfo`. Below both
:mod:`.provider` and :mod:`.pool_members` (neither imports the other's way back); imports no engine.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from cubicle.orchestrator import labels as L
from cubicle.orchestrator import pool_marks as marks
from cubicle.orchestrator.provider import SandboxInfo

__all__ = ["BACKEND", "CREATING_SUFFIX", "ID_PREFIX", "guest_info", "guest_name"]

BACKEND: Final = "docker"
"""The backend's name (:attr:`DockerProvider.name`, ``SandboxInfo.provider``)."""
ID_PREFIX: Final = "dk-"
CREATING_SUFFIX: Final = "-creating"
"""The guest container's name ends with this until the sandbox is ready (the ready mark)."""


def guest_name(sandbox_id: str, *, ready: bool) -> str:
    """The guest container's name: ``cubicle-<id>`` once ready, ``cubicle-<id>-creating`` before."""
    return f"cubicle-{sandbox_id}" + ("" if ready else CREATING_SUFFIX)


def guest_info(
    labels: dict[str, str],
    *,
    name: str,
    state: str,
    image: str,
    engine: str,
    described: str,
    claim: tuple[str, dict[str, str]] | None = None,
) -> SandboxInfo | None:
    """The sandbox of a guest container on ``engine``, from what a listing (or a claimer) already
    knows of it — its labels, name, state, image reference — and of its claim marker (how it is
    named in warnings, its labels: the claim's stamp counts); None when the labels do not parse
    (with a warning naming ``described``)."""
    objects = [(described, labels)] + ([claim] if claim else [])
    stamp = marks.effective_stamps(objects, ID_PREFIX).get(labels.get(L.SANDBOX, ""))
    if stamp is None:
        return None
    info = SandboxInfo.from_labels(
        stamp,
        labels,
        provider=BACKEND,
        state=state,
        ready=not name.endswith(CREATING_SUFFIX),
        detail={"container": name, "image": image, "engine": engine},
    )
    if claim is None and marks.is_member_name(name):
        return dataclasses.replace(info, ownership="pool")
    return info
