"""VNC sessions of a VM sandbox's desktop over its view channel (a virtio-serial port, no network).

Every VM domain has the virtio-serial port ``org.cubicle.view``
(:data:`~cubicle.orchestrator.providers.vm.domain.VIEW_CHANNEL`) whose host side is the unix
socket ``view.sock`` QEMU binds in the sandbox's run folder, beside the agent's (same owner and
mode: root and QEMU's group, or the ``qemu:///session`` user). The guest's
:mod:`cubicle_guest.view_relay` serves it. No port is opened anywhere: the guest can reach
nothing through it; only the host opens sessions.

QEMU takes one connection on that socket at a time, so this process keeps one connection per
VM (a *hub*) and carries each session as a :mod:`cubicle_guest.egress_mux` stream on it: every
viewer of this process (the view server's browser tabs, its reconnects on a mode change) shares
it. The hub lets the connection go :data:`LINGER_S` after its last session ended, so another
process can view the VM; while one process holds it, another's session waits (up to
``first_bytes_s`` of :func:`open_vm_vnc`, then a clear error).

Contract of :func:`open_vm_vnc`: a connected socket carrying RFB (x11vnc speaks first); closing
it ends the session and its x11vnc in the guest. ``view_only`` sessions run x11vnc
``-viewonly``: the guest drops their input whatever the viewer sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cubicle.orchestrator.errors import ProviderError
from cubicle_guest.egress_mux import Mux, MuxError

__all__ = ["LINGER_S", "open_vm_vnc"]

log = logging.getLogger(__name__)

LINGER_S: Final = 2.0
"""How long a hub keeps its connection after its last session (a page's reconnect reuses it)."""
CONNECT_TIMEOUT_S: Final = 10.0
VIEW_ONLY: Final = b"view-only"
CONTROL: Final = b"control"


@dataclass
class _Hub:
    mux: Mux
    writer: asyncio.StreamWriter
    runner: asyncio.Task[None] | None = None
    sessions: int = 0
    linger: asyncio.TimerHandle | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class _Hubs:
    """This process's hubs, served by one background event loop (a daemon thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hubs: dict[str, _Hub] = {}

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="cubicle-vm-view", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    async def _hub(self, path: str) -> _Hub:
        hub = self._hubs.get(path)
        if hub is not None and hub.runner is not None and not hub.runner.done():
            return hub
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(path, limit=1 << 20), CONNECT_TIMEOUT_S
        )
        # ids from a random start: a guest that missed an earlier hub's end tells them apart
        hub = _Hub(Mux(reader, writer, first_id=secrets.randbelow(1 << 30) + 1), writer)
        hub.runner = asyncio.ensure_future(self._run(path, hub))
        self._hubs[path] = hub
        return hub

    async def _run(self, path: str, hub: _Hub) -> None:
        try:
            await hub.mux.run()
        except MuxError as exc:  # garbage from the guest ends this hub, not the loop
            log.warning("the view channel %s sent garbage: %s", path, exc)
        finally:
            if self._hubs.get(path) is hub:
                del self._hubs[path]
            hub.writer.close()

    async def open(self, path: str, hello: bytes) -> socket.socket:
        hub = await self._hub(path)
        if hub.linger is not None:
            hub.linger.cancel()
            hub.linger = None
        ours, theirs = socket.socketpair()
        try:
            reader, writer = await asyncio.open_connection(sock=ours, limit=1 << 20)
        except BaseException:
            ours.close()
            theirs.close()
            raise
        hub.sessions += 1
        task = asyncio.ensure_future(self._carry(path, hub, reader, writer, hello))
        hub.tasks.add(task)
        task.add_done_callback(hub.tasks.discard)
        return theirs

    async def _carry(
        self,
        path: str,
        hub: _Hub,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        hello: bytes,
    ) -> None:
        try:
            await hub.mux.open(reader, writer, hello)
        finally:
            hub.sessions -= 1
            if hub.sessions == 0 and hub.runner is not None and not hub.runner.done():
                loop = asyncio.get_running_loop()
                hub.linger = loop.call_later(LINGER_S, self._let_go, path, hub)

    def _let_go(self, path: str, hub: _Hub) -> None:
        """End an idle hub's connection (its sessions' guest ends had time to close)."""
        if hub.sessions == 0 and hub.runner is not None:
            if self._hubs.get(path) is hub:
                del self._hubs[path]  # a session opened from now on makes a new connection
            hub.runner.cancel()


_HUBS = _Hubs()


def open_vm_vnc(
    view_socket: Path, sandbox_id: str, *, view_only: bool, first_bytes_s: float = 60.0
) -> socket.socket:
    """Open one VNC session over the view socket ``view_socket`` of VM sandbox ``sandbox_id``;
    return once the guest's x11vnc spoke (its first bytes stay unread in the socket). The caller
    owns the blocking socket.

    :raises ProviderError: no view socket (a VM made before the live view came to VMs, or gone);
        the connection was refused; the guest refused the session or nothing came within
        ``first_bytes_s`` (another process is viewing the VM, or its desktop is stuck).
    """
    if not view_socket.exists():
        raise ProviderError(
            f"VM sandbox {sandbox_id} has no view channel ({view_socket} is missing): it is "
            "gone, or was made by a cubicle without the live view on VMs; recreate it"
        )
    loop = _HUBS.loop()
    hello = VIEW_ONLY if view_only else CONTROL
    future = asyncio.run_coroutine_threadsafe(_HUBS.open(str(view_socket), hello), loop)
    try:
        sock = future.result(CONNECT_TIMEOUT_S + 5)
    except (OSError, TimeoutError) as exc:
        future.cancel()
        raise ProviderError(
            f"cannot reach the view channel of VM sandbox {sandbox_id} ({view_socket}): {exc}"
        ) from None
    try:
        sock.settimeout(first_bytes_s)
        first = sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        sock.close()
        raise ProviderError(
            f"no VNC session from VM sandbox {sandbox_id} within {first_bytes_s:.0f} s: another "
            "process may be viewing it (one process at a time), or its desktop is stuck "
            f"(`cubicle logs {sandbox_id}`)"
        ) from None
    except OSError as exc:
        sock.close()
        raise ProviderError(f"the VNC session of VM sandbox {sandbox_id} failed: {exc}") from None
    if not first:
        sock.close()
        raise ProviderError(
            f"VM sandbox {sandbox_id} refused the VNC session (no x11vnc in the guest, or its "
            f"desktop is gone: `cubicle logs {sandbox_id}`)"
        )
    sock.settimeout(None)
    with contextlib.suppress(OSError):
        sock.setblocking(True)
    return sock
