"""``python -m cubicle_guest.vnc [--view-only]``: one VNC session of the desktop on stdin/stdout.

The live view (``cubicle view``) reaches the desktop the way the host reaches the agent: the
engine runs this module inside the guest (``docker exec``) and carries its stdin and stdout.
No TCP port is opened in the guest and no VNC server runs while nobody watches.

Contract (read by :mod:`cubicle.orchestrator.view.stream`):

- It starts ``x11vnc -inetd`` on the desktop's display (``$DISPLAY``, else ``:0``) with one end
  of a socket pair as its client connection, and forwards stdin/stdout to the other end, byte
  for byte: stdout carries only RFB (the VNC protocol), x11vnc's diagnostics go to stderr.
- ``--view-only`` runs x11vnc with ``-viewonly``: the server drops every key, pointer and
  clipboard message, whatever the client sends. Input is refused in the guest, not only hidden
  in the page.
- When stdin ends (the viewer left, the host went away) x11vnc sees the connection close and
  exits; the module then stops it for good (terminate, then kill) and exits 0. Each session is
  its own x11vnc: nothing outlives the connection.
- x11vnc missing: one line on stderr, exit 3.

Standard library only (plus :mod:`cubicle_guest.bridge`): imported without the agent's dependencies.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
from typing import Final

from cubicle_guest.bridge import forward

__all__ = ["main", "x11vnc_argv"]

EXIT_UNAVAILABLE: Final = 3
STOP_TIMEOUT_S: Final = 2.0


def x11vnc_argv(display: str, *, view_only: bool) -> list[str]:
    """x11vnc serving one client on its stdin (``-inetd``), no password (the exec stream is the
    authentication), no listening port, no shared memory with other clients' settings."""
    argv = [
        "x11vnc",
        "-inetd",
        "-display",
        display,
        "-nopw",
        "-norc",
        "-quiet",
        "-noipv6",
        "-rfbport",
        "0",
        "-xkb",
        "-nonap",
        "-noxrecord",
        "-cursor",
        "arrow",
    ]
    if view_only:
        argv.append("-viewonly")
    return argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cubicle_guest.vnc", description=__doc__)
    parser.add_argument(
        "--view-only", action="store_true", help="drop every input event (x11vnc -viewonly)"
    )
    args = parser.parse_args(argv)
    if shutil.which("x11vnc") is None:
        print("cubicle vnc: x11vnc is not installed in this guest", file=sys.stderr, flush=True)
        return EXIT_UNAVAILABLE
    display = os.environ.get("DISPLAY") or ":0"
    ours, theirs = socket.socketpair()
    with ours:
        process = subprocess.Popen(
            x11vnc_argv(display, view_only=args.view_only),
            stdin=theirs.fileno(),
            stdout=theirs.fileno(),
        )
        theirs.close()
        try:
            forward(ours, b"")
        except OSError as exc:
            print(f"cubicle vnc: forwarding ended: {exc}", file=sys.stderr, flush=True)
        finally:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
