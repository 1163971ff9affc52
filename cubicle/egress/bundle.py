"""The egress proxy as one file: a zipapp of :mod:`cubicle.egress` that ``python3 -I`` runs
without cubicle installed (the egress container's system Python, the VM host's ``nobody``).

The archive holds this package's sources (:data:`_SOURCES`), the guest's stream format of the VM
channel (:data:`_GUEST_SOURCES`: ``cubicle_guest/__init__.py`` is standard library only) — a
``cubicle/__init__.py`` of its own (empty: the real one is the public API, which needs the whole
of cubicle) and, as its ``__main__.py``, :mod:`cubicle.egress.__main__`. It is deterministic
(sorted entries, a fixed timestamp, fixed modes), so its bytes — and the Docker image's content
hash over them — change exactly when a source does.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path
from typing import Final

__all__ = ["BUNDLE_NAME", "bundle_bytes", "write_bundle"]

BUNDLE_NAME: Final = "egress.pyz"
"""The file name the proxy ships under (a Docker build context's entry, a VM host's copy)."""
_SOURCES: Final = (
    "__init__.py",
    "origins.py",
    "questions.py",
    "targets.py",
    "upstream.py",
    "proxy.py",
)
_GUEST_SOURCES: Final = ("__init__.py", "egress_mux.py")
_STAMP: Final = (2000, 1, 1, 0, 0, 0)
_TOP_INIT: Final = b'"""cubicle\'s egress proxy, bundled alone (cubicle.egress.bundle)."""\n'


def bundle_bytes() -> bytes:
    """The zipapp's bytes, made from the sources of the installed :mod:`cubicle.egress`."""
    here = Path(__file__).resolve().parent
    entries = {f"cubicle/egress/{name}": (here / name).read_bytes() for name in _SOURCES}
    entries["cubicle/__init__.py"] = _TOP_INIT
    guest = here.parent.parent / "cubicle_guest"
    for name in _GUEST_SOURCES:  # the VM channel's stream format (cubicle_guest.egress_mux)
        entries[f"cubicle_guest/{name}"] = (guest / name).read_bytes()
    entries["__main__.py"] = (here / "__main__.py").read_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_STAMP)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, entries[name])
    return out.getvalue()


def write_bundle(folder: Path) -> Path:
    """``folder/egress-<hash>.pyz`` holding :func:`bundle_bytes` (written once per content,
    atomically, mode 0644: the proxy may run as another user); returns its path. ``folder`` must
    exist and be the caller's own (no other user can write it)."""
    data = bundle_bytes()
    path = folder / f"egress-{hashlib.sha256(data).hexdigest()[:16]}.pyz"
    if path.is_file() and path.read_bytes() == data:
        return path
    partial = folder / f".{path.name}.{os.getpid()}.tmp"
    partial.write_bytes(data)
    partial.chmod(0o644)
    partial.replace(path)
    return path
