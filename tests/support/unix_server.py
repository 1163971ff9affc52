"""A unix stream server on a thread for tests: each connection is handed to ``handle`` in turn."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["unix_server"]


@contextmanager
def unix_server(path: Path, handle: Callable[[socket.socket], None]) -> Iterator[None]:
    """Listen on ``path`` until the block ends; ``handle`` gets each accepted connection (closed
    after it returns). The thread is stopped and joined on exit."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5.0)
                handle(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
