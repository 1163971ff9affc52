"""Start and stop a private Xvfb server for tests and benchmarks.

The caller owns the returned :class:`Xvfb` and must call :meth:`Xvfb.stop` (or use ``with``);
stop ends only the process this object started, by its pid.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from tests.support.processes import stop_process

__all__ = ["Xvfb", "XvfbUnavailable"]


class XvfbUnavailable(RuntimeError):
    """Xvfb is not installed or did not start."""


class Xvfb:
    """One Xvfb server on a free display number (chosen by the server itself via -displayfd).

    :param width: screen width, pixels.
    :param height: screen height, pixels.
    :param depth: colour depth, bits.
    :param arguments: more Xvfb arguments (``["-extension", "DAMAGE"]``: a server without it).
    """

    def __init__(
        self, width: int = 1280, height: int = 800, depth: int = 24, arguments: Sequence[str] = ()
    ) -> None:
        self.width, self.height, self.depth = width, height, depth
        self.arguments = list(arguments)
        self._process: subprocess.Popen[bytes] | None = None
        self.display = ""

    def start(self, timeout: float = 15.0) -> Self:
        binary = shutil.which("Xvfb")
        if binary is None:
            raise XvfbUnavailable("Xvfb is not installed (apt-get install xvfb)")
        read_fd, write_fd = os.pipe()
        self._process = subprocess.Popen(
            [
                binary,
                "-displayfd",
                str(write_fd),
                "-screen",
                "0",
                f"{self.width}x{self.height}x{self.depth}",
                "-nolisten",
                "tcp",
                "-noreset",
                "+extension",
                "XTEST",
                "-ac",
                *self.arguments,
            ],
            pass_fds=(write_fd,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(write_fd)
        deadline = time.monotonic() + timeout
        data = b""
        try:
            os.set_blocking(read_fd, False)
            while not data.endswith(b"\n"):
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.stop()
                    raise XvfbUnavailable(
                        f"Xvfb did not report a display within {timeout} s "
                        f"(exit code {self._process.returncode})"
                    )
                try:
                    chunk = os.read(read_fd, 64)
                except BlockingIOError:
                    time.sleep(0.01)
                    continue
                if not chunk:
                    time.sleep(0.01)
                data += chunk
        finally:
            os.close(read_fd)
        self.display = f":{int(data.strip())}"
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def env(self) -> dict[str, str]:
        """A copy of ``os.environ`` with ``DISPLAY`` pointing at this server."""
        return {**os.environ, "DISPLAY": self.display}

    def stop(self) -> None:
        """Terminate the server this object started (idempotent)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        stop_process(process, timeout=5)

    def __enter__(self) -> Self:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
