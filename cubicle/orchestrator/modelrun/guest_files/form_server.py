"""The drill's form server (runs inside the guest, loopback only).

Usage: ``python3 form_server.py PORT FOLDER``. Serves ``FOLDER/form.html`` at ``/`` and stores
what the page posts:

- ``POST /submit`` (JSON object of the form's fields) → ``FOLDER/form-data.json``

Files are written atomically (temp file + rename) so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MAX_BODY = 64 * 1024
FOLDER = Path(".")


def _store(name: str, data: object) -> None:
    target = FOLDER / name
    temporary = target.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, ensure_ascii=False, sort_keys=True), encoding="utf-8")
    os.replace(temporary, target)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path not in ("/", "/form.html"):
            self._reply(404, b"not found", "text/plain")
            return
        self._reply(200, (FOLDER / "form.html").read_bytes(), "text/html; charset=utf-8")

    def do_POST(self) -> None:
        targets = {"/submit": "form-data.json"}
        length = int(self.headers.get("Content-Length") or 0)
        if self.path not in targets or not 0 < length <= MAX_BODY:
            self._reply(400, b"bad request", "text/plain")
            return
        try:
            data = json.loads(self.rfile.read(length).decode("utf-8"))
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
    global FOLDER
    port, FOLDER = int(argv[0]), Path(argv[1])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"form_server: serving {FOLDER} on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
