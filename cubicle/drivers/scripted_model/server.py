"""A local stand-in for ``POST /v1/responses`` that plays a script, for offline keyless runs.

::

    with ScriptedModel(load_script("demo.json"), on_turn=hook) as model:
        client = OpenAI(base_url=model.base_url, api_key="drill", max_retries=0)
        ComputerToolset(driver).run(client, {"model": "drill", "input": "go"}, ...)
    # leaving the block raises the first recorded ScriptViolation, if any

The server (stdlib ``ThreadingHTTPServer`` on 127.0.0.1, port chosen by the OS) answers the
n-th request with turn n. Before answering it calls ``on_turn(index, turn, request_body)``
(the embedder waits for windows etc. there; the server knows nothing about the guest), then
checks the request (:mod:`cubicle.drivers.scripted_model.checks`) and fills ``{TOOL_OUTPUT}`` in
the turn with the request's latest function output. A request off script gets HTTP
400 with the reason and is recorded in :attr:`ScriptedModel.failures` (the turn does not advance);
a request after the last turn gets 400 too; an ``on_turn`` failure gets 500. Errors carry
``x-should-retry: false``. ``"stream": true`` requests get SSE (``response.created`` →
``response.output_item.done`` → ``response.completed``).

:class:`ScriptedModel` owns the server thread: ``__exit__`` / :meth:`close` stop it and close
the socket, even when the body failed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from cubicle.drivers.errors import DriverError, ScriptViolation
from cubicle.drivers.scripted_model.checks import check_request, tool_output
from cubicle.drivers.scripted_model.script import TOOL_OUTPUT, Script, Turn, load_script
from cubicle.drivers.scripted_model.wire import response_json, sse_body

__all__ = ["OnTurn", "ScriptedModel"]

OnTurn = Callable[[int, Turn, dict[str, Any]], None]
"""``on_turn(index, turn, request_body)``: runs before turn ``index`` is answered; raising makes
the server answer HTTP 500 and record the failure."""

MAX_BODY_BYTES = 512 * 1024 * 1024


class ScriptedModel:
    """Serve ``script`` on ``127.0.0.1``; use as a context manager.

    :param script: a :class:`Script` or a path to a script file.
    :param on_turn: hook run before each turn is answered (see :data:`OnTurn`).
    :param raise_on_exit: on a clean ``with`` exit, raise the first recorded failure.
    :param start: the first turn served (a resumed run: the turns before it were answered by
        an earlier server); its request must end with the resumed run's fresh observation
        (a user message with a screenshot) instead of the previous call's output.
    :param skip_actions: leave out the first this many actions of turn ``start`` (they were
        performed before the run was interrupted: the model saw them done on the screen); a
        batch left empty becomes one ``screenshot`` action.
    """

    def __init__(
        self,
        script: Script | str,
        *,
        on_turn: OnTurn | None = None,
        raise_on_exit: bool = True,
        start: int = 0,
        skip_actions: int = 0,
    ) -> None:
        self.script = script if isinstance(script, Script) else load_script(script)
        self.on_turn = on_turn
        self.raise_on_exit = raise_on_exit
        self.prefix = re.sub(r"[^A-Za-z0-9]+", "_", self.script.name).strip("_") or "script"
        self.requests: list[dict[str, Any]] = []
        """Every request body received (also off-script ones), in order."""
        self.failures: list[DriverError] = []
        """Every violation and hook failure, in order."""
        if not 0 <= start <= len(self.script.turns):
            raise ValueError(
                f"start {start} is outside the script's {len(self.script.turns)} turns"
            )
        self.first_turn = start
        self.skip_actions = skip_actions
        self._next = start
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        handler = type("_Handler", (_Handler,), {"model": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # how fast close() stops it
            name=f"scripted-model-{self.prefix}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start() if self._server is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
        if exc is not None:
            for failure in self.failures:
                exc.add_note(f"scripted model: {failure}")
        elif self.raise_on_exit:
            self.raise_for_failures()

    # -- state -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the scripted model is not running; use 'with ScriptedModel(...)'")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``base_url`` for ``openai.OpenAI`` / ``AsyncOpenAI``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def turns_served(self) -> int:
        with self._lock:
            return self._next

    @property
    def finished(self) -> bool:
        """Whether every turn has been answered."""
        return self.turns_served == len(self.script.turns)

    def raise_for_failures(self) -> None:
        """Raise the first recorded failure (later ones attached as notes)."""
        if self.failures:
            first = self.failures[0]
            for other in self.failures[1:]:
                first.add_note(f"also: {other}")
            raise first

    def assert_finished(self) -> None:
        """Raise :class:`ScriptViolation` unless every turn was answered and nothing failed."""
        self.raise_for_failures()
        served = self.turns_served
        if served != len(self.script.turns):
            raise ScriptViolation(
                self.script.name,
                served,
                f"only {served} of {len(self.script.turns)} turns were requested",
            )

    # -- serving (called from the handler threads) -------------------------------------------

    def _answer(self, body: object, stream: bool) -> tuple[int, bytes, str]:
        """Status, payload and content type for one request; serialised by the lock."""
        with self._lock:
            index = self._next
            if isinstance(body, dict):
                self.requests.append(body)
            if index >= len(self.script.turns):
                return self._fail(
                    400,
                    ScriptViolation(
                        self.script.name,
                        index,
                        f"the script has {len(self.script.turns)} turns; "
                        "this request is past its end",
                    ),
                )
            problem = check_request(
                self.script, self.prefix, index, body, resumed=index == self.first_turn > 0
            )
            if problem is not None:
                return self._fail(400, ScriptViolation(self.script.name, index, problem))
            assert isinstance(body, dict)
            turn = _with_output(self.script.turns[index], tool_output(body))
            if index == self.first_turn and self.skip_actions and turn.actions is not None:
                rest = turn.actions[self.skip_actions :] or ({"type": "screenshot"},)
                turn = dataclasses.replace(turn, actions=rest)
            if self.on_turn is not None:
                try:
                    self.on_turn(index, turn, body)
                except Exception as exc:
                    violation = ScriptViolation(
                        self.script.name, index, f"on_turn hook failed: {exc!r}"
                    )
                    violation.__cause__ = exc
                    return self._fail(500, violation)
            self._next = index + 1
            model = str(body.get("model") or "scripted")
            if stream:
                return 200, sse_body(self.prefix, turn, model), "text/event-stream"
            payload = json.dumps(response_json(self.prefix, turn, model)).encode()
            return 200, payload, "application/json"

    def _fail(self, status: int, error: ScriptViolation) -> tuple[int, bytes, str]:
        self.failures.append(error)
        kind = "invalid_request_error" if status == 400 else "server_error"
        payload = {"error": {"message": str(error), "type": kind, "code": "off_script"}}
        return status, json.dumps(payload).encode(), "application/json"


def _with_output(turn: Turn, output: str | None) -> Turn:
    """``turn`` with :data:`TOOL_OUTPUT` replaced by ``output`` in its typed texts and message
    (unchanged when the request carries no function output)."""
    if output is None:
        return turn

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(TOOL_OUTPUT, output)
        if isinstance(value, dict):
            return {key: fill(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(fill(item) for item in value)
        return value

    return dataclasses.replace(
        turn,
        actions=fill(turn.actions),
        message=fill(turn.message),
        function=fill(turn.function),
    )


class _Handler(BaseHTTPRequestHandler):
    model: ScriptedModel
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: requests are recorded in ``ScriptedModel.requests`` instead."""

    def do_POST(self) -> None:
        if self.path.split("?")[0].rstrip("/") != "/v1/responses":
            self._send(
                404,
                json.dumps({"error": {"message": f"no route {self.path}"}}).encode(),
                "application/json",
            )
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._send(413, b'{"error": {"message": "request body too large"}}', "application/json")
            return
        raw = self.rfile.read(length)
        try:
            body: object = json.loads(raw or b"null")
        except ValueError as exc:
            body = f"<not JSON: {exc}>"
        stream = isinstance(body, dict) and body.get("stream") is True
        status, payload, content_type = self.model._answer(body, stream)
        self._send(status, payload, content_type)

    def do_GET(self) -> None:
        self._send(
            404, b'{"error": {"message": "only POST /v1/responses is served"}}', "application/json"
        )

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if status >= 400:
            self.send_header("x-should-retry", "false")
        self.end_headers()
        self.wfile.write(payload)
