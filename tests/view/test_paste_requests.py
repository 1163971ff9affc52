"""``POST /api/paste`` of a real view server (its app on uvicorn, on 127.0.0.1) refusing what it
must before reaching any sandbox: without the session cookie or the page's header, in view mode,
an unknown chord, an empty text, bytes that are not UTF-8, a text over the clipboard's limit —
each with an error naming what was wrong, and the server keeps serving."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import requests
import uvicorn

from cubicle.orchestrator.view.server import COOKIE, ViewServer, build_app
from cubicle_guest.protocol import MAX_CLIPBOARD_BYTES

HEADERS = {"X-Cubicle-View": "1"}


@pytest.fixture
def served() -> Iterator[tuple[ViewServer, str, requests.Session]]:
    """A view server of a sandbox that does not exist, in takeover mode, and a browser session
    of it (a one-time token spent for its cookie)."""
    server = ViewServer("dk-0000000000", key="k" * 43, mode="takeover")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    server.port = listener.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(build_app(server), lifespan="off", log_level="warning"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.port}/"
    session = requests.Session()
    try:
        while not uv.started:
            thread.join(0.01)
        opened = session.post(
            base + "api/session", json={"token": server.mint()}, headers=HEADERS, timeout=10
        )
        assert opened.status_code == 200 and COOKIE in session.cookies
        yield server, base, session
    finally:
        uv.should_exit = True
        thread.join(10)
        listener.close()


def test_a_paste_is_refused_naming_what_was_wrong_and_the_server_keeps_serving(
    served: tuple[ViewServer, str, requests.Session],
) -> None:
    server, base, session = served
    url = base + "api/paste"

    def paste(
        body: bytes, *, keys: str | None = None, headers: dict[str, str] = HEADERS
    ) -> tuple[int, str]:
        reply = session.post(url, data=body, params={"keys": keys}, headers=headers, timeout=10)
        return reply.status_code, str(reply.json()["error"])

    assert requests.post(url, data=b"x", headers=HEADERS, timeout=10).status_code == 401
    assert paste(b"x", headers={}) == (401, "not authorized")  # no header: a cross-site form
    assert paste(b"x", keys="ctrl+alt+delete") == (
        400,
        "keys must be one of ctrl+v, ctrl+shift+v, not 'ctrl+alt+delete'",
    )
    assert paste(b"") == (400, "nothing to paste: the browser's clipboard holds no text")
    status, error = paste(b"ok \xff\xfe")
    assert status == 400 and error.startswith("the pasted text is not UTF-8: "), error
    limit = f"the pasted text is over the clipboard's limit of {MAX_CLIPBOARD_BYTES} bytes of UTF-8"
    assert paste("€".encode() * (MAX_CLIPBOARD_BYTES // 3 + 1)) == (413, limit)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the body is read up to the limit
        for _ in range(MAX_CLIPBOARD_BYTES // 1000 + 1):
            yield b"x" * 1000

    chunked = session.post(url, data=chunks(), headers=HEADERS, timeout=10)
    assert (chunked.status_code, chunked.json()["error"]) == (413, limit)

    server.mode = "view"
    assert paste("🙂".encode()) == (403, "view only: take control to paste into the desktop")
    state = session.get(base + "api/state", timeout=10)
    assert state.status_code == 200 and state.json()["mode"] == "view"
