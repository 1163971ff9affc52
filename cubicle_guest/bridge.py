"""``python -m cubicle_guest.bridge PATH``: forward stdin/stdout to the agent's unix socket, byte
for byte.

The host reaches a container's agent through the engine's own exec stream (``docker exec``; later
a Kubernetes exec): the engine starts this bridge inside the guest and carries its stdin and
stdout. Nothing of the host is shared with the guest — no folder, no socket path the host would
follow.

Contract (read by :mod:`cubicle.orchestrator.providers.docker.exec`):

- It says nothing before it is spoken to: it reads the first bytes from stdin, *then* connects to
  ``PATH`` (retrying until ``--wait`` seconds pass, while the agent starts), sends those bytes and
  forwards both directions until either side ends. Stdout carries only the agent's bytes.
- EOF on stdin half-closes the socket (the agent ends the connection); EOF from the agent ends
  the bridge. Exit status 0 then. The two directions run independently (one on a thread), so
  the bridge never stops reading one side because the other is full.
- With ``--first-within SECONDS``, a bridge that is not spoken to that long writes one line to
  stderr and exits 0 without touching the agent: for a stream opened early and perhaps never
  used (a warm-pool claim that may lose its race), whose close the engine can lose — Docker's
  exec sometimes never delivers the EOF of a stdin closed before the process has read anything
  (moby/moby#37870), and the bridge would wait for its first bytes for ever.
- When the agent cannot be reached it writes one line to stderr saying why and exits 3; a bad
  command line exits 2.

Standard library only (with :mod:`cubicle_guest.waiting`, itself standard library), imported without
the agent's dependencies (Xlib, Pillow, mss), and only its C modules where the Python ones import
much more (``_socket``, not :mod:`socket` with its enums and selectors; ``_thread``, not
:mod:`threading`): every agent connection starts a bridge, and a sandbox claimed from a pool
waits for one before its first answer (~16 ms to start instead of ~30 ms in the guest).
"""

from __future__ import annotations

import _socket
import _thread
import os
import sys

from cubicle_guest.waiting import Deadline, poll

__all__ = ["main"]

# constants carry no typing.Final: importing typing alone costs ~10 ms, and every agent
# connection starts this module

CHUNK = 256 * 1024
RETRY_S = 0.01
"""Pause between two connection attempts while the agent starts: a connect() to a socket not
yet there costs microseconds, and a sandbox's first hello waits on this."""
EXIT_UNREACHABLE = 3


def _connect(path: str, wait_s: float) -> _socket.socket:
    last = OSError("no attempt")
    for _ in poll(Deadline(wait_s), RETRY_S):
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise OSError(
        last.errno, f"no agent accepted connections at {path} within {wait_s:g} s: {last}"
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _pump_stdin(sock: _socket.socket, stdin: int) -> None:
    """stdin → agent until stdin ends, then half-close (the agent then ends the connection)."""
    try:
        while data := os.read(stdin, CHUNK):
            sock.sendall(data)
        sock.shutdown(_socket.SHUT_WR)
    except OSError:
        pass  # the agent went away: the other direction sees it and ends the bridge


def forward(sock: _socket.socket, first: bytes, stdin: int = 0, stdout: int = 1) -> None:
    """Send ``first``, then copy ``stdin`` → ``sock`` (on a thread) and ``sock`` → ``stdout``
    until the agent closes. Each direction blocks only on itself: a large reply and a large
    request in flight at once cannot deadlock."""
    sock.sendall(first)
    _thread.start_new_thread(_pump_stdin, (sock, stdin))  # not joined: the process ends with us
    while data := sock.recv(CHUNK):
        _write_all(stdout, data)


USAGE = (
    "usage: python -m cubicle_guest.bridge PATH [--wait SECONDS] [--first-within SECONDS]"
    "  (default wait 10 s; first bytes: no limit)"
)
EXIT_USAGE = 2


def parse_args(argv: list[str]) -> tuple[str, float, float | None] | None:
    """``PATH [--wait SECONDS] [--first-within SECONDS]`` → (path, wait, first-within or None),
    or None when malformed (a value that is not a number >= 0, an unknown option, a second path).
    By hand, not argparse: this runs on every agent connection, and argparse (with typing) costs
    ~20 ms."""
    path: str | None = None
    seconds: dict[str, float] = {"--wait": 10.0}
    rest = list(argv)
    while rest:
        word = rest.pop(0)
        if word in ("--wait", "--first-within") and rest:
            try:
                value = float(rest.pop(0))
            except ValueError:
                return None
            if not value >= 0:  # also refuses nan
                return None
            seconds[word] = value
        elif path is None and not word.startswith("-"):
            path = word
        else:
            return None
    return None if path is None else (path, seconds["--wait"], seconds.get("--first-within"))


def _spoken_to_within(seconds: float) -> bool:
    """Whether stdin has bytes (or its end) to read within ``seconds``."""
    import select  # noqa: PLC0415 — a C module, loaded only by the bridges that bound the wait

    readable, _, _ = select.select([0], [], [], seconds)
    return bool(readable)


def main(argv: list[str] | None = None) -> int:
    parsed = parse_args(sys.argv[1:] if argv is None else argv)
    if parsed is None:
        print(USAGE, file=sys.stderr, flush=True)
        return EXIT_USAGE
    path, wait_s, first_within_s = parsed
    if first_within_s is not None and not _spoken_to_within(first_within_s):
        print(
            f"cubicle bridge: not spoken to within {first_within_s:g} s; ending unused",
            file=sys.stderr,
            flush=True,
        )
        return 0
    first = os.read(0, CHUNK)
    if not first:
        return 0
    try:
        sock = _connect(path, wait_s)
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
