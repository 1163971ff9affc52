"""Files in and out and the clipboard of a VM sandbox (the agent on the virtio-serial port): a
Unicode tree with a file of several chunks goes up and comes back identical, and the agent's
clipboard text is read by another X client of the guest (the Docker test,
tests/orchestrator/test_files_docker.py, adds the editor's Ctrl+V / Ctrl+C and the full disk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubicle.orchestrator.providers.vm import VmProvider
from cubicle.orchestrator.sandbox import Sandbox
from tests.guest.test_files_and_clipboard import TEXT, make_tree, tree_of

pytestmark = [pytest.mark.vm, pytest.mark.slow]

READ_AS_ANOTHER_CLIENT = (
    "import sys; from cubicle_guest.clipboard import Clipboard; c = Clipboard(); "
    "sys.stdout.buffer.write(c.get(sys.argv[1])[0].encode()); c.close()"
)


def test_files_and_the_clipboard_through_the_virtio_channel(
    vm_provider: VmProvider, leak_check: list[str], tmp_path: Path
) -> None:
    source = tmp_path / "arbre-树"
    source.mkdir()
    make_tree(source)
    with Sandbox.create("vm", ready_timeout_s=180) as sandbox:
        leak_check.append(sandbox.id)
        sandbox.upload(source, "~")
        back = tmp_path / "back"
        back.mkdir()
        sandbox.download("arbre-树", back)
        assert tree_of(back / "arbre-树") == tree_of(source)
        for selection in ("clipboard", "primary"):
            sandbox.set_clipboard(TEXT, selection)
            with sandbox.connect() as client:
                read = client.exec(["python3", "-c", READ_AS_ANOTHER_CLIENT, selection]).result
            assert read["stdout"] == TEXT, read
            assert sandbox.get_clipboard(selection) == TEXT
