"""Enforce a sandbox's network policy on the Docker engine (outside the guest).

========  =================================================================================
policy    what the guest container gets
========  =================================================================================
none      ``network_mode="none"``: loopback only; no route, no DNS
allow:…   only an ``internal=True`` network ``cubicle-<id>`` whose bridge has no host address
          (``inhibit_ipv4``: the guest reaches neither other networks nor the host) shared with a
          separate egress-proxy container (:mod:`orchestrator.egress`, same image, also on the
          default bridge) that forwards exactly the allowed origins and logs every decision.
          The guest gets ``HTTP(S)_PROXY``/``http(s)_proxy`` pointing at the proxy's address on
          the internal network, and a DNS server that does not answer (``127.0.0.1``), so
          names are resolved by the proxy only.
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

from orchestrator import labels as L
from orchestrator.egress import EGRESS_PORT
from orchestrator.network import NetworkPolicy
from orchestrator.providers.docker_errors import map_docker_errors

__all__ = ["GuestNetwork", "egress_name", "network_name", "setup_network"]

EGRESS_MEMORY: Final = "128m"
EGRESS_PIDS: Final = 64


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
        "/usr/bin/python3",  # the system Python, with Debian's python3-h11 (guest-packages.txt)
        "-I",
        "/opt/cubicle/egress.py",
        "--listen",
        f"0.0.0.0:{EGRESS_PORT}",
    ]
    for origin in policy.allow:
        command += ["--allow", str(origin)]
    with map_docker_errors(f"creating the egress proxy of {sandbox_id}"):
        proxy: docker.models.containers.Container = client.containers.create(
            image,
            entrypoint=command,
            name=egress_name(sandbox_id),
            labels={**labels, L.ROLE: "egress"},
            user="1000:1000",
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
