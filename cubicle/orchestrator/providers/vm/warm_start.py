"""Warm-start orchestration of the VM backend: restore a sandbox from a saved golden state,
and boot + save those states (the slots and their files are
:mod:`cubicle.orchestrator.providers.vm.warm`).

:class:`WarmStarter` works through a :class:`WarmHost` — the public surface of the backend it needs
(libvirt connection, labels, run directories, domain plans, readiness, destroy), which
:class:`~cubicle.orchestrator.providers.vm.provider.VmProvider` implements; this module never
imports the provider. The provider calls :meth:`WarmStarter.create` first for ``none``-network
sandboxes and cold-boots when it returns None. A warm sandbox's clean-up is the provider's
``destroy``, like any other sandbox's.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from cubicle.orchestrator.errors import ProviderError, SandboxStartError
from cubicle.orchestrator.provider import Progress, SandboxInfo, SandboxSpec
from cubicle.orchestrator.providers.vm import image as vm_image
from cubicle.orchestrator.providers.vm.domain import DomainPlan, domain_xml, retarget_saved_xml
from cubicle.orchestrator.providers.vm.files import FileAccess
from cubicle.orchestrator.providers.vm.saved_state import SavedStateError, clone_saved_state
from cubicle.orchestrator.providers.vm.virt import libvirt_module, map_libvirt_errors, unless_gone
from cubicle.orchestrator.providers.vm.warm import WarmKey, WarmSlot, slots_for

__all__ = ["GOLDEN_TTL_S", "WarmHost", "WarmStarter"]

log = logging.getLogger(__name__)

GOLDEN_TTL_S = 900.0
"""Expiry of a golden guest being booted and saved (gc removes one left by a killed process)."""
GOLDEN_ID_PREFIX = "vm-golden"
"""Sandbox ids of golden guests (``vm-`` like every VM sandbox id, so gc and destroy know them)."""


class SlotBusy(ProviderError):
    """A saved state's domain runs already (its one live restore)."""


class SlotUnusable(ProviderError):
    """libvirt refused to restore a saved state (for another reason than a live domain)."""


class WarmHost(Protocol):
    """What :class:`WarmStarter` needs of the VM backend (``VmProvider`` implements it)."""

    home: Path
    warm_slots: int
    image: str | None

    @property
    def conn(self) -> Any:
        """The libvirt connection."""

    @property
    def files(self) -> FileAccess:
        """Who may touch the backend's files."""

    def warm_key(self, spec: SandboxSpec) -> WarmKey:
        """The guest shape a saved state must match for ``spec``."""

    def validate(self, spec: SandboxSpec) -> None:
        """Refuse a spec this backend cannot create (ConfigError)."""

    def labels_for(
        self,
        sandbox_id: str,
        spec: SandboxSpec,
        image: vm_image.VmImage,
        start: str,
        ttl_s: float | None = None,
    ) -> dict[str, str]:
        """The sandbox's labels (domain metadata and ``labels.json``)."""

    def run_dir(self, sandbox_id: str) -> Path:
        """The sandbox's run folder (may not exist)."""

    def new_run_dir(self, sandbox_id: str, labels: dict[str, str]) -> Path:
        """Create the run folder with its labels."""

    def write_labels(self, run: Path, labels: dict[str, str]) -> None:
        """Rewrite the run folder's ``labels.json``."""

    def seal_socket(self, run: Path) -> None:
        """Restrict the agent socket QEMU created."""

    def plan(
        self,
        name: str,
        *,
        run: Path,
        overlay: Path,
        spec: SandboxSpec,
        image: vm_image.VmImage,
        labels: dict[str, str],
    ) -> DomainPlan:
        """The domain to define for a sandbox (no NIC)."""

    def sandbox_info(self, dom: Any, labels: dict[str, str]) -> SandboxInfo | None:
        """The sandbox of a domain."""

    def wait_painted(self, sandbox_id: str, plan: DomainPlan) -> None:
        """Wait until the agent answers, the desktop is drawn and the guest of ``plan`` runs
        with the vCPUs it keeps (SandboxStartError)."""

    def destroy(self, sandbox_id: str) -> None:
        """Remove the sandbox and everything created for it."""


