"""``python -m cubicle_guest`` / ``cubicle-agent``: run the in-guest agent.

    python -m cubicle_guest --listen unix:/run/cubicle/agent.sock
    python -m cubicle_guest --listen virtio:/dev/virtio-ports/org.cubicle.agent
    python -m cubicle_guest --stdio

The X display comes from ``$DISPLAY`` (or ``--display``). Runs as the unprivileged desktop user.
SIGTERM/SIGINT stop it cleanly: held keys released, remapped keycodes restored, socket removed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from types import FrameType

# imported at start (Xlib, Pillow, mss come with these), not on the first request: a VM guest
# would otherwise pay ~2 s on its first action
from cubicle_guest import transport
from cubicle_guest.errors import GuestError
from cubicle_guest.server import Agent

log = logging.getLogger("guest")


class _Stop(BaseException):
    """Raised in the main thread by SIGTERM/SIGINT to unwind into the cleanup."""


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    # one stop is enough: a second signal must not interrupt the cleanup it started
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise _Stop(signal.Signals(signum).name)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m cubicle_guest", description=__doc__.split("\n")[0]
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--listen",
        metavar="unix:PATH|virtio:DEVICE",
        help="unix socket path or virtio-serial port to serve on",
    )
    where.add_argument("--stdio", action="store_true", help="serve on stdin/stdout")
    parser.add_argument("--display", help="X display (default: $DISPLAY)")
    parser.add_argument(
        "--socket-mode",
        type=lambda v: int(v, 8),
        default=None,
        help="permission bits of the unix socket file, octal (default: umask)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.add_argument(
        "--wait-fd",
        type=int,
        default=None,
        metavar="FD",
        help="before opening the display, wait until this inherited file descriptor reads EOF "
        "(a desktop starter closes it once the desktop is drawn): the imports overlap its start",
    )
    args = parser.parse_args(argv)
    if args.listen and not args.listen.startswith(("unix:", "virtio:")):
        parser.error(f"--listen must be unix:PATH or virtio:DEVICE, got {args.listen!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _configure_logging(args)
    display_name = _display_of(args)
    if not display_name:
        log.error("no X display: set DISPLAY or pass --display")
        return 2
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    if args.wait_fd is not None:
        try:
            _wait_for_eof(args.wait_fd)
        except _Stop:
            return 0
    try:
        agent = Agent(display_name)
    except GuestError as exc:
        log.error("%s", exc)
        return 1
    return _serve(args, agent)


class Prepared:
    """An agent built by :func:`prepare` (its X connections open), not serving yet.

    The caller owns it: :func:`serve` it, or :meth:`close` it.
    """

    def __init__(self, args: argparse.Namespace, agent: Agent) -> None:
        self.args = args
        self.agent = agent

    def close(self) -> None:
        self.agent.close()


def prepare(argv: list[str]) -> Prepared:
    """Parse ``argv`` (as :func:`main`'s; ``--wait-fd`` refused), set up logging and build the
    agent on the display: everything before serving, so a desktop starter can do it on another
    thread while the desktop starts (it installs no signal handler, which only the main thread
    may). The X server must be up; the window manager and panel need not be.

    :raises GuestError: ``x11_error`` if the display cannot be used (no display named, cannot be
        opened, no XTEST).
    :raises ValueError: for ``--wait-fd``.
    :raises SystemExit: for bad arguments, as argparse does.
    """
    args = parse_args(argv)
    if args.wait_fd is not None:
        raise ValueError("prepare() takes no --wait-fd: its caller does the waiting")
    _configure_logging(args)
    display_name = _display_of(args)
    if not display_name:
        raise GuestError("x11_error", "no X display: set DISPLAY or pass --display")
    return Prepared(args, Agent(display_name))


def serve(prepared: Prepared) -> int:
    """Serve a :func:`prepare`d agent until SIGTERM/SIGINT or a transport error, then close it.

    Call on the main thread (it installs the signal handlers). Returns the exit status.
    """
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    return _serve(prepared.args, prepared.agent)


def _display_of(args: argparse.Namespace) -> str | None:
    """The X display to use: ``--display``, else ``$DISPLAY``; None when neither names one."""
    return args.display or os.environ.get("DISPLAY")


def _configure_logging(args: argparse.Namespace) -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level,
        format="%(asctime)s cubicle-agent[%(process)d] %(levelname)s %(message)s",
    )


def _serve(args: argparse.Namespace, agent: Agent) -> int:
    """Serve ``agent`` on ``args``' transport; closes it whatever happens."""
    listener: transport.UnixListener | None = None
    try:
        if args.stdio:
            transport.serve_stdio(agent)
        elif args.listen.startswith("unix:"):
            listener = transport.UnixListener(agent, args.listen[len("unix:") :], args.socket_mode)
            listener.serve_forever()
        else:
            transport.serve_virtio(agent, args.listen[len("virtio:") :])
    except _Stop as stop:
        log.info("stopping on %s", stop)
    except GuestError as exc:
        log.error("%s", exc)
        return 1
    finally:
        if listener is not None:
            listener.close()
        agent.close()
    return 0


def _wait_for_eof(fd: int) -> None:
    """Block until ``fd`` reads EOF (its writer closed it or exited), then close it."""
    try:
        while os.read(fd, 512):
            pass
    except OSError as exc:
        log.warning("--wait-fd %d: %s; going on", fd, exc)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
