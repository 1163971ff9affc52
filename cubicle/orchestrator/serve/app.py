"""The HTTP side of ``cubicle serve``: the Agents sessions API and the console (Starlette).

Routes (all under the bearer token of :mod:`cubicle.orchestrator.serve.auth`, except the console
page):

=========================================  ==================================================
``POST   /v1/agents/sessions``              create (``stream: true`` → SSE of its first turn)
``GET    /v1/agents/sessions``              list (``after``/``limit``/``order``, ``agent_id``,
                                            ``metadata[KEY]=VALUE``)
``GET    /v1/agents/sessions/{id}``         retrieve
``POST   /v1/agents/sessions/{id}``         update: ``metadata``, ``spend_control`` (resumes a
                                            session paused at its spending limit)
``DELETE /v1/agents/sessions/{id}``         delete: cancels the turn, removes the sandbox,
                                            its folder, its streams
``POST   /v1/agents/sessions/{id}/events``  inputs: message, cancel, approval answers, function
                                            tool results (202)
``GET    /v1/agents/sessions/{id}/events``  SSE: the current status, then live events
``GET    /v1/agents/sessions/{id}/items``   items, paginated as the SDK pages them
any other ``/v1/...``                       501 in the error shape (not implemented)
``GET    /console``                         the console page (no data in it)
``GET    /console/console.{js,css}``        its script and style sheet (no inline code)
``GET    /console/api/sessions/{id}/...``   the console's ``events`` (with the kept ones) and
                                            ``screenshot`` (the latest, JPEG)
``POST   /console/api/sessions/{id}/view``  a one-time live-view link (``cubicle view``)
=========================================  ==================================================
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import anyio.to_thread
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from cubicle.drivers.policy_file import Policy
from cubicle.orchestrator.page_security import BASE_HEADERS, content_security_policy
from cubicle.orchestrator.providers import backend_of, get_provider
from cubicle.orchestrator.serve import wire
from cubicle.orchestrator.serve.agents import parse_agent
from cubicle.orchestrator.serve.auth import check_bearer
from cubicle.orchestrator.serve.body import parse_object
from cubicle.orchestrator.serve.environment import parse_environment
from cubicle.orchestrator.serve.errors import (
    NO_RETRY,
    ApiError,
    bad_request,
    error_body,
    not_implemented,
)
from cubicle.orchestrator.serve.hosts import HostCheck
from cubicle.orchestrator.serve.registry import Registry
from cubicle.orchestrator.serve.requests import (
    ApprovalResult,
    CancelInput,
    CreateRequest,
    EventsRequest,
    InputEvent,
    MessageInput,
    SigninResponse,
    ToolResult,
    UpdateRequest,
    content_of,
    validate,
)
from cubicle.orchestrator.serve.signin import DEFAULT_SIGNIN_EXPIRY_S, check_signin_answer
from cubicle.orchestrator.serve.spend import PriceTable, Spend, check_limit
from cubicle.orchestrator.serve.store import Session, SessionStore, TurnState, page
from cubicle.orchestrator.serve.turns import turn_runner
from cubicle.orchestrator.serve.worker import SessionWorker
from cubicle.orchestrator.view.control import open_view
from cubicle_guest.errors import CubicleError

__all__ = ["ServerState", "build_app"]

log = logging.getLogger("cubicle.serve")

DELETE_WAIT_S = 120.0
SSE_PING_S = 15
MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body read (inline files are at most 32 MiB each, base64 grows them by 4/3)."""
DEFAULT_MAX_SESSIONS = 4
"""Sessions at once unless ``--max-sessions`` says otherwise (see ``cli.default_max_sessions``)."""


