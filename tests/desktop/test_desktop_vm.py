"""The same desktop in a VM guest (libvirt/QEMU; TCG here, so only what differs by backend):
the first screenshot shows the panel, and the panel's browser launcher starts a Chromium whose
renderers run in their own user namespace (no seccomp profile there: the guest kernel's own
unprivileged user namespaces); the VM's desktop is started by the same supervisor as Docker's
(the user's files are private, openbox is restarted: both were not so before it was shared)."""

from __future__ import annotations

import pytest

from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.sandbox import Sandbox
from tests.desktop.checks import (
    assert_browser_launcher_starts_a_sandboxed_chromium,
    assert_chromium_opens_a_page_without_gpu_failures,
    assert_panel_drawn,
    assert_the_start_up_promises,
    screenshot,
)

pytestmark = [pytest.mark.vm, pytest.mark.slow]

BROWSER_TIMEOUT_S = 240.0
"""Chromium takes tens of seconds to start under TCG emulation."""


def test_vm_desktop_shows_the_panel_and_runs_a_sandboxed_chromium_without_gpu_failures(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    with Sandbox.create("vm", ready_timeout_s=300) as sandbox:
        leak_check.append(sandbox.id)
        with sandbox.connect(timeout=60) as client:
            assert_panel_drawn(screenshot(client))
        assert_browser_launcher_starts_a_sandboxed_chromium(sandbox, BROWSER_TIMEOUT_S)
        assert_chromium_opens_a_page_without_gpu_failures(sandbox, BROWSER_TIMEOUT_S)


def test_vm_user_files_are_private_and_openbox_comes_back(
    vm_provider: VmProvider, leak_check: list[str]
) -> None:
    with Sandbox.create("vm", ready_timeout_s=300) as sandbox:
        leak_check.append(sandbox.id)
        assert_the_start_up_promises(sandbox, 120)
