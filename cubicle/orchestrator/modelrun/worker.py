"""What every non-openai provider loop shares: a worker thread with cooperative cancellation
(:class:`WorkerLoop`, the same surface as :class:`~cubicle.orchestrator.modelrun.loop.LoopThread`;
:class:`SdkLoop` adds the endpoint, driver and session the anthropic and gemini loops hold alike)
and the HTTP hooks that record each model turn into the trajectory (:class:`TurnHooks`).

:class:`TurnHooks` gives an ``httpx2`` client event hooks: the request time goes to the session's
``model_s``; each response to the provider's endpoint becomes a ``model_turn`` record (its id, the
calls and their inputs, the final text, usage, duration; an HTTP error's message) and its usage
goes to the session's totals. What a body means is the provider's: ``read(body)`` returns a
:class:`TurnFacts`. Request bodies (screenshots) are never recorded, only their size
(``model_request``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx2

from cubicle.drivers.computer import GuestDriver
from cubicle.orchestrator.modelrun.loop import LoopOutcome, RecordedSession, join_polling

__all__ = ["LoopBody", "SdkLoop", "TurnFacts", "TurnHooks", "WorkerLoop"]

LoopBody = Callable[[Callable[[], bool]], str | None]
"""The provider's loop: runs until the model's final text (returned), given ``cancelled``."""


class WorkerLoop:
    """Runs ``body`` in a worker thread (``start``, ``cancelled``, ``cancel``, ``wait`` and
    ``outcome`` as :class:`~cubicle.orchestrator.modelrun.loop.LoopThread`): the final text lands
    in ``outcome.message``, an exception in ``outcome.error``.

    :param on_cancel: called by :meth:`cancel` after the flag is set; returns a status word.
    """

    def __init__(
        self,
        name: str,
        body: LoopBody,
        *,
        on_cancel: Callable[[], str] = lambda: "cancelled",
    ) -> None:
        self.outcome = LoopOutcome()
        self._body = body
        self._on_cancel = on_cancel
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"cubicle-{name}-loop", daemon=True)

    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def start(self) -> WorkerLoop:
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            self.outcome.message = self._body(self.cancelled)
        except BaseException as exc:  # reported by the caller, which owns the outcome
            self.outcome.error = exc

    def cancel(self) -> str:
        """Ask the loop to stop at its next checkpoint (before a request, an action or a wait)."""
        self._cancel.set()
        return self._on_cancel()

    def wait(self, timeout: float | None = None, *, poll_s: float = 0.2) -> bool:
        """Join the worker (polling, so signal handlers run); True when it has finished."""
        return join_polling(self._thread, timeout, poll_s)


class SdkLoop(WorkerLoop):
    """A provider SDK's loop against ``base_url`` with the run's driver and session: its worker
    thread (named after :attr:`LOOP`) runs the subclass's :meth:`_run`, which returns the final
    text (``outcome.message``).

    :param base_url: the provider's endpoint (``None``: the SDK's default).
    :param max_steps: model requests at most.
    :param trust_env: whether the HTTP client honours proxy variables (not for a loopback URL).
    """

    LOOP: ClassVar[str]
    """The SDK loop's name (``tool_runner``, ``generate_content``)."""

    def __init__(
        self,
        driver: GuestDriver,
        session: RecordedSession,
        *,
        base_url: str | None,
        api_key: str,
        model: str,
        prompt: str,
        max_steps: int,
        trust_env: bool = True,
    ) -> None:
        super().__init__(self.LOOP, self._run)
        self.driver = driver
        self.session = session
        self.base_url = base_url
        self.api_key = api_key
        self.model = model
        self.prompt = prompt
        self.max_steps = max_steps
        self.trust_env = trust_env

    def _run(self, cancelled: Callable[[], bool]) -> str | None:
        """The loop until the model's final text (returned); ``cancelled`` says when to stop."""
        raise NotImplementedError


@dataclass
class TurnFacts:
    """One model response as the trajectory records it.

    :param counts: ``input_tokens``/``output_tokens``/``total_tokens`` for the usage totals
        (``None``: the response had no usage).
    """

    response_id: str | None
    status: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    message: str | None = None
    usage: dict[str, Any] | None = None
    counts: dict[str, int] | None = None


class TurnHooks:
    """httpx2 event hooks recording the turns of one provider (module docstring).

    :param endpoint: the suffix of the model endpoint's path (``/v1/messages``,
        ``:generateContent``); other requests are only timed.
    :param read: a successful JSON body → its :class:`TurnFacts`.
    """

    def __init__(
        self,
        session: RecordedSession,
        endpoint: str,
        read: Callable[[dict[str, Any]], TurnFacts],
    ) -> None:
        self.session = session
        self.endpoint = endpoint
        self.read = read
        self._started: dict[int, float] = {}

    def client(self, *, trust_env: bool) -> httpx2.Client:
        """An ``httpx2.Client`` with these hooks (``trust_env=False`` for a loopback model)."""
        return httpx2.Client(
            trust_env=trust_env,
            timeout=httpx2.Timeout(600.0, connect=10.0),
            event_hooks={"request": [self.on_request], "response": [self.on_response]},
        )

    def _ours(self, request: httpx2.Request) -> bool:
        return request.method == "POST" and request.url.path.endswith(self.endpoint)

    def on_request(self, request: httpx2.Request) -> None:
        self._started[id(request)] = time.monotonic()
        if self._ours(request):
            self.session.recorder.event(
                "model_request",
                index=self.session.requests_sent,
                body_bytes=len(request.content),
            )
            self.session.requests_sent += 1

    def on_response(self, response: httpx2.Response) -> None:
        started = self._started.pop(id(response.request), None)
        elapsed = time.monotonic() - started if started is not None else 0.0
        self.session.model_s += elapsed
        if not self._ours(response.request):
            return
        response.read()
        try:
            body = json.loads(response.content)
        except ValueError:
            body = None
        duration_ms = round(elapsed * 1000, 1)
        if response.status_code != 200 or not isinstance(body, dict):
            error = body.get("error") if isinstance(body, dict) else None
            message = error.get("message") if isinstance(error, dict) else response.text[:300]
            self.session.recorder.model_turn(
                status=f"http {response.status_code}",
                response_id=None,
                calls=[],
                message=None,
                error=message,
                duration_ms=duration_ms,
            )
            return
        facts = self.read(body)
        self.session.usage.add_request(facts.counts)
        self.session.recorder.model_turn(
            status=facts.status,
            response_id=facts.response_id,
            calls=facts.calls,
            message=facts.message,
            usage=facts.usage,
            duration_ms=duration_ms,
        )
