"""Which network sockets a host process holds, and whether another user can reach a unix socket:
the checks that a sandbox's egress proxy is reachable by nothing but its own channel."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

__all__ = ["NOBODY_CONNECT", "as_nobody", "inet_socket_inodes", "socket_inodes"]


def inet_socket_inodes() -> set[str]:
    """The inodes of every TCP/UDP socket of the host's network namespace (IPv4 and IPv6)."""
    inodes = set()
    for table in ("tcp", "tcp6", "udp", "udp6"):
        with open(f"/proc/net/{table}") as listing:
            for line in listing.read().splitlines()[1:]:
                inodes.add(line.split()[9])
    return inodes


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds (the caller may read its ``fd`` folder:
    root, or the same user)."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                found.add(target[len("socket:[") : -1])
    return found


def as_nobody(*argv: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` as the unprivileged user ``nobody`` (no groups)."""
    return subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv],
        capture_output=True,
        timeout=60,
        check=False,
    )


NOBODY_CONNECT = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    sock.connect(sys.argv[1])
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""
"""``python3 -I -c NOBODY_CONNECT PATH``: prints ``connected`` or the error's class name."""
