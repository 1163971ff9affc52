"""A person's paste in the live view: the text of their browser's clipboard becomes the guest's
clipboard and is pasted into the focused application.

The page (``view.js``), in takeover mode only, catches the browser's ``paste`` event (Ctrl+V on
the desktop, or the browser's menu) and posts the event's ``text/plain`` to ``POST /api/paste``
as the raw UTF-8 body, with ``?keys=ctrl+v`` or ``?keys=ctrl+shift+v`` (the chord the person
pressed; a terminal pastes with the second). The view server checks it here
(:func:`read_paste`) and, only while the server is in takeover mode, hands it to
:func:`deliver_paste`: through its own agent connection, the guest's ``CLIPBOARD`` and
``PRIMARY`` selections are set to the text (the agent's X client owns them, so the application
asks the agent for the text: emoji, CJK and newlines land exactly, which VNC's Latin-1 cut text
cannot carry) and the chord is pressed in the guest. The person's action is recorded like their
key presses: ``{"kind": "paste"}``, never the text (:mod:`cubicle.orchestrator.view.inputs`).

Limits: at most :data:`~cubicle_guest.protocol.MAX_CLIPBOARD_BYTES` of UTF-8; an empty text or
a body that is not UTF-8 is refused. On a VM the agent's channel takes one connection at a time:
a run paused at the hand-over lets go of it while the person holds control
(:func:`cubicle.orchestrator.view.handover.lend_agent`); while another process holds it, the
paste fails with an error that says so after :data:`CONNECT_TIMEOUT_S`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cubicle.orchestrator.errors import OrchestratorError
from cubicle.orchestrator.providers import backend_of
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.errors import CubicleError
from cubicle_guest.protocol import MAX_CLIPBOARD_BYTES

__all__ = [
    "CONNECT_TIMEOUT_S",
    "PASTE_CHORDS",
    "Paste",
    "PasteError",
    "deliver_paste",
    "read_paste",
]

PASTE_CHORDS: Final[Mapping[str, Sequence[str]]] = {
    "ctrl+v": ("ctrl", "v"),
    "ctrl+shift+v": ("ctrl", "shift", "v"),
}
"""The chords a paste may press in the guest (``keys`` of ``/api/paste``), by name."""
CONNECT_TIMEOUT_S: Final = 10.0


class PasteError(OrchestratorError):
    """A paste was refused (``status`` 400 or 413: bad input) or not delivered (502)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Paste:
    """A checked paste: ``text`` (non-empty, at most the clipboard's limit) and the ``keys``
    pressed in the guest afterwards."""

    text: str
    keys: Sequence[str]


async def read_paste(
    body: AsyncIterator[bytes], *, content_length: str | None, keys: str | None
) -> Paste:
    """The paste a ``/api/paste`` request carries: its body (read no further than the limit)
    and its ``keys`` query parameter (``None``: Ctrl+V).

    :raises PasteError: 413 over :data:`MAX_CLIPBOARD_BYTES`; 400 empty, not UTF-8, or unknown
        ``keys`` (each message names what was wrong).
    """
    chord = PASTE_CHORDS.get(keys or "ctrl+v")
    if chord is None:
        raise PasteError(f"keys must be one of {', '.join(PASTE_CHORDS)}, not {keys!r}", status=400)
    too_long = PasteError(
        f"the pasted text is over the clipboard's limit of {MAX_CLIPBOARD_BYTES} bytes of UTF-8",
        status=413,
    )
    if (
        content_length is not None
        and content_length.isdigit()
        and (int(content_length) > MAX_CLIPBOARD_BYTES)
    ):
        raise too_long
    data = bytearray()
    async for chunk in body:
        data += chunk
        if len(data) > MAX_CLIPBOARD_BYTES:
            raise too_long
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PasteError(f"the pasted text is not UTF-8: {exc}", status=400) from None
    if not text:
        raise PasteError("nothing to paste: the browser's clipboard holds no text", status=400)
    return Paste(text, chord)


def deliver_paste(sandbox_id: str, paste: Paste) -> None:
    """Set the guest's ``CLIPBOARD`` and ``PRIMARY`` to ``paste.text``, then press
    ``paste.keys`` there and wait, as an agent's keypress does, until the screen settled (the
    text drawn), so the answer comes after the paste landed. Blocking: run it in a worker
    thread.

    :raises PasteError: 502, the sandbox or its agent could not do it (the message says why).
    """
    try:
        sandbox = Sandbox.attach(sandbox_id)
        with sandbox.connect(timeout=CONNECT_TIMEOUT_S) as client:
            for selection in ("clipboard", "primary"):
                client.clipboard_set(paste.text, selection=selection)
            client.keypress(list(paste.keys), settle={})  # the agent's defaults
    except CubicleError as exc:
        busy = (
            " (a VM's agent channel takes one connection at a time: another process, such as "
            "a second run, may hold it)"
            if backend_of(sandbox_id) == "vm"
            else ""
        )
        raise PasteError(f"the paste did not reach {sandbox_id}: {exc}{busy}", status=502) from exc
