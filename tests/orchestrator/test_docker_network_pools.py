"""A network create the engine refuses for want of a subnet says why and what to do (each ``open``
sandbox takes one network of the engine's address pools, each restricted one two)."""

from __future__ import annotations

from typing import Any

import docker.errors
import pytest

from cubicle.orchestrator.errors import ProviderError
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.providers.docker.network import POOL_HINT, setup_network

EXHAUSTED = (
    "could not find an available, non-overlapping IPv4 address pool among the defaults to "
    "assign to the network"
)


class Networks:
    def create(self, name: str, **kwargs: Any) -> None:
        raise docker.errors.APIError("403 Client Error", explanation=EXHAUSTED)


class Client:
    networks = Networks()


@pytest.mark.parametrize("policy", ["open", "allow:example.com"])
def test_exhausted_address_pools_name_the_remedy(policy: str) -> None:
    with pytest.raises(ProviderError) as raised:
        setup_network(
            Client(),  # type: ignore[arg-type]
            "dk-0123456789",
            NetworkPolicy.parse(policy),
            image="unused",
            labels={},
        )
    assert EXHAUSTED in str(raised.value)
    assert raised.value.hint == POOL_HINT
