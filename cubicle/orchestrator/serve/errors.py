"""API errors in the OpenAI wire shape: ``{"error": {"message", "type", "param", "code"}}``.

Every failure the server answers goes through :class:`ApiError` (raised by the route handlers and
turned into a JSON response by the app's exception handler), so a client built on the ``openai``
package gets the matching ``openai.APIStatusError`` subclass (400 ``BadRequestError``, 401
``AuthenticationError``, 404 ``NotFoundError``, 409 ``ConflictError``, 429 ``RateLimitError``, 501
``InternalServerError``) with ``message``, ``param`` and ``code`` filled in. Never a stack trace.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from cubicle.orchestrator.errors import OrchestratorError

__all__ = ["NO_RETRY", "ApiError", "bad_request", "error_body", "not_found", "not_implemented"]


NO_RETRY = {"x-should-retry": "false"}
"""Headers of every error answer: the ``openai`` client retries 408, 409, 429 and 5xx (501
included) by default, and nothing cubicle serve refuses goes better the second time."""


class ApiError(OrchestratorError):
    """One error answer: HTTP ``status`` plus the OpenAI error object's fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)

    def response(self) -> JSONResponse:
        """The JSON answer, with :data:`NO_RETRY`."""
        return JSONResponse(self.body(), status_code=self.status, headers=NO_RETRY)


def error_body(
    message: str, *, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The wire form of an error (also the ``error`` field of an SSE ``error`` event)."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """400 naming the offending field in ``param`` (dotted path, e.g. ``environment.network``)."""
    return ApiError(400, message, param=param, code=code or "invalid_request_error")


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, f"No {what} found with id {ident!r}.", code="not_found")


def not_implemented(method: str, path: str) -> ApiError:
    """What every endpoint of the API that cubicle does not serve answers (501)."""
    return ApiError(
        501,
        f"{method} {path} is part of the Agents API but cubicle serve does not implement it; "
        "see docs/serve.md for the compatible subset.",
        type="not_implemented_error",
        code="not_implemented",
    )
