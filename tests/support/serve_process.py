"""A real ``cubicle serve`` in a subprocess (``python -m cubicle.orchestrator.cli serve --port 0``)
with a private data folder and a known token, and real openai clients to it: used by the serve
tests (tests/serve/conftest.py's fixtures), the serve attacks and the serve benchmark."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from openai import AsyncOpenAI, OpenAI

__all__ = ["REPO", "TOKEN", "Server", "serve_argv", "start_server"]

REPO = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789abcdef"


@dataclass
class Server:
    process: subprocess.Popen[str]
    base_url: str
    data_dir: Path
    lines: list[str]
    clients: list[OpenAI] = field(default_factory=list)
    """Clients handed out; closed by :meth:`stop` (no socket left to the garbage collector)."""

    @property
    def origin(self) -> str:
        return self.base_url.removesuffix("/v1")

    def client(self, token: str = TOKEN) -> OpenAI:
        client = OpenAI(base_url=self.base_url, api_key=token, max_retries=0, timeout=300)
        self.clients.append(client)
        return client

    def async_client(self, token: str = TOKEN) -> AsyncOpenAI:
        return AsyncOpenAI(base_url=self.base_url, api_key=token, max_retries=0, timeout=300)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()
        if self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=180)
        if self.process.stdout is not None:
            self.process.stdout.close()


def serve_argv(data_dir: Path, *extra: str) -> list[str]:
    """The command line of ``cubicle serve`` on a free port with ``data_dir`` and ``extra``."""
    cli = [sys.executable, "-m", "cubicle.orchestrator.cli", "serve"]
    return [*cli, "--port", "0", "--data-dir", str(data_dir), *extra]


def start_server(
    data_dir: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    stderr: IO[bytes] | None = None,
    nofile: int | None = None,
) -> Server:
    """Start ``cubicle serve`` and wait for its ``base_url`` line.

    :param stderr: where its stderr goes (default: the test's).
    :param nofile: its ``RLIMIT_NOFILE``, soft and hard (file descriptors; default: inherited).
    """

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    environ = {**os.environ, "CUBICLE_API_TOKEN": TOKEN}
    environ.pop("OPENAI_API_KEY", None)  # no real model unless a test passes one
    environ.update(env or {})
    process = subprocess.Popen(
        serve_argv(data_dir, *extra),
        cwd=REPO,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=stderr,
        preexec_fn=limit if nofile is not None else None,  # noqa: PLW1509 — only setrlimit
        text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:
        lines.append(line)
        if "base_url" in line:
            return Server(process, line.split()[-1], data_dir, lines)
    process.wait(timeout=30)
    raise AssertionError(f"cubicle serve exited ({process.returncode}): {lines}")
