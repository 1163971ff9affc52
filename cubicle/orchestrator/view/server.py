"""The view server of one sandbox: noVNC over a WebSocket, on 127.0.0.1 only.

``python -m cubicle.orchestrator.view.server --sandbox ID`` (started by
:mod:`cubicle.orchestrator.view.control`, never by hand) reads one JSON line from stdin — ``{"key":
..., "mode": ...}`` — binds an ephemeral port on 127.0.0.1, writes its state file
(:mod:`cubicle.orchestrator.view_servers`), prints ``ready PORT`` on stdout and serves (Starlette on
uvicorn) until SIGTERM or until its sandbox is gone (checked every :data:`WATCH_S` seconds). Logs
(uvicorn's access log included) go to stderr.

Access: the page (``/``) holds nothing of the desktop. A viewer gets in with a **one-time token**
minted by the control key (``POST /api/mint``) and carried in the URL *fragment*
(``/#t=TOKEN``) — browsers never send a fragment, so no request line and no log holds it. The
page posts it to ``/api/session`` and receives an ``HttpOnly; SameSite=Strict`` session cookie;
the token is then spent. Every other endpoint needs that cookie (or the control key as a bearer
token): no cookie, no desktop. Requests must name ``127.0.0.1`` as Host (no DNS rebinding), the
WebSocket's Origin must be this server, and state-changing calls need the ``X-Cubicle-View``
header (a cross-site form cannot send it).

Modes: ``view`` (default) runs x11vnc with ``-viewonly`` in the guest — the guest drops input,
whatever the page sends. ``takeover`` (``POST /api/mode``: the page's button or ``cubicle view
--takeover``) runs it with input; switching closes the open VNC sessions (the page reconnects in
the new mode) and records the mode in the state file, which the agent's hand-over gate reads
(:mod:`cubicle.orchestrator.view.handover`).

Paste: ``POST /api/paste`` (the page's ``paste`` event, raw UTF-8 body) sets the guest's
clipboard to the person's text and presses Ctrl+V there (:mod:`cubicle.orchestrator.view.paste`)
— in takeover mode only: in ``view`` mode the server answers 403 whoever asks. One paste at a
time; a refused or failed paste answers ``{"error": ...}`` and the server keeps serving.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Final

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from cubicle.orchestrator.page_security import PageHeaders, content_security_policy
from cubicle.orchestrator.providers import backend_of, get_provider
from cubicle.orchestrator.view.inputs import RfbInputTap, append_input
from cubicle.orchestrator.view.paste import PasteError, deliver_paste, read_paste
from cubicle.orchestrator.view.stream import open_vnc_stream
from cubicle.orchestrator.view_servers import (
    MODES,
    Mode,
    ViewState,
    check_sandbox_id,
    input_path,
    state_path,
    write_state,
)

__all__ = ["NOVNC_DIR", "ViewServer", "build_app", "main"]

NOVNC_DIR: Final = Path(os.environ.get("CUBICLE_NOVNC_DIR", "/usr/share/novnc"))
"""noVNC's files (Debian's ``novnc`` package)."""
COOKIE: Final = "cubicle_view"
HEADER: Final = "x-cubicle-view"
TOKEN_TTL_S: Final = 600.0
WATCH_S: Final = 2.0
CHUNK: Final = 256 * 1024
MODE_CHANGED: Final = 4001
log = logging.getLogger("cubicle.view")


@dataclass
class ViewServer:
    """The server's mutable state (one event loop: no locks)."""

    sandbox_id: str
    key: str
    mode: Mode
    port: int = 0
    tokens: dict[str, float] = field(default_factory=dict)
    sessions: set[str] = field(default_factory=set)
    sockets: set[WebSocket] = field(default_factory=set)
    generation: int = 0
    """Counts mode changes: a VNC session opened in one generation must not outlive it."""
    pasting: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One paste at a time: a clipboard set and its Ctrl+V never interleave with another's."""

    def mint(self) -> str:
        now = time.monotonic()
        self.tokens = {t: exp for t, exp in self.tokens.items() if exp > now}
        token = secrets.token_urlsafe(24)
        self.tokens[token] = now + TOKEN_TTL_S
        return token

    def spend(self, token: str) -> bool:
        expires = self.tokens.pop(token, 0.0)
        return expires > time.monotonic()

    def holds_key(self, request: Request | WebSocket) -> bool:
        """Whether the request carries the control key as its bearer token (a viewer's cookie
        does not count: only the key mints links)."""
        bearer = request.headers.get("authorization", "")
        return bearer.startswith("Bearer ") and secrets.compare_digest(bearer[7:], self.key)

    def authorized(self, request: Request | WebSocket) -> bool:
        """The control key, or the cookie of a session a one-time token opened."""
        if self.holds_key(request):
            return True
        session = request.cookies.get(COOKIE, "")
        return any(secrets.compare_digest(session, s) for s in self.sessions)

    def in_control(self) -> bool:
        """Whether a person has control (mode ``takeover``): their input and pastes go in."""
        return self.mode == "takeover"

    def record(self) -> None:
        write_state(ViewState(self.sandbox_id, os.getpid(), self.port, self.key, self.mode))


