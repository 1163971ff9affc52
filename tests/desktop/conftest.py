"""The desktop tests use the VM backend's fixtures (``vm_provider``: the VM image built once per
run and pinned; ``leak_check``: nothing of the sandboxes left) as the tests in tests/vm do."""

from tests.vm.conftest import leak_check, vm_provider

__all__ = ["leak_check", "vm_provider"]
