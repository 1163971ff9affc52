"""cubicle's host <-> guest protocol, version 1 — the one place it is defined.

Both sides import this module: the in-guest agent (``cubicle_guest.server``) and the host
(``cubicle_guest.client``, ``drivers``, ``orchestrator``). It is pure standard library.

Transport
---------
Any ordered byte stream: a unix socket, a virtio-serial port, or stdio. Each message is one
*frame*::

    magic  b"CBL1"            4 bytes
    json_len                  u32, big-endian   (<= MAX_JSON_BYTES)
    blob_len                  u32, big-endian   (<= MAX_BLOB_BYTES)
    json                      UTF-8 JSON object
    blob                      raw bytes (screenshot image, file content) or nothing

Binary blobs travel beside the JSON instead of base64 inside it: a 1280x800 PNG is ~0.5-1.5 MB,
and base64 would add a third to its size plus an encode and a decode on the hot path
(``make bench`` prints both). The magic lets a reader that joins a stream mid-frame (a
virtio-serial port keeps bytes queued across host reconnects) resynchronise by scanning.

Messages
--------
Request:  ``{"id": <int|str>, "op": <str>, "args": {...}}`` (+ blob for ``write_file``).
Reply:    ``{"id": <same>, "ok": true, "result": {...}}`` (+ blob for ``screenshot``/``read_file``)
          ``{"id": <same>, "ok": false,
          "error": {"code": <str>, "message": <str>, "details": {...}}}``

A client opens with ``hello`` (``{"protocol": PROTOCOL_VERSION}``); the agent answers with its
protocol version, the screen size and the operations it supports, or ``version_mismatch``.
Replies carry the request's id, so a client skips stale replies (virtio-serial queues
requests written before the guest opened the port).

Coordinates are X screen pixels (origin top-left) of the guest's display; any scaling from a
model's screenshot space happens on the host (``cubicle.drivers.viewport``). Button, key and action
field names follow ``openai.types.responses.computer_action``.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from cubicle_guest.errors import GuestError, ProtocolError

__all__ = [
    "BUTTONS",
    "ERROR_CODES",
    "FEATURES",
    "FRAME_HEADER",
    "IDLE_QUIET_MS",
    "MAGIC",
    "MAX_BLOB_BYTES",
    "MAX_CHUNK_BYTES",
    "MAX_CLIPBOARD_BYTES",
    "MAX_FILE_BYTES",
    "MAX_JSON_BYTES",
    "MAX_LAUNCH_CAP_MS",
    "MAX_LIST_ENTRIES",
    "MAX_SETTLE_CAP_MS",
    "MAX_TEXT_CHARS",
    "OPS",
    "PROTOCOL_VERSION",
    "RECEIPT_FIELDS",
    "SCROLL_PIXELS_PER_CLICK",
    "SELECTIONS",
    "TYPING_QUIET_MS",
    "VISIBLE_CHANGE_AREA",
    "Frame",
    "FrameDecoder",
    "SettleSpec",
    "encode_frame",
    "error_reply",
    "json_string_bytes",
    "ok_reply",
    "parse_reply",
    "request",
    "validate_args",
]

PROTOCOL_VERSION: Final = 1
MAGIC: Final = b"CBL1"
FRAME_HEADER: Final = struct.Struct("!4sII")
MAX_JSON_BYTES: Final = 4 * 1024 * 1024
"""Largest JSON part of a frame (bytes). Typed text and exec output must fit in it."""
MAX_BLOB_BYTES: Final = 64 * 1024 * 1024
"""Largest binary part of a frame (bytes): a lossless 4K screenshot fits comfortably."""
MAX_FILE_BYTES: Final = 32 * 1024 * 1024
"""Largest file ``read_file``/``write_file`` move in one request (bytes)."""
MAX_TEXT_CHARS: Final = 100_000
"""Longest text one ``type`` request may carry (characters)."""
MAX_EXEC_OUTPUT_BYTES: Final = 1024 * 1024
"""Each of stdout/stderr of ``exec`` is cut so that it takes at most this many bytes *as sent*
(the JSON string in the frame, escapes included: a NUL byte costs 6); the reply then says
``*_truncated``. Both together stay well inside :data:`MAX_JSON_BYTES`."""
SCROLL_PIXELS_PER_CLICK: Final = 100
"""``scroll`` distances are pixels; one X wheel click (buttons 4-7) stands for this many. The
remainder of a division is carried to the next scroll on the same axis, never dropped."""
MAX_WAIT_MS: Final = 60_000
DEFAULT_WAIT_MS: Final = 1000
VISIBLE_CHANGE_AREA: Final = 400
"""A *visible change*: the bounding box of what changed on screen is larger than this (px²) —
more than a blinking caret (2-3 px wide, one line high)."""
MAX_SETTLE_CAP_MS: Final = 60_000
"""Largest ``cap_ms`` of a ``settle`` argument (milliseconds). 60 s: the drill's settle on a TCG
guest (x10) must cover Chromium's cold start there (24-41 s measured) after a launcher click."""
MAX_LAUNCH_CAP_MS: Final = 180_000
"""Largest ``launch_cap_ms`` of a ``settle`` argument (milliseconds): how long the agent follows a
launch at all. 180 s: under TCG on a slow host Chromium's first frame came over 60 s after a
launcher click (``make conformance``, 2026-12-01)."""
FEATURES: Final = (
    "receipts",
    "typing_quiet",
    "idle_quiet",
    "settle_until_idle",
    "launch_cap",
    "hold",
    "files",
    "clipboard",
    "signin",
)
"""Optional protocol-v1 features this agent has, listed in ``hello``/``info`` ``features``.
``receipts``: input ops take ``settle`` and answer with a ``receipt``; ``typing_quiet``: the
``settle`` object also takes ``typing_quiet_ms``; ``idle_quiet``: it also takes
``idle_quiet_ms`` (:class:`SettleSpec`); ``settle_until_idle``: the ``settle`` op takes
``until_idle``; ``launch_cap``: the ``settle`` object also takes ``launch_cap_ms``; ``hold``: the
ops ``mouse_down``, ``mouse_up``, ``hold_keys`` and ``pointer``; ``files``: the chunked transfer
ops ``file_stat``, ``put_*`` and ``get_*`` (:mod:`cubicle_guest.transfer`); ``clipboard``: the
ops ``clipboard_get`` and ``clipboard_set`` (:mod:`cubicle_guest.clipboard`); ``signin``: the
ops ``browser_start``, ``browser_stop``, ``signin_find`` and ``signin_fill``
(:mod:`cubicle_guest.signin_ops`)."""
MAX_CHUNK_BYTES: Final = 8 * 1024 * 1024
"""Largest piece of a file one ``put_chunk``/``get_chunk`` moves (bytes)."""
MAX_LIST_ENTRIES: Final = 50_000
"""Most entries ``get_list`` answers for one folder tree."""
MAX_CLIPBOARD_BYTES: Final = 200_000
"""Largest clipboard text ``clipboard_set`` takes and ``clipboard_get`` answers (UTF-8 bytes):
one X property change (no INCR transfers), under the X server's request size limit."""
SELECTIONS: Final = ("clipboard", "primary")
"""The X selections the clipboard ops reach: ``CLIPBOARD`` (Ctrl+C/Ctrl+V) and ``PRIMARY``
(select, middle click)."""
TYPING_QUIET_MS: Final = 150
"""Default ``typing_quiet_ms``: the quiet period after typing into a normal (non-dialog) window."""
IDLE_QUIET_MS: Final = 70
"""Default ``idle_quiet_ms``: the quiet period once the programs the action reached are idle."""

