"""Orchestration helpers inside the guest: run a program, read and write files.

``run`` takes an argument list and never a shell. The process gets its own process group, and a
timeout kills the whole group. Output is read as it arrives, and each stream is cut to what fits
in :data:`protocol.MAX_EXEC_OUTPUT_BYTES` *as sent* (JSON escapes counted); the reply says what
was cut, and the rest of the reply is never lost to an oversized frame.
File writes are atomic: a temp file in the same directory, then rename.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Final, cast

from cubicle_guest import protocol
from cubicle_guest.errors import GuestError

__all__ = ["fit_output", "read_file", "run", "write_file"]

DEFAULT_EXEC_TIMEOUT_MS: Final = 30_000
MAX_EXEC_TIMEOUT_MS: Final = 3_600_000
_CHUNK: Final = 64 * 1024


class _BoundedReader(threading.Thread):
    """Drain a pipe to EOF, keeping the first ``limit`` bytes."""

    def __init__(self, stream: io.BufferedReader, limit: int) -> None:
        super().__init__(daemon=True)
        self._stream = stream
        self._limit = limit
        self.data = bytearray()
        self.truncated = False

    def run(self) -> None:
        with self._stream:
            while chunk := self._stream.read1(_CHUNK):
                room = self._limit - len(self.data)
                if len(chunk) > room:
                    self.truncated = True
                self.data += chunk[: max(0, room)]


def run(
    argv: list[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_ms: int | None = None,
    stdin: str | None = None,
) -> dict[str, Any]:
    """Run ``argv`` (no shell) and return its exit code and output.

    :param env: merged over the agent's environment.
    :param timeout_ms: bound on the run; on expiry the process group is killed and
        ``exit_code`` is ``None`` with ``timed_out`` true.
    :raises GuestError: ``not_found`` if the program or cwd does not exist, ``io_error`` if it
        cannot be started, ``bad_args`` for a bad timeout.
    """
    timeout = DEFAULT_EXEC_TIMEOUT_MS if timeout_ms is None else timeout_ms
    if not 0 < timeout <= MAX_EXEC_TIMEOUT_MS:
        raise GuestError(
            "bad_args",
            f"timeout_ms must be 1..{MAX_EXEC_TIMEOUT_MS}, got {timeout}",
            details={"timeout_ms": timeout, "limit": MAX_EXEC_TIMEOUT_MS},
        )
    if cwd is not None and not os.path.isdir(cwd):
        raise GuestError("not_found", f"exec cwd {cwd!r} is not a directory", details={"cwd": cwd})
    merged = {**os.environ, **(env or {})}
    start = time.monotonic()
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=merged,
            start_new_session=True,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except FileNotFoundError as exc:
        raise GuestError(
            "not_found",
            f"exec: program {argv[0]!r} not found ({exc.strerror})",
            details={"program": argv[0]},
        ) from exc
    except OSError as exc:
        raise GuestError(
            "io_error", f"exec: cannot start {argv[0]!r}: {exc}", details={"program": argv[0]}
        ) from exc
    assert process.stdout is not None and process.stderr is not None
    stdout = cast(io.BufferedReader, process.stdout)  # Popen's pipes are buffered readers
    stderr = cast(io.BufferedReader, process.stderr)
    readers = [
        _BoundedReader(stdout, protocol.MAX_EXEC_OUTPUT_BYTES),
        _BoundedReader(stderr, protocol.MAX_EXEC_OUTPUT_BYTES),
    ]
    for reader in readers:
        reader.start()
    if stdin is not None:
        assert process.stdin is not None
        threading.Thread(
            target=_feed, args=(process.stdin, stdin.encode("utf-8")), daemon=True
        ).start()
    timed_out = False
    try:
        process.wait(timeout=timeout / 1000)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for reader in readers:
        reader.join(timeout=5)
    out, err = readers
    stdout_text, stdout_cut = fit_output(bytes(out.data))
    stderr_text, stderr_cut = fit_output(bytes(err.data))
    return {
        "exit_code": None if timed_out else process.returncode,
        "stdout": stdout_text,
        "stderr": stderr_text,
        "stdout_truncated": out.truncated or stdout_cut,
        "stderr_truncated": err.truncated or stderr_cut,
        "timed_out": timed_out,
        "duration_ms": round((time.monotonic() - start) * 1000),
    }


def fit_output(data: bytes, limit: int = protocol.MAX_EXEC_OUTPUT_BYTES) -> tuple[str, bool]:
    """``data`` as text (invalid UTF-8 replaced), cut to the longest prefix that takes at most
    ``limit`` bytes in the reply's JSON; and whether it was cut."""
    text = data.decode("utf-8", "replace")
    if protocol.json_string_bytes(text) <= limit:
        return text, False
    fits, too_long = 0, len(text)  # invariant: text[:fits] fits, text[:too_long] does not
    while too_long - fits > 1:
        middle = (fits + too_long) // 2
        if protocol.json_string_bytes(text[:middle]) <= limit:
            fits = middle
        else:
            too_long = middle
    return text[:fits], True


