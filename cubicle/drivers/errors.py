"""Errors of the host drivers, a branch under the one root
:class:`cubicle_guest.errors.CubicleError`::

    CubicleError
    └── DriverError
        ├── ActionRejected (ValueError)   an action is invalid; refused before anything was sent
        │   └── CoordinateOutOfView       a coordinate outside the image the model saw
        ├── ActionFailed                  the guest (or the way to it) failed an action;
        │   │                             ``.code`` keeps the GuestError code when there is one
        │   └── ActionTimeout (TimeoutError)
        ├── ActionCancelled               ``cancelled()`` was set; the action was not (fully) sent
        ├── ScreenshotMismatch            the guest's image does not match the view geometry
        ├── ViewportError (ValueError)    a bad :class:`cubicle.drivers.viewport.Viewport` setting
        ├── PolicyFileError (ValueError)  a policy file is invalid (``.path``, ``.line``)
        ├── ScriptError (ValueError)      a scripted-model file is invalid (``.path``, ``.turn``)
        └── ScriptViolation               a conversation went off a scripted model's script

Messages name the action, the values seen and the limit; they never echo typed text.
"""

from __future__ import annotations

from cubicle_guest.errors import CubicleError

__all__ = [
    "ActionCancelled",
    "ActionFailed",
    "ActionRejected",
    "ActionTimeout",
    "CoordinateOutOfView",
    "DriverError",
    "PolicyFileError",
    "ScreenshotMismatch",
    "ScriptError",
    "ScriptViolation",
    "SettleOptionError",
    "ViewportError",
]


class DriverError(CubicleError):
    """Base of every error raised by :mod:`drivers`."""


class ActionRejected(DriverError, ValueError):
    """An action failed validation; nothing was sent to the guest.

    :param action: the action type (``click``, ``drag`` …).
    :param reason: what was wrong, with the value seen and the limit.
    """

    def __init__(self, action: str, reason: str, *, hint: str | None = None) -> None:
        super().__init__(f"{action} rejected: {reason}", hint=hint)
        self.action = action
        self.reason = reason


class CoordinateOutOfView(ActionRejected):
    """A coordinate lies outside the image the model saw (model pixels); never clamped."""

    def __init__(self, action: str, x: int, y: int, width: int, height: int) -> None:
        super().__init__(
            action,
            f"coordinate ({x}, {y}) is outside the {width}x{height} screenshot "
            f"(x must be 0..{width - 1}, y 0..{height - 1})",
            hint="coordinates are in the pixel space of the last screenshot the model saw",
        )
        self.x, self.y, self.width, self.height = x, y, width, height


class ActionFailed(DriverError):
    """The guest refused or failed an action, or the connection to it failed.

    :param code: the guest's error code (:data:`cubicle_guest.protocol.ERROR_CODES`) or ``None``
    when
        the failure was the connection or a timeout.
    """

    def __init__(
        self, action: str, reason: str, *, code: str | None = None, hint: str | None = None
    ) -> None:
        suffix = f" [{code}]" if code else ""
        super().__init__(f"{action} failed: {reason}{suffix}", hint=hint)
        self.action = action
        self.reason = reason
        self.code = code


class ActionTimeout(ActionFailed, TimeoutError):
    """The guest did not answer an action within its deadline (the connection is then broken)."""


class ActionCancelled(DriverError):
    """``cancelled()`` returned true, so the driver stopped before sending (the rest of) it."""

    def __init__(self, action: str, stage: str) -> None:
        super().__init__(f"{action} stopped: the run was cancelled {stage}")
        self.action = action
        self.stage = stage


class ScreenshotMismatch(DriverError):
    """The guest returned an image whose size or region differs from the view geometry."""


class ViewportError(DriverError, ValueError):
    """A :class:`cubicle.drivers.viewport.Viewport` does not fit the screen or is malformed."""


class SettleOptionError(DriverError, ValueError):
    """A driver's ``settle`` option is malformed (the message names the option), or the agent
    cannot settle actions."""


class PolicyFileError(DriverError, ValueError):
    """A policy file is invalid.

    :param path: the file.
    :param line: 1-based line of the offending entry (``None`` if the file could not be read).
    """

    def __init__(self, path: str, line: int | None, reason: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"policy file {where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class ScriptError(DriverError, ValueError):
    """A scripted-model file is invalid.

    :param turn: 0-based index of the offending turn, or ``None`` for a file-level problem.
    """

    def __init__(self, path: str, turn: int | None, reason: str) -> None:
        where = f"{path} turn {turn}" if turn is not None else path
        super().__init__(f"script {where}: {reason}")
        self.path = path
        self.turn = turn
        self.reason = reason


class ScriptViolation(DriverError):
    """A request to the scripted model did not match its script (the server answered HTTP 400).

    :param turn: 0-based index of the turn the request was meant to answer.
    """

    def __init__(self, script: str, turn: int, reason: str) -> None:
        super().__init__(f"scripted model {script!r}, request for turn {turn}: {reason}")
        self.script = script
        self.turn = turn
        self.reason = reason
