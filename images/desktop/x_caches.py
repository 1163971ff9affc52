"""Caches of the work X programs redo at every desktop start, made once when the image is built.

Run as root inside the guest's root file system (images/guest-setup ``x-caches``, after the
desktop's files and the desktop user exist), with the guest's own Python and X programs:

    python3 /usr/share/cubicle/x_caches.py

(images/desktop/install puts it there, with ``xkbcomp-cached`` beside it.)

It starts one Xvfb (as the desktop's supervisor does) and makes:

- **The X server's compiled keymap.** Xvfb pipes its keymap's source to ``xkbcomp`` at every start
  and waits for it (~70 M instructions: ~0.7 s of a VM's cold boot under TCG). Debian's compiler
  is diverted to ``/usr/bin/xkbcomp.real`` (``dpkg-divert``: a package upgrade updates it there);
  while this Xvfb starts, ``/usr/bin/xkbcomp`` is this script (``--record``), which keeps the
  arguments and the source it is given and the keymap the real compiler makes of them in
  ``/usr/share/cubicle/xkb``; then ``/usr/bin/xkbcomp`` becomes ``xkbcomp-cached``, which hands
  out that keymap for the same call and runs the real compiler for any other.
- **libX11's compose table for C.UTF-8** (the guest's locale). Every Xlib program that opens an
  input method — openbox as it starts, xterm — parses /usr/share/X11/locale/en_US.UTF-8/Compose
  (~5,700 lines, ~50 M instructions: ~0.7 s of openbox's start under TCG) unless libX11's
  system-wide cache ``/var/cache/libx11/compose`` holds it (owned by root, not writable by
  others, newer than the file). libX11 writes a cache only for a user that is not root, into a
  folder of that user's: a program run as the desktop user opens an input method with
  ``XCOMPOSECACHE`` naming a new folder, and the file it writes is installed as root's.

And it takes away **the X server's protocol-name registry** (``/usr/lib/xorg/protocol.txt``,
diverted to ``protocol.txt.unused``): Xvfb reads the whole file again for every extension it
registers (~10 M instructions, a third of its start), only to name requests in its own debug and
audit output; without it those say ``unknown``.

Any step that fails exits 1 with a line naming it, which fails the image's build.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROTOCOL_NAMES = Path("/usr/lib/xorg/protocol.txt")
XKBCOMP = Path("/usr/bin/xkbcomp")
XKBCOMP_REAL = Path("/usr/bin/xkbcomp.real")
XKB_CACHE = Path("/usr/share/cubicle/xkb")
COMPOSE_CACHE = Path("/var/cache/libx11/compose")
DESKTOP_USER = "cubicle"
LOCALE = "C.UTF-8"
LC_ALL = 6  # <locale.h> on Linux
XVFB_READY_S = 60.0


class Failed(Exception):
    """A step that did not happen: the build stops with this message."""


def record(args: list[str]) -> int:
    """``/usr/bin/xkbcomp`` while the keymap is recorded: keep the call (arguments before the
    output, one a line, and standard input), compile it with the real compiler into the cache,
    and give the caller a copy at the output it asked for."""
    if not args:
        return subprocess.run([XKBCOMP_REAL], check=False).returncode
    source = sys.stdin.buffer.read()
    *given, output = args
    XKB_CACHE.mkdir(parents=True, exist_ok=True)
    (XKB_CACHE / "keymap.args").write_text("".join(f"{arg}\n" for arg in given))
    (XKB_CACHE / "keymap.xkb").write_bytes(source)
    compiled = XKB_CACHE / "keymap.xkm"
    done = subprocess.run([XKBCOMP_REAL, *given, str(compiled)], input=source, check=False)
    if done.returncode == 0:
        shutil.copyfile(compiled, output)
    return done.returncode


def open_input_method(display: str) -> int:
    """Open an input method on ``display`` the way openbox does (locale from the environment,
    no modifiers): libX11 parses the locale's compose table and, with ``XCOMPOSECACHE`` set,
    writes its cache there."""
    libc = ctypes.CDLL(None)
    libc.setlocale.restype = ctypes.c_char_p
    libc.setlocale.argtypes = [ctypes.c_int, ctypes.c_char_p]
    if libc.setlocale(LC_ALL, b"") is None:
        print("x_caches: the locale of the environment is not available", file=sys.stderr)
        return 1
    x11 = ctypes.CDLL("libX11.so.6")
    x11.XSetLocaleModifiers.argtypes = [ctypes.c_char_p]
    x11.XSetLocaleModifiers(b"")
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XOpenIM.restype = ctypes.c_void_p
    x11.XOpenIM.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    dpy = x11.XOpenDisplay(display.encode())
    if not dpy:
        print(f"x_caches: cannot open display {display}", file=sys.stderr)
        return 1
    if not x11.XOpenIM(dpy, None, None, None):
        print("x_caches: XOpenIM failed", file=sys.stderr)
        return 1
    return 0


def start_xvfb() -> tuple[subprocess.Popen[bytes], str]:
    """An Xvfb on a free display, once it has reported it (``-displayfd``)."""
    read_fd, write_fd = os.pipe()
    process = subprocess.Popen(
        ["Xvfb", "-nolisten", "tcp", "-extension", "GLX", "-displayfd", str(write_fd)],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    deadline = time.monotonic() + XVFB_READY_S
    said = b""
    with os.fdopen(read_fd, "rb", buffering=0) as reported:
        while not said.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([reported], [], [], remaining)[0]:
                break
            chunk = reported.read(16)
            if not chunk:
                break
            said += chunk
    if not said.strip().isdigit():
        process.kill()
        process.wait()
        raise Failed(f"Xvfb did not report a display (exit status {process.poll()})")
    return process, f":{said.strip().decode()}"


def divert(path: Path, to: Path) -> None:
    """Debian's file at ``path`` moved to ``to``, and kept there by package upgrades (once: an
    image set up again keeps the diversion)."""
    if to.exists():
        return
    subprocess.run(
        ["dpkg-divert", "--quiet", "--local", "--rename", "--divert", str(to), "--add", str(path)],
        check=True,
    )


def install_script(text: str, target: Path) -> None:
    """``text`` as an executable (0755, root's) at ``target``, replaced in one rename."""
    staged = target.with_name(f".{target.name}.new")
    staged.write_text(text)
    staged.chmod(0o755)
    staged.replace(target)


def make_caches() -> None:
    desktop_user = pwd.getpwnam(DESKTOP_USER)
    divert(XKBCOMP, XKBCOMP_REAL)
    divert(PROTOCOL_NAMES, PROTOCOL_NAMES.with_name("protocol.txt.unused"))
    shutil.rmtree(XKB_CACHE, ignore_errors=True)
    python = Path(sys.executable).resolve()
    script = Path(__file__).resolve()
    install_script(f'#!/bin/sh\nexec "{python}" "{script}" --record "$@"\n', XKBCOMP)
    compose_dir = Path(tempfile.mkdtemp(prefix="cubicle-compose-"))  # 0700: libX11 checks
    os.chown(compose_dir, desktop_user.pw_uid, desktop_user.pw_gid)
    try:
        xvfb, display = start_xvfb()
        try:
            opened = subprocess.run(
                [python, script, "--open-input-method", display],
                user=desktop_user.pw_uid,
                group=desktop_user.pw_gid,
                extra_groups=[],
                env={
                    "XCOMPOSECACHE": str(compose_dir),
                    "LANG": LOCALE,
                    "LC_ALL": LOCALE,
                    "HOME": "/nonexistent",
                    "PATH": "/usr/bin:/bin",
                },
                check=False,
            )
        finally:
            xvfb.terminate()
            xvfb.wait()
        if opened.returncode != 0:
            raise Failed("opening an input method as the desktop user failed")
        names = ("keymap.args", "keymap.xkb", "keymap.xkm")
        missing = [name for name in names if not (XKB_CACHE / name).is_file()]
        if missing:
            raise Failed(f"Xvfb's keymap was not recorded ({', '.join(missing)} missing)")
        install_script((script.parent / "xkbcomp-cached").read_text(), XKBCOMP)
        for name in names:
            (XKB_CACHE / name).chmod(0o644)
        written = sorted(compose_dir.iterdir())
        if len(written) != 1:
            raise Failed(f"libX11 wrote {len(written)} compose caches, not one: {written}")
        COMPOSE_CACHE.mkdir(mode=0o755, parents=True, exist_ok=True)
        COMPOSE_CACHE.chmod(0o755)
        target = COMPOSE_CACHE / written[0].name
        shutil.copyfile(written[0], target)  # root's, as libX11 requires of the system cache
        target.chmod(0o644)
    finally:
        shutil.rmtree(compose_dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--record"]:
        return record(argv[1:])
    if argv[:1] == ["--open-input-method"] and len(argv) == 2:
        return open_input_method(argv[1])
    if argv:
        print("usage: x_caches.py (no arguments)", file=sys.stderr)
        return 2
    try:
        make_caches()
    except (Failed, OSError, KeyError, subprocess.CalledProcessError) as exc:
        print(f"x_caches: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
