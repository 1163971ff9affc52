"""The browser-side rules of cubicle's pages (the live view, serve's console): one
Content-Security-Policy builder and the headers every response of those servers carries.

Each page's policy starts from nothing (``default-src 'none'``) and names only what the page
needs; docs/security.md lists each page's sources and why. No page has inline scripts or
styles: scripts and style sheets are files of the server (``'self'``), so an injected
``<script>`` or ``style`` attribute does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BASE_HEADERS", "PageHeaders", "content_security_policy"]

BASE_HEADERS: Final[Mapping[str, str]] = {
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
"""Headers of every response: no referrer leaves the page, no type sniffing, nothing cached."""

_FIXED: Final = (
    ("default-src", ("'none'",)),
    ("script-src", ("'self'",)),
    ("style-src", ("'self'",)),
    ("base-uri", ("'none'",)),
    ("form-action", ("'none'",)),
    ("frame-ancestors", ("'none'",)),
)


def content_security_policy(
    *, img: Sequence[str] = ("'self'",), connect: Sequence[str] = ("'self'",)
) -> str:
    """The policy of a page whose scripts and styles are its server's files, that loads images
    from ``img`` and connects (fetch, WebSocket) to ``connect``; everything else is refused,
    and no other site may frame the page."""
    directives = [*_FIXED, ("img-src", tuple(img)), ("connect-src", tuple(connect))]
    for name, sources in directives:
        if not sources:
            raise ValueError(f"{name} needs at least one source ('none' to allow nothing)")
        for source in sources:
            if not source or any(c in source for c in ";, \t\r\n"):
                raise ValueError(f"{name}: {source!r} is not one CSP source")
    return "; ".join(f"{name} {' '.join(sources)}" for name, sources in directives)


class PageHeaders:
    """ASGI middleware: every HTTP response gets :data:`BASE_HEADERS` and ``policy`` as its
    Content-Security-Policy (responses that set their own keep theirs). WebSockets pass."""

    def __init__(self, app: ASGIApp, *, policy: str) -> None:
        self.app = app
        self.extra = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in {**BASE_HEADERS, "Content-Security-Policy": policy}.items()
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(n, v) for n, v in self.extra if n not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
