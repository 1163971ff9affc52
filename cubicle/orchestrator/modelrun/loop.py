"""Run the real openai computer-use loop with every step recorded into a trajectory.

Shared by ``cubicle drill`` and ``cubicle run``. :class:`RecordedSession` wires the SDK's
callbacks and the driver's observer to a
:class:`~cubicle.orchestrator.trajectory.TrajectoryRecorder`:

- the driver's ``on_action`` records (screen pixels, durations, screenshot bytes) →
  ``action``/``screenshot`` events, paired with the action the model sent (text, keys, button),
  which ``before_action`` saw first;
- ``approve_safety_checks``/``before_action`` delegate to :mod:`cubicle.drivers.approvals` policies
and
  record every decision (who decided and why, from the policy's decision log);
- ``on_diagnostic`` → ``diagnostic`` events (the SDK's content-free timings);
- an httpx event hook on the OpenAI client → ``model_request`` events before each request is sent
  (``input_bytes`` and ``images``: what its ``input`` carries, measured as the SDK's context
  budget measures it, :func:`~cubicle.orchestrator.modelrun.budget.measure_input`) and
  ``model_turn`` events as each response arrives (response id, calls and their actions, the final
  message, usage, request time), never the request bodies (screenshots);
- usage totals (:attr:`RecordedSession.usage`, a
  :class:`~cubicle.orchestrator.modelrun.usage.UsageTotals`): from the runner's request
  diagnostics, or from the response bodies for the toolset loop.

:func:`run_loop` runs either ``openai.ComputerToolset.run`` or ``ResponsesToolRunner.run`` in a
worker thread, so the caller's thread keeps handling signals: :meth:`LoopThread.cancel` sets the
SDK's ``cancelled`` flag and closes the toolset (``draining`` while a call is active), then
:meth:`LoopThread.wait` joins it. The runner gets a context budget
(:mod:`cubicle.orchestrator.modelrun.budget`, cubicle's ``compact``) unless it is given ``None``;
the toolset replays the full history (it has no budget).
"""

from __future__ import annotations

import collections
import ipaddress
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import httpx2
import openai
from openai import ComputerToolset, OpenAI
from openai.lib.computer import ComputerActionInput
from openai.lib.responses_tool_runner import (
    RegisteredFunction,
    ResponsesToolLedger,
    ResponsesToolRunner,
)
from openai.lib.tool_diagnostics import ToolDiagnostic
from openai.types.responses import Response, ResponseComputerToolCall
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

from cubicle.drivers.approvals import ApprovalPolicy
from cubicle.drivers.records import ActionRecord
from cubicle.drivers.stall import DEFAULT_STALL_LIMIT, StallDetector
from cubicle.orchestrator.modelrun.budget import (
    BudgetSpec,
    Compactor,
    measure_input,
    resolve_budget,
)
from cubicle.orchestrator.modelrun.functions import FunctionCalls
from cubicle.orchestrator.modelrun.usage import UsageTotals
from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder

__all__ = [
    "LoopKind",
    "LoopOutcome",
    "LoopThread",
    "RecordedSession",
    "error_chain",
    "is_loopback",
    "join_polling",
]

LoopKind = Literal["toolset", "runner", "tool_runner", "generate_content"]
"""The SDK loops: openai's ``toolset`` and ``runner`` (:class:`LoopThread`), anthropic's
``tool_runner`` (:mod:`~cubicle.orchestrator.modelrun.claude_loop`), google-genai's
``generate_content`` (:mod:`~cubicle.orchestrator.modelrun.gemini_loop`); which provider has which:
:data:`cubicle.orchestrator.modelrun.model_providers.PROVIDER_LOOPS`."""


def error_chain(exc: BaseException) -> str:
    """``exc``'s message plus its causes (ToolRunnerError hides the original in ``__context__``)."""
    parts: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(parts) < 5:
        text = f"{type(current).__name__}: {current}"
        if text not in parts:
            parts.append(text)
        current = current.__cause__ or current.__context__
    return " <- ".join(parts)


