"""A local JSON-over-HTTP server for the scripted model stand-ins (offline, keyless runs).

:class:`StandIn` serves ``POST`` requests on ``127.0.0.1`` (a port the OS picks) and hands each
JSON body to ``answer(path, body)``, which returns the JSON to send (HTTP 200) or raises
:class:`~cubicle.drivers.errors.ScriptViolation` (HTTP 400, the reason in the body, recorded in
:attr:`StandIn.failures`). Errors carry ``x-should-retry: false`` so a real client does not retry.
Every body is kept in :attr:`StandIn.requests`. Used by :mod:`cubicle.drivers.scripted_messages`
(Anthropic's Messages API) and :mod:`cubicle.drivers.scripted_gemini` (Gemini's generateContent).

The server thread is the stand-in's: ``__exit__`` / :meth:`close` stop it and close the socket;
a clean ``with`` exit raises the first recorded failure.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from cubicle.drivers.errors import DriverError, ScriptViolation

__all__ = ["Answer", "ScriptedStandIn", "StandIn"]

Answer = Callable[[str, dict[str, Any]], dict[str, Any]]
"""``answer(path, body)`` → the JSON reply; raises ``ScriptViolation`` for a request off script."""

MAX_BODY_BYTES = 512 * 1024 * 1024

T = TypeVar("T")


class StandIn:
    """Serve ``answer`` on ``127.0.0.1``; use as a context manager."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.failures: list[DriverError] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        if self._server is None:
            raise RuntimeError("the stand-in is not running")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        handler = type("_Handler", (_Handler,), {"stand_in": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="cubicle-stand-in", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
        if exc_type is None and self.failures:
            raise self.failures[0]

    def handle(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One request: the status and the JSON to send (serialised: one turn at a time)."""
        with self._lock:
            self.requests.append(body)
            try:
                return 200, self.answer(path, body)
            except ScriptViolation as exc:
                self.failures.append(exc)
                return 400, {"type": "error", "error": {"type": "off_script", "message": str(exc)}}


class _Handler(BaseHTTPRequestHandler):
    stand_in: StandIn

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            self._send(413, {"error": {"message": f"body over {MAX_BODY_BYTES} bytes"}})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError as exc:
            self._send(400, {"error": {"message": f"the body is not JSON: {exc}"}})
            return
        if not isinstance(body, dict):
            self._send(400, {"error": {"message": "the body is not a JSON object"}})
            return
        status, reply = self.stand_in.handle(self.path, body)
        self._send(status, reply)

    def _send(self, status: int, reply: dict[str, Any]) -> None:
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if status != 200:
            self.send_header("x-should-retry", "false")
        self.end_headers()
        self.wfile.write(data)


class ScriptedStandIn(Generic[T]):
    """What every scripted stand-in shares: its ``turns`` (the last one the final text), its
    :class:`StandIn` server, the turn the next request gets, and off-script reasons naming that
    turn. A subclass implements :meth:`answer`.

    :param what: the API's name for errors (``"a Gemini script"``).
    :param on_turn: called with the turn's index before each turn is answered, once the request
        was found on script (the drill looks at the screen there); what it raises makes the
        request off script (HTTP 400), with that error as the recorded failure's ``__cause__``.
    """

    def __init__(
        self,
        turns: Sequence[T | str],
        *,
        name: str,
        what: str,
        on_turn: Callable[[int], None] | None = None,
    ) -> None:
        if not turns or not isinstance(turns[-1], str):
            raise ValueError(f"{what} ends with the final text (a string)")
        self.turns = list(turns)
        self.name = name
        self.on_turn = on_turn
        self._next = 0
        self._server = StandIn(self.answer)

    @property
    def finished(self) -> bool:
        """Whether every turn was served."""
        return self._next >= len(self.turns)

    def begin_turn(self) -> None:
        """Run ``on_turn`` for the turn about to be answered (subclasses call it)."""
        if self.on_turn is None:
            return
        try:
            self.on_turn(self._next)
        except Exception as exc:
            raise self.violation(f"on_turn: {exc}") from exc

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The reply to one request (raise :meth:`violation` for one off script)."""
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        return self._server.base_url

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body received, in order."""
        return self._server.requests

    @property
    def failures(self) -> list[DriverError]:
        """Every request found off script, in order."""
        return self._server.failures

    def __enter__(self) -> Self:
        self._server.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.__exit__(exc_type, exc, tb)

    def violation(self, reason: str) -> ScriptViolation:
        """An off-script request at the current turn."""
        return ScriptViolation(self.name, self._next, reason)
