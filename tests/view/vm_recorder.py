"""An input recorder *inside* a VM sandbox: what the guest's X server delivers to a window.

:class:`VmGuestRecorder` writes :mod:`tests.support.recorder` and a small script into the guest
through the agent (``write_file``), starts it detached as the desktop user (``exec`` of
``setsid -f``), and reads the events it appends to a JSON-lines file (``read_file``). The VM's
agent channel carries no streams (and takes one connection at a time: each call connects
anew), so events are read by polling that file. ``close()`` ends the script by the pid it
wrote.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import GuestError
from cubicle_guest.waiting import Deadline, poll

SOURCE = (Path(__file__).resolve().parents[1] / "support" / "recorder.py").read_bytes()
HOME = "/home/cubicle"
SCRIPT = f"""
import dataclasses, json, os, sys
sys.path.insert(0, {HOME!r})
from recorder import Recorder
geometry = tuple(json.loads(sys.argv[1])) or None
rec = Recorder(os.environ.get("DISPLAY") or ":0", geometry, motion=False).start()
with open({HOME!r} + "/vrec.pid", "w") as f:
    f.write(str(os.getpid()))
sent = 0
with open({HOME!r} + "/vrec.jsonl", "a", encoding="utf-8") as out:
    out.write(json.dumps({{"kind": "ready"}}) + "\\n")
    out.flush()
    while True:
        events = rec.wait_until(lambda events: len(events) > sent, timeout=3600)
        for event in events[sent:]:
            out.write(json.dumps(dataclasses.asdict(event)) + "\\n")
        out.flush()
        sent = len(events)
"""


class VmGuestRecorder:
    """Events the guest's X server delivers to a recorder window at ``geometry``."""

    def __init__(self, sandbox: Sandbox, *, geometry: tuple[int, int, int, int]) -> None:
        self._sandbox = sandbox
        command = (
            f"rm -f {HOME}/vrec.jsonl {HOME}/vrec.pid; "
            f'setsid -f python {HOME}/vrec.py "$1" >{HOME}/vrec.log 2>&1'
        )
        with self._client() as client:
            client.write_file(f"{HOME}/recorder.py", SOURCE, timeout=60)
            client.write_file(f"{HOME}/vrec.py", SCRIPT.encode(), timeout=60)
            client.exec(["sh", "-c", command, "sh", json.dumps(list(geometry))], timeout=60)
        self.wait_for(lambda e: e["kind"] == "ready", timeout=90)

    def _client(self) -> AgentClient:
        return self._sandbox.connect(timeout=60)

    def _all(self) -> list[dict[str, Any]]:
        try:
            with self._client() as client:
                blob = client.read_file(f"{HOME}/vrec.jsonl", timeout=30).blob
        except GuestError:
            return []
        return [json.loads(line) for line in blob.decode().splitlines() if line.strip()]

    def events(self) -> list[dict[str, Any]]:
        return [e for e in self._all() if e["kind"] != "ready"]

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30.0
    ) -> dict[str, Any]:
        seen: list[dict[str, Any]] = []
        for _ in poll(Deadline(timeout), 0.2):
            seen = self._all()
            for event in seen:
                if predicate(event):
                    return event
        with self._client() as client:
            log = client.exec(["cat", f"{HOME}/vrec.log"], timeout=30).result.get("stdout")
        raise AssertionError(f"no such event within {timeout} s; seen {seen}; log {log}")

    def close(self) -> None:
        with contextlib.suppress(Exception), self._client() as client:
            client.exec(["sh", "-c", f"kill $(cat {HOME}/vrec.pid)"], timeout=30)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
