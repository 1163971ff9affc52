"""A sandbox's lifecycle on any backend: create → ready (the agent's hello) → use → destroy.

::

    with Sandbox.create(network="allow:example.com") as sandbox, teardown_on_signals(sandbox):
        result, png = sandbox.screenshot()
        sandbox.exec(["xterm"])

Ownership: :meth:`Sandbox.create` returns a ready sandbox owned by the caller, who destroys it
(``destroy()``, leaving the ``with`` block, or SIGINT/SIGTERM under :func:`teardown_on_signals`).
If it never becomes ready, everything it created is removed before
:class:`~cubicle.orchestrator.errors.SandboxStartError` (with the guest's log tail) is raised. A
sandbox holds no agent connection of its own: every call opens one (a VM channel accepts one at a
time), and :meth:`Sandbox.connect` (or :meth:`Sandbox.connect_async`) hands the caller one to
keep — the way to drive it. The one exception saves a start-up round: on a backend whose agent
takes several connections at once (Docker), the connection ``create`` opened to see the agent
ready (or a warm-pool claim opened) is kept and is what the first ``connect()`` returns::

    with Sandbox.create() as sandbox, sandbox.connect() as agent:
        driver = GuestDriver(agent, viewport=Viewport.fit(1024, 640))
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import warnings
from collections.abc import Iterator, Sequence
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

import anyio

from cubicle.orchestrator import claims, file_transfer
from cubicle.orchestrator.errors import ConfigError, SandboxNotFound, SandboxStartError
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.provider import (
    ExecResult,
    Progress,
    Provider,
    SandboxInfo,
    SandboxSpec,
    default_cpus,
)
from cubicle.orchestrator.providers import backend_of, get_provider
from cubicle.orchestrator.readiness import ready_client, wait_ready
from cubicle_guest import protocol
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError
from cubicle_guest.waiting import Deadline

if TYPE_CHECKING:
    from cubicle.drivers.async_client import AsyncAgentClient

__all__ = ["Sandbox", "SignalGuard", "ready_client", "teardown_on_signals", "wait_ready"]

REMOVED_HINT = "the sandbox was removed; the log tail above shows the guest's last words"
SPARE_CHECK_S = 2.0
"""Most seconds :meth:`Sandbox.connect` waits for the hello that checks the connection
:meth:`Sandbox.create` kept before handing it out."""


class Sandbox:
    """One running sandbox. Create with :meth:`create`, or :meth:`attach` to an existing id."""

    def __init__(
        self,
        provider: Provider,
        info: SandboxInfo,
        *,
        owned: bool = True,
        spare: AgentClient | None = None,
    ) -> None:
        """:param spare: an agent connection (hello done) the first :meth:`connect` hands out;
        the sandbox closes it if nobody takes it (:meth:`close`, :meth:`destroy`, ``with``).
        Until then it holds one bridge process in the guest (~4 MiB of the sandbox's
        memory): a sandbox kept idle without ever connecting should :meth:`close` it."""
        self.provider = provider
        self.info = info
        self.id = info.id
        self.backend = provider.name
        self._destroyed = False
        self._owned = owned
        self._spare = spare
        self._spare_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"<Sandbox {self.id} backend={self.backend}{' destroyed' if self._destroyed else ''}>"
        )

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        backend: str = "docker",
        *,
        network: str | NetworkPolicy = "none",
        screen: tuple[int, int] = (1280, 800),
        ttl_s: float = 3600,
        ready_timeout_s: float = 90,
        progress: Progress | None = None,
        detached: bool = False,
        cpus: float | None = None,
        spec: SandboxSpec | None = None,
        pool: bool = True,
        provider: Provider | None = None,
    ) -> Sandbox:
        """Create a sandbox; wait until its agent answers ``hello`` (at most ``ready_timeout_s``).

        :param network: ``none`` (default), ``allow:HOST[:PORT],...`` or ``open``.
        :param screen: width, height in pixels.
        :param ttl_s: seconds until ``cubicle gc`` may remove it.
        :param detached: ``cubicle up``: once ready, owned by its expiry alone (only
            ``down``/expiry removes it; leaving a ``with`` block does not). Until ready it is
            this process's: killed mid-start, ``gc`` removes it
            (:mod:`cubicle.orchestrator.ownership`).
        :param cpus: CPU limit in cores (default: ``CUBICLE_CPUS``, else 1).
        :param spec: a full :class:`SandboxSpec`, instead of network/screen/ttl_s/detached/cpus
            (passing one of those too is a :class:`ConfigError`).
        :param pool: claim a ready member of a warm pool of this shape when one exists
            (:mod:`cubicle.orchestrator.pool`, asked through :mod:`cubicle.orchestrator.claims`: no
            import of the pool needed; returns in milliseconds); ``False``: always start one.
        :param provider: the provider to use instead of ``backend``'s (the pool filler's).
        :raises SandboxStartError: not ready in time; everything created is removed first.
        :raises ConfigError, EngineUnavailable, ImageMissing: before anything is created.
        """
        if spec is not None:
            given = {
                "network": network != "none",
                "screen": screen != (1280, 800),
                "ttl_s": ttl_s != 3600,
                "detached": detached,
                "cpus": cpus is not None,
            }
            if any(given.values()):
                names = ", ".join(name for name, set_ in given.items() if set_)
                raise ConfigError(
                    f"Sandbox.create got both spec and {names}: the spec already says those",
                    hint=f"set {names} on the SandboxSpec (dataclasses.replace(spec, ...))",
                )
        provider = provider or get_provider(backend)
        if spec is None:
            policy = network if isinstance(network, NetworkPolicy) else NetworkPolicy.parse(network)
            spec = SandboxSpec(
                screen=screen,
                network=policy,
                ttl_s=ttl_s,
                detached=detached,
                cpus=default_cpus() if cpus is None else cpus,
            )
        say = progress or (lambda _line: None)
        deadline = Deadline(ready_timeout_s)
        if pool:
            for claimer in claims.claimers():
                claimed = claimer(provider, spec)
                if claimed is not None:
                    say(f"{claimed.info.id}: claimed from a warm pool")
                    spare = claimed.client
                    if spare is not None and not provider.keeps_spare_connection():
                        spare.close()
                        spare = None
                    return cls(provider, claimed.info, owned=not spec.detached, spare=spare)
        info = provider.create(spec)
        sandbox = cls(provider, info, owned=not spec.detached)
        say(f"{info.id}: started; waiting for the agent (up to {ready_timeout_s:.0f} s)")
        try:
            client = ready_client(provider, info.id, deadline=deadline)
            if provider.keeps_spare_connection():
                with sandbox._spare_lock:
                    sandbox._spare = client
            else:  # its channel / SSH session must stay free for the caller's connections
                client.close()
            provider.mark_ready(info.id)
            sandbox.info = provider.describe(info.id) or info
        except SandboxStartError as exc:
            sandbox.destroy()
            exc.hint = REMOVED_HINT
            raise
        except BaseException:
            sandbox.destroy()
            raise
        say(f"{info.id}: ready in {deadline.elapsed():.1f} s")
        return sandbox

    @classmethod
    def attach(cls, sandbox_id: str, backend: str | None = None) -> Sandbox:
        """A handle on an existing sandbox (for the CLI). Leaving ``with`` does not destroy it.

        :param backend: defaults to the backend named by the id's prefix (``dk-``, ``vm-``).
        :raises SandboxNotFound: no such sandbox, or an unclaimed warm-pool member
            (:mod:`cubicle.orchestrator.pool`: members are never used before their claim).
        """
        provider = get_provider(backend or backend_of(sandbox_id))
        info = provider.describe(sandbox_id)
        if info is None:
            raise SandboxNotFound(
                f"no {provider.name} sandbox {sandbox_id!r}", hint="list sandboxes with: cubicle ls"
            )
        if info.ownership == "pool":  # a claimed sandbox must never have been used
            raise SandboxNotFound(
                f"{sandbox_id} is an unclaimed warm-pool member, not for use before its claim",
                hint="claim one with: cubicle up (same shape); remove it with: cubicle pool drain",
            )
        return cls(provider, info, owned=False)

    # -- use ---------------------------------------------------------------------------------

    def connect(self, timeout: float = 10.0) -> AgentClient:
        """A new agent connection with ``hello`` done. The caller closes it.

        The first call after :meth:`create` returns the connection ``create`` opened, once a
        ``hello`` on it succeeds again (one round trip: the sandbox may have been removed or its
        agent restarted since): no new ``docker exec``, the first screenshot is one request
        away. Otherwise it is closed and a new connection opened."""
        spare = self._take_spare()
        if spare is not None:
            try:
                spare.hello(timeout=min(timeout, SPARE_CHECK_S))
                return spare
            except CubicleError:
                spare.close()
            except BaseException:
                spare.close()
                raise
        client = self.provider.connect(self.id, timeout=timeout)
        try:
            client.hello(timeout=timeout)
        except BaseException:
            client.close()
            raise
        return client

    async def connect_async(self, timeout: float = 10.0) -> AsyncAgentClient:
        """:meth:`connect` for anyio (``AsyncGuestDriver.open(client)``). The caller closes it.

        Always a new connection; the one ``create`` kept (blocking) is closed first, unused."""
        self.close()

        client = await self.provider.connect_async(self.id, timeout=timeout)
        try:
            await client.hello(timeout=timeout)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await client.aclose()
            raise
        return client

    def agent_socket(self) -> str:
        """Host path of a unix socket reaching the agent, where the backend has one (VM).

        :raises ProviderError: Docker sandboxes have none (their agent is reached over the
            engine's exec stream); use :meth:`connect`.
        """
        return self.provider.agent_socket(self.id)

    def screenshot(self, **args: Any) -> tuple[dict[str, Any], bytes]:
        """One screenshot: the ``screenshot`` op's result and the image bytes (PNG by default)."""
        with self.connect() as client:
            reply = client.screenshot(**args)
        return reply.result, reply.blob

    def exec(self, argv: Sequence[str], timeout: float = 60.0) -> ExecResult:
        """Run ``argv`` in the guest as the desktop user (never through a shell)."""
        return self.provider.exec(self.id, argv, timeout=timeout)

    def upload(self, local: str | os.PathLike[str], guest_path: str) -> None:
        """Copy the local file or folder ``local`` into the guest at ``guest_path``, as
        ``docker cp`` does: an existing guest folder receives it under its own name. Streamed
        in chunks (any size the guest's disk holds); bytes, modes and mtimes kept; written as
        the desktop user (a relative ``guest_path`` is the home's); complete or absent, never
        partial (:mod:`cubicle.orchestrator.file_transfer`).

        :raises TransferError: ``local`` missing, or a folder holding links or special files.
        :raises GuestError: ``no_space`` (the guest's disk is full), ``not_found``, ``io_error``.
        """
        with self.connect() as client:
            file_transfer.upload(client, local, guest_path)

    def download(self, guest_path: str, local: str | os.PathLike[str]) -> None:
        """Copy the guest file or folder ``guest_path`` to ``local``, as ``docker cp`` does: an
        existing local folder receives it under its own name. Nothing the guest says chooses a
        host path: a guest folder holding a symbolic link or special file is refused, names are
        checked, the copy is built in a fresh hidden folder and renamed into place.

        :raises TransferError: refused or failed (the message says which and why).
        :raises GuestError: the guest could not read it (``not_found``, ``io_error``).
        """
        with self.connect() as client:
            file_transfer.download(client, guest_path, local)

    def get_clipboard(self, selection: Literal["clipboard", "primary"] = "clipboard") -> str:
        """The text of the guest's ``CLIPBOARD`` (or ``PRIMARY``) selection, exactly; ``""``
        when no program owns it or its owner offers no text."""
        with self.connect() as client:
            result = client.clipboard_get(selection=_selection(selection)).result
        return str(result["text"])

    def set_clipboard(
        self, text: str, selection: Literal["clipboard", "primary"] = "clipboard"
    ) -> None:
        """Make the guest's ``CLIPBOARD`` (or ``PRIMARY``) hold ``text`` (UTF-8, at most
        :data:`~cubicle_guest.protocol.MAX_CLIPBOARD_BYTES`): the agent's own X client owns it
        until a program in the guest takes it, so a paste in any application receives it.

        :raises ConfigError: ``text`` is not a string or is too long, or a bad ``selection``.
        """
        if not isinstance(text, str):
            raise ConfigError(f"clipboard text must be a string, got {type(text).__name__}")
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise ConfigError(f"clipboard text is not valid Unicode: {exc}") from exc
        if size > protocol.MAX_CLIPBOARD_BYTES:
            raise ConfigError(
                f"clipboard text is {size} bytes of UTF-8, over the limit of "
                f"{protocol.MAX_CLIPBOARD_BYTES}"
            )
        with self.connect() as client:
            client.clipboard_set(text, selection=_selection(selection))

    def logs(self, tail: int = 50) -> str:
        return self.provider.logs(self.id, tail=tail)

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection :meth:`create` kept for the first :meth:`connect`, if nobody
        took it; the sandbox stays. Idempotent (``destroy`` and leaving ``with`` do it too)."""
        spare = self._take_spare()
        if spare is not None:
            spare.close()

    def _take_spare(self) -> AgentClient | None:
        """The kept connection, now the caller's (once: any thread)."""
        lock = getattr(self, "_spare_lock", None)  # None: __init__ did not finish (__del__)
        if lock is None:
            return None
        with lock:
            spare, self._spare = self._spare, None
        return spare

    def destroy(self) -> None:
        """Remove the sandbox and everything created for it. Idempotent."""
        self.close()
        if self._destroyed:
            return
        self._destroyed = True
        self.provider.destroy(self.id)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._owned:
            self.destroy()
        else:
            self.close()

    def __del__(self) -> None:
        self.close()
        if getattr(self, "_owned", False) and not getattr(self, "_destroyed", True):
            warnings.warn(f"unclosed {self!r}", ResourceWarning, stacklevel=1)


def _selection(name: str) -> str:
    if name not in protocol.SELECTIONS:
        raise ConfigError(f"unknown selection {name!r}; known: {', '.join(protocol.SELECTIONS)}")
    return name


class SignalGuard:
    """The sandboxes :func:`teardown_on_signals` destroys; :meth:`add` more inside the block."""

    def __init__(self, sandboxes: Sequence[Sandbox]) -> None:
        self.sandboxes = list(sandboxes)

    def add(self, sandbox: Sandbox) -> Sandbox:
        self.sandboxes.append(sandbox)
        return sandbox


@contextlib.contextmanager
def teardown_on_signals(*sandboxes: Sandbox) -> Iterator[SignalGuard]:
    """Destroy ``sandboxes`` when SIGINT or SIGTERM arrives inside the block, then re-raise.

    SIGINT raises ``KeyboardInterrupt`` as usual; SIGTERM raises ``SystemExit(143)``. Either way
    the sandboxes are destroyed before the exception leaves the block. A signal during
    :meth:`Sandbox.create` inside the block makes ``create`` remove what it made. To cover
    creation and use with no gap::

        with teardown_on_signals() as guard:
            sandbox = guard.add(Sandbox.create())
            ...

    The previous handlers are restored on exit. Main thread only (Python delivers signals there).
    """

    def on_term(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    guard = SignalGuard(sandboxes)
    previous_term = signal.signal(signal.SIGTERM, on_term)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield guard
    except (KeyboardInterrupt, SystemExit):
        for sandbox in guard.sandboxes:
            with contextlib.suppress(CubicleError):
                sandbox.destroy()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)
