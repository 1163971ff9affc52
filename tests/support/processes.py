"""Ending a process a test started: by its handle, gently first."""

from __future__ import annotations

import subprocess
from typing import Any

__all__ = ["stop_process"]


def stop_process(process: subprocess.Popen[Any], timeout: float = 10.0) -> int:
    """SIGTERM ``process`` (if still running), SIGKILL it after ``timeout`` seconds; reap it and
    close its pipes. Return its exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            stream.close()
    return process.returncode