def _feed(stream: IO[bytes], data: bytes) -> None:
    try:
        with stream:
            stream.write(data)
    except (BrokenPipeError, OSError):
        pass  # the program stopped reading; its exit code tells the story


def read_file(path: str, max_bytes: int | None = None) -> bytes:
    """The content of ``path``, at most ``max_bytes`` (default and cap MAX_FILE_BYTES).

    :raises GuestError: ``too_large`` if the file is bigger than the limit (nothing is cut),
        ``not_found``, ``io_error``.
    """
    limit = protocol.MAX_FILE_BYTES if max_bytes is None else max_bytes
    if not 0 <= limit <= protocol.MAX_FILE_BYTES:
        raise GuestError(
            "bad_args",
            f"max_bytes must be 0..{protocol.MAX_FILE_BYTES}, got {limit}",
            details={"max_bytes": limit, "limit": protocol.MAX_FILE_BYTES},
        )
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            if size > limit:
                raise GuestError(
                    "too_large",
                    f"file {path!r} is {size} bytes, over the limit of {limit} bytes",
                    details={"size": size, "limit": limit},
                )
            data = stream.read(limit + 1)
    except FileNotFoundError as exc:
        raise GuestError(
            "not_found", f"file {path!r} does not exist", details={"path": path}
        ) from exc
    except OSError as exc:
        raise GuestError(
            "io_error", f"cannot read {path!r}: {exc}", details={"path": path}
        ) from exc
    if len(data) > limit:  # it grew while we read it
        raise GuestError(
            "too_large",
            f"file {path!r} is over the limit of {limit} bytes",
            details={"limit": limit},
        )
    return data


def write_file(path: str, data: bytes, *, mode: int | None = None, mkdirs: bool = False) -> int:
    """Write ``data`` to ``path`` atomically (temp file in the same directory + rename).

    :param mode: permission bits (default 0o644).
    :param mkdirs: create missing parent directories.
    :return: bytes written.
    :raises GuestError: ``too_large``, ``not_found`` (missing parent without ``mkdirs``),
        ``io_error``, ``bad_args`` for a bad mode.
    """
    if len(data) > protocol.MAX_FILE_BYTES:
        raise GuestError(
            "too_large",
            f"write_file payload is {len(data)} bytes, over the limit "
            f"of {protocol.MAX_FILE_BYTES} bytes",
            details={"size": len(data), "limit": protocol.MAX_FILE_BYTES},
        )
    bits = 0o644 if mode is None else mode
    if not 0 <= bits <= 0o7777:
        raise GuestError("bad_args", f"mode must be 0..0o7777, got {bits:#o}")
    target = Path(path)
    parent = target.parent
    try:
        if mkdirs:
            parent.mkdir(parents=True, exist_ok=True)
        elif not parent.is_dir():
            raise GuestError(
                "not_found",
                f"directory {str(parent)!r} of {path!r} does not exist "
                "(pass mkdirs=true to create it)",
                details={"path": path},
            )
        fd, temp = tempfile.mkstemp(dir=parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.chmod(temp, bits)
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
    except GuestError:
        raise
    except OSError as exc:
        raise GuestError(
            "io_error", f"cannot write {path!r}: {exc}", details={"path": path}
        ) from exc
    return len(data)
