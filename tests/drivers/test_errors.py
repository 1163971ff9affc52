"""Error mapping: every guest-client failure becomes an ActionFailed naming the action; the
async client times out, breaks, and says so (against a real, silent unix socket)."""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from cubicle.drivers.async_client import AsyncAgentClient, connect_unix_async
from cubicle.drivers.errors import ActionFailed, ActionTimeout, DriverError
from cubicle.drivers.guest_errors import map_guest_errors
from cubicle_guest import client as guest_client
from cubicle_guest import errors as guest_errors
from cubicle_guest.client import AgentConnectionError, AgentTimeout
from cubicle_guest.errors import CubicleError, GuestError


def _raise(exc: BaseException) -> None:
    raise exc


FOREIGN: dict[type[CubicleError], Callable[[], CubicleError]] = {
    GuestError: lambda: GuestError("unknown_key", "unknown key 'Hyper'", op="keypress"),
    guest_errors.ProtocolError: lambda: guest_errors.ProtocolError("bad frame: no magic"),
    AgentTimeout: lambda: AgentTimeout("agent did not answer click in time"),
    AgentConnectionError: lambda: AgentConnectionError("connection to agent is closed"),
}


def test_every_guest_side_exception_class_is_mapped() -> None:
    """Fails when cubicle_guest.errors/guest.client grow an exception the driver does not map."""
    public = {
        obj
        for module in (guest_errors, guest_client)
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, CubicleError) and obj is not CubicleError
    }
    assert public == set(FOREIGN)
    for cls, make in FOREIGN.items():
        with pytest.raises(ActionFailed) as caught, map_guest_errors("click"):
            _raise(make())
        assert str(caught.value).startswith("click failed: ")
        assert isinstance(caught.value.__cause__, cls)
        assert isinstance(caught.value, DriverError)


def test_guest_error_code_is_kept_and_timeouts_are_timeouts() -> None:
    with pytest.raises(ActionFailed) as caught, map_guest_errors("keypress"):
        _raise(FOREIGN[GuestError]())
    assert caught.value.code == "unknown_key"
    assert str(caught.value) == "keypress failed: unknown key 'Hyper' [unknown_key]"
    with pytest.raises(ActionTimeout) as timed_out, map_guest_errors("click"):
        _raise(FOREIGN[AgentTimeout]())
    assert isinstance(timed_out.value, TimeoutError)


def test_async_client_times_out_then_reports_broken() -> None:
    with tempfile.TemporaryDirectory(prefix="cbl-ac-", dir="/tmp") as directory:
        path = Path(directory) / "silent.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(1)

        async def main() -> None:
            client: AsyncAgentClient = await connect_unix_async(path, name="silent-agent")
            async with client:
                with pytest.raises(
                    AgentTimeout, match=r"silent-agent did not answer info within 0\.2 s"
                ):
                    await client.info(timeout=0.2)
                with pytest.raises(AgentConnectionError, match="broken by an earlier failure"):
                    await client.info(timeout=0.2)

        try:
            anyio.run(main)
        finally:
            listener.close()


def test_async_connect_gives_up_naming_the_path() -> None:
    async def main() -> None:
        with pytest.raises(AgentConnectionError, match="no agent accepted connections at /tmp/"):
            await connect_unix_async("/tmp/cbl-no-such-agent.sock", timeout=0.2)

    anyio.run(main)
