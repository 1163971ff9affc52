"""The agent loop's side of a hand-over: ``before_action`` waits while a person has control.

A person takes control of a sandbox with ``cubicle view ID --takeover`` or the view page's
button; the sandbox's view server then records mode ``takeover`` in its state file
(:mod:`cubicle.orchestrator.view_servers`). :class:`HandoverGate` wraps the loop's
``before_action``: each action first waits until no person holds control — the SDK's run is not
ended (a non-True answer would end it), it is paused — then is judged as before. While waiting it
checks ``cancelled`` (the SDK's callable) and answers ``False`` when the run was cancelled, so a
cancel still ends the run. A view server that is gone (sandbox down, server killed) holds nothing.

Each hand-over is reported once through ``on_event``: ``("taken", {...})`` when the gate first
sees a person in control, ``("released", {"held_s": ..., "person_actions": [...]})`` when control
comes back — the clicks (button, x, y), key presses (never which key) and pastes (never the
text) the person sent through the view meanwhile (:mod:`cubicle.orchestrator.view.inputs`,
:mod:`cubicle.orchestrator.view.paste`); the run's trajectory records them.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

from cubicle.orchestrator.provider import Provider
from cubicle.orchestrator.view.control import open_view
from cubicle.orchestrator.view.inputs import read_inputs
from cubicle.orchestrator.view_servers import check_sandbox_id, input_path, read_state
from cubicle_guest.client import AgentClient

__all__ = ["HandoverGate", "lend_agent", "recorded_gate", "take_over"]

POLL_S: Final = 0.05
A = TypeVar("A")
EventSink = Callable[[str, dict[str, Any]], object]


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
        lend: Callable[[], Callable[[], object]] | None = None,
    ) -> None:
        self.sandbox_id = check_sandbox_id(sandbox_id)
        self.cancelled = cancelled
        self.on_event = on_event
        self.lend = lend
        """Called when a person takes control; what it returns is called before the gate
        opens again (released or cancelled): :func:`lend_agent`."""
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
        started, since = time.monotonic(), time.time()
        self.handovers += 1
        self._emit("taken", {"by": "person", "sandbox": self.sandbox_id})
        take_back = self.lend() if self.lend is not None else None
        try:
            while self.held():
                if self.cancelled():
                    self._emit("cancelled", {"held_s": round(time.monotonic() - started, 3)})
                    return False
                self._wake.wait(self.poll_s)
        finally:
            if take_back is not None:
                take_back()
        actions = [
            {key: value for key, value in event.items() if key != "at"}
            | {"after_s": round(float(event["at"]) - since, 3)}
            for event in read_inputs(input_path(self.sandbox_id), since, time.time())
        ]
        self._emit(
            "released",
            {
                "by": "person",
                "held_s": round(time.monotonic() - started, 3),
                "person_actions": actions,
            },
        )
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


class _Recorder(Protocol):
    def event(self, kind: str, **fields: Any) -> dict[str, Any]: ...


def lend_agent(desktop: object, agent: AgentClient) -> Callable[[], Callable[[], object]] | None:
    """For a gate's ``lend``: while a person holds control, the run's ``agent`` connection is
    let go when ``desktop``'s agent takes one connection at a time (a VM's channel), so the
    person's paste and other tools can reach the agent; before the gate opens, ``agent`` carries
    on over a new connection (``desktop.connect()``, hello done). ``None`` where the agent takes
    several connections (Docker) or ``desktop`` is no sandbox: the connection is kept."""
    provider = getattr(desktop, "provider", None)
    connect = getattr(desktop, "connect", None)
    if not isinstance(provider, Provider) or provider.agent_takes_several_connections():
        return None
    if not callable(connect):
        return None

    def lend() -> Callable[[], object]:
        agent.close()
        return lambda: agent.adopt(connect())

    return lend


def recorded_gate(
    desktop: object,
    recorder: _Recorder,
    cancelled: Callable[[], bool],
    agent: AgentClient | None = None,
) -> HandoverGate | None:
    """The hand-over gate of a run on ``desktop`` (a sandbox: anything with a sandbox ``id``),
    writing each hand-over to the trajectory as a ``handover`` event (``state``: ``taken`` |
    ``released`` | ``cancelled``, ``by``, ``held_s``). ``None`` when ``desktop`` is no sandbox.
    With the run's ``agent``, the gate lends its connection while held (:func:`lend_agent`)."""
    sandbox_id = getattr(desktop, "id", None)
    if not isinstance(sandbox_id, str):
        return None
    try:
        check_sandbox_id(sandbox_id)
    except ValueError:
        return None
    return HandoverGate(
        sandbox_id,
        cancelled=cancelled,
        on_event=lambda what, detail: recorder.event("handover", state=what, **detail),
        lend=lend_agent(desktop, agent) if agent is not None else None,
    )


def take_over(gate: HandoverGate, recorder: _Recorder, reason: str) -> str:
    """Hand control to a person now (``cubicle run --takeover-on-stall``): start the view in
    takeover mode, record a ``handover`` event ``requested`` with ``reason``, and tell the
    terminal where to look. The next action waits at ``gate`` until the person releases.

    :return: the one-time URL of the view.
    """
    link = open_view(gate.sandbox_id, mode="takeover")
    recorder.event("handover", state="requested", by="cubicle", reason=reason)
    print(
        f"cubicle: {reason}\ncubicle: you have control of {gate.sandbox_id}: {link.url}\n"
        f"cubicle: give it back from the page or with: cubicle view {gate.sandbox_id} --release",
        file=sys.stderr,
        flush=True,
    )
    return link.url