def join_polling(thread: threading.Thread, timeout: float | None, poll_s: float) -> bool:
    """Join ``thread`` in steps of ``poll_s`` seconds (so signal handlers run between them), for
    at most ``timeout`` seconds (``None``: until it ends); True when it has finished."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while thread.is_alive():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        thread.join(poll_s)
    return True


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (a local model stand-in): its client must ignore
    proxy variables (:meth:`RecordedSession.http_client`'s ``trust_env``)."""
    host = urlsplit(url).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _point_dict(points: tuple[tuple[int, int], ...]) -> dict[str, Any] | None:
    if not points:
        return None
    if len(points) == 1:
        return {"x": points[0][0], "y": points[0][1]}
    return {"path": [{"x": x, "y": y} for x, y in points]}


class RecordedSession:
    """The recording glue for one run (see the module docstring).

    :param recorder: where events go; the caller owns and closes it.
    :param safety_policy: decides ``approve_safety_checks``.
    :param action_policy: decides ``before_action``; ``None`` lets every action run (the
        decision is still recorded as such).
    :param stall_limit: state-changing actions in a row without a visible change that make the
        run stalled (:mod:`cubicle.drivers.stall`; ``0`` never). On a stall a ``warning`` event is
        recorded and ``on_stall`` is called once (the run stops the loop there).
    :param gate: the hand-over gate (see :attr:`gate`), or ``None``.
    """

    def __init__(
        self,
        recorder: TrajectoryRecorder,
        *,
        safety_policy: ApprovalPolicy,
        action_policy: ApprovalPolicy | None = None,
        stall_limit: int = DEFAULT_STALL_LIMIT,
        on_stall: Callable[[str], None] | None = None,
        gate: Callable[[], bool] | None = None,
    ) -> None:
        self.recorder = recorder
        self.gate = gate
        """Called first in ``before_action``; blocks while a person has control (hand-over,
        :class:`cubicle.orchestrator.view.handover.HandoverGate.wait`); ``False`` (cancelled)
        refuses."""
        self.safety_policy = safety_policy
        self.action_policy = action_policy
        self.stall = StallDetector(stall_limit)
        self.on_stall = on_stall
        self.stalled: str | None = None
        """The stall message once the run stalled, else ``None``."""
        self.last_model_shot: bytes | None = None
        """The PNG of the latest screenshot the SDK took (what the model sees next)."""
        self._pending: collections.deque[dict[str, Any]] = collections.deque()
        self._request_started: dict[int, float] = {}
        self.model_s = 0.0
        """Seconds spent waiting for model responses (HTTP)."""
        self.executed_actions = 0
        self.driver_s = 0.0
        """Seconds the driver spent on actions and screenshots (guest round trips)."""
        self.next_shot_note: str | None = None
        """Says who took the next screenshot when it is not the SDK (recorded, then cleared)."""
        self.signin: Callable[[], None] | None = None
        """Called before each screenshot the model is to get: answers any sign-in form the
        browser shows, the turn waiting meanwhile (:mod:`cubicle.orchestrator.modelrun.signin`)."""
        self.functions: FunctionCalls | None = None
        """The run's function tools: each response's ``function_call`` items are queued there
        (:mod:`cubicle.orchestrator.modelrun.functions`) and recorded in its ``model_turn``."""
        self.usage = UsageTotals()
        """Token usage over the run's completed requests (the ``end`` record's ``usage``)."""
        self.usage_from_bodies = True
        """Count requests from the response bodies (no request diagnostics: the toolset loop,
        the Agents SDK); :class:`LoopThread` turns it off for the runner."""
        self.requests_sent = 0

    # -- SDK callbacks -------------------------------------------------------------------------

    def approve_safety_checks(self, call: ResponseComputerToolCall) -> bool:
        allowed = self.safety_policy.approve_safety_checks(call)
        decision = self.safety_policy.log[-1]
        checks = [
            {"id": c.id, "code": c.code, "message": c.message}
            for c in call.pending_safety_checks or []
        ]
        self.recorder.event(
            "approval",
            subject="safety_check",
            allowed=allowed is True,
            by=decision.decided_by,
            reason=decision.reason,
            call_id=call.call_id,
            detail=", ".join(str(c["code"]) for c in checks),
            checks=checks,
        )
        return allowed is True

    def before_action(self, action: ComputerActionInput) -> bool:
        return self.approve(
            str(action.type),
            action.model_dump(exclude_none=True),
            lambda policy: policy.before_action(action),
        )

    def approve(
        self, kind: str, sent: dict[str, Any], judge: Callable[[ApprovalPolicy], bool]
    ) -> bool:
        """``before_action`` for any provider: the hand-over gate first, then ``judge`` with the
        action policy (none: the action runs), the decision recorded as an ``approval`` event;
        an allowed action's ``sent`` fields (``text``, ``keys``, the model's coordinates) are
        paired with the driver's record of it (``sent["type"]`` must be the record's kind).

        :param kind: the action's name as the provider calls it (``left_click``, ``click_at``).
        """
        if self.gate is not None and not self.gate():
            return False
        if kind == "screenshot" and self.signin is not None:
            self.signin()  # a sign-in form is answered before the model sees the screen
        if self.action_policy is None:
            allowed, by, reason = True, "none", "no action policy: actions run without approval"
        else:
            allowed = judge(self.action_policy)
            decision = self.action_policy.log[-1]
            by, reason = decision.decided_by, decision.reason
        if (self.action_policy is not None and kind != "screenshot") or not allowed:
            self.recorder.event(
                "approval",
                subject="action",
                allowed=allowed is True,
                by=by,
                reason=reason,
                detail=kind,
            )
        if allowed and kind != "screenshot":
            self._pending.append(sent)
        return allowed is True

    def approve_confirmation(self, call_id: str, code: str, message: str) -> bool:
        """A provider's own request for a person's confirmation (Gemini's ``safety_decision``)
        as one pending safety check, decided by the safety policy and recorded as
        ``approve_safety_checks`` is."""
        check = SimpleNamespace(id=call_id, code=code, message=message)
        call = SimpleNamespace(call_id=call_id, pending_safety_checks=[check])
        return self.approve_safety_checks(cast(ResponseComputerToolCall, call))

    def on_diagnostic(self, diagnostic: ToolDiagnostic) -> None:
        self.recorder.event("diagnostic", **dict(diagnostic))
        if (
            not self.usage_from_bodies
            and diagnostic.get("api") == "responses"
            and diagnostic.get("stage") == "request"
            and diagnostic.get("reason") == "completed"
        ):
            self.usage.add_request(diagnostic.get("usage"))

    # -- driver observer -------------------------------------------------------------------------

    def on_action(self, record: ActionRecord) -> None:
        geometry = record.geometry
        self.driver_s += record.duration_s
        if record.kind == "screenshot":
            if record.image is not None and record.outcome == "done":
                note, self.next_shot_note = self.next_shot_note, None
                self.recorder.screenshot(
                    record.image,
                    size=(geometry.width, geometry.height),
                    native={
                        "screen": list(geometry.screen),
                        "crop": str(geometry.crop),
                        "duration_ms": round(record.duration_s * 1000, 1),
                    },
                    note=note,
                )
                if note is None:
                    self.last_model_shot = record.image
            else:
                self.recorder.event(
                    "error", where="screenshot", type=record.outcome, message=record.error or ""
                )
            # a batch ends with its screenshot: actions approved but never sent are dropped here
            # so they cannot pair with the next batch's records
            self._pending.clear()
            return
        sent = (
            self._pending.popleft()
            if self._pending and self._pending[0].get("type") == record.kind
            else {}
        )
        model: dict[str, Any] = {k: v for k, v in sent.items() if k not in ("type", "text", "keys")}
        if not model:
            model = _point_dict(record.model_points) or {}
        fields: dict[str, Any] = {
            "type": record.kind,
            "model": model,
            "native": _point_dict(record.native_points),
            "duration_ms": round(record.duration_s * 1000, 1),
            "outcome": record.outcome,
        }
        if "text" in sent:
            fields["text"] = sent["text"]
        if sent.get("keys"):
            fields["keys"] = sent["keys"]
        if record.error:
            fields["error"] = record.error
        if record.receipt is not None:
            fields["receipt"] = record.receipt.as_dict()
        if record.outcome == "done":
            self.executed_actions += 1
        self.recorder.action(**fields)
        if self.stall.observe(record) and self.stalled is None:
            self.stalled = (
                f"stalled: {self.stall.unchanged_in_row} state-changing actions in a row changed "
                f"nothing visible on the screen (the last: {record.kind})"
            )
            self.recorder.event(
                "warning",
                what="stall",
                message=self.stalled,
                actions=self.stall.unchanged_in_row,
            )
            if self.on_stall is not None:
                self.on_stall(self.stalled)

    # -- the OpenAI client -------------------------------------------------------------------

    def http_client(self, *, trust_env: bool = True) -> httpx2.Client:
        """An HTTP client for ``openai.OpenAI`` that records every model turn.

        :param trust_env: ``False`` ignores proxy variables (the drill's model is on 127.0.0.1).
        """
        return openai.DefaultHttpxClient(
            trust_env=trust_env,
            event_hooks={"request": [self._on_request], "response": [self._on_response]},
        )

    def async_http_client(self, *, trust_env: bool = True) -> httpx2.AsyncClient:
        """:meth:`http_client` for ``openai.AsyncOpenAI`` (e.g. the Agents SDK's model)."""

        async def on_request(request: httpx2.Request) -> None:
            self._on_request(request)

        async def on_response(response: httpx2.Response) -> None:
            if "json" in response.headers.get("content-type", ""):
                await response.aread()  # a streamed (SSE) body is left to the SDK
            self._on_response(response)

        return openai.DefaultAsyncHttpxClient(
            trust_env=trust_env,
            event_hooks={"request": [on_request], "response": [on_response]},
        )

    def _on_request(self, request: httpx2.Request) -> None:
        self._request_started[id(request)] = time.monotonic()
        if request.method == "POST" and request.url.path.endswith("/responses"):
            self._record_request(request)

    def _record_request(self, request: httpx2.Request) -> None:
        """A ``model_request`` record: what this request's ``input`` carries."""
        try:
            content = request.content
            body = json.loads(content)
        except (ValueError, httpx2.RequestNotRead):
            return
        if not isinstance(body, dict):
            return
        items = body.get("input")
        input_bytes, images = measure_input(items)
        self.recorder.event(
            "model_request",
            index=self.requests_sent,
            input_bytes=input_bytes,
            images=images,
            items=len(items) if isinstance(items, list) else 1,
            body_bytes=len(content),
        )
        self.requests_sent += 1

    def _on_response(self, response: httpx2.Response) -> None:
        started = self._request_started.pop(id(response.request), None)
        elapsed = time.monotonic() - started if started is not None else 0.0
        self.model_s += elapsed
        if not response.request.url.path.endswith("/responses"):
            return
        if "json" not in response.headers.get("content-type", ""):
            # a streamed (SSE) turn: the runner's turns are recorded from the actions instead;
            # its usage is not read here, so the totals say they are incomplete
            if response.status_code == 200 and self.usage_from_bodies:
                self.usage.add_request(None)
            self.recorder.model_turn(
                status=f"http {response.status_code}",
                response_id=None,
                calls=[],
                message=None,
                duration_ms=round(elapsed * 1000, 1),
            )
            return
        response.read()
        try:
            body = json.loads(response.content)
        except ValueError:
            body = {}
        if response.status_code != 200 or not isinstance(body, dict):
            error = body.get("error") if isinstance(body, dict) else None
            message = error.get("message") if isinstance(error, dict) else response.text[:300]
            self.recorder.model_turn(
                status=f"http {response.status_code}",
                response_id=None,
                calls=[],
                message=None,
                error=message,
                duration_ms=round(elapsed * 1000, 1),
            )
            return
        if body.get("status") == "completed":
            self.usage.add_response(body.get("usage"), counts=self.usage_from_bodies)
        calls: list[dict[str, Any]] = []
        texts: list[str] = []
        functions = self.functions.observe(body) if self.functions is not None else []
        for item in body.get("output") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "computer_call":
                actions = item.get("actions") or ([item["action"]] if item.get("action") else [])
                calls.append(
                    {
                        "call_id": item.get("call_id"),
                        "actions": actions,
                        "pending_safety_checks": item.get("pending_safety_checks") or [],
                    }
                )
            elif item.get("type") == "message":
                texts.extend(
                    str(part.get("text", ""))
                    for part in item.get("content") or []
                    if isinstance(part, dict) and part.get("type") == "output_text"
                )
        self.recorder.model_turn(
            status=body.get("status"),
            response_id=body.get("id"),
            calls=calls,
            message="\n".join(texts) or None,
            **({"function_calls": functions} if functions else {}),
            usage=body.get("usage"),
            duration_ms=round(elapsed * 1000, 1),
        )


