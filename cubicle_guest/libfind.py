"""Shared-library lookups of the agent's process answered from one ``ldconfig -p`` read.

:func:`ctypes.util.find_library` starts ``/sbin/ldconfig -p`` and parses the whole library cache
on every call. mss asks for eight libraries as the agent starts (X11, Xfixes, Xrandr, xcb and
four xcb extensions): eight processes, ~2 ms each natively and ~50 ms each in a VM guest under
TCG, on the path to the agent's first answer. :func:`install` makes every later lookup in this
process read the cache once and search it as :mod:`ctypes.util` does (the same pattern, the same
ABI tag); a name it does not find there goes to the original function, whose other ways
(gcc, ld) stay as they were.
"""

from __future__ import annotations

import ctypes.util
import os
import re
import struct
import subprocess
import threading
from collections.abc import Callable

__all__ = ["cached_find_library", "install"]

_ABI_TAGS = {
    "x86_64-64": "libc6,x86-64",
    "ppc64-64": "libc6,64bit",
    "sparc64-64": "libc6,64bit",
    "s390x-64": "libc6,64bit",
    "ia64-64": "libc6,IA-64",
}
"""ldconfig's ABI tag of this machine's libraries, as ctypes.util names them (else ``libc6``)."""

_original: Callable[[str], str | None] = ctypes.util.find_library
_lock = threading.Lock()
_cache: bytes | None = None


def _abi_tag() -> str:
    bits = "32" if struct.calcsize("l") == 4 else "64"
    return _ABI_TAGS.get(f"{os.uname().machine}-{bits}", "libc6")


def _ldconfig_cache() -> bytes:
    """``ldconfig -p``'s output, read once per process (``b""`` if it cannot run)."""
    global _cache
    with _lock:
        if _cache is None:
            try:
                _cache = subprocess.run(
                    ["/sbin/ldconfig", "-p"],
                    stdin=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    env={"LC_ALL": "C", "LANG": "C"},
                    check=False,
                ).stdout
            except OSError:
                _cache = b""
        return _cache


def cached_find_library(name: str) -> str | None:
    """The soname :func:`ctypes.util.find_library` gives for ``name`` (``"xcb"`` ->
    ``"libxcb.so.1"``), from the one cached ``ldconfig -p`` read; the original lookup when the
    cache has no match."""
    pattern = os.fsencode(rf"\s+(lib{re.escape(name)}\.[^\s]+)\s+\({_abi_tag()}")
    found = re.search(pattern, _ldconfig_cache())
    if found:
        return os.fsdecode(found.group(1))
    return _original(name)


def install() -> None:
    """Make :func:`ctypes.util.find_library` this module's for the rest of the process. Call it
    before importing a module that binds the name at import (``from ctypes.util import
    find_library``, as mss's Xlib backend does)."""
    ctypes.util.find_library = cached_find_library
