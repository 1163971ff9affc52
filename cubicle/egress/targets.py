"""The targets of proxied requests: ``CONNECT host:port`` or an absolute ``http://`` URI, and
the headers a forwarded request carries (hop-by-hop ones dropped both ways)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from cubicle.egress.origins import (
    InvalidOrigin,
    parse_port,
    split_authority,
)

__all__ = [
    "HOP_BY_HOP",
    "LOG_TARGET_CHARS",
    "BadRequest",
    "authority",
    "forwarded_headers",
    "parse_target",
]

LOG_TARGET_CHARS: Final = 200
"""The longest request target a log line or a question shows (characters)."""
HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",
    }
)
"""Headers that concern one connection, never forwarded (with those ``Connection`` names)."""


class BadRequest(ValueError):
    """A request the proxy cannot judge (names what is wrong); answered 400 and logged."""


def parse_target(method: str, target: str) -> tuple[str, int, str | None]:
    """``(host, port, origin-form target)`` of a proxy request-target; the origin-form target is
    ``None`` for ``CONNECT host:port`` and ``/path?query`` for ``http://host[:port]/path?query``.

    :raises BadRequest: naming what is wrong (origin-form, another scheme, user info, bad port).
    """
    shown = target[:LOG_TARGET_CHARS]
    try:
        if method == "CONNECT":
            host, port_text = split_authority(target)
            if port_text is None:
                raise BadRequest(f"CONNECT target {shown!r} is not host:port")
            return host, parse_port(port_text), None
        try:
            url = urlsplit(target)
        except ValueError as exc:
            raise BadRequest(f"{method} target {shown!r}: {exc}") from None
        if url.scheme.lower() != "http" or not url.netloc:
            raise BadRequest(f"{method} target {shown!r} is not an absolute http:// URI")
        if "@" in url.netloc:
            raise BadRequest(f"user info in {shown!r} is not accepted")
        host, port_text = split_authority(url.netloc)
        port = 80 if port_text is None else parse_port(port_text)
    except InvalidOrigin as exc:
        raise BadRequest(f"{method} target {shown!r}: {exc}") from None
    return host, port, urlunsplit(("", "", url.path or "/", url.query, ""))


def authority(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == 80 else f"{shown}:{port}"


def forwarded_headers(
    headers: Iterable[tuple[bytes, bytes]], *, extra_drop: Iterable[bytes] = ()
) -> list[tuple[bytes, bytes]]:
    """``headers`` minus hop-by-hop ones, those the ``Connection`` header names and ``extra``."""
    pairs = list(headers)
    named = {
        token.strip().lower()
        for name, value in pairs
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    drop = HOP_BY_HOP | named | {name.lower() for name in extra_drop}
    return [(name, value) for name, value in pairs if name.lower() not in drop]
