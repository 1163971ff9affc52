"""The drill's form server (runs inside the guest, loopback only).

Usage: ``python3 form_server.py PORT FOLDER [PAGES]``. Serves ``FOLDER/form.html`` at ``/``, a
task's own pages from its work folder ``PAGES`` (``GET /NAME.html`` → ``PAGES/NAME.html``; NAME of
letters, digits, ``.``, ``_`` and ``-``, a file directly in PAGES; anything else 404), and stores
what a page posts:

- ``POST /submit`` (JSON object of the form's fields) → ``FOLDER/form-data.json``
- a sign-in site when ``FOLDER/signin.json`` exists (SHA-256 hex digests of the task's test
  credentials ``email``, ``password``, ``code``; the values themselves are never in the guest):
  ``GET /signin`` (email and password), ``POST /signin`` → ``/code`` (a one-time code),
  ``POST /code`` → ``/done`` ("signed in") and ``{"signed_in": "yes"}`` → ``FOLDER/form-data.json``;
  ``/done`` has a focused note field whose ``POST /note`` (signed in only) adds ``note`` there —
  what the model does once the person signed it in (the task's check needs both).
  A wrong value shows the page again with "Wrong"; the code page without the password is refused.
  Forms post ``application/x-www-form-urlencoded``; no value is logged.

Files are written atomically (temp file + rename) so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

MAX_BODY = 64 * 1024
FOLDER = Path(".")
PAGES: Path | None = None
PAGE_NAME = re.compile(r"^/([A-Za-z0-9_-][A-Za-z0-9._-]{0,99}\.html)$")


def _store(name: str, data: object) -> None:
    target = FOLDER / name
    temporary = target.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, ensure_ascii=False, sort_keys=True), encoding="utf-8")
    os.replace(temporary, target)


SIGNIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Cubicle sign-in</title>
<style>body{font:18px sans-serif;margin:60px}label{display:block;margin:14px 0}
input{font:18px sans-serif;width:320px;padding:6px}button{font:18px sans-serif;padding:8px 20px}
</style></head><body><h1>Sign in to the tracker</h1>%s
<form method="post" action="/signin">
<label>Email<br><input type="email" name="email" autocomplete="username" required></label>
<label>Password<br><input type="password" name="password" autocomplete="current-password"
 required></label><button type="submit">Sign in</button></form></body></html>"""
CODE_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Cubicle sign-in: code</title>
<style>body{font:18px sans-serif;margin:60px}label{display:block;margin:14px 0}
input{font:18px sans-serif;width:200px;padding:6px}button{font:18px sans-serif;padding:8px 20px}
</style></head><body><h1>Enter the one-time code</h1>%s
<form method="post" action="/code">
<label>One-time code<br><input name="code" autocomplete="one-time-code" inputmode="numeric"
 required></label><button type="submit">Verify</button></form></body></html>"""
DONE_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<title>Cubicle sign-in: signed in</title></head><body style="font:18px sans-serif;margin:60px">
<h1>Signed in</h1><p>Welcome to the tracker.</p>%s
<form method="post" action="/note"><label>Note for the team
<input name="note" autocomplete="off" autofocus></label></form></body></html>"""
SAVED = "<p>Note saved.</p>"
WRONG = '<p style="color:#b00020">Wrong, try again.</p>'
_state = {"password_ok": False, "signed_in": False}


def _digests() -> dict[str, str] | None:
    try:
        value = json.loads((FOLDER / "signin.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _matches(digests: dict[str, str], name: str, given: str) -> bool:
    digest = hashlib.sha256(given.encode("utf-8")).hexdigest()
    return hmac.compare_digest(digest, str(digests.get(name, "")))


class Handler(BaseHTTPRequestHandler):
    def _signin_get(self) -> bool:
        pages = {"/signin": SIGNIN_PAGE % "", "/code": CODE_PAGE % "", "/done": DONE_PAGE % ""}
        if _digests() is None or self.path not in pages:
            return False
        if self.path == "/code" and not _state["password_ok"]:
            self._redirect("/signin")
            return True
        self._reply(200, pages[self.path].encode(), "text/html; charset=utf-8")
        return True

    def _signin_post(self, body: bytes) -> bool:
        digests = _digests()
        if digests is None or self.path not in ("/signin", "/code", "/note"):
            return False
        form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
        if self.path == "/note":
            if not _state["signed_in"]:
                self._redirect("/signin")
                return True
            _store("form-data.json", {"signed_in": "yes", "note": form.get("note", "")})
            self._reply(200, (DONE_PAGE % SAVED).encode(), "text/html; charset=utf-8")
            return True
        if self.path == "/signin":
            if _matches(digests, "email", form.get("email", "")) and _matches(
                digests, "password", form.get("password", "")
            ):
                _state["password_ok"] = True
                self._redirect("/code")
            else:
                self._reply(200, (SIGNIN_PAGE % WRONG).encode(), "text/html; charset=utf-8")
            return True
        if _state["password_ok"] and _matches(digests, "code", form.get("code", "")):
            _state["signed_in"] = True
            _store("form-data.json", {"signed_in": "yes"})
            self._redirect("/done")
        else:
            self._reply(200, (CODE_PAGE % WRONG).encode(), "text/html; charset=utf-8")
        return True

    def _redirect(self, location: str) -> None:
        self.send_response(303)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        if self._signin_get():
            return
        if self.path in ("/", "/form.html"):
            self._reply(200, (FOLDER / "form.html").read_bytes(), "text/html; charset=utf-8")
            return
        page = self._task_page()
        if page is None:
            self._reply(404, b"not found", "text/plain")
            return
        self._reply(200, page, "text/html; charset=utf-8")

    def _task_page(self) -> bytes | None:
        """A page of the task's work folder (``GET /NAME.html``), or None."""
        match = PAGE_NAME.match(self.path)
        if PAGES is None or match is None:
            return None
        path = PAGES / match.group(1)
        if path.is_symlink() or not path.is_file():
            return None
        try:
            return path.read_bytes()
        except OSError:
            return None

    def do_POST(self) -> None:
        targets = {"/submit": "form-data.json"}
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            self._reply(400, b"bad request", "text/plain")
            return
        body = self.rfile.read(length)
        if self._signin_post(body):
            return
        if self.path not in targets:
            self._reply(400, b"bad request", "text/plain")
            return
        try:
            data = json.loads(body.decode("utf-8"))
        except ValueError:
            self._reply(400, b"body is not UTF-8 JSON", "text/plain")
            return
        _store(targets[self.path], data)
        self._reply(200, b'{"stored": true}', "application/json")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write("form_server: " + (format % args) + "\n")


def main(argv: list[str]) -> int:
    global FOLDER, PAGES
    port, FOLDER = int(argv[0]), Path(argv[1])
    PAGES = Path(argv[2]) if len(argv) > 2 else None
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"form_server: serving {FOLDER} on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
