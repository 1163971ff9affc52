"""Chromium's DevTools protocol over ``--remote-debugging-pipe``: a browser only its starter drives.

:class:`CdpBrowser` starts Chromium itself with ``--remote-debugging-pipe`` and holds both ends of
the pipe: the browser reads commands on its fd 3 and writes replies and events on its fd 4, NUL-
separated JSON. No port is opened, so no other process in the guest (the model's programs, a
page) can reach the protocol; the descriptors are not inherited by anything else the agent starts
(Python's descriptors are close-on-exec; only the browser gets these two, as 3 and 4).

Commands are sent with :meth:`CdpBrowser.call` (``session_id`` for a target attached with
``flatten``); a reader thread answers each waiting call and keeps events for
:meth:`CdpBrowser.events`. Nothing here logs a command's parameters or a reply's contents: a
sign-in fill passes secrets through :meth:`CdpBrowser.call` (:mod:`cubicle_guest.signin`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["CALL_TIMEOUT_S", "CdpBrowser", "CdpError"]

log = logging.getLogger("cubicle_guest.cdp")

CALL_TIMEOUT_S: Final = 15.0
"""How long one command waits for its reply by default (seconds)."""
MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024
"""A message from the browser longer than this ends the connection (a guard, not a rule)."""
_QUIT_GRACE_S: Final = 3.0
"""How long a browser asked to quit (``Browser.close``) has before its group gets SIGTERM."""
_FD_FLOOR: Final = 10
"""The parent's pipe ends are moved at or above this, so dup2 into 3 and 4 never meets them."""


class CdpError(RuntimeError):
    """A command failed (the browser's error message; never the command's parameters), timed out,
    or the browser is gone."""


class _Call:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: dict[str, Any] | None = None


