"""``cubicle mcp``: the desktop as MCP tools, on stdio or on streamable HTTP (loopback + token).

One MCP server (the ``mcp`` package's low-level :class:`mcp.server.Server`) lists the tools of
:data:`cubicle.orchestrator.mcp.tools.TOOLS` and calls them: the arguments are validated against
the tool's model first, then the (blocking) handler runs in a worker thread. A bad call, a
failing sandbox or any other error is an error *result* (``isError``) whose text names what was
wrong; the server keeps serving.

Lifetime: the sandboxes belong to the server's process (:mod:`cubicle.orchestrator.mcp.desktops`)
and are removed when it stops — stdin closed (the stdio client's close), SIGTERM or SIGINT —
before it exits; their removal takes well under the stdio client's 2 s SIGTERM grace. Signals
arriving during that teardown are ignored. Killed outright (SIGKILL), it leaves them to ``cubicle
gc``, which takes them because their owner process is gone.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import anyio.to_thread
import uvicorn
from mcp import types
from mcp.server import Server
from mcp.server.stdio import stdio_server

from cubicle.orchestrator import __version__
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.mcp.auth import BearerGuard, write_token
from cubicle.orchestrator.mcp.desktops import Desktops
from cubicle.orchestrator.mcp.schemas import BadArguments, parse_arguments
from cubicle.orchestrator.mcp.tools import TOOLS, tool_named
from cubicle_guest.errors import CubicleError

__all__ = ["build_server", "call_tool", "serve_http", "serve_stdio"]

log = logging.getLogger("cubicle.orchestrator.mcp")

INSTRUCTIONS = (
    "Disposable Linux desktops. Call create_sandbox, then screenshot to see the screen; click, "
    "type, keypress and the other input tools act on it (coordinates are pixels of the last "
    "screenshot); exec runs a program in it; upload and download copy files between it and "
    "this server's files folder (paths there are relative to it); clipboard_get and "
    "clipboard_set read and set its clipboard. destroy_sandbox removes it; all of this server's "
    "sandboxes are removed when it stops."
)
GRACEFUL_S = 1
"""Seconds the HTTP server waits for open requests when stopping, before the teardown."""


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


async def call_tool(desktops: Desktops, name: str, arguments: object) -> types.CallToolResult:
    """Call tool ``name``: its result, or an error result naming what was wrong (never raises
    but for cancellation)."""
    tool = tool_named(name)
    if tool is None:
        known = ", ".join(t.name for t in TOOLS)
        return _error(f"unknown tool {name!r}; the tools are: {known}")
    try:
        args = parse_arguments(name, tool.model, arguments)
        content = await anyio.to_thread.run_sync(
            tool.handler, desktops, args, abandon_on_cancel=True
        )
    except BadArguments as exc:
        return _error(str(exc))
    except CubicleError as exc:
        return _error(f"{name}: {exc}" + (f"\nhint: {exc.hint}" if exc.hint else ""))
    except Exception as exc:  # the server keeps serving whatever one call did
        log.exception("tool %s failed", name)
        return _error(f"{name}: internal error: {type(exc).__name__}: {exc}")
    return types.CallToolResult(content=list(content))


def build_server(desktops: Desktops) -> Server[Any]:
    """The MCP server over ``desktops`` (tools only)."""

    async def list_tools(
        _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool.listing() for tool in TOOLS])

    async def on_call(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await call_tool(desktops, params.name, params.arguments)

    return Server(
        "cubicle",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=on_call,
    )


def _say(text: str) -> None:
    print(f"cubicle mcp: {text}", file=sys.stderr, flush=True)


def _teardown(desktops: Desktops) -> None:
    removed = desktops.close()
    if removed:
        _say(f"removed {', '.join(removed)}")


def serve_stdio(desktops: Desktops) -> int:
    """Serve MCP on stdin/stdout until stdin closes or SIGTERM/SIGINT; then remove the
    sandboxes (signals during the removal are ignored: it finishes). Stopped by a signal, the
    process exits with 128 + its number right after the removal (the thread reading stdin
    would otherwise hold the exit up until the client closes stdin)."""

    async def main() -> None:
        server = build_server(desktops)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    _say(f"stopping on signal {signum}")
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(_teardown, desktops)
                    sys.stderr.flush()
                    os._exit(128 + signum)

            try:
                async with anyio.create_task_group() as group:
                    group.start_soon(stop_on_signal)
                    async with stdio_server() as (read, write):
                        await server.run(read, write, server.create_initialization_options())
                    group.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(_teardown, desktops)

    anyio.run(main)
    return 0


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def serve_http(
    desktops: Desktops,
    *,
    port: int,
    token: str,
    token_file: Callable[[int], Path],
    host: str = "127.0.0.1",
) -> int:
    """Serve MCP over streamable HTTP at ``http://HOST:PORT/mcp`` for holders of ``token``
    (written to ``token_file(port)`` once the port is bound) until SIGTERM/SIGINT; then remove
    the sandboxes."""
    server = build_server(desktops)
    app = BearerGuard(server.streamable_http_app(host=host), token)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
        bound = sock.getsockname()[1]
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"--port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="pick another --port (0: any free one)",
        ) from None
    path = token_file(bound)
    try:
        write_token(path, token)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--token-file {path}: cannot write the token: {exc}") from None
    shown = f"[{host}]" if ":" in host else host
    _say(f"token in {path} (send it as 'Authorization: Bearer <token>')")
    _say(f"url http://{shown}:{bound}/mcp")
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_S,
        ws="none",
    )
    # uvicorn re-raises the signal that stopped it once it is done: this handler turns it into
    # SystemExit, so the teardown below runs before the process exits
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except SystemExit:
        pass
    finally:
        for sig in previous:  # the teardown finishes whatever comes now
            signal.signal(sig, signal.SIG_IGN)
        _teardown(desktops)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    return 0
