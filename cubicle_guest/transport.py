"""Byte-stream transports the agent listens on: a unix socket, a virtio-serial port, stdio.

Every transport decodes frames with :class:`cubicle_guest.protocol.FrameDecoder` (which
resynchronises on the magic after garbage) and writes one reply per request or broken frame.

- unix: one thread per connection (the agent serializes X actions itself). The listener owns
  the socket file and removes it on close; a stale socket file is replaced, a live one refused.
- virtio-serial: a character device, opened O_RDWR|O_NONBLOCK. While no host is connected the
  port polls POLLHUP (or reads return 0): the loop waits instead of spinning, and discards a
  half-received frame, since the next host starts afresh. It waits for the port's SIGIO (the
  guest kernel sends one when a host connects, ``O_ASYNC``), at most
  :data:`HOST_ABSENT_SLEEP_S`: a host that connects (e.g. right after a VM's warm restore) is
  answered at once, not after the rest of a sleep.
- stdio: requests on fd 0, replies on fd 1 (logs go to stderr); EOF ends the agent.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import select
import signal
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Final

from cubicle_guest.errors import GuestError
from cubicle_guest.protocol import FrameDecoder
from cubicle_guest.server import Agent
from cubicle_guest.waiting import Deadline, poll

__all__ = ["UnixListener", "find_virtio_port", "serve_stdio", "serve_virtio"]

log = logging.getLogger("cubicle_guest.transport")

READ_CHUNK: Final = 1024 * 1024
HOST_ABSENT_SLEEP_S: Final = 0.2
"""How long the virtio loop waits at most when no host is connected (it must not spin); the
port's SIGIO ends the wait as soon as a host connects."""
VIRTIO_WRITE_TIMEOUT_S: Final = 30.0
"""A reply the host does not read within this long is dropped (it reconnects and retries)."""
VIRTIO_SYSFS: Final = Path("/sys/class/virtio-ports")


# --------------------------------------------------------------------------- unix


class UnixListener:
    """Serve ``agent`` on a unix stream socket at ``path``.

    :param mode: permission bits of the socket file (default: leave the umask's).
    The caller owns the listener: :meth:`serve_forever` until :meth:`close`.
    """

    def __init__(self, agent: Agent, path: str, mode: int | None = None) -> None:
        self._agent = agent
        self.path = path
        _remove_stale_socket(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(path)
            if mode is not None:
                os.chmod(path, mode)
            self._sock.listen(16)
        except OSError as exc:
            self._sock.close()
            raise GuestError("io_error", f"cannot listen on unix socket {path!r}: {exc}") from exc
        self._closed = threading.Event()
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        log.info("listening on unix:%s", path)

    def serve_forever(self) -> None:
        """Accept connections until :meth:`close`; each gets its own thread."""
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closed.is_set():
                    return
                raise
            with self._lock:
                self._connections.add(conn)
            threading.Thread(
                target=self._serve_connection, args=(conn,), daemon=True, name="agent-connection"
            ).start()

    def _serve_connection(self, conn: socket.socket) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = conn.recv(READ_CHUNK)
                if not data:
                    return
                for item in decoder.feed_items(data):
                    conn.sendall(self._agent.handle_item(item))
        except OSError as exc:
            if not self._closed.is_set():
                log.info("connection ended: %s", exc)
        finally:
            with self._lock:
                self._connections.discard(conn)
            conn.close()

    def close(self) -> None:
        """Stop accepting, close open connections, remove the socket file (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with self._lock:
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _remove_stale_socket(path: str) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise GuestError("io_error", f"{path!r} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody is listening: a leftover of an agent that died
        return
    finally:
        probe.close()
    raise GuestError("io_error", f"another agent is already listening on {path!r}")


# --------------------------------------------------------------------------- virtio-serial


def find_virtio_port(path: str, timeout: float = 30.0) -> str:
    """The device node for ``path`` (``/dev/virtio-ports/NAME``).

    Without udev the symlink does not exist; then the port named NAME is found by scanning
    ``/sys/class/virtio-ports/*/name`` and its node is ``/dev/vportNpM``. Waits up to
    ``timeout`` seconds for the port to appear (the module may still be loading).

    :raises GuestError: ``not_found`` naming the port and the ports that do exist.
    """
    name = os.path.basename(path)
    for _ in poll(Deadline(timeout), HOST_ABSENT_SLEEP_S):
        if os.path.exists(path):
            return path
        for entry in sorted(VIRTIO_SYSFS.glob("*/name")) if VIRTIO_SYSFS.is_dir() else []:
            try:
                if entry.read_text().strip() == name:
                    node = Path("/dev") / entry.parent.name
                    if node.exists():
                        return str(node)
            except OSError:
                continue
    seen = []
    if VIRTIO_SYSFS.is_dir():
        for entry in sorted(VIRTIO_SYSFS.glob("*/name")):
            with contextlib.suppress(OSError):
                seen.append(f"{entry.parent.name}={entry.read_text().strip()}")
    raise GuestError(
        "not_found",
        f"virtio-serial port {name!r} not found at {path} nor under {VIRTIO_SYSFS} "
        f"within {timeout:.0f} s (ports seen: {', '.join(seen) or 'none'})",
    )


def serve_virtio(agent: Agent, path: str, stop: threading.Event | None = None) -> None:
    """Serve ``agent`` on the virtio-serial (or any character) device ``path`` until ``stop``."""
    device = find_virtio_port(path)
    fd = os.open(device, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY)
    log.info("serving on virtio-serial %s", device)
    stop = stop or threading.Event()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    decoder = FrameDecoder()
    host_present = True
    wake = _HostWake(fd)
    try:
        while not stop.is_set():
            events = poller.poll(500)
            if not events:
                continue
            mask = events[0][1]
            data = b""
            if mask & (select.POLLIN | select.POLLPRI):
                try:
                    data = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EIO, errno.ENXIO):
                        raise
            if not data:  # POLLHUP, EOF or EIO: no host on the other end
                if host_present:
                    log.info("virtio-serial host disconnected; waiting")
                    host_present = False
                decoder = FrameDecoder()
                wake.wait(HOST_ABSENT_SLEEP_S)
                continue
            if not host_present:
                log.info("virtio-serial host connected")
                host_present = True
            for item in decoder.feed_items(data):
                _write_all(fd, agent.handle_item(item))
    finally:
        wake.close()
        os.close(fd)


