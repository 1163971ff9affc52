"""The agent's log of the input it injected: one JSON line per input request, written *before*
the input is injected, so a request that reached the screen is always in it.

Why: a run interrupted in the middle of a batch of actions and resumed (``cubicle run --resume``)
must never perform an action twice; this log is the proof, read back through ``read_file``.
Each line: ``seq`` (from 1, per agent process), ``op`` (one of :data:`INPUT_OPS`), ``args`` (the
request's arguments but its ``settle``), ``t`` (unix seconds). The file is opened ``O_APPEND``
with mode 0600 and every line is one ``write``: an agent killed mid-line loses only that line's
end, never an earlier one. ``$CUBICLE_INPUT_LOG`` overrides the path; ``off`` turns it off.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Final

__all__ = ["DEFAULT_INPUT_LOG", "INPUT_LOG_ENV", "INPUT_OPS", "InputLog"]

INPUT_OPS: Final = frozenset(
    {
        "click",
        "double_click",
        "move",
        "drag",
        "scroll",
        "keypress",
        "type",
        "mouse_down",
        "mouse_up",
        "hold_keys",
    }
)
"""The ops that inject input (everything else only looks, waits or runs set-up)."""
INPUT_LOG_ENV: Final = "CUBICLE_INPUT_LOG"
DEFAULT_INPUT_LOG: Final = "/tmp/cubicle-input.jsonl"


class InputLog:
    """Appends one line per injected input request (module docstring); thread-safe.

    :param path: the file, or None for ``$CUBICLE_INPUT_LOG`` / :data:`DEFAULT_INPUT_LOG`.
    """

    def __init__(self, path: str | None = None) -> None:
        chosen = path or os.environ.get(INPUT_LOG_ENV) or DEFAULT_INPUT_LOG
        self.path: str | None = None if chosen == "off" else chosen
        self._seq = 0
        self._lock = threading.Lock()

    def append(self, op: str, args: dict[str, Any]) -> None:
        """Log ``op`` with ``args`` (not its ``settle``) if it injects input; a log that cannot
        be written never stops the input (best effort)."""
        if self.path is None or op not in INPUT_OPS:
            return
        with self._lock:
            self._seq += 1
            line = {
                "seq": self._seq,
                "op": op,
                "args": {k: v for k, v in args.items() if k != "settle"},
                "t": round(time.time(), 3),
            }
            data = (json.dumps(line, separators=(",", ":"), default=str) + "\n").encode()
            try:
                fd = os.open(
                    self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
                )
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            except OSError:
                pass
