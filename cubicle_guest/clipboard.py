"""The X clipboard, owned by the agent's own X client (feature ``clipboard``).

:class:`Clipboard` holds one X connection and one unmapped window of its own, and a thread that
serves them. ``set`` makes that window the owner of the selection (``CLIPBOARD`` or ``PRIMARY``)
with the text, and the thread answers every paste (``SelectionRequest``: ``TARGETS``,
``UTF8_STRING``, ``text/plain;charset=utf-8``, ``STRING``, ``TEXT``, ``TIMESTAMP``) for as long
as the agent runs, until another program takes the selection (``SelectionClear``). ``get``
answers the agent's own text directly, and otherwise asks the owner for ``UTF8_STRING`` (then
``STRING``) into a property of its window. Texts are at most
:data:`cubicle_guest.protocol.MAX_CLIPBOARD_BYTES` of UTF-8: one property, no ``INCR``
transfer. Over it, ``set`` and ``get`` raise ``too_large`` naming the limit (``get``: an owner
offering a longer text in one property, or answering with ``INCR``).

Every X request of this connection is made on the thread (callers hand it work and wait), so
the connection is never used from two threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Final, TypeVar

from Xlib import X, Xatom, display, error
from Xlib.protocol import event

from cubicle_guest import protocol
from cubicle_guest.errors import GuestError

__all__ = ["CONVERT_TIMEOUT_S", "Clipboard"]

log = logging.getLogger("cubicle_guest.clipboard")

CONVERT_TIMEOUT_S: Final = 3.0
"""How long ``get`` waits for another program to hand over the selection's text (seconds)."""
_CALL_TIMEOUT_S: Final = 10.0
T = TypeVar("T")


