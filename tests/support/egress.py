"""A real egress proxy (its one-file bundle, cubicle.egress.bundle, run with ``python -I`` as
deployed) on 127.0.0.1, upstream HTTP servers that record what reaches them, and a raw client; no
outside network. Waits are on events (the proxy's output lines), never on sleeps."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

from cubicle.egress.bundle import write_bundle
from cubicle.orchestrator.hostdirs import host_folder
from cubicle.orchestrator.providers.docker.image import BUNDLE_CACHE
from tests.orchestrator.support import Server, http_server

WAIT_S = 15.0


def upstream(token: str) -> AbstractContextManager[Server]:
    """An upstream HTTP/1.1 server on 127.0.0.1 recording every request it gets."""
    return http_server(token, "127.0.0.1")


class RunningProxy:
    """The proxy subprocess; :meth:`decisions` waits for its decision lines."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.port = port
        self.lines: list[dict[str, object]] = []
        self.stderr: list[str] = []
        self.stopped = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(json.loads(line))
                self._changed.notify_all()

    def decisions(self, count: int) -> list[dict[str, object]]:
        """The decision records once there are at least ``count`` (fails after WAIT_S)."""
        with self._changed:
            self._changed.wait_for(lambda: len(self._decisions()) >= count, WAIT_S)
            found = self._decisions()
        assert len(found) >= count, (count, found)
        return found

    def stop(self) -> None:
        """Terminate the proxy now (a test of what happens when it goes away)."""
        self.stopped = True
        self.process.terminate()
        self.process.wait(WAIT_S)

    def _decisions(self) -> list[dict[str, object]]:
        return [line for line in self.lines if "decision" in line]

    def events(self, kind: str, count: int) -> list[dict[str, object]]:
        """The log lines with ``"event": kind`` once there are ``count`` (fails after WAIT_S)."""

        def found() -> list[dict[str, object]]:
            return [line for line in self.lines if line.get("event") == kind]

        with self._changed:
            self._changed.wait_for(lambda: len(found()) >= count, WAIT_S)
            lines = found()
        assert len(lines) >= count, (kind, count, self.lines)
        return lines

    def exchange(self, data: bytes, *, then: bytes = b"", end: bool = False) -> bytes:
        """Send ``data`` (then ``then`` once a first reply arrived; with ``end``, then close our
        sending side) on one connection; return everything the proxy sent until it closed."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=WAIT_S) as sock:
            sock.sendall(data)
            received = b""
            if then:
                received = sock.recv(65536)
                sock.sendall(then)
            if end:
                sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                received += chunk
            return received


def statuses(raw: bytes) -> list[int]:
    """The status codes of the HTTP/1.1 responses in ``raw`` (bodies here never hold one)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", raw)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def egress_proxy(
    *allow: str, python: str = sys.executable, options: Sequence[str] = ()
) -> Iterator[RunningProxy]:
    """Run the proxy with ``python -I`` allowing ``allow`` (``HOST[:PORT]``) or with
    ``options`` (e.g. ``--policy``); stopped (by its pid) on exit."""
    port = free_port()
    bundle = write_bundle(host_folder(BUNDLE_CACHE))  # the very file the images ship
    argv = [python, "-I", str(bundle), "--listen", f"127.0.0.1:{port}", *options]
    for origin in allow:
        argv += ["--allow", origin]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    running: RunningProxy | None = None
    try:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        assert '"listening"' in first, first + process.stderr.read()
        running = RunningProxy(process, port)
        yield running
        assert running.stopped or process.poll() is None, "the proxy died: " + process.stderr.read()
    finally:
        process.terminate()
        try:
            process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if running is not None:  # its reader sees the end of output: let it finish first
            running._reader.join(WAIT_S)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