BUTTONS: Final[Mapping[str, int]] = {"left": 1, "wheel": 2, "right": 3, "back": 8, "forward": 9}
"""OpenAI button names → X11 button numbers (``wheel`` is a middle click)."""

ERROR_CODES: Final = frozenset(
    {
        "bad_frame",  # the frame itself is broken: magic, sizes, not UTF-8, not a JSON object
        "bad_request",  # id/op/args missing or of the wrong type
        "unknown_op",  # op not in OPS
        "bad_args",  # an argument is missing, of the wrong type, or not allowed
        "unknown_key",  # a key name not in the key vocabulary
        "unknown_button",  # a button name not in BUTTONS
        "out_of_bounds",  # a coordinate outside the screen
        "too_large",  # text, file, frame or output over its limit
        "version_mismatch",  # hello with a protocol version this agent does not speak
        "timeout",  # the operation did not finish within its bound
        "not_found",  # a file or window that does not exist
        "io_error",  # the OS refused (permissions, disk)
        "no_space",  # the guest's disk (its filesystem) is full
        "x11_error",  # the X server refused or went away
        "signin_failed",  # a sign-in op failed; details.reason: no_browser, unknown_form, changed…
        "internal",  # a bug in the agent; the message says what
    }
)


# --------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class Frame:
    """One decoded frame: the JSON object and the binary blob (``b""`` when absent)."""

    message: dict[str, Any]
    blob: bytes = b""


