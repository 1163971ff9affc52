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
    "IPNetwork",
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
    "parse_permit",
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
    person decides". ``guard`` True: the destination was not named exactly — a name admitted
    by a domain rule (the domain itself or a subdomain), anything a block list lets through, an
    origin a person approves — so every address it resolves to must be public
    (:func:`forbidden_address`); an IP literal or ``HOST:PORT`` entry names its destination
    exactly and is not guarded. ``by``: who decided.
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
            if origin.is_domain:  # DNS decides where the name goes: guarded, apex included
                return Decision("allow", wanted, port, f"allowed domain {origin}", guard=True)
            return Decision("allow", wanted, port, "allowed origin")
    reason = f"port {port} not allowed for {wanted}" if host_known else "not in the allow list"
    if rules.mode == "ask":
        return Decision("ask", wanted, port, reason, guard=True)
    return Decision("refuse", wanted, port, reason)


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NEVER: Final[tuple[tuple[str, str], ...]] = (
    ("0.0.0.0/8", "an unspecified ('this network')"),
    ("127.0.0.0/8", "a loopback"),
    ("169.254.0.0/16", "a link-local"),
    ("224.0.0.0/4", "a multicast"),
    ("255.255.255.255/32", "a broadcast"),
    ("::/128", "an unspecified"),
    ("::1/128", "a loopback"),
    ("fe80::/10", "a link-local"),
    ("ff00::/8", "a multicast"),
)
"""Never reachable by a guarded destination, whatever ``permit`` says."""
_INTERNAL: Final[tuple[tuple[str, str], ...]] = (
    ("10.0.0.0/8", "a private (RFC 1918)"),
    ("100.64.0.0/10", "a shared (CGNAT, RFC 6598)"),
    ("172.16.0.0/12", "a private (RFC 1918)"),
    ("192.0.0.0/24", "an IETF protocol-assignment"),
    ("192.0.2.0/24", "a documentation"),
    ("192.88.99.0/24", "a 6to4-relay"),
    ("192.168.0.0/16", "a private (RFC 1918)"),
    ("198.18.0.0/15", "a benchmarking"),
    ("198.51.100.0/24", "a documentation"),
    ("203.0.113.0/24", "a documentation"),
    ("240.0.0.0/4", "a reserved"),
    ("::/8", "a reserved (IPv4-compatible/translated)"),
    ("64:ff9b:1::/48", "a local-use NAT64"),
    ("100::/64", "a discard-only"),
    ("2001::/23", "an IETF special-purpose (Teredo and others)"),
    ("2001:db8::/32", "a documentation"),
    ("fc00::/7", "a unique-local"),
    ("fec0::/10", "a site-local"),
)
"""Internal, special or non-public: refused unless an operator permits the network."""
_TABLE: Final = tuple(
    (ipaddress.ip_network(net), what, never)
    for table, never in ((_NEVER, True), (_INTERNAL, False))
    for net, what in table
)
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address carries to an IPv4 host: IPv4-mapped (``::ffff:a.b.c.d``),
    NAT64 (``64:ff9b::a.b.c.d``) or 6to4 (``2002:AABB:CCDD::/48``)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped"
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), "NAT64"
    if ip.sixtofour is not None:
        return ip.sixtofour, "6to4"
    return None


def parse_permit(text: str) -> IPNetwork:
    """An internal network an operator lets guarded destinations reach (``--allow-internal``):
    ``10.1.0.0/16``, ``192.0.2.7`` (one address) or ``fd00::/64``.

    :raises InvalidOrigin: not a network, host bits set, or it overlaps loopback, link-local,
        unspecified, broadcast or multicast addresses (never reachable by a guarded destination).
    """
    try:
        net = ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise InvalidOrigin(f"invalid internal network {text!r}: {exc}") from None
    for never, what, absolute in _TABLE:
        if absolute and net.version == never.version and net.overlaps(never):
            raise InvalidOrigin(
                f"internal network {text!r} overlaps {never} ({what} network): a guarded "
                "destination never reaches it; name an exact IP:PORT in the policy instead"
            )
    return net


def forbidden_address(address: str, permit: Iterable[IPNetwork] = ()) -> str | None:
    """Why a resolved ``address`` may not be reached by a guarded decision, or ``None``.

    Refused: every address that is not public — loopback, link-local, unspecified, multicast,
    broadcast (always), private (RFC 1918), CGNAT, unique-local, site-local, documentation,
    benchmarking, reserved and other special-purpose ranges (unless in ``permit``) — and the
    IPv6 forms of such an IPv4 address (IPv4-mapped, NAT64 ``64:ff9b::/96``, 6to4), judged by
    the IPv4 address they carry. The ranges are a table of their own (not ``is_global``, whose
    answers change between Python versions).
    """
    text = address.partition("%")[0]
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(text)
    via = ""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_v4(ip)
        if embedded is not None:
            ip, how = embedded
            via = f" ({how} form of {ip})"
    for net, what, never in _TABLE:
        if ip.version == net.version and ip in net:
            if not never and any(ip.version == p.version and ip in p for p in permit):
                return None
            return f"{address} is {what} address{via}"
    return None
