"""A local sign-in test site and the host's Chromium for the sign-in tests.

:class:`Site` serves pages by path on one port of the loopback, reachable as
``http://127.0.0.1:P`` and ``http://localhost:P`` (two sites: a cross-origin iframe between them
is its own renderer process), and records each form POST (the values the site received).
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qsl

__all__ = ["SCRIPT_BUILT", "Site", "browser_argv", "secret_forms", "until"]

T = TypeVar("T")

SCRIPT_BUILT = """<!doctype html><title>Portal</title><body><p>Loading…</p><script>
addEventListener("load", () => setTimeout(() => {
  const form = document.createElement("form");
  form.method = "post"; form.action = "/received";
  form.innerHTML = `<label for=u>Work email</label><input id=u name=user autocomplete=username>
    <label>Secret <input type=password name=pw></label><button>Sign in</button>`;
  document.body.append(form);
}, 300));
</script>"""


class Site:
    """Pages by path on one port, reachable as http://127.0.0.1:P and http://localhost:P."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        self.received: list[dict[str, str]] = []
        """Every form POSTed, in order."""
        self.posted: list[tuple[str, dict[str, str]]] = []
        """(path, form) of every POST, in order."""
        self.responses: dict[str, Callable[[dict[str, str]], str]] = {}
        """path → the page answering a POST there (given the form); default: "Signed in"."""
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page = site.pages.get(self.path.split("?")[0])
                body = (page or "not found").encode()
                self.send_response(200 if page else 404)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                form = dict(parse_qsl(self.rfile.read(length).decode()))
                path = self.path.split("?")[0]
                site.received.append(form)
                site.posted.append((path, form))
                answer = site.responses.get(path)
                page = answer(form) if answer else "<title>Signed in</title>welcome"
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.end_headers()
                self.wfile.write(page.encode())

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def browser_argv(profile: str, *, headless: bool) -> list[str]:
    """The host's Chromium with a private profile, no proxy, every site in its own process."""
    argv = ["chromium", "--no-first-run", "--no-proxy-server", "--disable-gpu"]
    argv += [f"--user-data-dir={profile}", "--site-per-process"]
    if headless:
        argv.append("--headless=new")
    if os.geteuid() == 0:
        argv.append("--no-sandbox")  # the host's tests run as root; the guest's browser does not
    return argv


def until(probe: Callable[[], T | None], what: str, timeout_s: float = 20.0) -> T:
    """Ask ``probe`` until it answers something (a condition, not a fixed wait)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = probe()
        if answer is not None:
            return answer
        threading.Event().wait(0.05)
    raise AssertionError(f"no {what} within {timeout_s} s")


def secret_forms(value: str) -> list[str]:
    """A submitted value as it could leak: plain, base64, JSON-escaped (ASCII and not)."""
    return [
        value,
        base64.b64encode(value.encode()).decode(),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
    ]
