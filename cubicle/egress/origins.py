"""THE origin grammar and decision of cubicle: what a policy's entries mean, for everyone.

:class:`Origin`, :func:`parse_origin`, :func:`parse_policy` and :func:`decide` are used by the
egress proxy that enforces a policy (:mod:`cubicle.egress.proxy`), by the policy a user writes
(:mod:`cubicle.orchestrator.network`, which only turns :class:`InvalidOrigin` into cubicle's
``ConfigError``) and by approval policy files (:mod:`cubicle.drivers.policy_file`), so the three
cannot disagree. The rules are the proxy's module docstring's *Policy* section.

Standard library only, and it imports nothing of cubicle: the proxy ships as one file with it
(:mod:`cubicle.egress.bundle`), and the drivers, below the orchestrator, import it without
importing the proxy.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "DEFAULT_PORTS",
    "POLICY_MODES",
    "Decision",
    "InvalidHost",
    "InvalidOrigin",
    "Origin",
    "Policy",
    "PolicyMode",
    "Verdict",
    "decide",
    "forbidden_address",
    "is_ip",
    "normalize_host",
    "parse_origin",
    "parse_policy",
    "parse_port",
    "split_authority",
]

DEFAULT_PORTS: Final = (80, 443)
"""The ports a domain or address entry without a port admits."""


class InvalidOrigin(ValueError):
    """Origin or authority text that is not ``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT``."""


class InvalidHost(InvalidOrigin):
    """A host that is neither an IP literal nor a valid DNS name."""


_PORT = re.compile(r"[0-9]{1,5}")  # [0-9], not \d: ASCII digits only ('²' is not a port)


def normalize_host(raw: str) -> str:
    """Canonical form of a host: IP literal text, or lower-case IDNA A-label name.

    :raises InvalidHost: naming the host and what is wrong with it.
    """
    host = raw.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    host = host.rstrip(".").lower()
    if not host or len(host) > 253:
        raise InvalidHost(f"invalid host name {raw!r}: empty or longer than 253 characters")
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError as exc:
        raise InvalidHost(f"invalid host name {raw!r}: {exc}") from None
    for label in ascii_host.split("."):
        if (
            not label
            or len(label) > 63
            or label.startswith("-")
            or label.endswith("-")
            or not all(c.isalnum() or c == "-" for c in label)
        ):
            raise InvalidHost(f"invalid host name {raw!r}: bad label {label!r}")
    return ascii_host


def parse_port(text: str) -> int:
    """A port written in ASCII digits, 1-65535.

    :raises InvalidOrigin: naming the text.
    """
    if not _PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise InvalidOrigin(f"port must be 1-65535 in ASCII digits, got {text!r}")
    return int(text)


def split_authority(text: str) -> tuple[str, str | None]:
    """Split ``HOST``, ``HOST:PORT``, ``[V6]``, ``[V6]:PORT`` or a bare IPv6 literal into the
    host text and the port text (``None`` when absent); neither is checked here.

    :raises InvalidOrigin: for an unclosed ``[`` or text after ``]`` that is not ``:PORT``.
    """
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise InvalidOrigin(f"unclosed '[' in {text!r}")
        host, rest = text[1:end], text[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise InvalidOrigin(f"unexpected {rest!r} after ']' in {text!r}")
        return host, rest[1:]
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, port
    return text, None  # a name, or a bare IPv6 literal (several colons)


def is_ip(host: str) -> bool:
    """True when ``host`` (normalised) is an IP literal rather than a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _in_domain(host: str, domain: str) -> bool:
    """``host`` is ``domain`` or one of its subdomains (whole labels; both normalised names)."""
    return host == domain or host.endswith("." + domain)


@dataclass(frozen=True, order=True)
class Origin:
    """One entry of a policy: a lower-case IDNA (ASCII) host name or an IP literal, and a port.

    What it admits follows from its form (so its text round-trips through :func:`parse_origin`):

    - a NAME without port is a **domain**: the host and all its subdomains, ports 80 and 443;
    - an IP literal without port: that address, ports 80 and 443;
    - anything with a port: exactly that host and that port (no subdomains).
    """

    host: str
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def is_domain(self) -> bool:
        """A domain entry (NAME without port): subdomains included."""
        return self.port is None and not is_ip(self.host)

    def covers_host(self, host: str) -> bool:
        """Whether the normalised ``host`` is this entry's host (or, for a domain, below it)."""
        return _in_domain(host, self.host) if self.is_domain else host == self.host

    def allows(self, host: str, port: int) -> bool:
        """True when a connection to ``host:port`` is admitted by this entry alone."""
        return decide(Policy("allow", (self,)), host, port).allowed


