"""The agent over ``docker exec``: Docker's multiplexed stream decoded, sync and async clients,
and no bridge left behind in the guest."""

from __future__ import annotations

import base64
import io
import os
import struct
import time

import anyio
import docker
import pytest
from openai.lib.computer import Screenshot
from openai.types.responses.computer_action import Click
from PIL import Image

from cubicle.drivers import AsyncGuestDriver, Viewport
from cubicle.orchestrator.errors import SandboxNotFound
from cubicle.orchestrator.providers.docker.exec import DockerStreamCodec
from cubicle_guest.errors import ProtocolError
from tests.orchestrator.conftest import Tracker


def png_of(shot: Screenshot) -> bytes:
    return base64.b64decode(str(shot["image_url"]).split(",", 1)[1])


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def test_stdout_is_reassembled_across_any_split_and_stderr_kept_aside() -> None:
    wire = frame(1, b"CBL1 agent") + frame(2, b"a warning\n") + frame(1, b" bytes\x00\xff")
    for cut in range(len(wire) + 1):
        codec = DockerStreamCodec()
        out = codec.decode(wire[:cut]) + codec.decode(wire[cut:])
        assert out == b"CBL1 agent bytes\x00\xff"
        assert codec.closed_reason() == "a warning"
    assert DockerStreamCodec().encode(b"\x01\x00\x00\x00") == b"\x01\x00\x00\x00"


def test_a_cut_off_frame_is_named_when_the_stream_ends() -> None:
    codec = DockerStreamCodec()
    assert codec.decode(frame(2, b"bridge: gone") + frame(1, b"partial")[:10]) == b""
    assert codec.closed_reason() == "bridge: gone (and 10 bytes of a cut-off frame)"
    assert DockerStreamCodec().closed_reason() is None


@pytest.mark.parametrize(
    "header", [frame(0, b"x"), frame(3, b"x"), b"\x01\x00\x00\x00\xff\xff\xff\xff"]
)
def test_a_broken_stream_is_a_protocol_error(header: bytes) -> None:
    with pytest.raises(ProtocolError, match="broken exec stream"):
        DockerStreamCodec().decode(header)


def test_the_kept_stderr_is_bounded() -> None:
    codec = DockerStreamCodec()
    for _ in range(100):
        codec.decode(frame(2, b"x" * 1000))
    assert len(codec.closed_reason() or "") <= 4096


def bridges(engine: docker.DockerClient, sandbox_id: str) -> list[str]:
    top = engine.containers.get(f"cubicle-{sandbox_id}").top()
    return [p[-1] for p in top["Processes"] if "cubicle_guest.bridge" in p[-1]]


@pytest.mark.docker
def test_async_driver_over_the_exec_stream_and_no_bridge_left(
    sandboxes: Tracker, engine: docker.DockerClient
) -> None:
    sandbox = sandboxes.create()
    seen: dict[str, bytes | list[str]] = {}

    async def drive() -> None:
        async with await sandbox.connect_async() as client:
            driver = await AsyncGuestDriver.open(client, viewport=Viewport.fit(640, 400))
            await driver.click(Click(type="click", button="left", x=320, y=200))
            seen["png"] = png_of(await driver.screenshot())
            seen["bridges"] = bridges(engine, sandbox.id)

    anyio.run(drive)
    png, during = seen["png"], seen["bridges"]
    assert isinstance(png, bytes)
    with Image.open(io.BytesIO(png)) as image:
        assert image.size == (640, 400)
    assert len(during) == 1, during
    # a closed connection ends its bridge (stdin's EOF half-closes the agent socket): the
    # engine reaps it shortly after, so look until it is gone
    deadline = time.monotonic() + 10
    while bridges(engine, sandbox.id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert bridges(engine, sandbox.id) == []


@pytest.mark.docker
def test_a_gone_sandbox_is_named(sandboxes: Tracker) -> None:
    sandbox = sandboxes.create()
    sandbox.provider.destroy(sandbox.id)
    with pytest.raises(SandboxNotFound, match=sandbox.id):
        sandbox.connect(timeout=2)


@pytest.mark.docker
def test_large_binary_payloads_cross_the_exec_stream_intact(sandboxes: Tracker) -> None:
    sandbox = sandboxes.create()
    data = os.urandom(8 * 1024 * 1024)
    with sandbox.connect() as client:
        written = client.write_file("/tmp/blob", data, timeout=60)
        assert written.result["size"] == len(data)
        back = client.read_file("/tmp/blob", timeout=60)
    assert back.blob == data
