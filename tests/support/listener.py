"""A host TCP listener that counts the connections it accepts (what a guest reached), and the
host's own addresses."""

from __future__ import annotations

import json
import socket
import subprocess
import threading

__all__ = ["Listener", "host_addresses"]


class Listener:
    """Listens on ``address`` (a free port); ``accepted`` counts connections. ``close()`` it."""

    def __init__(self, address: str) -> None:
        self.sock = socket.create_server((address, 0))
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self._thread.join(timeout=5)


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
