"""Enforce a sandbox's network policy on the Docker engine (outside the guest).

========  =================================================================================
policy    what the guest container gets
========  =================================================================================
none      ``network_mode="none"``: loopback only; no route, no DNS
allow:…,  only an ``internal=True`` network ``cubicle-<id>`` whose bridge has no host address
          (``inhibit_ipv4``: the guest reaches neither other networks nor the host) shared with a
          separate egress-proxy container (:mod:`cubicle.egress.proxy`, same image, also on
          the default bridge) that forwards what the policy admits and logs every decision.
          The guest gets ``HTTP(S)_PROXY``/``http(s)_proxy`` pointing at the proxy's address on
          the internal network, and a DNS server that does not answer (``127.0.0.1``), so
          names are resolved by the proxy only. ``ask:`` proxies also get a tmpfs
          ``/run/egress`` holding their control socket (:data:`CONTROL_SOCKET`), which the host
          reaches with ``docker exec … egress.pyz --relay`` (never the guest: it is another
          container's private file system).
open      the default bridge (full network; only when asked for explicitly)
========  =================================================================================

Who cleans up: everything made here carries the sandbox's labels and
``DockerProvider.destroy`` removes it by label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import docker
import docker.models.containers

from cubicle.egress.proxy import EGRESS_PORT
from cubicle.orchestrator import labels as L
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.providers.docker.errors import map_docker_errors

__all__ = [
    "CONTROL_SOCKET",
    "EGRESS_PYTHON",
    "EGRESS_SCRIPT",
    "EGRESS_USER",
    "GuestNetwork",
    "egress_name",
    "network_name",
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
    if policy.mode == "open":
        return GuestNetwork({"network": "bridge"})
    name = network_name(sandbox_id)
    with map_docker_errors(f"creating the internal network {name}"):
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
        "--policy",
        str(policy.proxy_policy),
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
            network="bridge",
            environment={"PYTHONUNBUFFERED": "1"},
        )
        network.connect(proxy)
        proxy.start()
        proxy.reload()
        address = proxy.attrs["NetworkSettings"]["Networks"][name]["IPAddress"]
    url = f"http://{address}:{EGRESS_PORT}"
    environment = {key: url for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    environment["NO_PROXY"] = environment["no_proxy"] = "localhost,127.0.0.1,::1"
    return GuestNetwork({"network": name, "dns": ["127.0.0.1"]}, environment)
