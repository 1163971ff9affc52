"""Network policies for sandboxes: ``none`` (default), ``allow:HOST[:PORT],...`` and ``open``.

This module only parses and names a policy; each provider enforces it outside the guest (see
``orchestrator.egress`` for the allowlist proxy and its origin check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator import egress
from orchestrator.errors import ConfigError

__all__ = ["NetworkPolicy", "Origin", "normalize_host", "parse_origin"]

Mode = Literal["none", "allow", "open"]


Origin = egress.Origin
"""The one origin type (defined by the standalone egress proxy, :mod:`orchestrator.egress`)."""


def normalize_host(raw: str) -> str:
    """Return the canonical form of a host: IP literal, or lower-case IDNA A-label name.

    The egress proxy (:mod:`orchestrator.egress`, which runs standalone, outside this package)
    holds the one implementation, so the policy parsed here and the proxy that enforces it
    cannot disagree on what a host is.

    :raises ConfigError: if ``raw`` is not a valid host name or IP literal.
    """
    try:
        return egress.normalize_host(raw)
    except egress.InvalidHost as exc:
        raise ConfigError(str(exc)) from None


def parse_origin(text: str) -> Origin:
    """Parse ``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT``; no scheme, path or user info
    (:func:`orchestrator.egress.parse_origin`, the one parser).

    :raises ConfigError: naming the text and what is wrong with it.
    """
    try:
        return egress.parse_origin(text)
    except egress.InvalidOrigin as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class NetworkPolicy:
    """How a sandbox may reach the network. Parse user text with :meth:`parse`."""

    mode: Mode
    allow: tuple[Origin, ...] = ()

    @classmethod
    def none(cls) -> NetworkPolicy:
        return cls("none")

    @classmethod
    def parse(cls, text: str) -> NetworkPolicy:
        """``none`` | ``open`` | ``allow:HOST[:PORT],...``.

        :raises ConfigError: naming the part that is wrong.
        """
        value = text.strip()
        if value == "none":
            return cls("none")
        if value == "open":
            return cls("open")
        if value.startswith("allow:"):
            items = value[len("allow:") :].split(",")
            origins = tuple(sorted({parse_origin(item) for item in items}))
            return cls("allow", origins)
        raise ConfigError(
            f"unknown network policy {text!r}; use 'none', 'open' or 'allow:HOST[:PORT],...'"
        )

    def __str__(self) -> str:
        if self.mode == "allow":
            return "allow:" + ",".join(str(origin) for origin in self.allow)
        return self.mode

    def allows(self, host: str, port: int) -> bool:
        """Whether a connection to ``host:port`` is permitted by this policy."""
        if self.mode == "open":
            return True
        return self.mode == "allow" and egress.decide(self.allow, host, port).allowed
