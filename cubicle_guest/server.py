"""The agent: answers protocol requests (:mod:`cubicle_guest.protocol`) with X11 actions and
helpers.

:class:`Agent` turns one request frame into one reply frame and never raises for bad input: a
malformed frame, an unknown op, bad arguments or a failing action all become a structured error
reply, and the agent keeps serving. The transports (:mod:`cubicle_guest.transport`) feed it frames.

Logs go to stderr and name the op, the request id, the outcome and the duration; they never
contain typed text, key names, file contents, clipboard text or screenshots.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from cubicle_guest import __version__, protocol, system
from cubicle_guest.changes import ChangeTracker, open_tracker
from cubicle_guest.clipboard import Clipboard
from cubicle_guest.errors import GuestError, ProtocolError
from cubicle_guest.geometry import Rect
from cubicle_guest.input_log import InputLog
from cubicle_guest.keys import is_typing_key
from cubicle_guest.launches import CpuWatch, pointer_programs, window_manager_pid
from cubicle_guest.machine import MachineSample, measure_speed, open_machine_load
from cubicle_guest.screen import Screen
from cubicle_guest.signin_ops import SigninOps
from cubicle_guest.transfer import Transfers
from cubicle_guest.windows import active_window, list_windows, window_pid
from cubicle_guest.xinput import XInput

__all__ = ["Agent"]

log = logging.getLogger("cubicle_guest.server")

Handler = Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]

SETTLE_METHOD_ENV = "CUBICLE_SETTLE_METHOD"
"""``poll`` forces the frame-polling change tracker (for tests and X servers whose DAMAGE
misbehaves); anything else uses DAMAGE when the server has it."""
FRAME_CACHE_ENV = "CUBICLE_FRAME_CACHE"
"""``off`` encodes every full-screen PNG whole (today's path before the frame cache; for
benchmarks and X servers whose DAMAGE misbehaves); anything else re-encodes only what changed
(:mod:`cubicle_guest.framecache`) when the server has DAMAGE."""
DEFAULT_SETTLE_OP_QUIET_MS = 300
DEFAULT_SETTLE_OP_TIMEOUT_MS = 5000
MAX_SETTLE_OP_TIMEOUT_MS = 60_000


class Agent:
    """Serve the protocol's operations on one X display.

    :param display_name: X display; ``None`` uses ``$DISPLAY``.
    :param force_poll: track screen changes by polling frames even when DAMAGE is there
        (default: ``$CUBICLE_SETTLE_METHOD == "poll"``).
    :raises GuestError: ``x11_error`` if the display cannot be opened.

    The caller owns the agent and calls :meth:`close` (restores remapped keycodes, releases
    anything held). :meth:`handle` is thread-safe; X actions are serialized inside.
    """

    def __init__(self, display_name: str | None = None, *, force_poll: bool | None = None) -> None:
        self.started = time.monotonic()
        self.input_log = InputLog()
        """Every input request, logged before it is injected (:mod:`cubicle_guest.input_log`)."""
        self._display_name = display_name
        self._wm_pid: int | None = None
        self._idle_from: tuple[float, dict[int, int]] | None = None
        """The CPU of the programs the last settled action watched, when it ended."""
        self.machine = open_machine_load()
        """The whole guest's activity (a VM guest; ``None`` elsewhere: :mod:`.machine`)."""
        self._machine_from: MachineSample | None = None
        """The machine when the last settled action ended."""
        self.speed = measure_speed()
        """How many times slower than the reference this machine runs (measured at start)."""
        self.input = XInput(display_name)
        try:
            self.screen = Screen(
                display_name,
                self.input.width,
                self.input.height,
                incremental=os.environ.get(FRAME_CACHE_ENV) != "off",
            )
        except BaseException:
            self.input.close()
            raise
        if force_poll is None:
            force_poll = os.environ.get(SETTLE_METHOD_ENV) == "poll"
        try:
            self.changes: ChangeTracker = open_tracker(
                display_name,
                lambda rect: self.screen.grab_raw(None if rect is None else rect.as_region()),
                force_poll=force_poll,
            )
        except BaseException:
            self.screen.close()
            self.input.close()
            raise
        self.signin = SigninOps()
        """The agent's browser on a DevTools pipe and its sign-in forms."""
        self._handlers: dict[str, Handler] = {
            "hello": self._hello,
            "info": self._info,
            "click": self._click,
            "double_click": self._double_click,
            "move": self._move,
            "drag": self._drag,
            "scroll": self._scroll,
            "keypress": self._keypress,
            "type": self._type,
            "wait": self._wait,
            "mouse_down": self._mouse_down,
            "mouse_up": self._mouse_up,
            "hold_keys": self._hold_keys,
            "pointer": self._pointer,
            "screenshot": self._screenshot,
            "settle": self._settle,
            "windows": self._windows,
            "exec": self._exec,
            "read_file": self._read_file,
            "write_file": self._write_file,
            "release_all": self._release_all,
            "file_stat": lambda a, _b: (self.transfers.stat(a["path"]), b""),
            "put_begin": lambda a, _b: (
                self.transfers.begin(a["path"], a["kind"], a["mode"], a["mtime_ns"], a.get("size")),
                b"",
            ),
            "put_mkdir": lambda a, _b: (
                self.transfers.mkdir(a["handle"], a["name"], a["mode"], a["mtime_ns"]),
                b"",
            ),
            "put_chunk": self._put_chunk,
            "put_commit": lambda a, _b: (self.transfers.commit(a["handle"]), b""),
            "put_abort": lambda a, _b: (self.transfers.abort(a["handle"]), b""),
            "get_list": lambda a, _b: (self.transfers.listing(a["path"]), b""),
            "get_chunk": self._get_chunk,
            "clipboard_get": self._clipboard_get,
            "clipboard_set": self._clipboard_set,
            "browser_start": lambda args, _blob: (self.signin.browser_start(args), b""),
            "browser_stop": lambda args, _blob: (self.signin.browser_stop(args), b""),
            "signin_find": lambda args, _blob: (self.signin.signin_find(args), b""),
            "signin_fill": lambda args, _blob: (self.signin.signin_fill(args), b""),
        }
        missing = set(protocol.OPS) - set(self._handlers)
        if missing:
            raise AssertionError(f"agent has no handler for protocol ops {sorted(missing)}")
        self._closed = threading.Event()
        self.transfers = Transfers()
        self._clipboard: Clipboard | None = None
        self._clipboard_lock = threading.Lock()

    def close(self) -> None:
        """Release held input, restore keycodes, close X connections (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self.transfers.close()
        with self._clipboard_lock:
            if self._clipboard is not None:
                self._clipboard.close()
        self.signin.close()
        self.changes.close()
        self.input.close()
        self.screen.close()

    # -- entry points ---------------------------------------------------------------------

    def handle_item(self, item: protocol.Frame | ProtocolError) -> bytes:
        """One decoded item (a frame, or the error of a broken one) → one encoded reply frame."""
        if isinstance(item, ProtocolError):
            log.info("bad frame: %s", item)
            return protocol.encode_frame(protocol.error_reply(None, "bad_frame", str(item)))
        message, blob = self.handle(item)
        try:
            return protocol.encode_frame(message, blob)
        except ProtocolError as exc:
            return protocol.encode_frame(
                protocol.error_reply(message.get("id"), "too_large", str(exc))
            )

    def handle(self, frame: protocol.Frame) -> tuple[dict[str, Any], bytes]:
        """Answer one request frame: (reply message, reply blob). Never raises for bad input."""
        message = frame.message
        request_id = message.get("id")
        op = message.get("op")
        op_name = op if isinstance(op, str) and op in protocol.OPS else "?"
        start = time.perf_counter()
        try:
            if not isinstance(request_id, (int, str)) or isinstance(request_id, bool):
                request_id = None
                raise GuestError(
                    "bad_request",
                    f"'id' must be an integer or a string, got {type(message.get('id')).__name__}",
                )
            extra = sorted(set(message) - {"id", "op", "args"})
            if extra:
                raise GuestError(
                    "bad_request",
                    f"unknown request field(s) {', '.join(extra)}; a request has id, op, args",
                )
            args = protocol.validate_args(op, message.get("args", {}), frame.blob)
            self.input_log.append(op_name, args)  # before the input: proof it happened once
            result, blob = self._handlers[op_name](args, frame.blob)
        except GuestError as exc:
            log.info(
                "op=%s id=%r error=%s (%.1f ms)",
                op_name,
                request_id,
                exc.code,
                (time.perf_counter() - start) * 1000,
            )
            return protocol.error_reply(request_id, exc.code, exc.reason, exc.details), b""
        except Exception as exc:  # a bug: answer it, log it, keep serving
            log.exception("op=%s id=%r internal error", op_name, request_id)
            return protocol.error_reply(
                request_id,
                "internal",
                f"{op_name} failed inside the agent: {type(exc).__name__}: {exc}",
            ), b""
        log.debug(
            "op=%s id=%r ok (%.1f ms)", op_name, request_id, (time.perf_counter() - start) * 1000
        )
        return protocol.ok_reply(request_id, result), blob

    # -- handlers -------------------------------------------------------------------------

    def _describe(self) -> dict[str, Any]:
        return {
            "protocol": protocol.PROTOCOL_VERSION,
            "agent_version": __version__,
            "screen": self.input.screen_size,
            "ops": sorted(protocol.OPS),
            "display": self.input.display_name,
            "pid": os.getpid(),
            "features": list(protocol.FEATURES),
            "settle_method": self.changes.method,
            "settle_signals": "machine" if self.machine is not None else "programs",
            "speed": self.speed,
            "screenshot_method": "whole" if self.screen.frame_cache is None else "incremental",
        }

    def _hello(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        if args["protocol"] != protocol.PROTOCOL_VERSION:
            raise GuestError(
                "version_mismatch",
                f"client speaks protocol {args['protocol']}, this agent speaks "
                f"{protocol.PROTOCOL_VERSION}",
                details={"protocol": protocol.PROTOCOL_VERSION},
            )
        log.info("hello from %s", args.get("client") or "a client")
        return self._describe(), b""

    def _info(self, _args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return {
            **self._describe(),
            "keysyms_remapped": self.input.keysyms_remapped,
            "uptime_ms": round((time.monotonic() - self.started) * 1000),
        }, b""

    def _act(
        self,
        args: dict[str, Any],
        perform: Callable[[], Mapping[str, Any] | None],
        *,
        typing: bool = False,
        pointer: bool = False,
    ) -> tuple[dict[str, Any], bytes]:
        """Perform an input action; with a ``settle`` argument, wait for its effect and add the
        ``receipt`` (:data:`cubicle_guest.protocol.RECEIPT_FIELDS`). ``typing``: the action only
        types text (see :class:`cubicle_guest.protocol.SettleSpec`'s ``typing_quiet_ms``);
        ``pointer``: it acts where the pointer is (the program of the window there may be the one
        that works).

        The busy probe (:class:`cubicle_guest.launches.CpuWatch`) watches the focused window's
        program, the window manager, and for pointer actions (or with no focused window) the program
        under the pointer; when one of them is unknown (a window without ``_NET_WM_PID``), it
        is unavailable and the action waits the long ``quiet_ms`` (never ``idle_quiet_ms``).
        Without a window manager of ours (``openbox``) nothing draws frames and title bars, so
        none is watched."""
        raw = args.get("settle")
        if raw is None:
            return dict(perform() or {}), b""
        spec = protocol.SettleSpec.parse(raw)
        focus_before = self._focus()
        spec = spec.for_input(typing, None if focus_before is None else focus_before.get("type"))
        cpu = self._busy_probe(focus_before)
        since = self.changes.begin_input()
        try:
            result = dict(perform() or {})
            # the program of the window under the pointer hears pointer actions, focused or not,
            # and keys when nothing has the focus (X sends them to the window under the pointer)
            if pointer or focus_before is None:
                for program in self.input.with_display(pointer_programs):
                    cpu.watch(program)
            outcome = self.changes.wait(since, spec, activity=cpu)
        finally:
            self.changes.end_input()
        self._idle_from = cpu.snapshot()  # the next action's background starts here
        self._machine_from = cpu.machine_snapshot()
        receipt = {**outcome.result(), "focus_before": focus_before, "focus_after": self._focus()}
        return {**result, "receipt": receipt}, b""

    def _focus(self) -> dict[str, Any] | None:
        return self.input.with_display(active_window)

    def _busy_probe(self, focus: dict[str, Any] | None) -> CpuWatch:
        """A :class:`CpuWatch` of ``focus``'s program (the focused window) and the window
        manager, with the background measured since the previous action ended."""
        pid = self.input.with_display(lambda d: window_pid(d, int(focus["id"]))) if focus else None
        if self._wm_pid is None or not os.path.exists(f"/proc/{self._wm_pid}"):
            self._wm_pid = window_manager_pid(self._display_name)
        roots = [pid] if focus else []
        if self._wm_pid is not None:
            roots.append(self._wm_pid)
        return CpuWatch(
            roots,
            self._idle_from,
            machine=self.machine,
            machine_before=self._machine_from,
            speed=self.speed,
        )

    def _click(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return self._act(
            args,
            lambda: self.input.click(
                args["x"],
                args["y"],
                args.get("button") or "left",
                args.get("keys") or (),
                1 if args.get("count") is None else args["count"],
            ),
            pointer=True,
        )

    def _double_click(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return self._act(
            args,
            lambda: self.input.double_click(args["x"], args["y"], args.get("keys") or ()),
            pointer=True,
        )

    def _move(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return self._act(
            args,
            lambda: self.input.move(args["x"], args["y"], args.get("keys") or ()),
            pointer=True,
        )

    def _drag(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        path = [(point["x"], point["y"]) for point in args["path"]]
        return self._act(args, lambda: self.input.drag(path, args.get("keys") or ()), pointer=True)

    def _scroll(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return self._act(
            args,
            lambda: self.input.scroll(
                args["x"], args["y"], args["scroll_x"], args["scroll_y"], args.get("keys") or ()
            ),
            pointer=True,
        )

    def _keypress(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return self._act(
            args, lambda: self.input.keypress(args["keys"]), typing=is_typing_key(args["keys"])
        )

    def _type(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return self._act(
            args,
            lambda: self.input.type_text(args["text"]),
            typing=not any(char in args["text"] for char in "\n\r\t"),
        )

    def _mouse_down(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return self._act(
            args, lambda: self.input.mouse_down(args.get("button") or "left"), pointer=True
        )

    def _mouse_up(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return self._act(
            args, lambda: self.input.mouse_up(args.get("button") or "left"), pointer=True
        )

    def _hold_keys(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return self._act(args, lambda: self.input.hold_keys(args["keys"], args["ms"]))

    def _pointer(self, _args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return dict(self.input.pointer()), b""

    def _wait(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        ms = args.get("ms")
        ms = protocol.DEFAULT_WAIT_MS if ms is None else ms
        if not 0 <= ms <= protocol.MAX_WAIT_MS:
            raise GuestError(
                "bad_args",
                f"wait ms must be 0..{protocol.MAX_WAIT_MS}, got {ms}",
                details={"ms": ms, "limit": protocol.MAX_WAIT_MS},
            )
        start = time.monotonic()
        time.sleep(ms / 1000)
        return {"waited_ms": round((time.monotonic() - start) * 1000)}, b""

    def _screenshot(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        shot = self.screen.screenshot(
            format=args.get("format") or "png",
            quality=args.get("quality"),
            max_width=args.get("max_width"),
            max_height=args.get("max_height"),
            region=args.get("region"),
        )
        return shot.result(), shot.data

    def _settle(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        """Wait until the region has not changed for ``quiet_ms`` (from now), or ``timeout_ms``.
        ``until_idle``: a quiet screen ends the wait only once the focused window's program and
        the window manager are idle too (the busy probe of actions), still within ``timeout_ms``
        — a program that draws its window in steps (Chromium under TCG: the frame, seconds
        later the page) pauses drawing while it works."""
        quiet = args.get("quiet_ms")
        quiet = DEFAULT_SETTLE_OP_QUIET_MS if quiet is None else quiet
        timeout = args.get("timeout_ms")
        timeout = DEFAULT_SETTLE_OP_TIMEOUT_MS if timeout is None else timeout
        if quiet < 0 or not 0 <= timeout <= MAX_SETTLE_OP_TIMEOUT_MS:
            raise GuestError(
                "bad_args",
                f"settle needs quiet_ms >= 0 and 0 <= timeout_ms <= "
                f"{MAX_SETTLE_OP_TIMEOUT_MS}, got quiet_ms={quiet} timeout_ms={timeout}",
                details={"limit": MAX_SETTLE_OP_TIMEOUT_MS},
            )
        region = Rect.of(self.screen.region(args.get("region")))
        spec = protocol.SettleSpec(min(quiet, timeout), min(quiet, timeout), timeout, None, None)
        activity = self._busy_probe(self._focus()) if args.get("until_idle") else None
        outcome = self.changes.wait(time.monotonic(), spec, region, activity=activity)
        return {
            "settled": outcome.settled and quiet <= timeout,
            "waited_ms": outcome.waited_ms,
            "changed": outcome.changed,
            "damage": None if outcome.box is None else outcome.box.as_region(),
        }, b""

    def _windows(self, _args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return {"windows": self.input.with_display(list_windows)}, b""

    def _exec(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        log.info("exec %s", os.path.basename(args["argv"][0]))
        return system.run(
            args["argv"],
            cwd=args.get("cwd"),
            env=args.get("env"),
            timeout_ms=args.get("timeout_ms"),
            stdin=args.get("stdin"),
        ), b""

    def _read_file(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        data = system.read_file(args["path"], args.get("max_bytes"))
        return {"size": len(data)}, data

    def _write_file(self, args: dict[str, Any], blob: bytes) -> tuple[dict[str, Any], bytes]:
        size = system.write_file(
            args["path"], blob, mode=args.get("mode"), mkdirs=bool(args.get("mkdirs"))
        )
        return {"size": size}, b""

    def _put_chunk(self, args: dict[str, Any], blob: bytes) -> tuple[dict[str, Any], bytes]:
        result = self.transfers.chunk(
            args["handle"],
            args["name"],
            args["offset"],
            blob,
            last=bool(args.get("last")),
            mode=args.get("mode"),
            mtime_ns=args.get("mtime_ns"),
        )
        return result, b""

    def _get_chunk(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        data = self.transfers.read(args["path"], args["offset"], args["length"])
        return {"size": len(data)}, data

    def clipboard(self) -> Clipboard:
        """The agent's clipboard client, opened on first use (its own X connection)."""
        with self._clipboard_lock:
            if self._clipboard is None:
                self._clipboard = Clipboard(self._display_name)
            return self._clipboard

    def _clipboard_get(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        text, owner = self.clipboard().get(args.get("selection") or "clipboard")
        return {"text": text, "owner": owner}, b""

    def _clipboard_set(self, args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        size = self.clipboard().set(args["text"], args.get("selection") or "clipboard")
        return {"size": size}, b""

    def _release_all(self, _args: dict[str, Any], _blob: bytes) -> tuple[dict[str, Any], bytes]:
        return {"released": self.input.release_all()}, b""
