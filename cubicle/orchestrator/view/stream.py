"""A VNC session of a sandbox's desktop as a byte stream (no port: the engine's exec stream, or
a VM's view channel).

Docker: ``docker exec`` of :mod:`cubicle_guest.vnc` as the desktop user — the same carrier as the
agent (:mod:`cubicle.orchestrator.providers.docker.exec`): stdin is RFB from the viewer, stdout
(demultiplexed by :class:`~cubicle.orchestrator.providers.docker.exec.DockerStreamCodec`) is RFB
from x11vnc. Each stream is one x11vnc in the guest, started for it and ended with it.

VM: a stream of the domain's view channel (:mod:`cubicle.orchestrator.view.vm_channel`: a
virtio-serial port whose host side is ``view.sock`` in the run folder), served in the guest by
:mod:`cubicle_guest.view_relay` with the same x11vnc session; the bytes are RFB, no framing.
"""

from __future__ import annotations

from cubicle.orchestrator.errors import ProviderError, SandboxNotFound
from cubicle.orchestrator.provider import AgentStream, Provider
from cubicle.orchestrator.providers.docker.exec import DockerStreamCodec, open_exec_socket
from cubicle.orchestrator.providers.docker.provider import GUEST_PYTHON, GUEST_UID, DockerProvider
from cubicle.orchestrator.providers.vm.domain import VIEW_SOCKET
from cubicle.orchestrator.providers.vm.provider import VmProvider
from cubicle.orchestrator.view.vm_channel import open_vm_vnc

__all__ = ["open_vnc_stream", "vnc_argv"]


def vnc_argv(*, view_only: bool) -> list[str]:
    """The guest command of one VNC session (:mod:`cubicle_guest.vnc`)."""
    return [GUEST_PYTHON, "-I", "-m", "cubicle_guest.vnc", *(["--view-only"] if view_only else [])]


def open_vnc_stream(provider: Provider, sandbox_id: str, *, view_only: bool) -> AgentStream:
    """Start one VNC session in the sandbox; the caller owns the returned stream.

    :raises SandboxNotFound: no such sandbox.
    :raises ProviderError: the backend has no live view.
    :raises AgentConnectionError: the engine refused to start the session.
    :raises ProviderError: (VM) the view channel is missing, refused, or silent.
    """
    if isinstance(provider, VmProvider):
        if provider.describe(sandbox_id) is None:
            raise SandboxNotFound(f"no VM sandbox {sandbox_id!r} here")
        view_socket = provider.run_dir(sandbox_id) / VIEW_SOCKET
        sock = open_vm_vnc(view_socket, sandbox_id, view_only=view_only)
        return AgentStream(sock, sandbox_id)
    if not isinstance(provider, DockerProvider):
        raise ProviderError(
            f"the live view is not available on the {provider.name} backend "
            "(Docker and VM sandboxes only)"
        )
    info = provider.describe(sandbox_id)
    if info is None:
        raise SandboxNotFound(f"no Docker sandbox {sandbox_id!r} on this engine")
    sock = open_exec_socket(
        provider.client_of(sandbox_id).api,
        info.detail["container"],
        vnc_argv(view_only=view_only),
        user=f"{GUEST_UID}:{GUEST_UID}",
        name=sandbox_id,
    )
    return AgentStream(sock, sandbox_id, DockerStreamCodec())
