"""Enforce a sandbox's network policy on the Docker engine (outside the guest).

========  =================================================================================
policy    what the guest container gets
========  =================================================================================
none      ``network_mode="none"``: loopback only; no route, no DNS
allow:…,  only an ``internal=True`` network ``cubicle-<id>`` whose bridge has no host address
block:…,  (``inhibit_ipv4``: the guest reaches neither other networks nor the host) shared with a
ask:…     separate egress-proxy container (:mod:`cubicle.egress.proxy`, same image) whose
          outward side is the sandbox's own bridge network ``cubicle-<id>-out`` (nothing else
          on it), which forwards what the policy admits and logs every decision.
          The guest gets ``HTTP(S)_PROXY``/``http(s)_proxy`` pointing at the proxy's address on
          the internal network, and a DNS server that does not answer (``127.0.0.1``), so
          names are resolved by the proxy only. ``ask:`` proxies also get a tmpfs
          ``/run/egress`` holding their control socket (:data:`CONTROL_SOCKET`), which the host
          reaches with ``docker exec … egress.pyz --relay`` (never the guest: it is another
          container's private file system).
open      the sandbox's own bridge network ``cubicle-<id>-out`` (full network; only when asked
          for explicitly)
========  =================================================================================

No sandbox object is ever on a network another sandbox's object is on (issue 38, PX2: the proxies
used to sit on Docker's default bridge, where every ``open`` guest reached them): Docker drops
traffic between two bridge networks (its ``DOCKER-ISOLATION`` chains, whatever ``--icc`` says,
which only governs traffic *within* one network), so neither a guest nor a proxy of one sandbox
reaches anything of another. Each network costs a subnet of the engine's address pools.

Who cleans up: everything made here carries the sandbox's labels and
``DockerProvider.destroy`` removes it by label (networks with role ``network``), as does ``gc``
whatever moment the creating process died at.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import docker
import docker.models.containers

from cubicle.egress.proxy import EGRESS_PORT
from cubicle.orchestrator import labels as L
from cubicle.orchestrator.errors import ProviderError
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.providers.docker.container_logs import log_config
from cubicle.orchestrator.providers.docker.errors import map_docker_errors

__all__ = [
    "CONTROL_SOCKET",
    "EGRESS_PYTHON",
    "EGRESS_SCRIPT",
    "EGRESS_USER",
    "POOL_HINT",
    "GuestNetwork",
    "egress_name",
    "network_name",
    "outward_name",
    "setup_network",
]

EGRESS_MEMORY: Final = "128m"
EGRESS_PIDS: Final = 64
EGRESS_USER: Final = "1000:1000"
EGRESS_PYTHON: Final = "/usr/bin/python3"
"""The image's system Python, with Debian's python3-h11 (guest-packages.txt)."""
EGRESS_SCRIPT: Final = "/opt/cubicle/egress.pyz"
CONTROL_DIR: Final = "/run/egress"
CONTROL_SOCKET: Final = f"{CONTROL_DIR}/control.sock"
"""Ask mode: the proxy's control socket, inside the proxy container only."""


def network_name(sandbox_id: str) -> str:
    return f"cubicle-{sandbox_id}"


def outward_name(sandbox_id: str) -> str:
    """The sandbox's own bridge network to the outside: its proxy's, or its ``open`` guest's."""
    return f"cubicle-{sandbox_id}-out"


def egress_name(sandbox_id: str) -> str:
    return f"cubicle-{sandbox_id}-egress"


@dataclass
class GuestNetwork:
    """The ``containers.create`` keyword arguments and environment that attach the guest."""

    create_kwargs: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)


def setup_network(
    client: docker.DockerClient,
    sandbox_id: str,
    policy: NetworkPolicy,
    *,
    image: str,
    labels: dict[str, str],
) -> GuestNetwork:
    """Create what ``policy`` needs (network, proxy) and say how to attach the guest.

    On failure the caller destroys the sandbox (everything here is labelled with its id).
    """
    if policy.mode == "none":
        return GuestNetwork({"network_mode": "none"})
    outward = _outward_network(client, sandbox_id, labels)
    if policy.mode == "open":
        return GuestNetwork({"network": outward})
    name = network_name(sandbox_id)
    with _pool_hint(), map_docker_errors(f"creating the internal network {name}"):
        network = client.networks.create(
            name,
            driver="bridge",
            internal=True,
            # no host address on this bridge: otherwise the guest reaches every host service
            # through the gateway (internal=True only stops forwarding to other networks)
            options={"com.docker.network.bridge.inhibit_ipv4": "true"},
            labels={**labels, L.ROLE: "network"},
        )
    command = [
        EGRESS_PYTHON,
        "-I",
        EGRESS_SCRIPT,
        "--listen",
        f"0.0.0.0:{EGRESS_PORT}",
        *policy.proxy_arguments,
    ]
    tmpfs: dict[str, str] = {}
    if policy.mode == "ask":
        command += ["--ask-timeout", f"{policy.ask_timeout:g}", "--control", CONTROL_SOCKET]
        tmpfs[CONTROL_DIR] = "mode=0700,uid=1000,gid=1000,size=64k"
    with map_docker_errors(f"creating the egress proxy of {sandbox_id}"):
        proxy: docker.models.containers.Container = client.containers.create(
            image,
            entrypoint=command,
            name=egress_name(sandbox_id),
            labels={**labels, L.ROLE: "egress"},
            user=EGRESS_USER,
            tmpfs=tmpfs,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            read_only=True,
            init=True,
            mem_limit=EGRESS_MEMORY,
            pids_limit=EGRESS_PIDS,
            network=outward,
            environment={"PYTHONUNBUFFERED": "1"},
            log_config=log_config(),
        )
        network.connect(proxy)
        proxy.start()
        proxy.reload()
        address = proxy.attrs["NetworkSettings"]["Networks"][name]["IPAddress"]
    url = f"http://{address}:{EGRESS_PORT}"
    environment = {key: url for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    environment["NO_PROXY"] = environment["no_proxy"] = "localhost,127.0.0.1,::1"
    return GuestNetwork({"network": name, "dns": ["127.0.0.1"]}, environment)


def _outward_network(client: docker.DockerClient, sandbox_id: str, labels: dict[str, str]) -> str:
    """Create the sandbox's own bridge network to the outside (:func:`outward_name`); its name."""
    name = outward_name(sandbox_id)
    with _pool_hint(), map_docker_errors(f"creating the network {name}"):
        client.networks.create(
            name,
            driver="bridge",
            # one container per network (the proxy, or an open guest): nothing to talk to
            options={"com.docker.network.bridge.enable_icc": "false"},
            labels={**labels, L.ROLE: "network"},
        )
    return name


POOL_HINT: Final = (
    "the engine's address pools are used up: each open sandbox takes one network, each allow:, "
    "block: or ask: sandbox two (Docker's default pools hold about 30); remove sandboxes "
    "(cubicle ls, cubicle down ID, cubicle gc) or widen default-address-pools in daemon.json"
)


@contextlib.contextmanager
def _pool_hint() -> Iterator[None]:
    """A network create refused for want of a subnet says why and what to do."""
    try:
        yield
    except ProviderError as exc:
        if "address pool" not in str(exc) or exc.hint:
            raise
        raise ProviderError(str(exc), hint=POOL_HINT) from exc
