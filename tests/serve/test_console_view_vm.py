"""The console's live-view link for a session whose desktop is a VM (``cubicle serve --backend
vm``): the one-time link it hands out opens an RFB session of that VM's desktop (over the VM's
view channel), and stopping the server leaves no VM and no view server behind."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.view_servers import DIR_ENV, view_server_pids
from cubicle_guest.waiting import Deadline, poll
from tests.serve.conftest import TOKEN, start_server
from tests.serve.support import DRILL_ENV
from tests.view.rfb import rfb_session, session_cookie_for
from tests.vm.conftest import vm_provider

__all__ = ["vm_provider"]

pytestmark = [pytest.mark.vm, pytest.mark.slow]


def test_console_view_link_opens_the_desktop_of_a_vm_session(
    vm_provider: VmProvider, tmp_path: Path
) -> None:
    server = start_server(
        tmp_path / "serve", "--backend", "vm", env={DIR_ENV: str(tmp_path / "view")}
    )
    sandbox_ids: list[str] = []
    try:
        session = server.client().beta.agents.sessions.create(
            environment=DRILL_ENV, agent={"model": "cubicle-drill"}
        )
        url = f"{server.origin}/console/api/sessions/{session.id}/view"
        reply = None
        for _ in poll(Deadline(240), 0.5):  # the VM is being made
            reply = requests.post(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            if reply.status_code == 200:
                break
            assert "not ready" in reply.text, reply.text
        assert reply is not None and reply.status_code == 200, reply and reply.text
        sandbox_ids = [
            info.id for info in vm_provider.list() if info.owner_pid == server.process.pid
        ]
        assert len(sandbox_ids) == 1, sandbox_ids
        link = reply.json()["url"]
        port = int(link.split(":")[2].split("/")[0])
        with rfb_session(port, session_cookie_for(link)) as rfb:
            assert rfb.size == (1280, 800)
    finally:
        server.stop()
    for sandbox_id in sandbox_ids:
        assert vm_provider.describe(sandbox_id) is None, f"serve left {sandbox_id} behind"
        assert view_server_pids(sandbox_id) == []