PAGE_FILES: Final[Mapping[str, str]] = {
    "/": "view.html",
    "/view.js": "view.js",
    "/view.css": "view.css",
}
"""The page's own files (URL path → file of this package); noVNC's are under ``/novnc``."""
_MEDIA: Final = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


def page_policy(port: int) -> str:
    """The Content-Security-Policy of every response of the server on ``port``. noVNC paints
    the JPEG and PNG rectangles it receives through ``data:`` image URLs
    (``core/display.js``) and draws the remote cursor as a ``data:`` CSS cursor
    (``core/util/cursor.js``): ``img-src data:``. The desktop comes over this server's own
    WebSocket: ``connect-src ws://127.0.0.1:PORT``. Scripts (the page's and noVNC's modules)
    and the style sheet are this server's files; noVNC's element styles are set through the
    DOM, which ``style-src`` does not govern."""
    return content_security_policy(
        img=("'self'", "data:"), connect=("'self'", f"ws://127.0.0.1:{port}")
    )


def _page_file(name: str) -> str:
    return resources.files("cubicle.orchestrator.view").joinpath(name).read_text("utf-8")


def build_app(server: ViewServer) -> Starlette:
    """The ASGI application of ``server`` (routes in the module docstring)."""

    def denied() -> Response:
        return JSONResponse({"error": "not authorized"}, status_code=401)

    def csrf_ok(request: Request) -> bool:
        return request.headers.get(HEADER) == "1" or request.headers.get(
            "authorization", ""
        ).startswith("Bearer ")

    async def page(request: Request) -> Response:
        name = PAGE_FILES[request.url.path]
        return Response(_page_file(name), media_type=_MEDIA[Path(name).suffix])

    async def session(request: Request) -> Response:
        if request.headers.get(HEADER) != "1":
            return denied()
        try:
            token = str((await request.json())["token"])
        except (ValueError, KeyError, TypeError):
            return JSONResponse({"error": 'body must be {"token": ...}'}, status_code=400)
        if not server.spend(token):
            log.warning("refused a wrong, spent or expired view token")
            return JSONResponse(
                {"error": "this view link is wrong, expired or already used: run cubicle view"},
                status_code=401,
            )
        value = secrets.token_urlsafe(32)
        server.sessions.add(value)
        response = JSONResponse({"mode": server.mode, "sandbox": server.sandbox_id})
        response.set_cookie(COOKIE, value, httponly=True, samesite="strict", path="/")
        return response

    async def mint(request: Request) -> Response:
        if not server.holds_key(request):
            return denied()
        return JSONResponse({"token": server.mint()})

    async def state(request: Request) -> Response:
        if not server.authorized(request):
            return denied()
        return JSONResponse({"mode": server.mode, "sandbox": server.sandbox_id})

    async def mode(request: Request) -> Response:
        if not (server.authorized(request) and csrf_ok(request)):
            return denied()
        try:
            wanted = (await request.json())["mode"]
        except (ValueError, KeyError, TypeError):
            wanted = None
        if wanted not in MODES:
            return JSONResponse(
                {"error": f"mode must be one of {', '.join(MODES)}"}, status_code=400
            )
        if wanted != server.mode:
            server.mode = wanted
            server.generation += 1  # sessions still opening see it and close themselves
            server.record()
            log.warning("mode is now %s", wanted)
            for ws in list(server.sockets):
                with contextlib.suppress(Exception):
                    await ws.close(MODE_CHANGED, f"mode changed to {wanted}")
        return JSONResponse({"mode": server.mode, "sandbox": server.sandbox_id})

    async def paste(request: Request) -> Response:
        if not (server.authorized(request) and csrf_ok(request)):
            return denied()
        view_only = JSONResponse(
            {"error": "view only: take control to paste into the desktop"}, status_code=403
        )
        if not server.in_control():
            return view_only
        try:
            checked = await read_paste(
                request.stream(),
                content_length=request.headers.get("content-length"),
                keys=request.query_params.get("keys"),
            )
            async with server.pasting:
                if not server.in_control():  # control was given back meanwhile
                    return view_only
                await asyncio.get_running_loop().run_in_executor(
                    None, deliver_paste, server.sandbox_id, checked
                )
        except PasteError as exc:
            log.warning("refused a paste: %s", exc)
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        append_input(input_path(server.sandbox_id), {"kind": "paste"})  # never the text
        return JSONResponse({"pasted": len(checked.text)})

    async def vnc(ws: WebSocket) -> None:
        origin = ws.headers.get("origin")
        if not server.authorized(ws) or origin != f"http://127.0.0.1:{server.port}":
            await ws.close(1008, "not authorized")
            return
        protocols = ws.scope.get("subprotocols") or []
        generation = server.generation
        view_only = server.mode != "takeover"
        loop = asyncio.get_running_loop()
        try:
            stream = await loop.run_in_executor(
                None,
                lambda: open_vnc_stream(
                    get_provider(backend_of(server.sandbox_id)),
                    server.sandbox_id,
                    view_only=view_only,
                ),
            )
        except Exception as exc:  # the sandbox may be gone; tell the page why
            log.warning("cannot open a VNC session: %s", exc)
            await ws.close(1011, str(exc)[:120])
            return
        await ws.accept(subprotocol="binary" if "binary" in protocols else None)
        # No await between this check and joining server.sockets: a mode change either came
        # before (the session was opened for the old mode: close it, the page reconnects) or
        # comes after and closes it with the others.
        if server.generation != generation:
            stream.sock.close()
            with contextlib.suppress(Exception):
                await ws.close(MODE_CHANGED, f"mode changed to {server.mode}")
            return
        server.sockets.add(ws)
        sock = stream.sock
        sock.setblocking(False)
        codec = stream.codec
        inputs = input_path(server.sandbox_id)
        tap = None if view_only else RfbInputTap(lambda event: append_input(inputs, event))

        async def to_browser() -> None:
            while data := await loop.sock_recv(sock, CHUNK):
                payload = codec.decode(data) if codec else data
                if payload:
                    await ws.send_bytes(payload)

        async def to_guest() -> None:
            with contextlib.suppress(WebSocketDisconnect):
                while True:
                    message = await ws.receive()
                    if message["type"] == "websocket.disconnect":
                        return
                    data = message.get("bytes") or (message.get("text") or "").encode()
                    if server.generation != generation:
                        return  # opened for the old mode: nothing more reaches the guest
                    if tap is not None and tap.stopped is None and not tap.feed(data):
                        log.warning("not noting the person's inputs: %s", tap.stopped)
                    await loop.sock_sendall(sock, codec.encode(data) if codec else data)

        tasks = [asyncio.ensure_future(to_browser()), asyncio.ensure_future(to_guest())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            server.sockets.discard(ws)
            sock.close()
            with contextlib.suppress(Exception):
                await ws.close()

    return Starlette(
        routes=[
            *(Route(path, page) for path in PAGE_FILES),
            Route("/api/session", session, methods=["POST"]),
            Route("/api/mint", mint, methods=["POST"]),
            Route("/api/state", state),
            Route("/api/mode", mode, methods=["POST"]),
            Route("/api/paste", paste, methods=["POST"]),
            WebSocketRoute("/websockify", vnc),
            Mount("/novnc", app=StaticFiles(directory=NOVNC_DIR), name="novnc"),
        ],
        middleware=[
            Middleware(PageHeaders, policy=page_policy(server.port)),
            Middleware(TrustedHostMiddleware, allowed_hosts=["127.0.0.1"]),
        ],
    )


async def _watch(server: ViewServer, uv: uvicorn.Server) -> None:
    """Exit once the sandbox is gone (its server must not outlive it)."""
    loop = asyncio.get_running_loop()
    provider = get_provider(backend_of(server.sandbox_id))
    while not uv.should_exit:
        await asyncio.sleep(WATCH_S)
        try:
            info = await loop.run_in_executor(None, provider.describe, server.sandbox_id)
        except Exception as exc:  # the engine did not answer: keep serving, look again later
            log.warning("cannot tell whether %s still exists: %s", server.sandbox_id, exc)
            continue
        if info is None:
            log.warning("sandbox %s is gone: exiting", server.sandbox_id)
            uv.should_exit = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cubicle.orchestrator.view.server")
    parser.add_argument("--sandbox", required=True, type=check_sandbox_id)
    args = parser.parse_args(argv)
    config = json.loads(sys.stdin.readline())
    wanted = config.get("mode", "view")
    server = ViewServer(
        args.sandbox, key=str(config["key"]), mode="takeover" if wanted == "takeover" else "view"
    )
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    server.port = listener.getsockname()[1]
    listener.listen(64)  # connections queue from here, so "ready" is true when printed
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(message)s")
    uv = uvicorn.Server(
        uvicorn.Config(
            build_app(server),
            log_level="info",
            access_log=True,
            lifespan="off",
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,  # open views must not hold up down/gc
        )
    )

    async def serve() -> None:
        watcher = asyncio.ensure_future(_watch(server, uv))
        try:
            await uv.serve(sockets=[listener])
        finally:
            watcher.cancel()

    server.record()
    print(f"ready {server.port}", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    signal.signal(signal.SIGTERM, lambda *_: setattr(uv, "should_exit", True))
    try:
        asyncio.run(serve())
    finally:
        current = state_path(server.sandbox_id)
        with contextlib.suppress(OSError):
            data = json.loads(current.read_text())
            if data.get("pid") == os.getpid():
                current.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
