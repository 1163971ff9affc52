"""Claimers: whoever may hand :meth:`cubicle.orchestrator.sandbox.Sandbox.create` a ready sandbox
instead of a cold start (warm pools, :mod:`cubicle.orchestrator.pool`).

A :data:`Claimer` is called with the request's provider and spec; it answers a :class:`Claim`
(a ready, never-used sandbox now owned per the spec) or None (nothing to claim: ``create``
starts one as before). :class:`Claim` is the provider interface's
(:class:`cubicle.orchestrator.provider.Claim`: each backend's pool members make claims), named
here too. ``Sandbox.create(pool=True)`` asks every claimer in turn, the first
:class:`Claim` wins.

Where claimers come from — the design that keeps ``Sandbox`` free of the pool:

- :data:`PLUGINS` names the claimers shipped with cubicle as ``module:attribute`` strings,
  imported on the first ``create`` that asks (the same shape as the CLI's plugin list in
  :mod:`cubicle.orchestrator.cli`). So a library user who never imported
  :mod:`cubicle.orchestrator.pool` still claims from a pool ``cubicle pool fill`` made, and neither
  this module nor
  :mod:`cubicle.orchestrator.sandbox` imports anything of the pool: the pool depends on this
  interface (and on ``Sandbox``, to make its members), never the other way round. A plugin whose
  package is absent is skipped; one that fails to import for another reason raises (a broken pool
  must not silently turn every claim into a cold start).
- :func:`register` adds a claimer at run time (another backend's pool, a test).

Cost without a pool: the pool's claimer answers after one directory read
(:func:`cubicle.orchestrator.pool.registry.has_pools`).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Final

from cubicle.orchestrator.provider import Claim, Provider, SandboxSpec

__all__ = ["PLUGINS", "Claim", "Claimer", "claimers", "register", "unregister"]

Claimer = Callable[[Provider, SandboxSpec], Claim | None]
"""``claimer(provider, spec)``: a :class:`Claim` for a request of ``spec`` on ``provider``, or
None. It never returns a used sandbox nor one another process may claim; it raises only for a
failure a cold start would meet too (the engine down)."""

PLUGINS: Final = ("cubicle.orchestrator.pool.claim:claim",)
"""The claimers shipped with cubicle, ``module:attribute``, imported on first use."""

_lock = threading.Lock()
_registered: list[Claimer] = []
_plugins: list[Claimer] | None = None


def register(claimer: Claimer) -> Claimer:
    """Ask ``claimer`` too (after the plugins), from now on; returns it (usable as a decorator)."""
    with _lock:
        if claimer not in _registered:
            _registered.append(claimer)
    return claimer


def unregister(claimer: Claimer) -> None:
    """Stop asking ``claimer`` (registered with :func:`register`). Idempotent."""
    with _lock:
        if claimer in _registered:
            _registered.remove(claimer)


def claimers() -> list[Claimer]:
    """The claimers to ask, in order: the :data:`PLUGINS` present, then the registered ones.

    :raises ImportError: a plugin's package is present but fails to import.
    """
    global _plugins
    with _lock:
        if _plugins is None:
            _plugins = [c for c in (_load(name) for name in PLUGINS) if c is not None]
        return [*_plugins, *_registered]


def _load(name: str) -> Claimer | None:
    module_name, _, attribute = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        parents = {module_name.rsplit(".", depth)[0] for depth in range(module_name.count(".") + 1)}
        if exc.name in parents:
            return None  # that package is not installed: no claimer of its kind
        raise
    claimer: Claimer = getattr(module, attribute)
    return claimer
