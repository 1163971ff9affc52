"""Ending a process a test started: by its handle, gently first."""

from __future__ import annotations

import subprocess
from typing import Any

__all__ = ["communicate_or_kill", "stop_process"]


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


def communicate_or_kill(process: subprocess.Popen[str], timeout: float = 600) -> tuple[str, str]:
    """``process``'s (stdout, stderr) once it ends within ``timeout`` seconds; when it has not
    ended (the timeout, or any other error on the way), it is killed and reaped first."""
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.returncode is None:
            process.kill()
            process.communicate(timeout=60)
