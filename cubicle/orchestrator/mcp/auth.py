"""The HTTP transport's bearer token: where it comes from, where the user reads it, its check.

The token is ``CUBICLE_MCP_TOKEN`` when set (at least 16 characters, no spaces), else a new
random one. The server writes it to a file only the user can read (mode 0600,
:func:`write_token`) and names that file on stderr, so a client configuration can read it. Every
HTTP request must carry ``Authorization: Bearer <token>`` (compared in constant time); any other
request is answered 401 before it reaches the MCP app (:class:`BearerGuard`).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from cubicle.orchestrator.errors import ConfigError

__all__ = ["TOKEN_ENV", "BearerGuard", "resolve_token", "write_token"]

TOKEN_ENV = "CUBICLE_MCP_TOKEN"  # noqa: S105 — the variable's name, not a token
MIN_TOKEN_CHARS = 16


def resolve_token(environ: Mapping[str, str] | None = None) -> str:
    """``CUBICLE_MCP_TOKEN`` when set, else a new random token.

    :raises ConfigError: the variable holds a token shorter than 16 characters or with spaces.
    """
    env = os.environ if environ is None else environ
    given = env.get(TOKEN_ENV, "")
    if not given:
        return "cubicle-mcp-" + secrets.token_urlsafe(32)
    if len(given) < MIN_TOKEN_CHARS or any(c.isspace() for c in given):
        raise ConfigError(
            f"{TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} characters without spaces"
        )
    return given


def write_token(path: Path, token: str) -> None:
    """Write ``token`` (and a newline) to ``path``, readable by the user alone (0600), replacing
    any previous file atomically; parent folders are created (0700)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(token + "\n")
    os.replace(temporary, path)


class BearerGuard:
    """ASGI middleware: HTTP requests without the right bearer token get a 401; the rest (and
    lifespan events) go to ``app``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": "unauthorized",
                "error_description": "send 'Authorization: Bearer <token>' with the token "
                "cubicle mcp --http wrote (or CUBICLE_MCP_TOKEN)",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="cubicle-mcp"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _allowed(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = bytes(value).partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    given.strip(), self._token
                )
        return False