class CdpBrowser:
    """One Chromium started with its DevTools protocol on a pipe this object holds.

    :param argv: the browser's command line (``["chromium", ...]``); ``--remote-debugging-pipe`` is
        appended.
    :param env: its environment (default: the agent's).
    :raises CdpError: the browser could not be started.
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        if not argv:
            raise CdpError("no browser command given")
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        # the child's fds 3 and 4 come from descriptors above the floor: dup2(x, 3) with x == 3
        # would keep close-on-exec set
        child_r = _raise_fd(to_browser_r)
        child_w = _raise_fd(from_browser_w)
        self._write_fd = _raise_fd(to_browser_w)
        self._read_fd = _raise_fd(from_browser_r)
        devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            self.pid = os.posix_spawnp(
                argv[0],
                [*argv, "--remote-debugging-pipe"],
                dict(os.environ if env is None else env),
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, devnull, 0),
                    (os.POSIX_SPAWN_DUP2, devnull, 1),
                    (os.POSIX_SPAWN_DUP2, devnull, 2),
                    (os.POSIX_SPAWN_DUP2, child_r, 3),
                    (os.POSIX_SPAWN_DUP2, child_w, 4),
                ],
                setsid=True,
            )
        except OSError as exc:
            for fd in (self._write_fd, self._read_fd):
                os.close(fd)
            raise CdpError(f"could not start {argv[0]}: {exc.strerror}") from exc
        finally:
            for fd in (child_r, child_w, devnull):
                os.close(fd)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._next_id = 0
        self._calls: dict[int, _Call] = {}
        self._events: list[dict[str, Any]] = []
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="cdp-reader", daemon=True)
        self._reader.start()

    # -- commands ---------------------------------------------------------------------------

    def call(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        timeout_s: float = CALL_TIMEOUT_S,
    ) -> dict[str, Any]:
        """Send one command and wait for its reply's ``result``.

        :raises CdpError: the browser answered with an error (its message, which names no
            parameter value), no reply came within ``timeout_s``, or the browser is gone.
        """
        call = _Call()
        with self._lock:
            if self._closed:
                raise CdpError(f"{method}: the browser is gone")
            self._next_id += 1
            command_id = self._next_id
            self._calls[command_id] = call
        message: dict[str, Any] = {"id": command_id, "method": method, "params": dict(params or {})}
        if session_id is not None:
            message["sessionId"] = session_id
        data = json.dumps(message).encode() + b"\0"
        try:
            with self._write_lock:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._write_fd, view) :]
        except OSError as exc:
            with self._lock:
                self._calls.pop(command_id, None)
            raise CdpError(f"{method}: the browser is gone ({exc.strerror})") from exc
        if not call.done.wait(timeout_s):
            with self._lock:
                self._calls.pop(command_id, None)
            raise CdpError(f"{method}: no reply within {timeout_s:g} s")
        reply = call.reply
        if reply is None:
            raise CdpError(f"{method}: the browser is gone")
        error = reply.get("error")
        if isinstance(error, dict):
            raise CdpError(f"{method}: {str(error.get('message', 'failed'))[:200]}")
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    def events(self, method: str | None = None) -> list[dict[str, Any]]:
        """The events received so far (``method`` only, when given), oldest first; kept until
        :meth:`forget_events`."""
        with self._lock:
            return [e for e in self._events if method is None or e.get("method") == method]

    def forget_events(self) -> None:
        """Drop every event kept so far."""
        with self._lock:
            self._events.clear()

    @property
    def alive(self) -> bool:
        """Whether the pipe to the browser is still open."""
        with self._lock:
            return not self._closed

    # -- the reader -------------------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = os.read(self._read_fd, 1 << 16)
                if not chunk:
                    break
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                if len(buffer) > MAX_MESSAGE_BYTES:
                    log.warning("a DevTools message over %d bytes: closing", MAX_MESSAGE_BYTES)
                    break
                for raw in messages:
                    self._dispatch(raw)
        except OSError:
            pass
        with self._lock:
            self._closed = True
            calls = list(self._calls.values())
            self._calls.clear()
        for call in calls:
            call.done.set()

    def _dispatch(self, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            log.warning("an undecodable DevTools message (%d bytes) dropped", len(raw))
            return
        if not isinstance(message, dict):
            return
        with self._lock:
            if "id" in message:
                call = self._calls.pop(message["id"], None)
                if call is not None:
                    call.reply = message
                    call.done.set()
            elif "method" in message:
                self._events.append(message)
                del self._events[:-1000]

    # -- the end ----------------------------------------------------------------------------

    def close(self, timeout_s: float = 10.0) -> None:
        """Ask the browser to quit, then end its process group (SIGTERM, SIGKILL after
        ``timeout_s``) and close the pipe. Idempotent."""
        if self.alive:
            with contextlib.suppress(CdpError):
                self.call("Browser.close", timeout_s=2.0)
        for fd_name in ("_write_fd",):
            fd = getattr(self, fd_name)
            if fd >= 0:
                os.close(fd)
                setattr(self, fd_name, -1)
        _end_group(self.pid, timeout_s)
        self._reader.join(timeout_s)
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1

    def __enter__(self) -> CdpBrowser:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _raise_fd(fd: int) -> int:
    """``fd`` moved to a close-on-exec descriptor at or above :data:`_FD_FLOOR`."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _FD_FLOOR)
    os.close(fd)
    return high


def _end_group(pid: int, timeout_s: float) -> None:
    """Reap ``pid`` (the group leader, started with setsid); its group gets SIGTERM, SIGKILL."""
    start = time.monotonic()
    deadline = start + timeout_s
    signalled = False
    while True:
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done == pid:
            break
        if not signalled and time.monotonic() - start > _QUIT_GRACE_S:
            _signal_group(pid, signal.SIGTERM)
            signalled = True
        if time.monotonic() > deadline:
            _signal_group(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            break
        time.sleep(0.05)
    _signal_group(pid, signal.SIGKILL)  # what the leader left behind (zygote, renderers)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
