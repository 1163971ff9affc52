"""``python -m guest.bridge PATH``: forward stdin/stdout to the agent's unix socket, byte for byte.

The host reaches a container's agent through the engine's own exec stream (``docker exec``; later
a Kubernetes exec): the engine starts this bridge inside the guest and carries its stdin and
stdout. Nothing of the host is shared with the guest — no folder, no socket path the host would
follow.

Contract (read by :mod:`orchestrator.providers.docker_exec`):

- It says nothing before it is spoken to: it reads the first bytes from stdin, *then* connects to
  ``PATH`` (retrying until ``--wait`` seconds pass, while the agent starts), sends those bytes and
  forwards both directions until either side ends. Stdout carries only the agent's bytes.
- EOF on stdin half-closes the socket (the agent ends the connection); EOF from the agent ends
  the bridge. Exit status 0 then.
- When the agent cannot be reached it writes one line to stderr saying why and exits 3; a bad
  command line exits 2.

Standard library only, imported without the agent's dependencies (Xlib, Pillow, mss): it starts
in a few tens of milliseconds.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import sys
import time
from typing import Final

__all__ = ["main"]

CHUNK: Final = 256 * 1024
RETRY_S: Final = 0.05
EXIT_UNREACHABLE: Final = 3


def _connect(path: str, wait_s: float) -> socket.socket:
    deadline = time.monotonic() + wait_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError as exc:
            sock.close()
            if time.monotonic() >= deadline:
                raise OSError(
                    exc.errno, f"no agent accepted connections at {path} within {wait_s:g} s: {exc}"
                ) from None
        time.sleep(RETRY_S)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def forward(sock: socket.socket, first: bytes, stdin: int = 0, stdout: int = 1) -> None:
    """Send ``first``, then copy ``stdin`` → ``sock`` and ``sock`` → ``stdout`` until the agent
    closes (a closed stdin only half-closes the socket)."""
    sock.sendall(first)
    selector = selectors.DefaultSelector()
    selector.register(stdin, selectors.EVENT_READ, "in")
    selector.register(sock, selectors.EVENT_READ, "sock")
    try:
        while True:
            for key, _ in selector.select():
                if key.data == "in":
                    data = os.read(stdin, CHUNK)
                    if data:
                        sock.sendall(data)
                    else:
                        selector.unregister(stdin)
                        sock.shutdown(socket.SHUT_WR)
                else:
                    data = sock.recv(CHUNK)
                    if not data:
                        return
                    _write_all(stdout, data)
    finally:
        selector.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m guest.bridge", description=__doc__)
    parser.add_argument("path", help="the agent's unix socket inside the guest")
    parser.add_argument(
        "--wait", type=float, default=10.0, help="seconds to wait for the agent (default 10)"
    )
    args = parser.parse_args(argv)
    first = os.read(0, CHUNK)
    if not first:
        return 0
    try:
        sock = _connect(args.path, args.wait)
    except OSError as exc:
        print(f"cubicle bridge: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return EXIT_UNREACHABLE
    try:
        forward(sock, first)
    except OSError as exc:
        print(f"cubicle bridge: forwarding ended: {exc}", file=sys.stderr, flush=True)
        return EXIT_UNREACHABLE
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
