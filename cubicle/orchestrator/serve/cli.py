"""``cubicle serve``: the Agents sessions API on this machine (see
:mod:`cubicle.orchestrator.serve`)."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import uvicorn
from starlette.applications import Starlette

from cubicle.drivers.policy_file import load_policy
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.network import DEFAULT_ASK_TIMEOUT_S, NetworkPolicy
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.providers import get_provider
from cubicle.orchestrator.serve.app import ServerState, build_app, destroy_by_id, shutdown
from cubicle.orchestrator.serve.auth import TOKEN_ENV, resolve_token
from cubicle.orchestrator.serve.connections import (
    DEFAULT_HEAD_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    KEEP_ALIVE_S,
    MAX_HEAD_BYTES,
    ConnectionLimits,
    fd_budget,
    guarded_protocol,
    raise_fd_limit,
)
from cubicle.orchestrator.serve.hosts import allowed_hosts
from cubicle.orchestrator.serve.logs import bound_logs
from cubicle.orchestrator.serve.registry import Registry
from cubicle.orchestrator.serve.signin import DEFAULT_SIGNIN_EXPIRY_S
from cubicle.orchestrator.serve.spend import PriceTable, load_prices
from cubicle.orchestrator.shape_options import add_internal_networks_argument
from cubicle_guest.errors import CubicleError

__all__ = ["cmd_serve", "register"]

DEFAULT_PORT = 8377
GRACEFUL_S = 5
SESSIONS_PER_CPU = 2
"""Default sessions per host CPU: a desktop is limited to one core (``CUBICLE_CPUS``) and its
agent mostly waits for the model, so two share a core without starving the host."""
SESSION_MEMORY_MB = SandboxSpec().memory_mb
"""A desktop's default memory limit (MiB); the default never promises more than the host has."""


