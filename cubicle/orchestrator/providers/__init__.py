"""Sandbox backends, loaded lazily by name (the core never imports a provider module).

To add one: write a subpackage ``cubicle/orchestrator/providers/<name>/`` (one module per job, like
``vm/``) whose ``provider.py`` holds a :class:`~cubicle.orchestrator.provider.Provider` subclass,
and register ``"<name>": "module:Class"`` in :data:`PROVIDERS`.

Sandbox ids carry their backend: Docker ids start with ``dk-``, VM ids with ``vm-``
(:data:`ID_PREFIXES`); :func:`backend_of` maps an id back to its backend name.
"""

from __future__ import annotations

import importlib

from cubicle.orchestrator.errors import ConfigError, SandboxNotFound
from cubicle.orchestrator.provider import Provider

__all__ = ["DOCKER_ENGINE_ENV", "ID_PREFIXES", "PROVIDERS", "backend_of", "get_provider"]

PROVIDERS: dict[str, str] = {
    "docker": "cubicle.orchestrator.providers.docker.provider:DockerProvider",
    "vm": "cubicle.orchestrator.providers.vm.provider:VmProvider",
}
"""Backend name → ``module:Class`` of its :class:`Provider`."""

DOCKER_ENGINE_ENV = "CUBICLE_DOCKER_HOST"
"""Names the Docker engine every command uses (``--engine URL`` sets it for one command);
see :mod:`cubicle.orchestrator.providers.docker.engine`."""

ID_PREFIXES: dict[str, str] = {"dk-": "docker", "vm-": "vm"}
"""Sandbox id prefix → backend name."""


def get_provider(name: str) -> Provider:
    """Instantiate the provider registered as ``name``, importing its module now.

    :raises ConfigError: for an unknown name (listing the known ones) or a provider whose
        module or class cannot be imported (saying which and why).
    """
    target = PROVIDERS.get(name)
    if target is None:
        raise ConfigError(
            f"unknown backend {name!r}; known backends: {', '.join(sorted(PROVIDERS))}"
        )
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"backend {name!r} is not available: its module {module_name} "
            f"cannot be imported ({exc})",
            hint="this backend is not installed in this checkout"
            if exc.name == module_name
            else None,
        ) from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise ConfigError(f"backend {name!r}: {target} is not a Provider subclass")
    return cls()


def backend_of(sandbox_id: str) -> str:
    """The backend name of a sandbox id, from its prefix.

    :raises SandboxNotFound: if the id has no known prefix.
    """
    for prefix, backend in ID_PREFIXES.items():
        if sandbox_id.startswith(prefix):
            return backend
    raise SandboxNotFound(
        f"{sandbox_id!r} is not a cubicle sandbox id (ids start with "
        f"{', '.join(sorted(ID_PREFIXES))})",
        hint="list sandboxes with: cubicle ls",
    )
