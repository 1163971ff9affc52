"""Upstream connections of the egress proxy: name resolution, the address guard and the
connect.

Name resolution: the system resolver, or first ``--hosts FILE`` (hosts(5) lines ``ADDRESS
NAME...``, read at every lookup) — a seam for tests, which make names resolve to their local
servers; no sandbox passes it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Sequence

from cubicle.egress.origins import (
    Decision,
    InvalidHost,
    InvalidOrigin,
    IPNetwork,
    forbidden_address,
    is_ip,
    normalize_host,
)

__all__ = [
    "ForbiddenAddress",
    "HostsFile",
    "Resolver",
    "SocketAddress",
    "open_upstream",
    "system_resolver",
]


class ForbiddenAddress(Exception):
    """A guarded destination resolved to an address it may not reach."""


SocketAddress = tuple[socket.AddressFamily, tuple[str, int] | tuple[str, int, int, int]]
"""One address to connect to: its family and its socket address."""
Resolver = Callable[[str, int], Awaitable[list[SocketAddress]]]
"""Name resolution: ``(host, port)`` to the socket addresses to try, in order."""


async def system_resolver(host: str, port: int) -> list[SocketAddress]:
    """The system's resolver (``getaddrinfo``; an IP literal is its own answer)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys((info[0], info[4]) for info in infos))  # type: ignore[misc]


class HostsFile:
    """``--hosts FILE``: names listed in a hosts(5)-format file resolve to its addresses, every
    other name through :func:`system_resolver`. The file is read at every lookup (as glibc reads
    /etc/hosts), so a test can add names while the proxy runs. A seam for tests: the proxy's
    own resolution path, with the answers a test needs (a name resolving to a private address)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lookup()  # a missing or unreadable file is an error now, not at the first request

    def lookup(self) -> dict[str, list[str]]:
        """``{normalised name: [addresses in file order]}``.

        :raises OSError: the file cannot be read. :raises InvalidOrigin: a bad line (named).
        """
        names: dict[str, list[str]] = {}
        with open(self.path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                fields = line.partition("#")[0].split()
                if not fields:
                    continue
                if len(fields) < 2 or not is_ip(fields[0]):
                    raise InvalidOrigin(
                        f"{self.path}:{number}: give 'ADDRESS NAME...', got {line.strip()!r}"
                    )
                for name in fields[1:]:
                    names.setdefault(normalize_host(name), []).append(fields[0])
        return names

    async def __call__(self, host: str, port: int) -> list[SocketAddress]:
        try:
            names = self.lookup()
        except (OSError, InvalidOrigin) as exc:  # changed since the start: this request fails
            raise OSError(f"--hosts {self.path}: {exc}") from None
        try:
            addresses = names.get(normalize_host(host))
        except InvalidHost:
            addresses = None
        if not addresses:
            return await system_resolver(host, port)
        found: list[SocketAddress] = []
        for address in addresses:
            found += await system_resolver(address, port)
        return found


async def open_upstream(
    decision: Decision, permit: Sequence[IPNetwork], resolve: Resolver
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the decided destination: resolve it once; for a guarded one check every
    address (:func:`forbidden_address`); then connect to exactly those socket addresses, in
    order (never by name again: what is connected to is what was checked)."""
    addresses = await resolve(decision.host, decision.port)
    if decision.guard:
        for _family, sockaddr in addresses:
            why = forbidden_address(sockaddr[0], permit)
            if why is not None:
                raise ForbiddenAddress(f"{decision.host} resolves to {why}")
    loop = asyncio.get_running_loop()
    error: OSError = OSError(f"{decision.host} has no address")
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:  # cancelled (the connect timeout): no socket left behind
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)
    raise error