@dataclass
class LoopOutcome:
    """How a loop ended: the final response (openai) or final text (the other providers), or
    the error that stopped it."""

    response: Response | None = None
    error: BaseException | None = None
    message: str | None = None

    @property
    def final_message(self) -> str | None:
        return self.response.output_text if self.response is not None else self.message


class LoopThread:
    """Runs one SDK loop in a worker thread so the caller can cancel it cooperatively.

    :param kind: ``toolset`` (``ComputerToolset.run``) or ``runner`` (``ResponsesToolRunner.run``).
    :param driver: an ``openai.ComputerDriver``; the caller owns it.
    :param functions: function tools beside the computer tool (``runner`` only).
    :param context_budget: the runner's budget (default
        :data:`~cubicle.orchestrator.modelrun.budget.DEFAULT_BUDGET`, with cubicle's
        :class:`~cubicle.orchestrator.modelrun.budget.Compactor`); ``None``: the full history
        every request. The toolset takes only ``None`` (it replays the full history).
    :param ledger: the runner's ledger (:mod:`cubicle.orchestrator.modelrun.ledger`), resuming
        when it carries ``resume_from``; the toolset has none.
    :raises ValueError: a budget or a ledger for the toolset loop.
    """

    def __init__(
        self,
        kind: LoopKind,
        driver: Any,
        client: OpenAI,
        params: ResponseCreateParamsNonStreaming,
        session: RecordedSession,
        *,
        max_steps: int,
        functions: Sequence[RegisteredFunction] = (),
        context_budget: BudgetSpec | Literal["default"] | None = "default",
        ledger: ResponsesToolLedger | None = None,
    ) -> None:
        if kind not in ("toolset", "runner"):
            raise ValueError(f"{kind!r} is not an openai loop (toolset, runner)")
        if ledger is not None and kind != "runner":
            raise ValueError("a ledger (resume points) needs the runner loop (ResponsesToolRunner)")
        if functions and kind != "runner":
            raise ValueError("function tools need the runner loop (ResponsesToolRunner)")
        context_budget = resolve_budget(kind, context_budget)
        if kind == "toolset" and context_budget is not None:
            raise ValueError(
                "the toolset loop (ComputerToolset.run) replays the full history and takes no "
                "context budget; use the runner loop or no budget"
            )
        self.kind = kind
        self.budget = context_budget
        self.budget_params = context_budget.context_budget() if context_budget else None
        self.compactor: Compactor | None = (
            cast(Compactor, self.budget_params["compact"]) if self.budget_params else None
        )
        """The run's ``compact`` (its counts: compactions, batches, dropped), or ``None``."""
        session.usage_from_bodies = kind != "runner"
        self.toolset = ComputerToolset(driver)
        self.runner = (
            ResponsesToolRunner(computer=self.toolset, functions=list(functions))
            if kind == "runner"
            else None
        )
        self._client = client
        self._params = params
        self._session = session
        self._max_steps = max_steps
        self._ledger = ledger
        self._cancel = threading.Event()
        self.outcome = LoopOutcome()
        self._thread = threading.Thread(target=self._main, name=f"cubicle-{kind}-loop", daemon=True)

    def cancelled(self) -> bool:
        """The SDK's ``cancelled`` callable."""
        return self._cancel.is_set()

    def start(self) -> LoopThread:
        self._thread.start()
        return self

    def _main(self) -> None:
        session = self._session
        try:
            if self.runner is not None:
                self.outcome.response = self.runner.run(
                    self._client,
                    self._params,
                    max_steps=self._max_steps,
                    approve_safety_checks=session.approve_safety_checks,
                    before_action=session.before_action,
                    cancelled=self.cancelled,
                    on_diagnostic=session.on_diagnostic,
                    context_budget=self.budget_params,
                    ledger=self._ledger,
                )
            else:
                self.outcome.response = self.toolset.run(
                    self._client,
                    self._params,
                    max_steps=self._max_steps,
                    approve_safety_checks=session.approve_safety_checks,
                    before_action=session.before_action,
                    cancelled=self.cancelled,
                    on_diagnostic=session.on_diagnostic,
                )
        except BaseException as exc:  # reported by the caller, which owns the outcome
            self.outcome.error = exc

    def cancel(self) -> str:
        """Ask the loop to stop at its next checkpoint; return the toolset's close status."""
        self._cancel.set()
        status = self.runner.close() if self.runner is not None else self.toolset.close()
        return str(status.get("status")) if isinstance(status, dict) else str(status)

    def wait(self, timeout: float | None = None, *, poll_s: float = 0.2) -> bool:
        """Join the worker (polling, so signal handlers run); True when it has finished."""
        return join_polling(self._thread, timeout, poll_s)
