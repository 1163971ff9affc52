"""The libvirt/QEMU VM backend (``--backend vm``): :class:`VmProvider`.

Modules, one job each (imports only go down this list, never back up):

- :mod:`.provider` — :class:`VmProvider`: create (cold or warm), destroy, list, gc.
- :mod:`.pool_members` — warm-pool members (listing, the atomic claim, the drain;
  ``VmProvider.pool_members``); it works through the :class:`~.pool_members.VmHost` protocol.
- :mod:`.warm_start` — restore a sandbox from a saved golden state; boot and save those states.
  It works through the :class:`~.warm_start.WarmHost` protocol the provider implements.
- :mod:`.warm` — the saved golden states on disk (slots, validity, files).
- :mod:`.network` — ``allow:``/``open`` networking: libvirt network, firewall rules, egress proxy.
- :mod:`.domain` — the domain XML (plan → XML, labels in ``<metadata>``), the accelerator probe.
- :mod:`.virt` — the libvirt connection, error mapping, "no such domain", named domain states.
- :mod:`.files` — who may touch the backend's files (root and QEMU's group).
- :mod:`.image` — the image's content hash, a built image, overlays; :mod:`.build` builds it.
- :mod:`.run_marks` — the ready, pool-member and claim marks of a run folder.
- :mod:`.naming` — sandbox ids.
"""

from __future__ import annotations

from cubicle.orchestrator.providers.vm.provider import VmProvider

__all__ = ["VmProvider"]
