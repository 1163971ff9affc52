"""cubicle_guest/libfind.py: the agent's shared-library lookups from one ``ldconfig -p`` read.

The answers must be ctypes.util.find_library's, name for name (mss loads what they name), and
the cache must be read once per process however many libraries are asked for."""

from __future__ import annotations

import ctypes.util
import re
import subprocess
import sys

import pytest

from cubicle_guest import libfind

MSS_LIBRARIES = [
    "X11",
    "Xfixes",
    "Xrandr",
    "xcb",
    "xcb-randr",
    "xcb-render",
    "xcb-shm",
    "xcb-xfixes",
]


def _cached_names() -> list[str]:
    """Library names (``libNAME.so...`` -> ``NAME``) in this host's ldconfig cache, 1 in 10."""
    listing = subprocess.run(
        ["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=True
    ).stdout
    names = sorted(set(re.findall(r"^\s+lib([^\s]+?)\.so", listing, re.M)))
    return names[::10]


@pytest.mark.parametrize("name", [*MSS_LIBRARIES, "c", "m", "no-such-library-here"])
def test_the_answer_is_find_librarys(name: str) -> None:
    assert libfind.cached_find_library(name) == libfind._original(name)


def test_every_tenth_library_of_the_cache_gets_find_librarys_answer() -> None:
    names = _cached_names()
    assert len(names) > 10, names
    differ = {
        name: (libfind.cached_find_library(name), libfind._original(name))
        for name in names
        if libfind.cached_find_library(name) != libfind._original(name)
    }
    assert differ == {}


_COUNT_LDCONFIG = """
import sys
runs = []
def count(event, args):
    if event == "subprocess.Popen" and "ldconfig" in str(args[0]):
        runs.append(args)
sys.addaudithook(count)
import ctypes.util
if sys.argv[1] == "installed":
    from cubicle_guest import libfind
    libfind.install()
found = [ctypes.util.find_library(name) for name in sys.argv[2:]]
print(len(runs), all(found))
"""


@pytest.mark.parametrize(("how", "runs"), [("installed", 1), ("plain", len(MSS_LIBRARIES))])
def test_installed_the_cache_is_read_once_for_every_library(how: str, runs: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_LDCONFIG, how, *MSS_LIBRARIES],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == [str(runs), "True"], done.stderr


def test_install_replaces_ctypes_find_library_for_the_process() -> None:
    before = ctypes.util.find_library
    try:
        libfind.install()
        assert ctypes.util.find_library is libfind.cached_find_library
    finally:
        ctypes.util.find_library = before