def default_max_sessions() -> int:
    """``--max-sessions`` when not given: :data:`SESSIONS_PER_CPU` per CPU, at most as many
    desktops as the host's memory holds at their default limit, at least 1 (4 on a 2-core
    machine with 8 GiB or more)."""
    cpus = os.cpu_count() or 1
    try:
        memory_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError):
        memory_mb = SESSION_MEMORY_MB * SESSIONS_PER_CPU * cpus
    return max(1, min(SESSIONS_PER_CPU * cpus, memory_mb // SESSION_MEMORY_MB))


def default_data_dir(port: int) -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "cubicle" / "serve" / str(port)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the Agents sessions API (client.beta.agents.sessions) on cubicle desktops",
        description="Serve /v1/agents/sessions for OpenAI(base_url='http://HOST:PORT/v1'). "
        f"The bearer token is {TOKEN_ENV}, or generated and printed once.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host that is not a loopback address (anyone who can reach it and holds "
        "the token can run agents on this machine)",
    )
    p.add_argument("--backend", default="docker", choices=("docker", "vm"))
    p.add_argument(
        "--policy",
        type=Path,
        help="policy file (cubicle.drivers.policy_file) deciding the safety checks of review "
        "'auto_review'",
    )
    add_internal_networks_argument(p)
    p.add_argument(
        "--ask-origins",
        action="store_true",
        help="ask mode: sessions with network 'restricted' or 'enabled' reach origins outside "
        "allowed_domains only once the session's client approves them (a "
        "browser_origin_access required action)",
    )
    p.add_argument(
        "--ask-timeout",
        type=float,
        metavar="S",
        help=f"with --ask-origins: seconds a question waits for the client; no answer = deny "
        f"(default {DEFAULT_ASK_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        metavar="N",
        help="sessions at once; a create beyond is refused (429 session_limit_reached) "
        f"(default {SESSIONS_PER_CPU} per CPU, at most what the memory holds at "
        f"{SESSION_MEMORY_MB} MiB each: {default_max_sessions()} here)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="open connections at most; at the cap a new one closes the connection that has "
        f"waited longest for a request (default {DEFAULT_MAX_CONNECTIONS})",
    )
    p.add_argument(
        "--head-timeout",
        type=float,
        default=DEFAULT_HEAD_TIMEOUT_S,
        metavar="S",
        help="seconds a connection has to send a complete request head "
        f"(default {DEFAULT_HEAD_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--signin-expiry",
        type=float,
        default=DEFAULT_SIGNIN_EXPIRY_S,
        metavar="S",
        help="seconds a browser sign-in request waits for its answer before it expires "
        f"(default {DEFAULT_SIGNIN_EXPIRY_S:g})",
    )
    p.add_argument(
        "--prices",
        type=Path,
        default=None,
        metavar="FILE",
        help="model prices (TOML, USD per million tokens: [models.NAME] input, cached_input, "
        "output): sessions report spend_control.consumed and may set a spending limit; "
        "without a price for its model a session's consumption stays null",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        help="private folder for turn records and the sandbox registry "
        "(default ~/.local/state/cubicle/serve/PORT)",
    )
    p.set_defaults(func=cmd_serve)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _signin_expiry(args: argparse.Namespace) -> float:
    """``--signin-expiry`` checked: more than 0, at most a day."""
    value = float(args.signin_expiry)
    if not 0 < value <= 86_400:
        raise ConfigError(f"--signin-expiry must be more than 0 and at most 86400 s, got {value:g}")
    return value


def _ask_timeout(args: argparse.Namespace) -> float | None:
    """The server's ask mode: the question timeout, or ``None`` without ``--ask-origins``.

    :raises ConfigError: ``--ask-timeout`` without ``--ask-origins``, or out of range."""
    if not args.ask_origins:
        if args.ask_timeout is not None:
            raise ConfigError("--ask-timeout needs --ask-origins")
        return None
    timeout = DEFAULT_ASK_TIMEOUT_S if args.ask_timeout is None else float(args.ask_timeout)
    NetworkPolicy.parse("ask:", ask_timeout=timeout)  # the one range check (ConfigError)
    return timeout


def cmd_serve(args: argparse.Namespace) -> int:
    if not _is_loopback(args.host) and not args.allow_remote:
        raise ConfigError(
            f"--host {args.host} is not a loopback address; pass --allow-remote to serve the "
            "API beyond this machine"
        )
    if not 0 <= args.port < 65536:
        raise ConfigError(f"--port {args.port} is not a TCP port")
    try:
        token, generated = resolve_token()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    policy = load_policy(args.policy) if args.policy else None
    prices = load_prices(args.prices) if args.prices else PriceTable({})
    ask_timeout = _ask_timeout(args)
    NetworkPolicy.parse("ask:").with_internal(args.allow_internal)  # checked before serving
    max_sessions = default_max_sessions() if args.max_sessions is None else args.max_sessions
    if max_sessions < 1:
        raise ConfigError(f"--max-sessions {max_sessions}: must be at least 1")
    limits = ConnectionLimits(args.max_connections, args.head_timeout)
    fd_budget(limits, max_sessions=max_sessions, soft_limit=raise_fd_limit())
    registry = Registry.open(args.data_dir or default_data_dir(args.port))
    try:
        listing = get_provider(args.backend).list() if registry.previous else []
    except CubicleError as exc:  # no engine now: the listed ids are still tried
        print(
            f"cubicle serve: warning: cannot list {args.backend} sandboxes: {exc}", file=sys.stderr
        )
        listing = []
    collected = registry.collect(destroy_by_id, listing)
    for sandbox_id in collected:
        print(f"cubicle serve: removed {sandbox_id}, left by a previous server", file=sys.stderr)
    state = ServerState(
        token=token,
        registry=registry,
        backend=args.backend,
        policy=policy,
        prices=prices,
        ask_timeout=ask_timeout,
        signin_expiry_s=_signin_expiry(args),
        max_sessions=max_sessions,
        hosts=allowed_hosts(args.host),
        internal_networks=tuple(args.allow_internal),
    )
    app = build_app(state)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await anyio.to_thread.run_sync(shutdown, state)

    app.router.lifespan_context = lifespan
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(limits.backlog)  # connections queue from the moment the address is printed
    port = sock.getsockname()[1]
    host = f"[{args.host}]" if ":" in args.host else args.host
    if generated:
        print(f"cubicle serve: API token (shown once): {token}", flush=True)
    print(f"cubicle serve: base_url http://{host}:{port}/v1", flush=True)
    print(f"cubicle serve: console http://{host}:{port}/console#token=<token>", flush=True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_S,  # open event streams do not hold the stop up
        http=guarded_protocol(limits),  # the cap and the head deadline (connections.py)
        ws="none",  # no WebSocket routes: an upgrade request is an ordinary (refused) request
        backlog=limits.backlog,
        timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )
    bound_logs()  # after uvicorn configured its loggers
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        registry.close()
    return 0