@dataclass
class ServerState:
    """What the routes share: the token, the sessions and their workers, the options."""

    token: str
    registry: Registry
    backend: str = "docker"
    policy: Policy | None = None
    ask_timeout: float | None = None
    signin_expiry_s: float = DEFAULT_SIGNIN_EXPIRY_S
    """Seconds a sign-in request waits for its answer (``--signin-expiry``)."""
    """Ask mode (``--ask-origins``): seconds a question about an origin waits; ``None``: off."""
    internal_networks: tuple[str, ...] = ()
    """Private networks the sessions' restricted policies may reach by name (``--allow-internal``,
    :meth:`~cubicle.orchestrator.network.NetworkPolicy.with_internal`)."""
    max_sessions: int = DEFAULT_MAX_SESSIONS
    """Sessions at once (``--max-sessions``); a deleted one counts until its desktop is gone."""
    prices: PriceTable = field(default_factory=lambda: PriceTable({}))
    """The operator's prices (``--prices FILE``, :mod:`cubicle.orchestrator.serve.spend`)."""
    hosts: frozenset[str] | None = None
    """The Host names answered (:func:`cubicle.orchestrator.serve.hosts.allowed_hosts`);
    ``None``: any."""
    store: SessionStore = field(default_factory=SessionStore)
    workers: dict[str, SessionWorker] = field(default_factory=dict)
    seen_keys: dict[str, set[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


# -- helpers ---------------------------------------------------------------------------------------


async def _json(request: Request) -> dict[str, Any]:
    """The request's JSON object, read up to :data:`MAX_BODY_BYTES`.

    :raises ApiError: 413 for a larger body, 400 when it is not a JSON object
        (:func:`cubicle.orchestrator.serve.body.parse_object`)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(
                413,
                f"the request body is over {MAX_BODY_BYTES} bytes",
                code="request_too_large",
            )
        chunks.append(chunk)
    return parse_object(b"".join(chunks))


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.serve
    check_bearer(request, state.token)
    return state


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f"{name} must be an integer, got {raw!r}", name) from None


def _page_response(request: Request, rows: list[dict[str, Any]]) -> Response:
    """One page of ``rows`` (oldest first) for the request's ``after``/``order``/``limit``."""
    return JSONResponse(
        page(
            rows,
            after=request.query_params.get("after"),
            order=request.query_params.get("order", "desc"),
            limit=_int_param(request, "limit", 20),
        )
    )


# -- sessions --------------------------------------------------------------------------------------


async def create_session(request: Request) -> Response:
    state = _state(request)
    raw = await _json(request)
    body = validate(CreateRequest, raw)
    if body.stream_options is not None and not body.stream:
        raise bad_request("stream_options is only allowed when stream is true", "stream_options")
    if body.review == "auto_review" and state.policy is None:
        raise bad_request(
            "review 'auto_review' needs a server-side policy: start cubicle serve with "
            "--policy FILE",
            "review",
        )
    plan = parse_environment(body.environment, ask_timeout=state.ask_timeout)
    if state.internal_networks and plan.network.proxied:
        plan.network = plan.network.with_internal(state.internal_networks)
    agent = parse_agent(raw)
    limit = body.spend_control.limit if body.spend_control is not None else None
    limit = check_limit(limit, model=agent.model, prices=state.prices)
    content = None if body.input is None else content_of(body.input)
    if content is None and body.stream:
        raise bad_request("input is required when stream is true", "input")

    _check_session_cap(state)  # before anything is made: a refused create leaves nothing
    session = Session(
        wire.new_id("sess"),
        agent=agent,
        plan=plan,
        metadata=dict(body.metadata or {}),
        review=body.review,
        spend=Spend(state.prices.price(agent.model), limit),
    )
    session.signin_expiry_s = state.signin_expiry_s
    queue = session.subscribe()[0] if body.stream else None
    worker = SessionWorker(
        session,
        backend=state.backend,
        registry=state.registry,
        folder=state.registry.session_folder(session.id),
        run=turn_runner(agent),
        policy=state.policy,
    )
    with state.lock:
        try:
            _check_session_cap(state)  # again, atomically: concurrent creates
        except ApiError:
            state.registry.remove_session_folder(session.id)
            raise
        state.store.add(session)
        state.workers[session.id] = worker
    session.publish(wire.event("agent.session.created", session=session.snapshot()))
    session.publish(
        wire.event(
            "agent.session.environment.pending",
            session_id=session.id,
            environment=session.environment_state(),
        )
    )
    first_turn = _submit_message(session, worker, content) if content is not None else None
    worker.start()
    if queue is None:
        return JSONResponse(session.snapshot())
    # subscribed before the first event was published: the queue holds every one of them
    return _sse(session, queue, kept=[], until_turn=first_turn)


def _check_session_cap(state: ServerState) -> None:
    """:raises ApiError: 429 (``session_limit_reached``, not retried: :data:`NO_RETRY`) when
    ``state.max_sessions`` sessions exist; a deleted one counts until its desktop is gone."""
    count = state.store.count()
    if count >= state.max_sessions:
        raise ApiError(
            429,
            f"cubicle serve runs at most {state.max_sessions} sessions at once (--max-sessions) "
            f"and has {count}: delete one before creating another",
            code="session_limit_reached",
        )


async def list_sessions(request: Request) -> Response:
    state = _state(request)
    rows = state.store.all()
    agent_id = request.query_params.get("agent_id")
    if agent_id is not None:
        rows = [s for s in rows if s.agent.id == agent_id]
    for key, value in request.query_params.multi_items():
        if key.startswith("metadata[") and key.endswith("]"):
            name = key[len("metadata[") : -1]
            rows = [s for s in rows if s.metadata.get(name) == value]
        elif key not in ("after", "limit", "order", "agent_id"):
            raise bad_request(f"unknown query parameter {key!r}", key)
    return _page_response(request, [s.snapshot() for s in sorted(rows, key=lambda s: s.id)])


async def retrieve_session(request: Request) -> Response:
    state = _state(request)
    return JSONResponse(state.store.get(request.path_params["session_id"]).snapshot())


async def update_session(request: Request) -> Response:
    """``sessions.update``: ``metadata`` and ``spend_control`` (omitted: unchanged; null: cleared,
    no limit). A session paused at its limit (``budget_reached``) resumes (``idle``) when the new
    limit is above what it consumed, or null."""
    state = _state(request)
    session = state.store.get(request.path_params["session_id"])
    body = validate(UpdateRequest, await _json(request))
    given = body.model_fields_set
    limit = None
    if body.spend_control is not None:
        limit = check_limit(
            body.spend_control.limit, model=session.agent.model, prices=state.prices
        )
    with session.lock:
        if "metadata" in given:
            session.metadata = dict(body.metadata or {})
        if "spend_control" in given:
            session.spend.limit = limit
        resume = session.status == "budget_reached" and not session.spend.reached
    if resume:
        session.set_status("idle")
    return JSONResponse(session.snapshot())


async def delete_session(request: Request) -> Response:
    state = _state(request)
    session = state.store.get(request.path_params["session_id"])
    with session.lock:
        session.deleted = True
    for pending in list(session.pending.values()):
        pending.answered.set()
    with state.lock:
        worker = state.workers.pop(session.id, None)
    await anyio.to_thread.run_sync(_teardown, state, session, worker)
    return JSONResponse({"id": session.id, "object": "agent.session.deleted", "deleted": True})


def _teardown(state: ServerState, session: Session, worker: SessionWorker | None) -> None:
    """Stop the worker, destroy the sandbox, remove the folder and the streams (idempotent)."""
    if worker is not None:
        worker.stop(DELETE_WAIT_S)
    sandbox = session.sandbox
    if sandbox is not None:
        try:
            sandbox.destroy()
            state.registry.discard(sandbox.id)
        except CubicleError as exc:
            log.warning("session %s: removing sandbox %s failed: %s", session.id, sandbox.id, exc)
    state.registry.remove_session_folder(session.id)
    session.close_streams()
    state.store.remove(session.id)
    state.seen_keys.pop(session.id, None)


def shutdown(state: ServerState) -> None:
    """Tear every session down (the server is stopping)."""
    for session in state.store.all():
        with session.lock:
            session.deleted = True
        with state.lock:
            worker = state.workers.pop(session.id, None)
        _teardown(state, session, worker)


# -- events ----------------------------------------------------------------------------------------


def _submit_message(
    session: Session, worker: SessionWorker, content: list[dict[str, Any]]
) -> TurnState:
    with session.lock:
        if session.status == "failed":
            raise bad_request("the session failed; create a new one", "events")
        if session.status == "budget_reached":
            raise bad_request(
                f"the session reached its spending limit ({session.spend.consumed} of "
                f"{session.spend.limit} USD cents); raise spend_control.limit with "
                "sessions.update to continue",
                "events",
                code="budget_reached",
            )
        if session.turn is not None:
            raise bad_request(
                "the session has a turn in progress; wait for it or cancel it",
                "events",
                code="turn_in_progress",
            )
        turn = TurnState(wire.new_id("turn"), content, wire.now())
        session.turn = turn
        item = wire.user_message(turn.id, content)
        session.add_item(item)
    session.publish(
        wire.event(
            "agent.session.turn.created",
            session_id=session.id,
            turn_id=turn.id,
            turn=wire.turn_object(
                turn.id, session.id, session.agent.id, status="queued", created_at=turn.created_at
            ),
        )
    )
    session.publish(
        wire.event(
            "agent.session.turn.item.added",
            session_id=session.id,
            turn_id=turn.id,
            item=item,
            output_index=0,
        )
    )
    session.set_status("in_progress")
    worker.jobs.put(turn)
    return turn


async def post_events(request: Request) -> Response:
    state = _state(request)
    session = state.store.get(request.path_params["session_id"])
    events = validate(EventsRequest, await _json(request)).events
    key = request.headers.get("idempotency-key")
    if key:
        seen = state.seen_keys.setdefault(session.id, set())
        if key in seen:
            return Response(status_code=202)
    with state.lock:
        worker = state.workers.get(session.id)
    if worker is None:
        raise ApiError(404, f"No session found with id {session.id!r}.", code="not_found")
    _refuse_repeated_answers(events)
    actions = [_check_input(session, index, entry) for index, entry in enumerate(events)]
    for action in actions:
        action(worker)
    if key:
        state.seen_keys.setdefault(session.id, set()).add(key)
    return Response(status_code=202)


def _refuse_repeated_answers(events: list[InputEvent]) -> None:
    """One request answers a function call or an approval request at most once: a later answer
    to the same one is a second answer (409, as it would be in a later request; nothing of the
    request applies)."""
    answered: dict[str, int] = {}
    for index, entry in enumerate(events):
        if isinstance(entry, ToolResult):
            key, what = f"call {entry.call_id}", f"function call {entry.call_id!r}"
        elif isinstance(entry, ApprovalResult):
            key, what = f"request {entry.request_id}", f"request {entry.request_id!r}"
        else:
            continue
        if key in answered:
            raise ApiError(
                409,
                f"events[{index}]: the {what} is answered already by events[{answered[key]}] "
                "of this request; answer each once",
                param=f"events[{index}]",
                code="conflict",
            )
        answered[key] = index


def _check_input(session: Session, index: int, entry: InputEvent) -> Any:
    """Check one input event against the session (its shape is checked:
    :class:`~cubicle.orchestrator.serve.requests.EventsRequest`); return what applies it (so
    nothing applies when any is bad)."""
    p = f"events[{index}]"
    if isinstance(entry, MessageInput):
        content = content_of(entry.input)
        return lambda worker: _submit_message(session, worker, content)
    if isinstance(entry, CancelInput):
        with session.lock:
            turn = session.turn
        if turn is None:
            raise bad_request("there is no active turn to cancel", p, code="no_active_turn")
        return lambda worker: turn.cancel.set()
    if isinstance(entry, ToolResult):
        return _tool_result(session, p, entry)
    assert isinstance(entry, ApprovalResult)  # MCP answers are refused by the schema
    if isinstance(entry.response, SigninResponse):
        return check_signin_answer(session, p, entry.request_id, entry.response)
    with session.lock:
        pending = session.pending.get(entry.request_id)
    if pending is None or pending.is_function_call:
        raise bad_request(
            f"{p}.request_id {entry.request_id!r} names no pending approval request",
            f"{p}.request_id",
        )
    if pending.kind == "browser_authentication" or entry.response.type != pending.kind:
        raise bad_request(
            f"{p}.response.type must be {pending.kind!r} for this request, "
            f"got {entry.response.type!r}",
            f"{p}.response.type",
        )
    decision = entry.response.decision

    def answer(_worker: SessionWorker) -> None:
        pending.decision = decision
        pending.answered.set()

    return answer


def _tool_result(session: Session, p: str, entry: ToolResult) -> Any:
    """Check a ``tool_result`` against the pending function calls; return what applies it.

    :raises ApiError: 404 when no call ``call_id`` of turn ``turn_id`` was ever pending, 409 when
        it was answered already or its turn ended (both with ``x-should-retry: false``)."""
    with session.lock:
        pending = session.pending.get(entry.call_id)
        turn_of_call = session.function_calls.get(entry.call_id)
    if turn_of_call != entry.turn_id:
        raise ApiError(
            404,
            f"{p}: no function call {entry.call_id!r} in turn {entry.turn_id!r} of this session; "
            "retrieve the session and answer a function_call of its required_actions",
            param=f"{p}.call_id",
            code="not_found",
        )
    if pending is None or not pending.is_function_call:
        raise ApiError(
            409,
            f"{p}: the function call {entry.call_id!r} is no longer pending (it was answered "
            "already, or its turn ended); retrieve the session for its required_actions",
            param=f"{p}.call_id",
            code="conflict",
        )
    result = {
        "success": entry.success,
        "output": None
        if entry.output is None
        else entry.output
        if isinstance(entry.output, str)
        else [part.model_dump() for part in entry.output],
        "error": entry.error,
    }

    def answer(_worker: SessionWorker) -> None:
        with session.lock:  # no longer pending: a second answer is a conflict
            session.pending.pop(entry.call_id, None)
        pending.result = result
        pending.answered.set()

    return answer


def _sse(
    session: Session,
    queue: asyncio.Queue[Any],
    *,
    kept: list[dict[str, Any]],
    until_turn: TurnState | None = None,
) -> EventSourceResponse:
    """An SSE response: ``kept`` events, then live ones until the client leaves or the session
    is deleted; with ``until_turn``, until that turn ended and the session went idle, failed or
    paused at its spending limit (``budget_reached``)."""
    loop = asyncio.get_running_loop()

    async def generate() -> AsyncIterator[dict[str, str]]:
        ended = False
        try:
            for event in kept:
                yield {"event": event["type"], "data": json.dumps(event)}
            while True:
                event = await queue.get()
                if event is None:
                    return
                yield {"event": event["type"], "data": json.dumps(event)}
                if until_turn is not None:
                    kind = event["type"]
                    if (
                        kind.startswith("agent.session.turn.")
                        and event.get("turn_id") == until_turn.id
                        and kind.rsplit(".", 1)[1] in ("completed", "failed", "cancelled")
                    ):
                        ended = True
                    if kind == "agent.session.failed" or (
                        ended and kind in ("agent.session.idle", "agent.session.budget_reached")
                    ):
                        return
        finally:
            session.unsubscribe(loop, queue)

    return EventSourceResponse(generate(), ping=SSE_PING_S)


async def stream_events(request: Request) -> Response:
    state = _state(request)
    session = state.store.get(request.path_params["session_id"])
    include = request.query_params.get("include_obfuscation")
    if include not in (None, "true", "false"):
        raise bad_request("include_obfuscation must be true or false", "include_obfuscation")
    queue, _ = session.subscribe()
    return _sse(session, queue, kept=[session.status_event()])


async def list_items(request: Request) -> Response:
    state = _state(request)
    session = state.store.get(request.path_params["session_id"])
    for key in request.query_params:
        if key not in ("after", "limit", "order"):
            raise bad_request(f"unknown query parameter {key!r}", key)
    with session.lock:
        rows = list(session.items)
    return _page_response(request, rows)


async def unimplemented(request: Request) -> Response:
    _state(request)
    raise not_implemented(request.method, request.url.path)


# -- console ---------------------------------------------------------------------------------------


CONSOLE_HEADERS = {
    **BASE_HEADERS,
    "Content-Security-Policy": content_security_policy(img=("'self'", "blob:")),
}
"""The console's files' headers: its script and style sheet are files of this server; it
shows the latest screenshot through a ``blob:`` URL of the image it fetched with the token
(``img-src blob:``) and fetches only from this server."""


def _console_file(name: str) -> str:
    return resources.files("cubicle.orchestrator.serve").joinpath(name).read_text("utf-8")


async def console_page(request: Request) -> Response:
    """The console page: no data in it (everything is fetched with the token)."""
    return HTMLResponse(_console_file("console.html"), headers=CONSOLE_HEADERS)


async def console_script(request: Request) -> Response:
    return Response(
        _console_file("console.js"), media_type="text/javascript", headers=CONSOLE_HEADERS
    )


async def console_style(request: Request) -> Response:
    return Response(_console_file("console.css"), media_type="text/css", headers=CONSOLE_HEADERS)


async def console_events(request: Request) -> Response:
    state = _state(request)
    session = state.store.get(request.path_params["session_id"])
    queue, kept = session.subscribe(replay=True)
    return _sse(session, queue, kept=kept)


async def console_view(request: Request) -> Response:
    """A one-time link to the session desktop's live view (``cubicle view``, issue 16)."""
    state = _state(request)
    session = state.store.get(request.path_params["session_id"])
    sandbox = session.sandbox
    if sandbox is None:
        raise bad_request("the session's desktop is not ready yet")
    try:
        link = await anyio.to_thread.run_sync(open_view, sandbox.id)
    except CubicleError as exc:
        raise bad_request(f"no live view for this session's desktop: {exc}") from None
    return JSONResponse({"url": link.url, "mode": link.mode})


async def console_screenshot(request: Request) -> Response:
    state = _state(request)
    session = state.store.get(request.path_params["session_id"])
    with session.lock:
        jpeg = session.latest_screenshot
    if jpeg is None:
        raise ApiError(404, "no screenshot yet", code="not_found")
    return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store"})


# -- the app ---------------------------------------------------------------------------------------


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    kind = "not_found" if status == 404 else "method_not_allowed" if status == 405 else "http_error"
    message = f"{request.method} {request.url.path}: {exc.detail}"
    return JSONResponse(
        error_body(message, type="invalid_request_error", code=kind),
        status_code=status,
        headers=NO_RETRY,
    )


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    return JSONResponse(
        error_body(
            "internal server error (logged by cubicle serve)",
            type="server_error",
            code="internal_error",
        ),
        status_code=500,
        headers=NO_RETRY,
    )


def destroy_by_id(sandbox_id: str) -> None:
    get_provider(backend_of(sandbox_id)).destroy(sandbox_id)


def build_app(state: ServerState) -> Starlette:
    """The ASGI app over ``state`` (the caller collected the previous server's sandboxes)."""
    base = "/v1/agents/sessions"
    routes = [
        Route(base, create_session, methods=["POST"]),
        Route(base, list_sessions, methods=["GET"]),
        Route(base + "/{session_id}", retrieve_session, methods=["GET"]),
        Route(base + "/{session_id}", update_session, methods=["POST"]),
        Route(base + "/{session_id}", delete_session, methods=["DELETE"]),
        Route(base + "/{session_id}/events", post_events, methods=["POST"]),
        Route(base + "/{session_id}/events", stream_events, methods=["GET"]),
        Route(base + "/{session_id}/items", list_items, methods=["GET"]),
        Route("/v1/{rest:path}", unimplemented, methods=["GET", "POST", "PUT", "PATCH", "DELETE"]),
        Route("/console", console_page, methods=["GET"]),
        Route("/console/console.js", console_script, methods=["GET"]),
        Route("/console/console.css", console_style, methods=["GET"]),
        Route("/console/api/sessions/{session_id}/events", console_events, methods=["GET"]),
        Route("/console/api/sessions/{session_id}/screenshot", console_screenshot, methods=["GET"]),
        Route("/console/api/sessions/{session_id}/view", console_view, methods=["POST"]),
    ]
    middleware = [] if state.hosts is None else [Middleware(HostCheck, hosts=state.hosts)]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _internal_error,
        },
    )
    app.state.serve = state
    return app
