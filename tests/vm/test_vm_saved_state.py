"""libvirt saved-state files copied under a new domain identity
(:mod:`cubicle.orchestrator.providers.vm.saved_state`; no libvirt needed: files in libvirt's
layout).

The real restore of such a copy, beside its slot's own restore, is
tests/vm/test_vm_sandbox.py::test_a_busy_warm_slot_makes_the_next_sandbox_restore_from_a_copy.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from cubicle.orchestrator.errors import ProviderError
from cubicle.orchestrator.providers.vm.saved_state import (
    HEADER,
    SavedStateError,
    clone_saved_state,
    read_saved_state,
)

XML = (
    "<domain type='qemu'>\n  <name>cubicle-warm-1234abcd-e09396-0</name>\n"
    "  <uuid>b5d71630-8b5d-4a87-96e4-83087f094af8</uuid>\n"
    "  <description>named cubicle-warm-1234abcd-e09396-0</description>\n</domain>\n"
)
COOKIE = b"<cookie>\n  <slirpHelper/>\n</cookie>\n"
STREAM = b"QEVM\x00\x00\x00\x03" + bytes(range(256)) * 3000  # ~770 kB, every byte value
NEW_UUID = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"


def _save_file(
    path: Path,
    *,
    xml: str = XML,
    cookie: bytes | None = COOKIE,
    magic: bytes = b"LibvirtQemudSave",
    version: int = 2,
    compressed: int = 0,
    padding: int = 4096,
) -> Path:
    """A file laid out as libvirt 9's virQEMUSaveDataWrite writes one."""
    data = xml.encode() + b"\0"
    cookie_offset = 0
    if cookie is not None:
        cookie_offset = len(data)
        data += cookie + b"\0"
    data += b"\0" * padding
    fields = [version, len(data), 1, compressed, cookie_offset] + [0] * 14
    path.write_bytes(struct.pack("=16s19I", magic, *fields) + data + STREAM)
    return path


def test_a_copy_names_the_new_domain_and_keeps_every_other_byte(tmp_path: Path) -> None:
    source = _save_file(tmp_path / "state.save")
    target = tmp_path / "copy.save"
    clone_saved_state(source, target, name="cubicle-vm-0123456789", uuid=NEW_UUID)

    copy = read_saved_state(target)
    original = read_saved_state(source)
    assert copy.xml == XML.replace(
        "<name>cubicle-warm-1234abcd-e09396-0</name>", "<name>cubicle-vm-0123456789</name>"
    ).replace("b5d71630-8b5d-4a87-96e4-83087f094af8", NEW_UUID)
    # the name elsewhere in the XML (here a description) is not the domain's name: kept
    assert "<description>named cubicle-warm-1234abcd-e09396-0</description>" in copy.xml
    assert copy.cookie == COOKIE
    assert copy.stream_offset == original.stream_offset  # QEMU's stream where it was
    data = target.read_bytes()
    assert data[copy.stream_offset :] == STREAM
    assert len(data) == source.stat().st_size
    # the header's other fields (was_running, unused) as they were; the cookie found again
    assert copy.fields[:4] == original.fields[:4] and copy.fields[5:] == original.fields[5:]
    assert os.stat(target).st_mode & 0o777 == 0o600


def test_a_state_without_cookie_is_copied_without_one(tmp_path: Path) -> None:
    source = _save_file(tmp_path / "state.save", cookie=None)
    clone_saved_state(source, tmp_path / "copy.save", name="n2", uuid=NEW_UUID)
    copy = read_saved_state(tmp_path / "copy.save")
    assert copy.cookie is None and copy.fields[4] == 0 and "<name>n2</name>" in copy.xml
    assert (tmp_path / "copy.save").read_bytes()[copy.stream_offset :] == STREAM


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ({"magic": b"LibvirtQemudPart"}, "not a complete libvirt save"),
        ({"version": 3}, "save format version 3, not 2"),
        ({"compressed": 1}, "compressed (format 1)"),
        ({"xml": "<domain><uuid>x</uuid></domain>"}, "has no <name> or <uuid>"),
        (
            {"xml": "<domain><name>a</name><uuid>u</uuid><x><name>a</name></x></domain>"},
            "has 2 <name>a</name>",
        ),
        ({"padding": 0, "cookie": None}, "does not fit the saved state's"),
    ],
)
def test_what_cannot_be_copied_is_refused_by_name_and_leaves_no_file(
    tmp_path: Path, layout: dict[str, object], says: str
) -> None:
    source = _save_file(tmp_path / "state.save", **layout)  # type: ignore[arg-type]
    target = tmp_path / "copy.save"
    # a longer name than the original's must fit the padding: with none it cannot
    name = "cubicle-vm-a-much-longer-domain-name-than-before-0123456789"
    with pytest.raises(SavedStateError) as caught:
        clone_saved_state(source, target, name=name, uuid=NEW_UUID)
    assert str(caught.value).startswith(f"{source}: ") and says in str(caught.value)
    assert isinstance(caught.value, ProviderError)  # the one error root
    assert not target.exists()


def test_a_cut_file_is_refused(tmp_path: Path) -> None:
    source = _save_file(tmp_path / "state.save")
    whole = source.read_bytes()
    source.write_bytes(whole[: HEADER.size - 1])
    with pytest.raises(SavedStateError, match="too short for a saved state"):
        read_saved_state(source)
    source.write_bytes(whole[: HEADER.size + 10])
    with pytest.raises(SavedStateError, match="data block is cut short"):
        read_saved_state(source)


def test_an_existing_target_is_never_overwritten(tmp_path: Path) -> None:
    source = _save_file(tmp_path / "state.save")
    target = tmp_path / "copy.save"
    target.write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        clone_saved_state(source, target, name="n", uuid=NEW_UUID)
    assert target.read_bytes() == b"someone else's"
    link = tmp_path / "link.save"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        clone_saved_state(source, link, name="n", uuid=NEW_UUID)
    assert not (tmp_path / "elsewhere").exists()
