"""``cubicle mcp`` through the real ``mcp`` client, without a sandbox: the tools and their
schemas, bad calls refused naming the field (the server keeps serving), the HTTP token."""

from __future__ import annotations

import stat
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.mcp.support import http_client, start_http, stdio_params, text

pytestmark = pytest.mark.slow  # each starts a real server (seconds on a loaded host)

TOOLS = {
    "create_sandbox",
    "list_sandboxes",
    "destroy_sandbox",
    "screenshot",
    "click",
    "double_click",
    "drag",
    "scroll",
    "move",
    "type",
    "keypress",
    "wait",
    "exec",
    "upload",
    "download",
    "clipboard_get",
    "clipboard_set",
}

BAD_CALLS: list[tuple[str, dict[str, object], list[str]]] = [
    # (tool, arguments, what the error must say)
    (
        "click",
        {"sandbox_id": "dk-abc", "x": "5"},
        ["x: Input should be a valid integer", "y: required"],
    ),
    (
        "click",
        {"sandbox_id": "dk-abc", "x": 1, "y": -1},
        ["y: Input should be greater than or equal to 0"],
    ),
    ("click", {"sandbox_id": "dk-abc", "x": 1, "y": 1, "button": "middle"}, ["button: "]),
    ("screenshot", {}, ["sandbox_id: required"]),
    ("screenshot", {"sandbox_id": "../etc"}, ["sandbox_id: String should match pattern"]),
    ("screenshot", {"sandbox_id": "dk-nosuch"}, ["sandbox_id: no sandbox 'dk-nosuch'"]),
    (
        "drag",
        {"sandbox_id": "dk-abc", "path": [{"x": 1, "y": 2}]},
        ["path: List should have at least 2 items"],
    ),
    (
        "drag",
        {"sandbox_id": "dk-abc", "path": [{"x": 1, "y": 2}, {"x": 1}]},
        ["path.1.y: required"],
    ),
    ("keypress", {"sandbox_id": "dk-abc", "keys": []}, ["keys: List should have at least 1 item"]),
    (
        "wait",
        {"sandbox_id": "dk-abc", "ms": 60_001},
        ["ms: Input should be less than or equal to 60000"],
    ),
    ("exec", {"sandbox_id": "dk-abc", "argv": "ls"}, ["argv: Input should be a valid list"]),
    ("create_sandbox", {"colour": "red"}, ["colour: unknown field"]),
    ("create_sandbox", {"backend": "qemu"}, ["backend: Input should be 'docker' or 'vm'"]),
    ("create_sandbox", {"screen": "big"}, ["screen: String should match pattern"]),
    ("create_sandbox", {"network": "allow:"}, ["network: empty entry in the allow: list"]),
    ("create_sandbox", {"network": "ask:example.com"}, ["network: ask policies need someone"]),
    (
        "upload",
        {"sandbox_id": "dk-abc", "local": "../x", "guest_path": "x"},
        ["local: Value error, a '..' part is refused"],
    ),
    (
        "download",
        {"sandbox_id": "dk-abc", "guest_path": "x", "local": "/etc/passwd"},
        ["local: Value error, an absolute path is refused"],
    ),
    ("upload", {"sandbox_id": "dk-abc", "local": "a"}, ["guest_path: required"]),
    ("download", {"sandbox_id": "dk-abc", "guest_path": ""}, ["guest_path: String should have"]),
    (
        "upload",
        {"sandbox_id": "dk-abc", "local": "missing", "guest_path": "x"},
        ["local: 'missing' does not exist in the files folder"],
    ),
    ("clipboard_set", {"sandbox_id": "dk-abc", "text": 5}, ["text: Input should be a valid str"]),
    (
        "clipboard_set",
        {"sandbox_id": "dk-abc", "text": "é" * 100_001},
        ["text: Value error, 200002 bytes of UTF-8, over the limit of 200000"],
    ),
    (
        "clipboard_get",
        {"sandbox_id": "dk-abc", "selection": "secondary"},
        ["selection: Input should be 'clipboard' or 'primary'"],
    ),
    ("clipboard_get", {"sandbox_id": "dk-nosuch"}, ["sandbox_id: no sandbox 'dk-nosuch'"]),
    ("no_such_tool", {}, ["unknown tool 'no_such_tool'", "create_sandbox"]),
]


def test_the_tools_and_their_schemas_and_bad_calls_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    """One server: the tools listed with precise schemas; each bad call an error result naming
    the field; the server still serving after them all."""
    files = tmp_path / "files"

    async def main() -> None:
        async with Client(stdio_params("--files", str(files))) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            for tool, arguments, expected in BAD_CALLS:
                result = await client.call_tool(tool, arguments)
                assert result.is_error, (tool, arguments, text(result))
                for part in expected:
                    assert part in text(result), (tool, arguments, text(result))
            after = await client.call_tool("list_sandboxes", {})
        assert set(listed) == TOOLS
        assert "required" not in listed["create_sandbox"].input_schema  # every argument optional
        assert listed["screenshot"].input_schema["required"] == ["sandbox_id"]
        assert listed["click"].input_schema["additionalProperties"] is False
        assert set(listed["click"].input_schema["required"]) == {"sandbox_id", "x", "y"}
        assert set(listed["download"].input_schema["required"]) == {"sandbox_id", "guest_path"}
        assert listed["clipboard_get"].input_schema["required"] == ["sandbox_id"]
        assert stat.S_IMODE(files.stat().st_mode) == 0o700  # made at its first use, the user's
        assert not after.is_error
        assert text(after) == "No sandboxes; create one with create_sandbox."

    anyio.run(main)


def _errors(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for inner in group.exceptions for leaf in _errors(inner)]
    return [group]


def test_http_serves_the_token_holder_alone(tmp_path: Path) -> None:
    server = start_http(tmp_path / "state" / "mcp.token")
    try:
        assert stat.S_IMODE(server.token_file.stat().st_mode) == 0o600
        assert len(server.token) >= 32

        async def main() -> None:
            for token in (None, "wrong-" + server.token):
                with pytest.raises(BaseException) as raised:
                    async with http_client(server.url, token):
                        pass
                assert any(isinstance(e, MCPError) for e in _errors(raised.value)), raised.value
            async with http_client(server.url, server.token) as client:
                assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS

        anyio.run(main)
        for header in (
            {},
            {"Authorization": "Bearer " + server.token[:-1]},
            {"Authorization": server.token},
        ):
            refused = httpx2.post(server.url, json={}, headers=header, timeout=30)
            assert refused.status_code == 401, (header, refused.text)
            assert "Authorization: Bearer" in refused.json()["error_description"]
        assert server.process.poll() is None, "the server stopped serving"
    finally:
        assert server.stop() == 0
