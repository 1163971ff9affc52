"""A real ``cubicle mcp`` for the tests: on stdio (launched by the ``mcp`` package's own stdio
client, with the bare environment it passes) or on HTTP in a subprocess, and the calls the tests
make through the real ``mcp`` client."""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from mcp import Client, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from PIL import Image

from cubicle_guest.waiting import Deadline
from tests.support.processes import stop_process

__all__ = [
    "HttpServer",
    "call",
    "child_server",
    "http_client",
    "image_of",
    "running",
    "start_http",
    "stdio_params",
    "text",
]

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "cubicle.orchestrator.cli", "mcp"]
START_S = 60.0


def stdio_params(*extra: str) -> StdioServerParameters:
    """``cubicle mcp`` as an MCP client launches it: no environment of ours (the client passes
    HOME, LOGNAME, PATH, SHELL, TERM and USER alone); the checkout as working folder (its
    ``cubicle`` is the one imported)."""
    return StdioServerParameters(command=CLI[0], args=[*CLI[1:], *extra], cwd=str(REPO))


@dataclass
class HttpServer:
    process: subprocess.Popen[str]
    url: str
    token: str
    token_file: Path

    def stop(self) -> int:
        return stop_process(self.process, timeout=30)


def start_http(token_file: Path, *extra: str) -> HttpServer:
    """``cubicle mcp --http --port 0 [extra...]`` in a subprocess; returns once it printed its
    URL."""
    process = subprocess.Popen(
        [*CLI, "--http", "--port", "0", "--token-file", str(token_file), *extra],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    deadline = Deadline(START_S)
    seen: list[str] = []
    while not deadline.expired:
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        found = re.search(r"url (http://\S+)", line)
        if found:
            return HttpServer(process, found.group(1), token_file.read_text().strip(), token_file)
    stop_process(process)
    raise AssertionError(f"cubicle mcp --http printed no URL: {''.join(seen)}")


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Client]:
    """A real MCP client over streamable HTTP, connected, sending ``token`` as its bearer
    (``None``: no header)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


async def call(client: Client, tool: str, arguments: dict[str, object]) -> types.CallToolResult:
    """Call ``tool``; the result must not be an error (it names the tool and the text if it is)."""
    result = await client.call_tool(tool, arguments)
    assert isinstance(result, types.CallToolResult), result
    assert not result.is_error, f"{tool}{arguments!r:.200}: {text(result)}"
    return result


def text(result: types.CallToolResult) -> str:
    """The text of a result's text blocks, joined."""
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


def image_of(result: types.CallToolResult) -> Image.Image:
    """The PNG a screenshot result carries, decoded."""
    (block,) = result.content
    assert isinstance(block, types.ImageContent), block
    assert block.mime_type == "image/png"
    image = Image.open(io.BytesIO(base64.b64decode(block.data)))
    assert image.format == "PNG"
    return image.convert("RGB")


def child_server() -> int:
    """The pid of the ``cubicle mcp`` this process's stdio client started (its one child
    running it): the ``mcp`` client does not say."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"cubicle.orchestrator.cli" in argv and b"mcp" in argv:
            found.append(int(entry))
    assert len(found) == 1, f"cubicle mcp children of this process: {found}"
    return found[0]


def running(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