def parse_origin(text: str) -> Origin:
    """Parse ``HOST``, ``HOST:PORT``, ``[V6]``, ``[V6]:PORT`` or a bare IPv6 literal; no scheme,
    path or user info. Surrounding blanks are ignored.

    :raises InvalidOrigin: naming the text and what is wrong with it.
    """
    item = text.strip()
    if not item:
        raise InvalidOrigin("empty origin in allow list")
    if any(c in item for c in "/@?#\\ \t") or "://" in item:
        raise InvalidOrigin(
            f"invalid origin {text!r}: give HOST or HOST:PORT, without scheme or path"
        )
    try:
        host, port_text = split_authority(item)
        port = None if port_text is None else parse_port(port_text)
        return Origin(normalize_host(host), port)
    except InvalidHost:
        raise
    except InvalidOrigin as exc:
        raise InvalidOrigin(f"invalid origin {text!r}: {exc}") from None


PolicyMode = Literal["allow", "block", "ask"]
POLICY_MODES: Final = ("allow", "block", "ask")


@dataclass(frozen=True)
class Policy:
    """What the proxy enforces: ``allow`` (only ``origins``), ``block`` (all but ``origins``) or
    ``ask`` (``origins``, and a person decides about the rest). Make one with
    :func:`parse_policy`; ``str()`` gives text :func:`parse_policy` reads back."""

    mode: PolicyMode
    origins: tuple[Origin, ...] = ()

    def __str__(self) -> str:
        return f"{self.mode}:" + ",".join(str(origin) for origin in self.origins)


def parse_policy(text: str) -> Policy:
    """Parse ``allow:ENTRY,...``, ``block:NAME,...`` or ``ask:[ENTRY,...]`` (module docstring).

    :raises InvalidOrigin: naming the policy or the entry that is wrong.
    """
    mode, sep, rest = text.strip().partition(":")
    if not sep or mode not in POLICY_MODES:
        raise InvalidOrigin(
            f"unknown proxy policy {text!r}; use 'allow:ENTRY,...', 'block:NAME,...' or "
            "'ask:[ENTRY,...]'"
        )
    items = [item.strip() for item in rest.split(",")] if rest.strip() or mode != "ask" else []
    origins: set[Origin] = set()
    for item in items:
        head = item.partition(":")[0].strip()
        if head in POLICY_MODES and head != item:
            raise InvalidOrigin(
                f"{mode}: list has the entry {item!r}: allow, block and ask lists cannot be "
                "combined (one mode per policy)"
            )
        if not item:
            raise InvalidOrigin(f"empty entry in the {mode}: list {rest!r}")
        origin = parse_origin(item)
        if mode == "block" and origin.port is not None:
            raise InvalidOrigin(
                f"block: entry {item!r} names a port; a blocked domain or address is blocked "
                "on every port (give NAME or IP)"
            )
        origins.add(origin)
    return Policy(mode, tuple(sorted(origins)))  # type: ignore[arg-type]


Verdict = Literal["allow", "refuse", "ask"]


@dataclass(frozen=True)
class Decision:
    """What a judge said about one request; ``host`` is normalised when it could be.

    ``verdict`` ``ask`` (from :func:`decide` in ask mode) means "not admitted by the list: a
    person decides". ``guard`` True: the destination was not named exactly, so it must not
    resolve to a loopback/link-local/unspecified/multicast address. ``by``: who decided.
    """

    verdict: Verdict
    host: str
    port: int
    reason: str
    guard: bool = False
    by: str = "policy"

    @property
    def allowed(self) -> bool:
        return self.verdict == "allow"


def decide(policy: Policy | Iterable[Origin], host: str, port: int) -> Decision:
    """The one check: what ``policy`` (or an allow list of origins) says about ``host:port``."""
    rules = policy if isinstance(policy, Policy) else Policy("allow", tuple(policy))
    try:
        wanted = normalize_host(host)
    except InvalidHost as exc:
        return Decision("refuse", host, port, str(exc))
    if not 1 <= port <= 65535:
        return Decision("refuse", wanted, port, f"port {port} outside 1-65535")
    if rules.mode == "block":
        for origin in rules.origins:
            if origin.covers_host(wanted):
                return Decision("refuse", wanted, port, f"blocked ({origin} is in the block list)")
        return Decision("allow", wanted, port, "not in the block list", guard=True)
    host_known = False
    for origin in rules.origins:
        if not origin.covers_host(wanted):
            continue
        host_known = True
        if (port in DEFAULT_PORTS) if origin.port is None else (port == origin.port):
            if origin.is_domain:
                return Decision(
                    "allow", wanted, port, f"allowed domain {origin}", guard=wanted != origin.host
                )
            return Decision("allow", wanted, port, "allowed origin")
    reason = f"port {port} not allowed for {wanted}" if host_known else "not in the allow list"
    if rules.mode == "ask":
        return Decision("ask", wanted, port, reason, guard=True)
    return Decision("refuse", wanted, port, reason)


def forbidden_address(address: str) -> str | None:
    """Why a resolved ``address`` may not be reached by a guarded decision, or ``None``."""
    ip = ipaddress.ip_address(address.partition("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped
    for what, bad in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("unspecified", ip.is_unspecified),
        ("multicast", ip.is_multicast),
    ):
        if bad:
            return f"{address} is a {what} address"
    return None
