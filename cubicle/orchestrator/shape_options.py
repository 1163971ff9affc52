"""The options that say what kind of sandbox a command makes — ``--backend``, ``--network``
(with ``--ask-timeout``) and ``--size`` — for every command that makes one (``cubicle up``,
``cubicle pool fill``), parsed the same way everywhere.
"""

from __future__ import annotations

import argparse

from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.origin_answers import add_ask_timeout_argument
from cubicle.orchestrator.provider import parse_size as provider_size
from cubicle.orchestrator.providers import PROVIDERS

__all__ = [
    "add_internal_networks_argument",
    "add_shape_options",
    "parse_network",
    "parse_size",
    "with_internal_networks",
]


def parse_size(text: str) -> tuple[int, int]:
    try:
        return provider_size(text, "--size")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_network(text: str) -> NetworkPolicy:
    try:
        return NetworkPolicy.parse(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_shape_options(parser: argparse.ArgumentParser) -> None:
    """``--backend``, ``--network`` and ``--size``: what kind of sandbox (``up``, ``pool fill``)."""
    parser.add_argument("--backend", choices=sorted(PROVIDERS), default="docker")
    parser.add_argument(
        "--network",
        type=parse_network,
        default=NetworkPolicy.none(),
        help="none (default) | allow:ENTRY,... | block:NAME,... | ask:[ENTRY,...] | "
        "open; ENTRY: NAME (that domain and its subdomains, ports 80/443), HOST:PORT "
        "(exactly), IP[:PORT]",
    )
    add_ask_timeout_argument(parser)
    parser.add_argument(
        "--size", type=parse_size, default=(1280, 800), help="screen WxH pixels (default 1280x800)"
    )


def add_internal_networks_argument(parser: argparse.ArgumentParser) -> None:
    """``--allow-internal NET`` (repeatable): see :meth:`NetworkPolicy.with_internal`."""
    parser.add_argument(
        "--allow-internal",
        action="append",
        default=[],
        metavar="NET",
        help="a private network (e.g. 10.1.0.0/16) names under the policy's domain rules or "
        "approved origins may resolve into; by default they must resolve to public addresses "
        "(repeatable)",
    )


def with_internal_networks(policy: NetworkPolicy, networks: list[str]) -> NetworkPolicy:
    """``policy`` with the ``--allow-internal`` networks (unchanged when there are none).

    :raises ConfigError: a bad network, or networks for a policy without a proxy.
    """
    return policy.with_internal(networks) if networks else policy
