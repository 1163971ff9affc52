"""The one error root of cubicle, shared by the guest agent and the host.

It lives in the guest package because ``guest`` is installable alone (the image installs it
without openai or docker) while the host packages import it; every cubicle exception, on either
side, derives from :class:`CubicleError`::

    CubicleError                      catch this to catch everything cubicle raises
    ├── ProtocolError                 a frame or message broke the wire protocol (local side)
    └── GuestError                    the guest agent answered with a structured error
                                      {code, message, details}
    (host packages add their own branches: cubicle.drivers.errors, cubicle.orchestrator.errors)

Messages name what failed, the identifiers, the limit and what was seen; the remedy, when there
is one, is in ``.hint`` so a CLI can print it and tests can assert on it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CubicleError", "GuestError", "ProtocolError"]


class CubicleError(Exception):
    """Root of every cubicle error.

    :param message: what failed, with identifiers, the limit and what was seen.
    :param hint: an optional remedy, kept apart from the message.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ProtocolError(CubicleError):
    """A frame or message violated the protocol (bad magic, oversized, malformed JSON, wrong id)."""


class GuestError(CubicleError):
    """The guest agent refused or failed a request and said why.

    :param code: one of :data:`cubicle_guest.protocol.ERROR_CODES` (``unknown_key``,
    ``out_of_bounds`` …).
    :param op: the operation that failed (``click``, ``screenshot`` …), when known.
    :param details: structured context from the guest (the offending key, the limit …).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        op: str | None = None,
        details: dict[str, Any] | None = None,
        hint: str | None = None,
    ) -> None:
        text = f"{op}: {message}" if op else message
        super().__init__(f"{text} [{code}]", hint=hint)
        self.code = code
        self.op = op
        self.reason = message
        self.details = details or {}
