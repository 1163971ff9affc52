"""The Docker backend: one module per job.

- :mod:`~cubicle.orchestrator.providers.docker.provider` — :class:`DockerProvider` (create, destroy,
  list, gc of sandboxes as containers);
- :mod:`~cubicle.orchestrator.providers.docker.pool_members` — warm-pool members (listing, the
  atomic claim, the drain; ``DockerProvider.pool_members``), never importing the provider;
- :mod:`~cubicle.orchestrator.providers.docker.naming` — sandbox ids, guest container names, a
  guest container's info (below both of the above);
- :mod:`~cubicle.orchestrator.providers.docker.engine` — which engine (local socket, ``tcp://``
with TLS,
  ``ssh://``) and the id → engine book;
- :mod:`~cubicle.orchestrator.providers.docker.image` — building, pushing and pruning the guest
image;
- :mod:`~cubicle.orchestrator.providers.docker.network` — ``none`` / ``allow:`` networks and the
egress
  proxy container;
- :mod:`~cubicle.orchestrator.providers.docker.exec` and
:mod:`~cubicle.orchestrator.providers.docker.relay` —
  the agent over the engine's exec stream;
- :mod:`~cubicle.orchestrator.providers.docker.seccomp` — the guest's seccomp profile;
- :mod:`~cubicle.orchestrator.providers.docker.errors` — engine errors mapped to cubicle's.
"""

from cubicle.orchestrator.providers.docker.provider import DockerProvider

__all__ = ["DockerProvider"]
