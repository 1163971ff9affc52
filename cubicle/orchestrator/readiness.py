"""Readiness: the one check that a sandbox's agent answers (and, when asked, that its desktop is
drawn), for every backend and every caller — :meth:`cubicle.orchestrator.sandbox.Sandbox.create`
(which re-exports :func:`wait_ready` and :func:`ready_client`), a VM's golden guest. It sits below
the providers, which use it, and reaches a sandbox only through the
:class:`~cubicle.orchestrator.provider.Provider` interface.
"""

from __future__ import annotations

import io

from PIL import Image

from cubicle.orchestrator.errors import SandboxStartError
from cubicle.orchestrator.provider import Provider
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError
from cubicle_guest.waiting import Deadline, poll

__all__ = ["LOG_TAIL_LINES", "STOPPED_STATES", "ready_client", "wait_ready"]

HELLO_TIMEOUT_S = 5.0
LOG_TAIL_LINES = 40
READY_POLL_S = 0.05
"""Pause between two attempts to reach a starting agent."""
PAINT_POLL_S = 0.2
"""Pause between two screenshots while waiting for a painted desktop."""
STOPPED_STATES = frozenset({"exited", "dead", "removing", "crashed"})
"""``SandboxInfo.state`` values that mean the guest will never answer."""


def wait_ready(
    provider: Provider, sandbox_id: str, *, timeout: float | Deadline, painted: bool = False
) -> float:
    """Wait until the sandbox's agent answers ``hello`` (and, with ``painted``, a screenshot
    shows more than one colour: the desktop is drawn); return the seconds waited.

    The one readiness check of every backend (:meth:`Sandbox.create`, the VM's golden guests).

    :param timeout: seconds, or a :class:`~cubicle_guest.waiting.Deadline` set earlier (e.g. before
    the
        sandbox was created).
    :raises SandboxStartError: the sandbox stopped or vanished, or the time ran out (with the
        guest's log tail and the last connection error). Nothing is removed here.
    """
    deadline = timeout if isinstance(timeout, Deadline) else Deadline(timeout)
    with ready_client(provider, sandbox_id, deadline=deadline, painted=painted):
        return deadline.elapsed()


def ready_client(
    provider: Provider, sandbox_id: str, *, deadline: Deadline, painted: bool = False
) -> AgentClient:
    """:func:`wait_ready`, returning the connection whose ``hello`` succeeded (the caller
    closes it) instead of closing it."""
    last: BaseException | None = None
    for _ in poll(deadline, READY_POLL_S):
        # the agent first (a starting sandbox's usually answers on the first try); only when it
        # does not, whether the sandbox still runs
        try:
            client = provider.connect(sandbox_id, timeout=deadline.remaining(low=0.05, high=2.0))
        except CubicleError as exc:
            last = exc
        else:
            try:
                client.hello(timeout=deadline.remaining(low=0.1, high=HELLO_TIMEOUT_S))
                if not painted or _painted(client, deadline):
                    return client
            except CubicleError as exc:
                last = exc
            except BaseException:
                client.close()
                raise
            client.close()
        info = provider.describe(sandbox_id)
        if info is None or info.state in STOPPED_STATES:
            state = "gone" if info is None else info.state
            raise _start_error(
                provider,
                sandbox_id,
                f"sandbox {sandbox_id} stopped while starting (state: {state})",
            )
    raise _start_error(
        provider,
        sandbox_id,
        f"the agent of sandbox {sandbox_id} did not answer hello"
        f"{' with a painted desktop' if painted else ''} within {deadline.seconds:.1f} s"
        + (f" (last error: {last})" if last else ""),
    )


def _painted(client: AgentClient, deadline: Deadline) -> bool:
    """Whether a screenshot shows more than one colour before ``deadline``."""
    for _ in poll(deadline, PAINT_POLL_S):
        reply = client.screenshot(format="png", timeout=deadline.remaining(low=0.1))
        with Image.open(io.BytesIO(reply.blob)) as image:
            if image.getcolors(1) is None:
                return True
    return False


def _start_error(provider: Provider, sandbox_id: str, message: str) -> SandboxStartError:
    try:
        tail = provider.logs(sandbox_id, tail=LOG_TAIL_LINES)
    except CubicleError as exc:
        tail = f"(logs unavailable: {exc})"
    return SandboxStartError(message, sandbox_id=sandbox_id, log_tail=tail)
