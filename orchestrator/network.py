"""Network policies for sandboxes: ``none`` (default), ``allow:HOST[:PORT],...`` and ``open``.

This module only parses and names a policy; each provider enforces it outside the guest (see
``orchestrator.egress`` for the allowlist proxy and its origin check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator import egress
from orchestrator.errors import ConfigError

__all__ = ["NetworkPolicy", "Origin"]

Mode = Literal["none", "allow", "open"]


@dataclass(frozen=True, order=True)
class Origin:
    """An allowed destination: a lower-case IDNA (ASCII) host name or an IP literal, and a port.

    ``port`` ``None`` means the scheme defaults 80 and 443.
    """

    host: str
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    def allows(self, host: str, port: int) -> bool:
        """True when a connection to ``host:port`` is exactly this origin (no suffix matching)."""
        try:
            wanted = normalize_host(host)
        except ConfigError:
            return False
        if wanted != self.host:
            return False
        return port in (80, 443) if self.port is None else port == self.port


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
    """Parse ``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT``; no scheme, path or user info."""
    item = text.strip()
    if not item:
        raise ConfigError("empty origin in allow list")
    if any(c in item for c in "/@?#\\ \t") or "://" in item:
        raise ConfigError(
            f"invalid origin {text!r}: give HOST or HOST:PORT, without scheme or path"
        )
    host, port_text = item, None
    if item.startswith("["):
        end = item.find("]")
        if end < 0:
            raise ConfigError(f"invalid origin {text!r}: unclosed '['")
        host, rest = item[: end + 1], item[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ConfigError(f"invalid origin {text!r}: unexpected {rest!r} after ']'")
            port_text = rest[1:]
    elif item.count(":") == 1:
        host, port_text = item.split(":")
    elif item.count(":") > 1:
        host = item  # a bare IPv6 literal
    port: int | None = None
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ConfigError(f"invalid origin {text!r}: port must be 1-65535, got {port_text!r}")
        port = int(port_text)
    return Origin(normalize_host(host), port)


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
        return self.mode == "allow" and any(origin.allows(host, port) for origin in self.allow)