class _HostWake:
    """Wakes the virtio loop when the port signals (SIGIO: a host connected, or data came).

    The port is put in ``O_ASYNC`` mode owned by this process; Python's signal handler writes
    to a pipe (``signal.set_wakeup_fd``) that :meth:`wait` selects on, so a signal between the
    last read and the wait is not lost. Off the main thread (signals cannot be set up there)
    :meth:`wait` is a plain sleep.
    """

    def __init__(self, fd: int) -> None:
        self._pipe: tuple[int, int] | None = None
        self._previous: tuple[object, int] | None = None
        if threading.current_thread() is not threading.main_thread():
            return
        read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        handler = signal.signal(signal.SIGIO, _ignore_signal)
        old_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self._pipe, self._previous = (read_end, write_end), (handler, old_fd)
        try:
            fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
        except OSError as exc:  # not a device with async notification: sleeps only
            log.info("no SIGIO from %d (%s): polling the host's presence", fd, exc)

    def wait(self, seconds: float) -> None:
        """Return after ``seconds`` or at the port's next signal (drained)."""
        if self._pipe is None:
            time.sleep(seconds)
            return
        ready, _, _ = select.select([self._pipe[0]], [], [], seconds)
        if ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._pipe[0], 512):
                    pass

    def close(self) -> None:
        if self._pipe is None or self._previous is None:
            return
        handler, old_fd = self._previous
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGIO, handler)  # type: ignore[arg-type]
        for end in self._pipe:
            os.close(end)
        self._pipe = None


def _ignore_signal(_signum: int, _frame: object) -> None:
    """SIGIO's handler: the wake-up pipe does the work (the default action would kill us)."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    deadline = Deadline(VIRTIO_WRITE_TIMEOUT_S)
    while view:
        try:
            written = os.write(fd, view)
            view = view[written:]
            continue
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno in (errno.EIO, errno.ENXIO, errno.EPIPE, errno.ENODEV):
                log.info("reply dropped: host went away (%s)", exc)
                return
            raise
        if deadline.expired:
            log.warning(
                "reply of %d bytes dropped: host did not read for %.0f s",
                len(data),
                VIRTIO_WRITE_TIMEOUT_S,
            )
            return
        select.select([], [fd], [], deadline.remaining(high=1.0))


# --------------------------------------------------------------------------- stdio


def serve_stdio(agent: Agent) -> None:
    """Serve requests from fd 0, replies to fd 1, until EOF on fd 0."""
    decoder = FrameDecoder()
    log.info("serving on stdio")
    while True:
        data = os.read(0, READ_CHUNK)
        if not data:
            return
        for item in decoder.feed_items(data):
            reply = memoryview(agent.handle_item(item))
            while reply:
                reply = reply[os.write(1, reply) :]