def encode_frame(message: Mapping[str, Any], blob: bytes = b"") -> bytes:
    """Serialise one frame.

    :raises ProtocolError: if the JSON or the blob exceeds its limit.
    """
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(data) > MAX_JSON_BYTES:
        raise ProtocolError(
            f"frame JSON is {len(data)} bytes, over the limit of {MAX_JSON_BYTES} bytes"
        )
    if len(blob) > MAX_BLOB_BYTES:
        raise ProtocolError(
            f"frame blob is {len(blob)} bytes, over the limit of {MAX_BLOB_BYTES} bytes"
        )
    return FRAME_HEADER.pack(MAGIC, len(data), len(blob)) + data + blob


def json_string_bytes(text: str) -> int:
    """How many bytes ``text`` takes inside a frame's JSON (as :func:`encode_frame` writes it),
    without the quotes."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2


class FrameDecoder:
    """Incremental frame parser for a byte stream.

    Feed it bytes with :meth:`feed`; it returns every complete frame. A broken frame raises
    :class:`ProtocolError` once, after which the decoder has skipped to the next magic, so the
    caller can report the error and keep reading. Holds at most one frame in memory.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while True:
            frame = self._next()
            if frame is None:
                return frames
            frames.append(frame)

    @property
    def pending(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    def feed_items(self, data: bytes) -> list[Frame | ProtocolError]:
        """Like :meth:`feed`, but return broken frames as :class:`ProtocolError` items in stream
        order instead of raising, so a server answers every frame and every error in order
        (``feed`` drops the complete frames decoded before a broken one in the same call)."""
        self._buffer += data
        items: list[Frame | ProtocolError] = []
        while True:
            try:
                frame = self._next()
            except ProtocolError as exc:
                items.append(exc)
                continue
            if frame is None:
                return items
            items.append(frame)

    def _resync(self, start: int) -> int:
        """Drop bytes up to the next magic at or after ``start``; return how many were dropped.

        Always drops at least one byte, so a caller that loops on errors makes progress.
        """
        index = self._buffer.find(MAGIC, start)
        if index < 0:
            # keep a tail that could be the start of a magic split across reads
            index = len(self._buffer)
            for keep in range(min(len(MAGIC) - 1, len(self._buffer) - start), 0, -1):
                if MAGIC.startswith(self._buffer[-keep:]):
                    index = len(self._buffer) - keep
                    break
        del self._buffer[:index]
        return index

    def _next(self) -> Frame | None:
        if not self._buffer.startswith(MAGIC[: min(len(self._buffer), len(MAGIC))]):
            dropped = self._resync(1)
            raise ProtocolError(f"bad frame: no magic {MAGIC!r}; skipped {dropped} bytes")
        if len(self._buffer) < FRAME_HEADER.size:
            return None
        _, json_len, blob_len = FRAME_HEADER.unpack_from(self._buffer)
        if json_len > MAX_JSON_BYTES or blob_len > MAX_BLOB_BYTES:
            self._resync(1)
            raise ProtocolError(
                f"bad frame: sizes json={json_len} blob={blob_len} exceed the limits "
                f"json<={MAX_JSON_BYTES} blob<={MAX_BLOB_BYTES}"
            )
        total = FRAME_HEADER.size + json_len + blob_len
        if len(self._buffer) < total:
            return None
        raw = bytes(self._buffer[FRAME_HEADER.size : FRAME_HEADER.size + json_len])
        blob = bytes(self._buffer[FRAME_HEADER.size + json_len : total])
        del self._buffer[:total]
        try:
            message = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ProtocolError(f"bad frame: JSON part is not valid UTF-8 JSON ({exc})") from None
        except RecursionError:  # a peer's deeply nested arrays or objects
            raise ProtocolError("bad frame: JSON part nests too deeply to decode") from None
        if not isinstance(message, dict):
            raise ProtocolError(
                f"bad frame: JSON part is a {type(message).__name__}, expected an object"
            )
        return Frame(message, blob)


# --------------------------------------------------------------------------- settling


@dataclass(frozen=True)
class SettleSpec:
    """How long an action waits for its effect to show, in milliseconds.

    After an action the agent waits ``expect_ms`` for a first change; when none comes the action
    returns then (nothing visible happened). Once something changed it waits until the screen has
    been quiet for ``quiet_ms``, and never longer than ``cap_ms`` in all.

    The defaults were measured on this project's desktop (``make bench``;
    docs/settle-and-screenshots.md): GTK and Chromium start drawing a key's or click's effect within
    ~100 ms and finish a dialog or a local page within ~1 s; the longest pause seen inside one
    effect is GTK's file chooser, which repaints at once on Enter and closes ~250-300 ms later
    (measured over repeated saves on Docker, under load), so ``quiet_ms`` is 400.

    ``typing_quiet_ms`` (feature ``typing_quiet``; ``None`` turns it off) replaces ``quiet_ms``
    for *typing into a normal window*: a ``type`` whose text has no newline, carriage return or
    tab, or a ``keypress`` of one key that is not a modifier chord, Enter, Escape or Tab, while the
    focused window's EWMH type is ``normal`` (not a dialog). Typed text is drawn in one go and
    cannot open or close a window, so the long quiet period that window changes need is waste
    there (``make bench``: typing in the editor); keys that commit or cancel, shortcuts, clicks
    and anything typed into a dialog keep ``quiet_ms``. It never exceeds ``quiet_ms``.

    ``idle_quiet_ms`` (feature ``idle_quiet``; ``None`` turns it off) ends the quiet period early
    when the agent can tell that nothing is still working on the action's effect: no launch is
    pending or ended during the action, and the programs the action reached (the focused
    window's process tree, the window manager's, and for pointer actions the program of the
    window under the pointer) used no CPU — neither ran nor waited to run — over a sample
    window (50 ms) after the last change. The long ``quiet_ms`` stays for pauses the CPU cannot
    explain: a program whose process is unknown (no ``_NET_WM_PID``), an agent without the busy
    probe (frame polling, no ``/proc``), and any action while the focused window is not a
    normal one (or none is): a dialog waits on timers and other processes — the GTK file
    chooser's name completion pops up on a timer, and after Enter the Save As dialog repaints
    at once, then closes ~250 ms later with no CPU used meanwhile (measured: the drill's model
    was shown it still open). A program that, after drawing part of an effect, sleeps longer
    than ``idle_quiet_ms`` before drawing the rest is the known limit (``make bench`` and the
    drill count stale screenshots). It never exceeds ``quiet_ms``.

    ``launch_cap_ms`` (feature ``launch_cap``; ``None``, the default: ``cap_ms``) is the cap while
    a program launched from the panel has not drawn its first window yet
    (:mod:`cubicle_guest.launches`): the wait goes on past ``cap_ms`` up to it, and only then. It
    lies from ``cap_ms`` to :data:`MAX_LAUNCH_CAP_MS`. For slow guests: under TCG a browser's cold
    start outlasts any cap that ordinary actions can afford (an app that keeps drawing — a
    blinking caret — holds an action until the cap).
    """

    expect_ms: int = 300
    quiet_ms: int = 400
    cap_ms: int = 3000
    typing_quiet_ms: int | None = TYPING_QUIET_MS
    idle_quiet_ms: int | None = IDLE_QUIET_MS
    launch_cap_ms: int | None = None
    unsupported: frozenset[str] = frozenset()
    """Optional fields the agent does not know (no feature): :meth:`as_args` leaves them out
    (:func:`cubicle.drivers.settle.settle_for_agent`); not part of the protocol."""

    NAMES = ("expect_ms", "quiet_ms", "cap_ms", "typing_quiet_ms", "idle_quiet_ms", "launch_cap_ms")
    OPTIONAL = ("typing_quiet_ms", "idle_quiet_ms", "launch_cap_ms")
    """The fields that may be ``None`` (off), each behind its own feature."""
    FEATURE_OF: ClassVar[Mapping[str, str]] = {
        "typing_quiet_ms": "typing_quiet",
        "idle_quiet_ms": "idle_quiet",
        "launch_cap_ms": "launch_cap",
    }
    """The agent feature (:data:`FEATURES`) each optional field needs."""

    @classmethod
    def parse(cls, value: object, *, name: str = "settle") -> SettleSpec:
        """Check a ``settle`` object (any subset of the fields; others default;
        ``typing_quiet_ms`` and ``idle_quiet_ms`` may be ``null``: off).

        :raises GuestError: ``bad_args`` naming the field that is wrong: not an integer,
            negative, ``cap_ms`` over :data:`MAX_SETTLE_CAP_MS`, or ``expect_ms``/``quiet_ms``
            over ``cap_ms``.
        """
        if not isinstance(value, Mapping):
            raise GuestError(
                "bad_args",
                f"{name} must be an object with {', '.join(cls.NAMES)}, got {value!r:.80}",
            )
        unknown = sorted(set(value) - set(cls.NAMES))
        if unknown:
            raise GuestError(
                "bad_args",
                f"unknown {name} option(s) {', '.join(map(str, unknown))}; accepted: "
                f"{', '.join(cls.NAMES)}",
            )
        fields: dict[str, int] = {}
        for key in cls.NAMES:
            item = value.get(key, getattr(cls, key))
            if key in cls.OPTIONAL and item is None:
                continue
            if not _is_int(item) or item < 0:
                raise GuestError(
                    "bad_args",
                    f"{name}.{key} must be an integer >= 0 (milliseconds), got {item!r:.40}",
                    details={"option": key},
                )
            fields[key] = item
        spec = cls(
            fields["expect_ms"],
            fields["quiet_ms"],
            fields["cap_ms"],
            fields.get("typing_quiet_ms"),
            fields.get("idle_quiet_ms"),
            fields.get("launch_cap_ms"),
        )
        if spec.cap_ms > MAX_SETTLE_CAP_MS:
            raise GuestError(
                "bad_args",
                f"{name}.cap_ms must be <= {MAX_SETTLE_CAP_MS}, got {spec.cap_ms}",
                details={"option": "cap_ms", "limit": MAX_SETTLE_CAP_MS},
            )
        if spec.launch_cap_ms is not None and not (
            spec.cap_ms <= spec.launch_cap_ms <= MAX_LAUNCH_CAP_MS
        ):
            raise GuestError(
                "bad_args",
                f"{name}.launch_cap_ms must be from {name}.cap_ms ({spec.cap_ms}) to "
                f"{MAX_LAUNCH_CAP_MS}, got {spec.launch_cap_ms}",
                details={"option": "launch_cap_ms", "limit": MAX_LAUNCH_CAP_MS},
            )
        for key in ("expect_ms", "quiet_ms", "typing_quiet_ms", "idle_quiet_ms"):
            if (getattr(spec, key) or 0) > spec.cap_ms:
                raise GuestError(
                    "bad_args",
                    f"{name}.{key} ({getattr(spec, key)}) is over {name}.cap_ms ({spec.cap_ms})",
                    details={"option": key, "limit": spec.cap_ms},
                )
        return spec

    def as_args(self) -> dict[str, int | None]:
        """The ``settle`` object to send: every field, ``None`` as ``null`` (off: an agent left
        to its default would turn it on), except the :attr:`unsupported` ones and a ``None``
        whose default is ``None`` too (``launch_cap_ms``: the agent's default is the same)."""
        args: dict[str, int | None] = {
            "expect_ms": self.expect_ms,
            "quiet_ms": self.quiet_ms,
            "cap_ms": self.cap_ms,
        }
        for key in self.OPTIONAL:
            value = getattr(self, key)
            default = self.__dataclass_fields__[key].default
            if key not in self.unsupported and (value is not None or default is not None):
                args[key] = value
        return args

    def for_input(self, typing: bool, window_type: str | None = "normal") -> SettleSpec:
        """The spec one action waits with, given whether it only types text (``typing``) and
        the focused window's EWMH type before it (``None``: no focused window). Into anything
        but a normal window: no ``idle_quiet_ms``; typing into a normal window: ``quiet_ms``
        becomes ``typing_quiet_ms`` (never longer) (class docstring)."""
        if window_type != "normal":
            return dataclasses.replace(self, idle_quiet_ms=None)
        if not typing or self.typing_quiet_ms is None:
            return self
        return dataclasses.replace(self, quiet_ms=min(self.quiet_ms, self.typing_quiet_ms))

    def longest_ms(self) -> int:
        """The longest an action may wait: ``launch_cap_ms`` when set, else ``cap_ms``."""
        return self.cap_ms if self.launch_cap_ms is None else max(self.cap_ms, self.launch_cap_ms)

    def quiet_when_idle(self) -> int:
        """The quiet period once the programs the action reached are idle (milliseconds):
        ``idle_quiet_ms`` when set, never over ``quiet_ms``; ``quiet_ms`` otherwise."""
        if self.idle_quiet_ms is None:
            return self.quiet_ms
        return min(self.quiet_ms, self.idle_quiet_ms)


RECEIPT_FIELDS: Final = (
    "changed",  # bool: a visible change (bounding box > VISIBLE_CHANGE_AREA) since the action began
    "settled",  # bool: quiet for quiet_ms before cap_ms (false: the cap cut the wait)
    "settle_ms",  # int: how long the agent waited after the action's input
    "damage",  # {x, y, width, height} bounding box of what changed (native px), or null
    "damage_events",  # int: damage notifications counted (background activity excluded)
    "method",  # "damage" (X DAMAGE events) or "poll" (frame hashing fallback)
    "focus_before",  # {id, title, wm_class, type} of the active window before the action, or null
    "focus_after",  # the same after the wait
    "quiet_ms",  # int: the quiet period that ended the wait (quiet_ms, typing_quiet_ms or
    # idle_quiet_ms: feature idle_quiet), or null when it did not end on one (nothing changed,
    # the cap)
    "last_change_ms",  # int: when the last change counted came, ms after the action's input
    # began (null: none) — the program's time; the rest of settle_ms is the agent's quiet period
)
"""The fields of an action's ``receipt`` (the reply of an action sent with ``settle``)."""


# --------------------------------------------------------------------------- messages


def request(
    request_id: int | str, op: str, args: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Build a request message (the JSON part of a request frame)."""
    return {"id": request_id, "op": op, "args": dict(args or {})}


def ok_reply(request_id: Any, result: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"id": request_id, "ok": True, "result": dict(result or {})}


def error_reply(
    request_id: Any, code: str, message: str, details: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    if code not in ERROR_CODES:
        raise ValueError(f"unknown error code {code!r}; known: {sorted(ERROR_CODES)}")
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = dict(details)
    return {"id": request_id, "ok": False, "error": error}


def parse_reply(message: Mapping[str, Any], *, op: str | None = None) -> dict[str, Any]:
    """Return a reply's ``result``; raise :class:`GuestError` for an error reply.

    :raises ProtocolError: if the message is not a well-formed reply.
    """
    ok = message.get("ok")
    if ok is True:
        result = message.get("result", {})
        if not isinstance(result, dict):
            raise ProtocolError(
                f"reply to {op or 'request'} has a non-object result: {result!r:.80}"
            )
        return result
    if ok is False:
        error = message.get("error")
        if not isinstance(error, dict) or not isinstance(error.get("code"), str):
            raise ProtocolError(f"reply to {op or 'request'} has a malformed error: {error!r:.200}")
        details = error.get("details")
        raise GuestError(
            error["code"],
            str(error.get("message", "")),
            op=op,
            details=details if isinstance(details, dict) else None,
        )
    raise ProtocolError(f"reply to {op or 'request'} has no boolean 'ok': {dict(message)!r:.200}")


# --------------------------------------------------------------------------- operations


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_point_list(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(p, dict) and set(p) == {"x", "y"} and _is_int(p["x"]) and _is_int(p["y"])
        for p in value
    )


def _is_str_map(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _is_region(value: object) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {"x", "y", "width", "height"}
        and all(_is_int(v) for v in value.values())
    )


Check = Callable[[object], bool]
INT: Final[tuple[Check, str]] = (_is_int, "an integer")
STR: Final[tuple[Check, str]] = (lambda v: isinstance(v, str), "a string")
BOOL: Final[tuple[Check, str]] = (lambda v: isinstance(v, bool), "a boolean")
KEYS: Final[tuple[Check, str]] = (_is_str_list, "a list of key names")
POINTS: Final[tuple[Check, str]] = (_is_point_list, "a list of {x, y} integer points")
ARGV: Final[tuple[Check, str]] = (
    lambda v: _is_str_list(v) and len(v) > 0,  # type: ignore[arg-type]
    "a non-empty list of strings",
)
ENV: Final[tuple[Check, str]] = (_is_str_map, "an object of string to string")
REGION: Final[tuple[Check, str]] = (_is_region, "{x, y, width, height} integers")
FORMAT: Final[tuple[Check, str]] = (lambda v: v in ("png", "jpeg"), '"png" or "jpeg"')
BUTTON: Final[tuple[Check, str]] = (lambda v: isinstance(v, str), "a button name")
KIND: Final[tuple[Check, str]] = (lambda v: v in ("file", "dir"), '"file" or "dir"')
SELECTION: Final[tuple[Check, str]] = (lambda v: v in SELECTIONS, '"clipboard" or "primary"')


@dataclass(frozen=True)
class OpSpec:
    """Arguments one operation takes: name → (check, description), required and optional."""

    required: Mapping[str, tuple[Check, str]] = field(default_factory=dict)
    optional: Mapping[str, tuple[Check, str]] = field(default_factory=dict)
    takes_blob: bool = False
    secret: frozenset[str] = frozenset()
    """Arguments whose values are never shown: an error about one names it, not its value."""


SETTLE: Final[tuple[Check, str]] = (
    lambda v: isinstance(v, dict),
    "an object {expect_ms, quiet_ms, cap_ms}",
)
_POINTER_KEYS: Final = {"keys": KEYS, "settle": SETTLE}

OPS: Final[Mapping[str, OpSpec]] = {
    # handshake and introspection
    "hello": OpSpec(required={"protocol": INT}, optional={"client": STR}),
    "info": OpSpec(),
    # the openai ComputerDriver actions (native screen pixels)
    "click": OpSpec(
        required={"x": INT, "y": INT}, optional={"button": BUTTON, "count": INT, **_POINTER_KEYS}
    ),
    "double_click": OpSpec(required={"x": INT, "y": INT}, optional=_POINTER_KEYS),
    "move": OpSpec(required={"x": INT, "y": INT}, optional=_POINTER_KEYS),
    "drag": OpSpec(required={"path": POINTS}, optional=_POINTER_KEYS),
    "scroll": OpSpec(
        required={"x": INT, "y": INT, "scroll_x": INT, "scroll_y": INT}, optional=_POINTER_KEYS
    ),
    "keypress": OpSpec(required={"keys": KEYS}, optional={"settle": SETTLE}),
    "type": OpSpec(required={"text": STR}, optional={"settle": SETTLE}),
    "wait": OpSpec(optional={"ms": INT}),
    # held input (feature "hold"): a button held across requests, a chord held for a time
    "mouse_down": OpSpec(optional={"button": BUTTON, "settle": SETTLE}),
    "mouse_up": OpSpec(optional={"button": BUTTON, "settle": SETTLE}),
    "hold_keys": OpSpec(required={"keys": KEYS, "ms": INT}, optional={"settle": SETTLE}),
    "pointer": OpSpec(),
    # observation
    "screenshot": OpSpec(
        optional={
            "format": FORMAT,
            "quality": INT,
            "max_width": INT,
            "max_height": INT,
            "region": REGION,
        }
    ),
    "settle": OpSpec(
        optional={"quiet_ms": INT, "timeout_ms": INT, "region": REGION, "until_idle": BOOL}
    ),
    "windows": OpSpec(),
    # orchestration helpers
    "exec": OpSpec(
        required={"argv": ARGV},
        optional={"cwd": STR, "env": ENV, "timeout_ms": INT, "stdin": STR},
    ),
    "read_file": OpSpec(required={"path": STR}, optional={"max_bytes": INT}),
    "write_file": OpSpec(
        required={"path": STR}, optional={"mode": INT, "mkdirs": BOOL}, takes_blob=True
    ),
    "release_all": OpSpec(),
    # chunked file transfer (feature "files")
    "file_stat": OpSpec(required={"path": STR}),
    "put_begin": OpSpec(
        required={"path": STR, "kind": KIND, "mode": INT, "mtime_ns": INT},
        optional={"size": INT},
    ),
    "put_mkdir": OpSpec(required={"handle": STR, "name": STR, "mode": INT, "mtime_ns": INT}),
    "put_chunk": OpSpec(
        required={"handle": STR, "name": STR, "offset": INT},
        optional={"last": BOOL, "mode": INT, "mtime_ns": INT},
        takes_blob=True,
    ),
    "put_commit": OpSpec(required={"handle": STR}),
    "put_abort": OpSpec(required={"handle": STR}),
    "get_list": OpSpec(required={"path": STR}),
    "get_chunk": OpSpec(required={"path": STR, "offset": INT, "length": INT}),
    # the clipboard (feature "clipboard")
    "clipboard_get": OpSpec(optional={"selection": SELECTION}),
    "clipboard_set": OpSpec(required={"text": STR}, optional={"selection": SELECTION}),
    # sign-in (feature "signin"): the agent's own browser, its forms found and filled
    "browser_start": OpSpec(optional={"argv": ARGV, "url": STR, "env": ENV}),
    "browser_stop": OpSpec(),
    "signin_find": OpSpec(),
    "signin_fill": OpSpec(
        required={"form_id": STR, "values": ENV},
        optional={"option": STR},
        secret=frozenset({"values"}),
    ),
}
"""Every operation of protocol version 1 and the arguments it accepts.

Replies (``result`` fields; sizes in pixels, times in milliseconds):

- ``hello``/``info``: ``protocol``, ``agent_version``, ``screen`` {width, height}, ``ops`` (list),
  ``display``, ``pid``, ``features`` (:data:`FEATURES`), ``settle_method`` (``damage`` or
  ``poll``), ``settle_signals`` (``machine``: a VM guest's settles also wait for the whole
  guest's other processes, :mod:`cubicle_guest.machine`; ``programs``: the programs an action
  reached alone), ``speed`` (how many times slower than a reference core this machine runs, at
  least 1.0, measured at the agent's start), ``screenshot_method`` (``incremental``: a
  full-screen PNG re-encodes only the rows drawn on since the last,
  :mod:`cubicle_guest.framecache`; ``whole``); ``info`` adds ``keysyms_remapped`` and
  ``uptime_ms``.
- pointer/key actions: ``{}`` (``scroll`` adds ``clicks_x``, ``clicks_y``). Sent with the optional
  ``settle`` argument (a :class:`SettleSpec` object; feature ``receipts``) the agent waits for
  the action's effect to settle before answering and adds ``receipt`` (:data:`RECEIPT_FIELDS`).
  An agent without the feature rejects ``settle`` with ``bad_args``, so a client checks
  ``features`` first: this is a compatible extension of version 1, not a version 2.
- ``wait``: ``waited_ms``.
- ``click``'s optional ``count`` (1..3, default 1; feature ``hold``): clicks in one burst, so a
  count of 3 is a triple click.
- ``mouse_down``/``mouse_up`` (default button ``left``): press or release at the pointer; a
  pressed button stays down across requests until ``mouse_up``, ``release_all`` or the agent's
  close (the host driver sends ``release_all`` when it lets go). ``hold_keys``: press the
  chord, hold it ``ms`` (0..MAX_WAIT_MS) and release it in reverse, in that one request
  (released even when it fails). ``pointer``: ``x``, ``y`` of the pointer (native pixels).
- ``screenshot``: ``native`` {width, height} of the screen, ``region`` grabbed (native pixels),
  ``width``/``height`` of the image, ``format``; the image bytes are the blob.
- ``settle``: ``settled`` (bool), ``waited_ms``, ``changed``, ``damage`` (as in a receipt);
  with ``until_idle`` (feature ``settle_until_idle``) a quiet screen counts only once the
  focused window's program and the window manager are idle.
- ``windows``: ``windows``: list of {id, title, wm_class, type, x, y, width, height, pid?,
  focused}; ``type`` is the EWMH window type (``normal``, ``dialog``, ``dock``...).
- ``exec``: ``exit_code`` (None on timeout), ``stdout``/``stderr`` (UTF-8, invalid bytes
  replaced), ``stdout_truncated``/``stderr_truncated``, ``timed_out``, ``duration_ms``.
- ``read_file``: ``size``; content is the blob. ``write_file``: ``size``.
- ``release_all``: ``released`` (list of key/button names that were still held).
- ``file_stat``: ``path`` (absolute; a relative path is the desktop user's home's), ``kind``
  (``file``, ``dir``, ``symlink``, ``other`` or ``null``: nothing there).
- ``put_begin``: ``handle``, ``path``; ``put_mkdir``/``put_chunk``: ``{}`` (``put_chunk`` adds
  ``size`` so far); ``put_commit``: ``path``, ``files``, ``bytes``; ``put_abort``: ``{}``.
- ``get_list``: ``path`` (absolute), ``kind`` (``file`` or ``dir``), ``mode``, ``mtime_ns``,
  ``size``, ``entries`` (a folder's, parents first: ``name`` relative with ``/``, ``kind``
  ``file``/``dir``/``symlink``/``other``, ``mode``, ``mtime_ns``, ``size``); ``get_chunk``:
  ``size`` of the blob, the bytes at ``offset`` (shorter at the end of the file).
- ``clipboard_get``: ``text`` (``""`` when nobody owns the selection), ``owner`` (``agent``,
  ``other`` or ``null``); ``clipboard_set``: ``size`` (UTF-8 bytes).
- ``browser_start``: ``pid``, ``started``; ``browser_stop``: ``stopped``; ``signin_find``:
  ``form`` (None or ``form_id``, ``title``, ``credential_origin``, ``fields``, ``options``);
  ``signin_fill``: ``filled`` — see :mod:`cubicle_guest.signin_ops`. ``signin_fill``'s
  ``values`` are secret (:attr:`OpSpec.secret`).
"""


def validate_args(op: object, args: object, blob: bytes = b"") -> dict[str, Any]:
    """Check an operation name and its arguments against :data:`OPS`.

    Validates types and presence only; semantic checks (key names, bounds) belong to the agent.

    :return: the arguments as a new dict.
    :raises GuestError: ``unknown_op``/``bad_args``/``bad_request`` naming what was wrong.
    """
    if not isinstance(op, str):
        raise GuestError("bad_request", f"'op' must be a string, got {type(op).__name__}")
    spec = OPS.get(op)
    if spec is None:
        raise GuestError("unknown_op", f"unknown op {op!r}; known: {', '.join(sorted(OPS))}", op=op)
    if not isinstance(args, dict):
        raise GuestError("bad_args", f"'args' must be an object, got {type(args).__name__}", op=op)
    unknown = sorted(set(args) - set(spec.required) - set(spec.optional))
    if unknown:
        raise GuestError(
            "bad_args",
            f"unknown argument(s) {', '.join(unknown)}; accepted: "
            f"{', '.join(sorted([*spec.required, *spec.optional])) or 'none'}",
            op=op,
        )
    for name in spec.required:
        if name not in args:
            raise GuestError("bad_args", f"missing required argument {name!r}", op=op)
    for name, value in args.items():
        check, description = spec.required.get(name) or spec.optional[name]
        if value is None and name in spec.optional:
            continue
        if not check(value):
            seen = "a value withheld" if name in spec.secret else f"{value!r:.80}"
            raise GuestError(
                "bad_args", f"argument {name!r} must be {description}, got {seen}", op=op
            )
    if blob and not spec.takes_blob:
        raise GuestError("bad_args", f"{op} takes no binary payload, got {len(blob)} bytes", op=op)
    return dict(args)
