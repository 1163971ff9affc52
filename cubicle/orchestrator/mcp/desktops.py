"""The sandboxes one ``cubicle mcp`` server created: it owns them and removes them when it stops.

Every sandbox is created by the server's own process with the ``owned`` lifetime (never from a
warm pool, whose members are detached), so its labels name this process
(:mod:`cubicle.orchestrator.ownership`): should the server die without its teardown (SIGKILL),
``cubicle gc`` removes them as soon as the process is gone. :meth:`Desktops.close` is the
teardown: it removes every sandbox, and a creation still running when it comes removes its
sandbox itself once started.

Each sandbox keeps one agent connection and one :class:`~cubicle.drivers.computer.GuestDriver`
over it (the drivers' coordinate mapping, settle and receipts), used by one call at a time
(a lock per sandbox; the calls are blocking: the server runs them in worker threads). ``exec``
goes through the same connection (a VM's channel takes one connection at a time), and so do the
file transfers and the clipboard.

The server's files folder (:mod:`cubicle.orchestrator.mcp.files`), the one host folder the
``upload`` and ``download`` tools touch, is :attr:`Desktops.files`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from cubicle.drivers.computer import GuestDriver
from cubicle.orchestrator.errors import ConfigError, SandboxNotFound
from cubicle.orchestrator.mcp.files import FilesFolder, default_files_dir
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.provider import EXEC_MARGIN_S, ExecResult, parse_size
from cubicle.orchestrator.sandbox import Sandbox
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError

__all__ = ["Desktop", "Desktops"]

T = TypeVar("T")


@dataclass
class Desktop:
    """One sandbox of the server, its agent connection and its driver."""

    sandbox: Sandbox
    client: AgentClient
    driver: GuestDriver
    network: str
    screen: tuple[int, int]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def exec(self, argv: list[str], timeout_s: float) -> ExecResult:
        """Run ``argv`` in the guest as the desktop user, on this desktop's connection."""
        reply = self.client.exec(
            argv, timeout_ms=int(timeout_s * 1000), timeout=timeout_s + EXEC_MARGIN_S
        )
        return ExecResult.from_reply(reply.result)

    def remove(self) -> None:
        """Close the connection and destroy the sandbox (idempotent)."""
        with contextlib.suppress(CubicleError, OSError):
            self.driver.close()
            self.client.close()
        self.sandbox.destroy()


class Desktops:
    """The server's sandboxes, by id. Thread-safe.

    :param backend: the backend ``create`` uses when the call names none.
    :param ready_timeout_s: how long a creation waits for the guest's agent.
    :param files: the files folder (default: the one of
        :func:`~cubicle.orchestrator.mcp.files.default_files_dir`).
    """

    def __init__(
        self,
        backend: str = "docker",
        *,
        ready_timeout_s: float = 90.0,
        files: FilesFolder | None = None,
    ) -> None:
        self.backend = backend
        self.ready_timeout_s = ready_timeout_s
        self.files = files if files is not None else FilesFolder(default_files_dir())
        self._items: dict[str, Desktop] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def create(self, backend: str | None, network: str, screen: str) -> Desktop:
        """A new ready sandbox owned by this process, with its driver.

        :raises ConfigError: ``network`` or ``screen`` is invalid (the message names it), an
            ``ask:`` policy (nobody would answer its questions), or the server is stopping.
        :raises CubicleError: the backend could not start it (nothing is left behind).
        """
        try:
            policy = NetworkPolicy.parse(network)
        except ConfigError as exc:
            raise ConfigError(f"network: {exc}", hint=exc.hint) from None
        if policy.mode == "ask":
            raise ConfigError(
                "network: ask policies need someone to answer their questions; "
                "use allow:HOST,... (or none, open, block:NAME,...)"
            )
        size = parse_size(screen, "screen")
        if self._stopping.is_set():
            raise ConfigError("the server is stopping; no new sandbox")
        sandbox = Sandbox.create(
            backend or self.backend,
            network=policy,
            screen=size,
            ready_timeout_s=self.ready_timeout_s,
            pool=False,
        )
        try:
            client = sandbox.connect()
            driver = GuestDriver(client)
            desktop = Desktop(sandbox, client, driver, str(policy), size)
        except BaseException:
            sandbox.destroy()
            raise
        with self._lock:
            if not self._stopping.is_set():
                self._items[sandbox.id] = desktop
                return desktop
        desktop.remove()  # the server stopped while this one was starting
        raise ConfigError("the server is stopping; the new sandbox was removed")

    def get(self, sandbox_id: str) -> Desktop:
        """:raises SandboxNotFound: this server has no such sandbox (the message says which)."""
        with self._lock:
            desktop = self._items.get(sandbox_id)
        if desktop is None:
            raise SandboxNotFound(
                f"sandbox_id: no sandbox {sandbox_id!r} created by this server (its "
                f"sandboxes: {', '.join(self.ids()) or 'none'}); create one with create_sandbox"
            )
        return desktop

    @contextlib.contextmanager
    def using(self, sandbox_id: str) -> Iterator[Desktop]:
        """The desktop, held for one call (calls on one sandbox run one at a time)."""
        desktop = self.get(sandbox_id)
        with desktop.lock:
            yield desktop

    def run(self, sandbox_id: str, work: Callable[[Desktop], T]) -> T:
        """``work(desktop)`` while holding the desktop."""
        with self.using(sandbox_id) as desktop:
            return work(desktop)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._items)

    def all(self) -> list[Desktop]:
        with self._lock:
            return list(self._items.values())

    def destroy(self, sandbox_id: str) -> None:
        """Remove one sandbox of this server.

        :raises SandboxNotFound: it has no such sandbox."""
        desktop = self.get(sandbox_id)
        with self._lock:
            self._items.pop(sandbox_id, None)
        desktop.remove()

    def close(self) -> list[str]:
        """Stop taking sandboxes and remove every one, in parallel; returns their ids. Errors
        are swallowed per sandbox (``gc`` collects what could not be removed: its owner is
        gone once this process is). Idempotent."""
        with self._lock:
            self._stopping.set()
            items, self._items = list(self._items.values()), {}
        threads = [threading.Thread(target=_remove_quietly, args=(d,), daemon=True) for d in items]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [d.sandbox.id for d in items]


def _remove_quietly(desktop: Desktop) -> None:
    with contextlib.suppress(CubicleError, OSError):
        desktop.remove()