class Clipboard:
    """The selections of one X display, owned by this object's own X client.

    :raises GuestError: ``x11_error`` if the display cannot be opened.
    """

    def __init__(self, display_name: str | None = None) -> None:
        try:
            self._display = display.Display(display_name)
        except (error.DisplayError, error.ConnectionClosedError, OSError) as exc:
            raise GuestError("x11_error", f"cannot open X display {display_name!r}: {exc}") from exc
        self._display.set_error_handler(lambda *_args: None)  # a requestor gone: not ours
        atom = self._display.intern_atom
        self._selections = {"clipboard": atom("CLIPBOARD"), "primary": Xatom.PRIMARY}
        self._utf8 = atom("UTF8_STRING")
        self._targets = atom("TARGETS")
        self._timestamp = atom("TIMESTAMP")
        self._incr = atom("INCR")
        self._text_targets = {self._utf8, atom("TEXT"), atom("text/plain;charset=utf-8")}
        self._latin_targets = {Xatom.STRING, atom("text/plain")}
        self._property = atom("CUBICLE_CLIPBOARD")
        self._clock = atom("CUBICLE_CLOCK")
        self._window = self._display.screen().root.create_window(
            -10, -10, 1, 1, 0, X.CopyFromParent, event_mask=X.PropertyChangeMask
        )
        self._display.flush()
        self._owned: dict[int, tuple[bytes, int]] = {}
        """selection atom → (UTF-8 text, the server time we took it at)."""
        self._calls: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._wake_read, self._wake_write = os.pipe()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="clipboard", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving (the selections this client owned are released) (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        os.write(self._wake_write, b"x")
        self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self._display.close()
        os.close(self._wake_read)
        os.close(self._wake_write)

    def set(self, text: str, selection: str = "clipboard") -> int:
        """Own ``selection`` with ``text``; return its size in UTF-8 bytes.

        :raises GuestError: ``too_large`` over the limit, ``x11_error`` if ownership failed.
        """
        data = text.encode("utf-8")
        if len(data) > protocol.MAX_CLIPBOARD_BYTES:
            raise GuestError(
                "too_large",
                f"clipboard text is {len(data)} bytes of UTF-8, over the limit of "
                f"{protocol.MAX_CLIPBOARD_BYTES}",
                details={"size": len(data), "limit": protocol.MAX_CLIPBOARD_BYTES},
            )
        atom = self._selections[selection]
        self._call(lambda: self._take(atom, data, selection))
        return len(data)

    def get(self, selection: str = "clipboard") -> tuple[str, str | None]:
        """The text of ``selection`` and who owns it (``agent``, ``other`` or ``None``: nobody;
        the text is then ``""``, as it is when the owner offers no text)."""
        atom = self._selections[selection]
        return self._call(lambda: self._fetch(atom, selection))

    # -- the thread ---------------------------------------------------------------------------

    def _call(self, work: Callable[[], T]) -> T:
        if self._closed.is_set():
            raise GuestError("x11_error", "the clipboard is closed")
        future: Future[T] = Future()
        self._calls.put((work, future))
        os.write(self._wake_write, b"x")
        try:
            return future.result(timeout=_CALL_TIMEOUT_S)
        except TimeoutError as exc:
            raise GuestError("timeout", "the clipboard did not answer in time") from exc

    def _serve(self) -> None:
        connection = self._display.fileno()
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([connection, self._wake_read], [], [], 1.0)
                if self._wake_read in ready:
                    os.read(self._wake_read, 4096)
                self._drain()
                while not self._calls.empty():
                    work, future = self._calls.get()
                    try:
                        future.set_result(work())
                    except Exception as exc:  # handed to the caller
                        future.set_exception(exc)
            except (error.ConnectionClosedError, OSError):
                self._closed.set()
        while not self._calls.empty():
            _work, future = self._calls.get()
            future.set_exception(
                GuestError("x11_error", "the X connection of the clipboard closed")
            )

    def _drain(self) -> None:
        while self._display.pending_events():
            self._dispatch(self._display.next_event())

    def _wait_for(self, wanted: Callable[[Any], bool], timeout: float, what: str) -> Any:
        """The first event ``wanted`` accepts, serving the others meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            while self._display.pending_events():
                found = self._display.next_event()
                if wanted(found):
                    return found
                self._dispatch(found)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise GuestError("timeout", f"no answer from the X server or owner ({what})")
            select.select([self._display.fileno()], [], [], remaining)

    def _dispatch(self, found: Any) -> None:
        """Serve one event; a paste that fails (a requestor gone, a bad property) is that
        paste's failure only: the thread goes on serving."""
        try:
            if found.type == X.SelectionClear and found.window.id == self._window.id:
                self._owned.pop(found.atom, None)
            elif found.type == X.SelectionRequest:
                self._answer(found)
        except (error.XError, ValueError, TypeError, AttributeError) as exc:
            log.info("clipboard: an event could not be served: %s", exc)

    def _answer(self, request: Any) -> None:
        prop = request.property or request.target  # X.NONE from an obsolete client
        owned = self._owned.get(request.selection)
        given = False
        if owned is not None:
            data, taken = owned
            target, requestor = request.target, request.requestor
            if target == self._targets:
                offered = [self._targets, self._timestamp, *self._text_targets]
                requestor.change_property(prop, Xatom.ATOM, 32, [*offered, *self._latin_targets])
                given = True
            elif target == self._timestamp:
                requestor.change_property(prop, Xatom.INTEGER, 32, [taken])
                given = True
            elif target in self._text_targets:
                requestor.change_property(prop, self._utf8, 8, data)
                given = True
            elif target in self._latin_targets:
                latin = data.decode("utf-8").encode("latin-1", "replace")
                requestor.change_property(prop, Xatom.STRING, 8, latin)
                given = True
        notify = event.SelectionNotify(
            time=request.time,
            requestor=request.requestor,
            selection=request.selection,
            target=request.target,
            property=prop if given else X.NONE,
        )
        request.requestor.send_event(notify)
        self._display.flush()

    def _server_time(self) -> int:
        """A server timestamp (ICCCM: never CurrentTime for a selection's owner)."""
        self._window.change_property(self._clock, Xatom.STRING, 8, b"", X.PropModeAppend)
        self._display.flush()
        found = self._wait_for(
            lambda e: (
                e.type == X.PropertyNotify
                and e.window.id == self._window.id
                and e.atom == self._clock
            ),
            CONVERT_TIMEOUT_S,
            "a server timestamp",
        )
        return int(found.time)

    def _take(self, atom: int, data: bytes, selection: str) -> None:
        taken = self._server_time()
        self._owned[atom] = (data, taken)
        self._window.set_selection_owner(atom, taken)
        owner = self._display.get_selection_owner(atom)
        if getattr(owner, "id", owner) != self._window.id:
            self._owned.pop(atom, None)
            raise GuestError("x11_error", f"the X server did not give the agent the {selection}")

    def _fetch(self, atom: int, selection: str) -> tuple[str, str | None]:
        owner = self._display.get_selection_owner(atom)
        owner_id = getattr(owner, "id", owner)
        if not owner_id:
            return "", None
        if owner_id == self._window.id and atom in self._owned:
            return self._owned[atom][0].decode("utf-8"), "agent"
        for target in (self._utf8, Xatom.STRING):
            self._window.delete_property(self._property)
            self._window.convert_selection(atom, target, self._property, X.CurrentTime)
            self._display.flush()
            notify = self._wait_for(
                lambda e: e.type == X.SelectionNotify and e.selection == atom,
                CONVERT_TIMEOUT_S,
                f"the {selection}'s owner did not hand over its text",
            )
            if notify.property == X.NONE:
                continue
            reply = self._window.get_full_property(self._property, X.AnyPropertyType, 65536)
            self._window.delete_property(self._property)
            self._display.flush()
            if reply is None:
                continue
            if reply.property_type == self._incr:
                size = int(reply.value[0]) if len(reply.value) else 0
                raise _too_large(selection, f"a text sent in pieces (INCR), {size} bytes")
            value = reply.value
            raw = value if isinstance(value, bytes) else bytes(value)
            if len(raw) > protocol.MAX_CLIPBOARD_BYTES:
                raise _too_large(selection, f"{len(raw)} bytes of text")
            return raw.decode("utf-8" if target == self._utf8 else "latin-1", "replace"), "other"
        return "", "other"


def _too_large(selection: str, what: str) -> GuestError:
    """``too_large``: the owner of ``selection`` offers ``what``, over the limit the agent
    reads (a selection's text comes in one X property, never in ``INCR`` pieces)."""
    return GuestError(
        "too_large",
        f"the {selection} holds {what}, over the limit of {protocol.MAX_CLIPBOARD_BYTES} bytes "
        "the agent reads",
        details={"limit": protocol.MAX_CLIPBOARD_BYTES},
    )
