"""An input recorder *inside* a Docker sandbox, streaming what the guest's X server delivers.

:class:`GuestRecorder` runs :mod:`tests.support.recorder` in the guest (its source is passed to
the guest's python; the guest venv has python-xlib and :mod:`cubicle_guest.keys`) over a ``docker
exec`` stream: a fullscreen white window at 0,0 that prints each event as a JSON line. Closing the
stream ends it (the script exits when its stdin ends).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from cubicle.orchestrator.providers.docker.exec import DockerStreamCodec, open_exec_socket
from cubicle.orchestrator.providers.docker.provider import GUEST_PYTHON, GUEST_UID, DockerProvider

SCRIPT = """
import dataclasses, json, os, sys, threading, types
module = types.ModuleType("recorder")
sys.modules["recorder"] = module
exec(sys.argv[1], module.__dict__)
geometry = tuple(json.loads(sys.argv[2])) or None
recorder = module.Recorder(os.environ.get("DISPLAY") or ":0", geometry, motion=False).start()
print(json.dumps({"kind": "ready"}), flush=True)
def stdin_ended():
    sys.stdin.buffer.read()
    os._exit(0)
threading.Thread(target=stdin_ended, daemon=True).start()
sent = 0
while True:
    events = recorder.wait_until(lambda events: len(events) > sent, timeout=3600)
    for event in events[sent:]:
        print(json.dumps(dataclasses.asdict(event)), flush=True)
    sent = len(events)
"""
SOURCE = (Path(__file__).resolve().parents[1] / "support" / "recorder.py").read_text()


class GuestRecorder:
    def __init__(
        self,
        provider: DockerProvider,
        sandbox_id: str,
        *,
        geometry: tuple[int, int, int, int] | None = None,
    ) -> None:
        info = provider.describe(sandbox_id)
        assert info is not None
        self._sock = open_exec_socket(
            provider.client.api,
            info.detail["container"],
            [GUEST_PYTHON, "-I", "-c", SCRIPT, SOURCE, json.dumps(list(geometry or ()))],
            user=f"{GUEST_UID}:{GUEST_UID}",
            name=sandbox_id,
        )
        self._sock.setblocking(True)  # the engine's fd comes non-blocking
        self._codec = DockerStreamCodec()
        self._events: list[dict[str, Any]] = []
        self._condition = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self.wait_for(lambda e: e["kind"] == "ready", timeout=30)

    def _read(self) -> None:
        pending = b""
        try:
            while data := self._sock.recv(65536):
                pending += self._codec.decode(data)
                *lines, pending = pending.split(b"\n")
                with self._condition:
                    self._events += [json.loads(line) for line in lines if line]
                    self._condition.notify_all()
        except OSError:
            pass
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def events(self) -> list[dict[str, Any]]:
        with self._condition:
            return [e for e in self._events if e["kind"] != "ready"]

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 20.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._condition:
            while True:
                for event in self._events:
                    if predicate(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise AssertionError(
                        f"no such event within {timeout} s; seen {self._events}; "
                        f"stderr {self._codec.closed_reason()}"
                    )
                self._condition.wait(left)

    def close(self) -> None:
        self._sock.close()
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
