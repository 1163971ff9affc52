"""The Host header check of ``cubicle serve`` (issue 38, SV2): a loopback server answers only
requests addressed to its loopback name, so a web page that rebinds its own domain name to
127.0.0.1 cannot reach the API as same-origin (it would still lack the token; this is defence in
depth). A server bound beyond loopback (``--allow-remote``) takes any Host: the names people
reach the machine by are not known to it, and the token is its gate."""

from __future__ import annotations

import ipaddress

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from cubicle.orchestrator.serve.errors import ApiError

__all__ = ["HostCheck", "allowed_hosts", "host_of"]


def allowed_hosts(bind: str) -> frozenset[str] | None:
    """The Host names (lower case, IPv6 in brackets, no port) a server bound to ``bind`` answers;
    ``None``: any (not a loopback address)."""
    if bind == "localhost":
        return frozenset({"localhost", "127.0.0.1"})
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        return None
    if not address.is_loopback:
        return None
    literal = f"[{address.compressed}]" if address.version == 6 else address.compressed
    return frozenset({literal, "localhost"})


def host_of(header: str) -> str:
    """The host part of a Host header (lower case; an IPv6 literal keeps its brackets)."""
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        return header[: end + 1] if end > 0 else header
    name, sep, port = header.rpartition(":")
    return name if sep and port.isdigit() else header


class HostCheck:
    """ASGI layer: a request whose Host is not one of ``hosts`` gets a 400 in the API's shape."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = Headers(scope=scope).get("host", "")
            if host_of(given) not in self.hosts:
                names = ", ".join(sorted(self.hosts))
                error = ApiError(
                    400,
                    f"Host {given!r} is not this server's address (it answers {names})",
                    param="Host",
                    code="invalid_host",
                )
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)
