"""Network policies for sandboxes: what a user writes after ``--network`` (and ``Sandbox.create``).

==========================  =====================================================================
``none`` (default)          no network at all
``open``                    full network (only when asked for explicitly)
``allow:ENTRY,...``         only these, through the egress proxy
``block:NAME,...``          everything except these domains (and their subdomains), through the
                            egress proxy
``ask:[ENTRY,...]``         these, and a person is asked about any other origin (held meanwhile;
                            no answer within the ask timeout, default 120 s = deny)
==========================  =====================================================================

``ENTRY``: ``NAME`` — a domain: the host and every subdomain, ports 80 and 443;
``HOST:PORT`` — exactly that host and port; ``IP`` / ``[V6]`` — that address on 80 and 443;
``IP:PORT`` / ``[V6]:PORT``. A ``block:`` entry is a ``NAME`` or an IP, without port (blocked on
every port). One mode per policy: allow and block lists cannot be combined.

This module only parses and names a policy; the one grammar, origin type and decision live in
the standalone proxy (:mod:`cubicle.egress.proxy`), which each provider runs outside the
guest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from cubicle.egress import origins as egress
from cubicle.orchestrator.errors import ConfigError

__all__ = ["DEFAULT_ASK_TIMEOUT_S", "NetworkPolicy", "Origin", "normalize_host", "parse_origin"]

Mode = Literal["none", "allow", "block", "ask", "open"]
DEFAULT_ASK_TIMEOUT_S: Final = 120.0
MAX_ASK_TIMEOUT_S: Final = 86400.0


Origin = egress.Origin
"""The one origin type (defined by the standalone egress proxy,
:mod:`cubicle.egress.proxy`)."""


def normalize_host(raw: str) -> str:
    """Return the canonical form of a host: IP literal, or lower-case IDNA A-label name.

    The egress proxy (:mod:`cubicle.egress.proxy`, which runs standalone, outside this
    package) holds the one implementation, so the policy parsed here and the proxy that enforces it
    cannot disagree on what a host is.

    :raises ConfigError: if ``raw`` is not a valid host name or IP literal.
    """
    try:
        return egress.normalize_host(raw)
    except egress.InvalidHost as exc:
        raise ConfigError(str(exc)) from None


def parse_origin(text: str) -> Origin:
    """Parse ``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT``; no scheme, path or user info
    (:func:`cubicle.egress.origins.parse_origin`, the one parser).

    :raises ConfigError: naming the text and what is wrong with it.
    """
    try:
        return egress.parse_origin(text)
    except egress.InvalidOrigin as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class NetworkPolicy:
    """How a sandbox may reach the network. Parse user text with :meth:`parse`.

    ``allow`` holds the allow list of ``allow`` and ``ask`` policies, ``block`` the block list;
    ``ask_timeout`` is how long an ask-mode question waits for an answer (seconds).
    ``internal`` names private networks that names admitted by a domain rule, a block list or an
    approval may resolve into (an intranet; otherwise the proxy refuses every private address,
    docs/security.md): the proxy's ``--allow-internal``. Set it with :meth:`with_internal`.
    """

    mode: Mode
    allow: tuple[Origin, ...] = ()
    block: tuple[Origin, ...] = ()
    ask_timeout: float = DEFAULT_ASK_TIMEOUT_S
    internal: tuple[egress.IPNetwork, ...] = ()

    def __post_init__(self) -> None:
        if not 0 < self.ask_timeout <= MAX_ASK_TIMEOUT_S:
            raise ConfigError(
                f"ask timeout must be more than 0 and at most {MAX_ASK_TIMEOUT_S:g} seconds, "
                f"got {self.ask_timeout!r}"
            )
        if self.allow and self.block:
            raise ConfigError("allowed and blocked domains cannot be combined; give one list")
        if self.internal and not self.proxied:
            raise ConfigError(
                f"internal networks apply to a proxied policy (allow:, block:, ask:), "
                f"not {self.mode!r}"
            )

    def with_internal(self, networks: Sequence[str]) -> NetworkPolicy:
        """This policy, letting guarded destinations reach ``networks`` (``10.1.0.0/16``).

        :raises ConfigError: naming a network that is not one, or one no destination may reach
            (loopback, link-local …), or a policy without a proxy.
        """
        try:
            internal = tuple(egress.parse_permit(text) for text in networks)
        except egress.InvalidOrigin as exc:
            raise ConfigError(str(exc)) from None
        return dataclasses.replace(self, internal=self.internal + internal)

    @property
    def proxy_arguments(self) -> list[str]:
        """The proxy's options for this policy: ``--policy`` and one ``--allow-internal`` per
        internal network."""
        argv = ["--policy", str(self.proxy_policy)]
        for network in self.internal:
            argv += ["--allow-internal", str(network)]
        return argv

    @classmethod
    def none(cls) -> NetworkPolicy:
        return cls("none")

    @classmethod
    def parse(cls, text: str, *, ask_timeout: float = DEFAULT_ASK_TIMEOUT_S) -> NetworkPolicy:
        """``none`` | ``open`` | ``allow:ENTRY,...`` | ``block:NAME,...`` | ``ask:[ENTRY,...]``.

        :raises ConfigError: naming the part that is wrong.
        """
        value = text.strip()
        if value in ("none", "open"):
            return cls(value, ask_timeout=ask_timeout)  # type: ignore[arg-type]
        if value.partition(":")[0] in egress.POLICY_MODES and ":" in value:
            try:
                rules = egress.parse_policy(value)
            except egress.InvalidOrigin as exc:
                raise ConfigError(str(exc)) from None
            return cls.from_proxy_policy(rules, ask_timeout=ask_timeout)
        raise ConfigError(
            f"unknown network policy {text!r}; use 'none', 'open', 'allow:ENTRY,...', "
            "'block:NAME,...' or 'ask:[ENTRY,...]'"
        )

    @classmethod
    def from_proxy_policy(
        cls, rules: egress.Policy, *, ask_timeout: float = DEFAULT_ASK_TIMEOUT_S
    ) -> NetworkPolicy:
        """The sandbox policy of a parsed proxy policy."""
        if rules.mode == "block":
            return cls("block", block=rules.origins, ask_timeout=ask_timeout)
        return cls(rules.mode, allow=rules.origins, ask_timeout=ask_timeout)

    @classmethod
    def restricted(
        cls,
        *,
        allowed_domains: Sequence[str] = (),
        blocked_domains: Sequence[str] = (),
        ask: bool = False,
        ask_timeout: float = DEFAULT_ASK_TIMEOUT_S,
    ) -> NetworkPolicy:
        """The product documents' ``restricted`` access: ``allowed_domains`` (entries as in
        ``allow:``) or ``blocked_domains`` (as in ``block:``), never both; ``ask`` asks a
        person about origins outside the allow list (not with ``blocked_domains``).

        :raises ConfigError: both lists, ask with a block list, a bad entry or nothing at all.
        """
        if allowed_domains and blocked_domains:
            raise ConfigError("allowed_domains and blocked_domains cannot be combined")
        if blocked_domains:
            if ask:
                raise ConfigError("ask mode takes an allow list, not blocked_domains")
            text = "block:" + ",".join(blocked_domains)
        elif ask:
            text = "ask:" + ",".join(allowed_domains)
        elif allowed_domains:
            text = "allow:" + ",".join(allowed_domains)
        else:
            raise ConfigError(
                "restricted network access needs allowed_domains, blocked_domains or ask mode"
            )
        for item in (*allowed_domains, *blocked_domains):
            if "," in item:
                raise ConfigError(f"domain {item!r} contains ','; give one domain per entry")
        return cls.parse(text, ask_timeout=ask_timeout)

    @property
    def proxied(self) -> bool:
        """Whether the guest's traffic goes through the egress proxy (allow, block, ask)."""
        return self.mode in egress.POLICY_MODES

    @property
    def proxy_policy(self) -> egress.Policy:
        """The policy the proxy enforces (its ``--policy`` text is ``str()`` of it).

        :raises ConfigError: for ``none`` and ``open``, which have no proxy.
        """
        if self.mode == "block":
            return egress.Policy("block", self.block)
        if self.mode in ("allow", "ask"):
            return egress.Policy(self.mode, self.allow)
        raise ConfigError(f"network policy {self.mode!r} has no egress proxy")

    def __str__(self) -> str:
        return str(self.proxy_policy) if self.proxied else self.mode

    def allows(self, host: str, port: int) -> bool:
        """Whether a connection to ``host:port`` is permitted without asking anyone."""
        if self.mode == "open":
            return True
        return self.proxied and egress.decide(self.proxy_policy, host, port).allowed