class WarmStarter:
    """Restores warm sandboxes and saves golden states for one VM backend (a :class:`WarmHost`)."""

    def __init__(self, provider: WarmHost) -> None:
        self.provider = provider

    def create(
        self, sandbox_id: str, spec: SandboxSpec, image: vm_image.VmImage
    ) -> SandboxInfo | None:
        """Restore from the first free valid slot; make slot 0 first if no slot exists yet.

        Returns None (→ cold boot) when every valid slot is in use; a slot whose state libvirt
        cannot restore (and whose domain is not running) is removed.
        """
        slots = slots_for(
            self.provider.home, image, self.provider.warm_key(spec), self.provider.warm_slots
        )
        if not any(slot.valid_for(image) for slot in slots):
            try:
                self.make_golden(slots[0], spec, image)
            except (ProviderError, SandboxStartError) as exc:
                # another process is making it, or it failed: cold boot this one
                log.warning("no warm state for %s (%s); cold boot", sandbox_id, exc)
                return None
        for slot in slots:
            if not slot.valid_for(image) or self.slot_live(slot):
                continue  # (a slot taken after this look fails its restore as busy: next one)
            try:
                return self.restore(sandbox_id, spec, image, slot, state=slot.state, name=slot.name)
            except SlotBusy:
                continue
            except SlotUnusable as exc:
                log.info("restoring %s from %s failed: %s", sandbox_id, slot.name, exc)
                if not self.slot_live(slot):
                    # not "in use" but unusable (e.g. QEMU/libvirt upgraded since the save):
                    # drop the slot and cold-boot; the next warm_up/create makes it again
                    slot.reset()
        source = next((slot for slot in slots if slot.valid_for(image)), None)
        if source is not None:
            info = self.restore_copy(sandbox_id, spec, image, source)
            if info is not None:
                return info
        shutil.rmtree(
            self.provider.run_dir(sandbox_id), ignore_errors=True
        )  # the cold boot starts afresh
        return None

    def restore_copy(
        self, sandbox_id: str, spec: SandboxSpec, image: vm_image.VmImage, slot: WarmSlot
    ) -> SandboxInfo | None:
        """Restore from a copy of ``slot``'s state made for this sandbox (every slot is busy):
        the copy names the domain ``cubicle-<id>`` with a new UUID, so it runs beside the slot's
        own restore; it is removed once QEMU has read it. None (→ cold boot) when the copy
        cannot be made or restored."""
        start = f"warm-copy:{slot.index}"
        run = self.provider.run_dir(sandbox_id)
        if not run.exists():
            self.provider.new_run_dir(
                sandbox_id, self.provider.labels_for(sandbox_id, spec, image, start)
            )
        copy = run / "state.save"
        copy.unlink(missing_ok=True)
        name = f"cubicle-{sandbox_id}"
        try:
            clone_saved_state(slot.state, copy, name=name, uuid=str(uuid.uuid4()))
            self.provider.files.restrict(copy, 0o440)
            return self.restore(sandbox_id, spec, image, slot, state=copy, name=name, start=start)
        except (SavedStateError, OSError, SlotBusy, SlotUnusable) as exc:
            log.warning("no copy of %s for %s (%s); cold boot", slot.name, sandbox_id, exc)
            return None
        finally:
            copy.unlink(missing_ok=True)

    def restore(
        self,
        sandbox_id: str,
        spec: SandboxSpec,
        image: vm_image.VmImage,
        slot: WarmSlot,
        *,
        state: Path,
        name: str,
        start: str | None = None,
    ) -> SandboxInfo:
        """Restore the domain ``name`` saved in ``state`` (the slot's or a copy of it) onto a new
        overlay of the slot's golden disk, as sandbox ``sandbox_id``.

        :raises SlotBusy: a domain of that name runs (the slot's other restore).
        :raises SlotUnusable: libvirt refused the state for another reason.
        """
        libvirt = libvirt_module()
        labels = self.provider.labels_for(sandbox_id, spec, image, start or f"warm:{slot.index}")
        run = self.provider.run_dir(sandbox_id)
        if not run.exists():
            self.provider.new_run_dir(sandbox_id, labels)
        files = self.provider.files
        files.directories(self.provider.home, slot.directory)  # slots saved by older versions
        slot.freeze(files)
        overlay = run / "overlay.qcow2"
        overlay.unlink(missing_ok=True)
        vm_image.create_overlay(slot.golden, overlay, files)
        try:
            saved = self.provider.conn.saveImageGetXMLDesc(str(state), 0)
            xml = retarget_saved_xml(
                saved,
                overlay=overlay,
                agent_socket=run / "agent.sock",
                console_log=run / "console.log",
                labels=labels,
            )
            self.provider.conn.restoreFlags(str(state), xml, libvirt.VIR_DOMAIN_SAVE_RUNNING)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_OPERATION_INVALID:
                raise SlotBusy(str(exc)) from None
            raise SlotUnusable(str(exc)) from None
        self.provider.write_labels(run, labels)
        self.provider.seal_socket(run)
        with map_libvirt_errors(f"look up the restored domain {name}"):
            dom = self.provider.conn.lookupByName(name)
        info = self.provider.sandbox_info(dom, labels)
        assert info is not None  # our own labels parse
        return info

    def slot_live(self, slot: WarmSlot) -> bool:
        """Whether the slot's domain (its one live restore) is running now."""
        return (
            unless_gone(functools.partial(self.provider.conn.lookupByName, slot.name)) is not None
        )

    def warm_up(
        self,
        spec: SandboxSpec,
        *,
        slots: int | None = None,
        progress: Progress | None = None,
        verify: Callable[[str], None] | None = None,
    ) -> int:
        """Make sure ``slots`` (default: all) golden states exist for ``spec``'s shape.

        :param verify: called with a golden guest's sandbox id once its desktop is drawn, before
            it is saved (:meth:`make_golden`); what it raises fails the warm-up.
        :return: how many valid golden states this shape now has.
        """
        self.provider.validate(spec)
        image = vm_image.load_image(spec.image or self.provider.image, self.provider.home)
        say = progress or (lambda _line: None)
        wanted = slots_for(
            self.provider.home, image, self.provider.warm_key(spec), self.provider.warm_slots
        )[: slots or self.provider.warm_slots]
        for slot in wanted:
            if slot.valid_for(image):
                continue
            started = time.monotonic()
            first = wanted[0]
            if slot is not first and first.valid_for(image):
                self.copy_slot(first, slot, spec, image)
                say(f"warm state: {slot.name} copied from {first.name}")
                continue
            say(f"warm state: booting and saving golden guest {slot.name}")
            self.make_golden(slot, spec, image, verify=verify)
            say(f"warm state: {slot.name} saved in {time.monotonic() - started:.0f} s")
        return sum(slot.valid_for(image) for slot in wanted)

    def copy_slot(
        self, source: WarmSlot, slot: WarmSlot, spec: SandboxSpec, image: vm_image.VmImage
    ) -> None:
        """Make ``slot`` a copy of the valid ``source`` (no boot: ~0.1 s): the same golden disk
        (a hard link, both read-only) and its state renamed to ``slot``'s domain, new UUID."""
        if self.slot_live(slot):
            raise ProviderError(
                f"warm slot {slot.name} is running: another process is saving it or uses it"
            )
        slot.reset()
        self.provider.files.directories(self.provider.home, slot.directory)
        new_uuid = str(uuid.uuid4())
        try:
            os.link(source.golden, slot.golden)
            clone_saved_state(source.state, slot.state, name=slot.name, uuid=new_uuid)
            slot.commit(image, self.provider.warm_key(spec), new_uuid, self.provider.files)
        except OSError as exc:
            slot.reset()
            raise ProviderError(
                f"cannot copy warm slot {source.name} to {slot.name}: {exc}"
            ) from None
        except BaseException:
            slot.reset()
            raise

    def make_golden(
        self,
        slot: WarmSlot,
        spec: SandboxSpec,
        image: vm_image.VmImage,
        *,
        verify: Callable[[str], None] | None = None,
    ) -> None:
        """Cold-boot the slot's domain, wait for a painted desktop, ``verify(sandbox id)`` the
        guest if given, save it (which stops it). Whatever fails removes the guest and the
        slot."""
        golden_id = GOLDEN_ID_PREFIX + secrets.token_hex(3)
        golden_spec = SandboxSpec(
            screen=spec.screen,
            memory_mb=spec.memory_mb,
            cpus=spec.cpus,
            pids_limit=spec.pids_limit,
            image=spec.image,
        )
        labels = self.provider.labels_for(
            golden_id, golden_spec, image, "golden", ttl_s=GOLDEN_TTL_S
        )
        if self.slot_live(slot):
            raise ProviderError(
                f"warm slot {slot.name} is running: another process is saving it or uses it"
            )
        slot.reset()
        self.provider.home.mkdir(parents=True, exist_ok=True)
        self.provider.files.directories(self.provider.home, slot.directory)
        run = self.provider.new_run_dir(golden_id, labels)
        try:
            vm_image.create_overlay(image.base, slot.golden, self.provider.files)
            plan = self.provider.plan(
                slot.name,
                run=run,
                overlay=slot.golden,
                spec=golden_spec,
                image=image,
                labels=labels,
            )
            with map_libvirt_errors(f"start the golden domain {slot.name}"):
                dom = self.provider.conn.createXML(domain_xml(plan), 0)
            self.provider.wait_painted(golden_id, plan)
            if verify is not None:
                verify(golden_id)
            uuid = dom.UUIDString()
            with map_libvirt_errors(f"save the golden domain {slot.name}"):
                dom.save(str(slot.state))
            slot.commit(image, self.provider.warm_key(spec), uuid, self.provider.files)
        except BaseException:
            self.provider.destroy(golden_id)
            slot.reset()
            raise
        shutil.rmtree(run, ignore_errors=True)
