"""Browser sign-in in a session: a ``browser_authentication`` request answered by the client.

When a turn's browser shows a sign-in form (:mod:`cubicle.orchestrator.modelrun.signin`), the
turn's callback (:func:`turn_signin`):

1. registers the request, adds a ``computer_use_approval_request`` item (the SDK's
   ``BrowserAuthenticationRequestItemResource``) and publishes it as a required action
   (``request``: ``type: browser_authentication``, ``reason``, ``credential_origin``, ``fields``,
   ``options``); the turn waits — the model gets no new screenshot — until the client answers
   or the request expires (``cubicle serve --signin-expiry``, default 300 s);
2. on the client's ``agent.session.input.computer_use_approval_request_result`` (checked by
   :func:`check_signin_answer`: 202 with an empty body) hands the answer to the run, which fills
   and submits the form, and adds a ``computer_use_approval_request_result`` item recording only
   the action and the selected option.

The rules (:func:`~cubicle.orchestrator.modelrun.signin.check_answer`; a 400 names its rule):
at most 6 values, each field once, each value at most 16,384 characters, values and option at
most 120 KiB of JSON, the option and fields of the request. An unknown request is a 404; an
identical resubmission of an accepted answer is a 202 and fills nothing again; other values
after acceptance, or an answer after expiry, a 409 (every error answer carries
``x-should-retry: false``). The accepted answer is remembered only as an HMAC under a key that
lives in this process's memory: no value is stored, logged or put in an item or event.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from cubicle.orchestrator.modelrun.errors import RunCancelled
from cubicle.orchestrator.modelrun.signin import (
    SigninAnswer,
    SigninAnswerError,
    SigninCallback,
    SigninRequest,
    check_answer,
)
from cubicle.orchestrator.serve import wire
from cubicle.orchestrator.serve.errors import ApiError
from cubicle.orchestrator.serve.reporter import TurnReporter
from cubicle.orchestrator.serve.store import PendingApproval, Session, TurnState

__all__ = ["DEFAULT_SIGNIN_EXPIRY_S", "SigninState", "check_signin_answer", "turn_signin"]

DEFAULT_SIGNIN_EXPIRY_S: Final = 300.0
"""How long a sign-in request waits for its answer (seconds; ``--signin-expiry``)."""
_KEY: Final = secrets.token_bytes(32)


@dataclass
class SigninState:
    """One sign-in request of a session, for its whole life (answers after it left
    :attr:`Session.pending` are told apart: accepted, expired)."""

    request: SigninRequest
    pending: PendingApproval
    expires_at: float
    accepted: bytes | None = None
    """The HMAC of the accepted answer (never the answer)."""


def _digest(answer: SigninAnswer) -> bytes:
    text = json.dumps([answer.action, answer.fields, answer.option], ensure_ascii=False)
    return hmac.new(_KEY, text.encode(), hashlib.sha256).digest()


def check_signin_answer(
    session: Session, p: str, request_id: str, response: Any
) -> Callable[[Any], None]:
    """Check an answer to sign-in request ``request_id`` (``p``: its place in the body); return
    what applies it.

    :raises ApiError: 404 unknown request, 409 answered with other values / expired / withdrawn,
        400 a rule broken (the message and ``code`` name the rule)."""
    with session.lock:
        state = session.signin_requests.get(request_id)
        pending = request_id in session.pending
    if state is None:
        raise ApiError(
            404,
            f"{p}.request_id {request_id!r} names no sign-in request of this session",
            param=f"{p}.request_id",
            code="not_found",
        )
    fields = tuple((f.field_id, f.value) for f in response.fields or ())
    answer = SigninAnswer(response.action, fields, response.selected_option)
    if state.accepted is not None:
        if hmac.compare_digest(state.accepted, _digest(answer)):
            return lambda _worker: None  # the same answer again: accepted, filled once
        raise ApiError(
            409,
            f"{p}: the sign-in request {request_id!r} was answered already with other values; "
            "an answer cannot be changed (a new request follows if the site asks again)",
            param=f"{p}.response",
            code="conflict",
        )
    if not pending or time.time() >= state.expires_at:
        raise ApiError(
            409,
            f"{p}: the sign-in request {request_id!r} is no longer pending (it expired or its "
            "turn ended); retrieve the session for its required_actions",
            param=f"{p}.request_id",
            code="conflict",
        )
    try:
        check_answer(state.request, answer)
    except SigninAnswerError as exc:
        raise ApiError(
            400, f"{p}.response: {exc} (rule: {exc.rule})", param=f"{p}.response", code=exc.rule
        ) from exc

    def apply(_worker: Any) -> None:
        with session.lock:
            if state.accepted is not None:
                return
            state.accepted = _digest(answer)
            session.pending.pop(request_id, None)
        state.pending.result = {"answer": answer}
        state.pending.decision = answer.action
        state.pending.answered.set()

    return apply


def turn_signin(turn: TurnState, reporter: TurnReporter) -> SigninCallback:
    """The person of one turn: the session's client, through a required action."""
    session = reporter.session

    def ask(request: SigninRequest) -> SigninAnswer:
        request_id = wire.new_id("req")
        body = request.as_request()
        pending = PendingApproval(
            {
                "type": "computer_use_approval_request",
                "request_id": request_id,
                "turn_id": turn.id,
                "request": body,
            }
        )
        expires_at = time.time() + session.signin_expiry_s
        state = SigninState(request, pending, expires_at)
        with session.lock:  # answerable before its item is seen
            session.signin_requests[request_id] = state
            session.pending[request_id] = pending
        reporter.add_item(
            {
                "type": "computer_use_approval_request",
                "id": wire.new_id("item"),
                "request_id": request_id,
                "turn_id": turn.id,
                "request": body,
            },
            done=True,
        )
        session.ask(turn, pending, deadline=expires_at)
        result, pending.result = pending.result, None
        if result is None:
            if turn.cancel.is_set() or session.deleted:
                raise RunCancelled(
                    f"the sign-in request {request_id} was withdrawn: the turn ended"
                )
            return SigninAnswer.cancel()  # expired: the turn goes on without signing in
        answer: SigninAnswer = result["answer"]
        response: dict[str, Any] = {"type": "browser_authentication", "action": answer.action}
        if answer.action == "submit":
            response["selected_option"] = answer.option
        reporter.add_item(
            {
                "type": "computer_use_approval_request_result",
                "id": wire.new_id("item"),
                "request_id": request_id,
                "turn_id": turn.id,
                "response": response,
            },
            done=True,
        )
        return answer

    return ask
