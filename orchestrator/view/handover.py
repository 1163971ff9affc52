"""The agent loop's side of a hand-over: ``before_action`` waits while a person has control.

A person takes control of a sandbox with ``cubicle view ID --takeover`` or the view page's
button; the sandbox's view server then records mode ``takeover`` in its state file
(:mod:`orchestrator.view.state`). :class:`HandoverGate` wraps the loop's ``before_action``: each
action first waits until no person holds control — the SDK's run is not ended (a non-True answer
would end it), it is paused — then is judged as before. While waiting it checks ``cancelled``
(the SDK's callable) and answers ``False`` when the run was cancelled, so a cancel still ends the
run. A view server that is gone (sandbox down, server killed) holds nothing.

Each hand-over is reported once through ``on_event``: ``("taken", {...})`` when the gate first
sees a person in control, ``("released", {"held_s": ...})`` when control comes back; the run's
trajectory records them (the person's actions happen between the two).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from orchestrator.view.state import check_sandbox_id, read_state

__all__ = ["HandoverGate"]

POLL_S: Final = 0.05
A = TypeVar("A")
EventSink = Callable[[str, dict[str, Any]], None]


class HandoverGate:
    """Pauses an agent loop while a person controls ``sandbox_id`` (see the module docstring).

    :param cancelled: the SDK's ``cancelled`` callable (checked while waiting).
    :param on_event: told ``taken`` and ``released`` (with ``held_s``).
    :param poll_s: how often the view state is read while waiting.
    """

    def __init__(
        self,
        sandbox_id: str,
        *,
        cancelled: Callable[[], bool] = lambda: False,
        on_event: EventSink | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.sandbox_id = check_sandbox_id(sandbox_id)
        self.cancelled = cancelled
        self.on_event = on_event
        self.poll_s = poll_s
        self.handovers = 0
        """How many hand-overs this gate waited through."""
        self._wake = threading.Event()

    def held(self) -> bool:
        """True while a person has control (the view server is in takeover mode)."""
        state = read_state(self.sandbox_id)
        return state is not None and state.mode == "takeover"

    def wait(self) -> bool:
        """Block while a person has control. :return: False when cancelled while waiting."""
        if not self.held():
            return True
        started = time.monotonic()
        self.handovers += 1
        self._emit("taken", {"by": "person", "sandbox": self.sandbox_id})
        while self.held():
            if self.cancelled():
                self._emit("cancelled", {"held_s": round(time.monotonic() - started, 3)})
                return False
            self._wake.wait(self.poll_s)
        self._emit("released", {"by": "person", "held_s": round(time.monotonic() - started, 3)})
        return True

    def wrap(self, before_action: Callable[[A], bool] | None) -> Callable[[A], bool]:
        """``before_action`` that first waits out a hand-over (``None``: allow every action)."""

        def gated(action: A) -> bool:
            if not self.wait():
                return False
            return True if before_action is None else before_action(action) is True

        return gated

    def _emit(self, what: str, detail: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(what, detail)
