"""A host TCP listener that counts the connections it accepts (what a guest reached), and the
host's own addresses."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from types import TracebackType

__all__ = ["Listener", "host_addresses"]


class Listener:
    """Listens on ``address``:``port`` (0: a free port); ``accepted`` counts connections.
    ``close()`` it, or use it as a context manager.

    :raises OSError: the address cannot be bound (e.g. port 80 when not root).
    """

    def __init__(self, address: str, port: int = 0) -> None:
        self.sock = socket.create_server((address, port))
        self.address = address
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()
            with self._changed:
                self.accepted += 1
                self._changed.notify_all()

    def wait_accepted(self, count: int, timeout: float) -> bool:
        """Whether ``count`` connections were accepted within ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self.accepted >= count, timeout)

    def close(self) -> None:
        self.sock.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Listener:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def host_addresses() -> list[str]:
    """The host's IPv4 addresses other than loopback (bridges included)."""
    done = subprocess.run(
        ["ip", "-4", "-j", "addr", "show"], capture_output=True, text=True, check=True
    )
    return [
        a["local"]
        for link in json.loads(done.stdout)
        for a in link["addr_info"]
        if not a["local"].startswith("127.")
    ]
