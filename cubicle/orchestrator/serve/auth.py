"""The server's one bearer token: from ``CUBICLE_API_TOKEN``, else generated (and printed once).

The same token guards the API and the console's data calls (the console page itself holds no
data; it reads the token from its URL fragment, which browsers never send). Comparison is
constant-time; a missing or wrong token is a 401 in the API's error shape.
"""

from __future__ import annotations

import hmac
import os
import secrets

from starlette.requests import HTTPConnection

from cubicle.orchestrator.serve.errors import ApiError

__all__ = ["TOKEN_ENV", "check_bearer", "resolve_token"]

TOKEN_ENV = "CUBICLE_API_TOKEN"  # noqa: S105 — the variable's name, not a token
MIN_TOKEN_CHARS = 16


def resolve_token(environ: dict[str, str] | None = None) -> tuple[str, bool]:
    """``(token, generated)``: ``CUBICLE_API_TOKEN`` when set, else a new random one.

    :raises ValueError: the variable holds a token shorter than 16 characters or with spaces
        (a guessable token is refused, not used); the message names the variable.
    """
    env = os.environ if environ is None else environ
    given = env.get(TOKEN_ENV)
    if given is None or given == "":
        return "cubicle-" + secrets.token_urlsafe(32), True
    if len(given) < MIN_TOKEN_CHARS or any(c.isspace() for c in given):
        raise ValueError(
            f"{TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} characters without spaces"
        )
    return given, False


def check_bearer(conn: HTTPConnection, token: str) -> None:
    """Raise a 401 unless the request carries ``Authorization: Bearer <token>``."""
    header = conn.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value:
        raise ApiError(
            401,
            "Missing bearer token: send 'Authorization: Bearer <token>' (the token cubicle "
            f"serve printed at start, or {TOKEN_ENV}).",
            type="invalid_request_error",
            code="missing_api_key",
        )
    if not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise ApiError(
            401,
            "Incorrect API key provided for cubicle serve.",
            type="invalid_request_error",
            code="invalid_api_key",
        )
