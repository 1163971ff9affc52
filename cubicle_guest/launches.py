"""Knowing that an application is still starting: startup notification and new windows.

A click on a panel launcher starts a program whose first window maps hundreds of milliseconds to
seconds later, long after the settle's ``expect_ms`` with nothing drawn meanwhile. Without a
signal the agent would answer "nothing changed" and the model would be shown the old screen.

The signal is the freedesktop *startup notification* protocol: the launcher (tint2, with
``startup_notifications = 1`` and ``StartupNotify=true`` in the desktop files) broadcasts a
``new:`` message on the root window (``_NET_STARTUP_INFO_BEGIN`` / ``_NET_STARTUP_INFO`` client
messages, 20 bytes each, NUL-terminated) when it starts a program, and the program's toolkit
sends ``remove:`` with the same ``ID`` once its first window is shown (GTK does).

Neither ``remove:`` nor the window's map means the window shows anything yet: measured in the
guest, Chromium sends ``remove:`` and maps its window at once, then draws nothing for over
500 ms (the window is one flat colour), and xterm never sends ``remove:``. So a launch ends when a
top-level window mapped after it began (``MapNotify`` of a root child; its client is the window
with ``WM_STATE`` under the frame) *has been drawn into by its program*: its contents are no
longer one flat colour (:func:`is_drawn`). While a launch waits on a mapped window, the watcher
looks at it every :data:`DRAWN_POLL_S`; otherwise it sleeps in ``select``.

:class:`LaunchWatcher` keeps that state on its own X connection and thread (idle: blocked in
``select`` with no timeout, woken by a pipe on close). A launch is followed for
:data:`LAUNCH_TRACK_S` (a program that never shows a window) and counts as pending, by default,
for :data:`LAUNCH_TIMEOUT_S` of that. The change tracker (:mod:`cubicle_guest.changes`) keeps an
action's wait going while a launch is pending, bounded by the action's ``cap_ms`` (or its
``launch_cap_ms``, which also lengthens how long a launch counts as pending), and counts a
launch's end as a change (its quiet period starts there).
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from PIL import Image
from Xlib import X
from Xlib import display as xdisplay
from Xlib import error as xerror
from Xlib.xobject.drawable import Window

from cubicle_guest.machine import MachineLoad, MachineSample
from cubicle_guest.protocol import MAX_LAUNCH_CAP_MS
from cubicle_guest.windows import window_pid

__all__ = [
    "LAUNCH_TIMEOUT_S",
    "LAUNCH_TRACK_S",
    "CpuWatch",
    "LaunchWatcher",
    "client_window",
    "is_drawn",
    "parse_startup_message",
    "pointer_programs",
    "process_tree",
    "window_manager_pid",
]

log = logging.getLogger("cubicle_guest.launches")

LAUNCH_TIMEOUT_S: Final = 60.0
"""By default a launch still pending after this long no longer holds actions: the longest cap an
action may wait (:data:`cubicle_guest.protocol.MAX_SETTLE_CAP_MS`; under TCG Chromium drew its first
frame 25-34 s after the click, past libstartup-notification's own 20 s). An action with a
``launch_cap_ms`` counts it pending for that long (:meth:`LaunchWatcher.pending`)."""
LAUNCH_TRACK_S: Final = MAX_LAUNCH_CAP_MS / 1000
"""How long a launch is followed at all (its window looked for), whatever an action's cap."""
DRAWN_POLL_S: Final = 0.05
"""How often a mapped, not yet drawn window of a launch is looked at (seconds)."""
FLAT_TOLERANCE: Final = 6
"""A window whose every channel spans at most this many levels is one flat colour (undrawn)."""
MAX_MESSAGE_BYTES: Final = 4096
"""A startup message longer than this is dropped (the protocol has no limit; ours is a guard)."""


def parse_startup_message(text: str) -> tuple[str, dict[str, str]]:
    """``new: ID="a b" NAME=x`` → ``("new", {"ID": "a b", "NAME": "x"})``.

    Values may be double-quoted; a backslash escapes the next character (the protocol's rules).
    :raises ValueError: no ``type:`` prefix.
    """
    kind, sep, rest = text.partition(":")
    if not sep or not kind.strip():
        raise ValueError(f"a startup message starts with TYPE:, got {text[:40]!r}")
    fields: dict[str, str] = {}
    index, length = 0, len(rest)
    while index < length:
        while index < length and rest[index] == " ":
            index += 1
        key_start = index
        while index < length and rest[index] not in "= ":
            index += 1
        key = rest[key_start:index]
        if index >= length or rest[index] != "=":
            continue
        index += 1
        value: list[str] = []
        quoted = False
        while index < length:
            char = rest[index]
            if char == "\\" and index + 1 < length:
                value.append(rest[index + 1])
                index += 2
                continue
            if char == '"':
                quoted = not quoted
            elif char == " " and not quoted:
                break
            else:
                value.append(char)
            index += 1
        if key:
            fields[key] = "".join(value)
    return kind.strip(), fields


BUSY_SAMPLE_S: Final = 0.04
""":meth:`CpuWatch.busy` samples at most this often."""
IDLE_MIN_STEP_S: Final = 0.005
""":meth:`CpuWatch.idle_since` reads the CPU at most this often."""
IDLE_SAMPLES_KEPT: Final = 32
""":meth:`CpuWatch.idle_since` keeps at most this many samples (a window needs two)."""
BUSY_MIN_CPU_S: Final = 0.002
BACKGROUND_MIN_S: Final = 0.5
"""The idle period before an action must be at least this long to give a background rate."""
BACKGROUND_MARGIN: Final = 1.5
"""Busy means above this many times the background rate (plus the fixed threshold): an
animation's frames are not evenly spread over short samples."""
BACKGROUND_MAX: Final = 0.4
"""At most this background rate (CPUs) is allowed for: a program working harder than that all
the time cannot be told from one working on the action, and holds it as before."""
"""CPU time per :data:`BUSY_SAMPLE_S` above which the focused application counts as busy (5 %;
an idle GTK dialog uses about 1 %)."""


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (from ``/proc/*/stat``'s parent pids)."""
    return process_trees([root])


def process_trees(roots: Sequence[int]) -> list[int]:
    """The ``roots`` and their descendants, each once (one pass over ``/proc``)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                parent = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    found: dict[int, None] = {}
    queue = list(roots)
    while queue:
        pid = queue.pop()
        if pid not in found:
            found[pid] = None
            queue.extend(children.get(pid, ()))
    return list(found)


def _threads_ns(pid: int) -> dict[int, int]:
    """Time each thread of ``pid`` spent on a CPU or waiting for one, by thread id
    (``/proc/PID/task/TID/schedstat``: run time and run-queue delay, nanoseconds); empty when the
    process is gone or no thread's schedstat can be read (a kernel without it).

    Per thread, not summed: a thread that ends takes its time out of any sum, so a program whose
    worker thread just finished would look as if it had used no CPU at all (its total drops)."""
    used: dict[int, int] = {}
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return used
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/schedstat", "rb") as handle:
                fields = handle.read().split()
            used[int(thread)] = int(fields[0]) + int(fields[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that just ended
    return used


def window_manager_pid(display_name: str | None) -> int | None:
    """The pid of the window manager (``openbox``) of this display: a process of that name
    whose ``DISPLAY`` is ours (``None`` when there is none)."""
    wanted = display_name or os.environ.get("DISPLAY", "")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/comm", "rb") as handle:
                if handle.read().strip() != b"openbox":
                    continue
            with open(f"/proc/{name}/environ", "rb") as handle:
                environment = handle.read().split(b"\0")
        except OSError:
            continue
        if f"DISPLAY={wanted}".encode() in environment:
            return int(name)
    return None


class CpuWatch:
    """Whether the focused window's program (with its child processes) or the window manager
    is still working: using a CPU, or waiting for one (a loaded host starves them).

    A key that opens a dialog or loads a page shows nothing for a while on a loaded machine
    (measured: mousepad's Open and Save As dialogs drew their first pixel more than 300 ms after
    the key, while mousepad used 2-20 ms of CPU every 20 ms, and idles at about 0.2 ms per 20 ms
    once shown; Chromium's page after Enter comes from its renderer, a child process). CPU time
    and run-queue time are summed over every thread of the program and its descendants
    (``/proc/PID/task/*/schedstat``, nanoseconds: ``/proc/PID/stat``'s 10 ms ticks are too
    coarse); busy means more than :data:`BUSY_MIN_CPU_S` per :data:`BUSY_SAMPLE_S`. The window
    manager counts too: it draws the title bars (measured on a loaded host: mousepad's ``*``
    for a modified file reached the title bar over 400 ms after the typing). CPU is kept per
    thread: a thread that ends between samples takes its time with it, and only its own (summed
    per process, a worker thread that finished made the whole program look idle); an idle verdict
    needs the same threads at both ends of its window (:meth:`idle_since`).

    **Background.** A program that works all the time (an animated page, a build in a
    terminal) would hold every action. ``idle_before`` is a :meth:`snapshot` taken when the
    previous action ended: the CPU the processes present in both used between it and this
    watch's start, per second, is the *background rate* (:attr:`background`, from an idle
    period of at least :data:`BACKGROUND_MIN_S`), and busy means above
    :data:`BACKGROUND_MARGIN` times that plus the fixed threshold.

    :param pids: the roots: the focused window's process, the window manager's; ``None`` for a
        program that is not known (a window without ``_NET_WM_PID``): :attr:`available` is then
        false.
    **The whole machine.** With ``machine`` (a VM guest: :mod:`cubicle_guest.machine`) the
    other processes of the guest count too: busy and idle verdicts also need the machine's other
    processes idle (no task runnable beside the agent, their CPU and I/O wait within
    :data:`cubicle_guest.machine.MACHINE_BUSY_SHARE` over the window plus their background rate,
    measured from ``machine_before`` like the programs' own). Their CPU holds the programs'
    too, so the programs are then read once, when the watch starts (:attr:`available`), and every
    later verdict is the machine's.

    :param pids: the roots: the focused window's process, the window manager's; ``None`` for a
        program that is not known (a window without ``_NET_WM_PID``): :attr:`available` is then
        false.
    :param idle_before: the :meth:`snapshot` of the previous action's end (``None``: no
        background known, 0).
    :param machine: the whole guest's activity (``None``: the programs alone).
    :param machine_before: the :meth:`machine_snapshot` of the previous action's end.
    :param speed: how many times slower than the reference this machine is
        (:func:`cubicle_guest.machine.measure_speed`): :attr:`speed`.
    """

    def __init__(
        self,
        pids: Sequence[int | None],
        idle_before: tuple[float, dict[int, int]] | None = None,
        *,
        machine: MachineLoad | None = None,
        machine_before: MachineSample | None = None,
        speed: float = 1.0,
    ) -> None:
        known = [pid for pid in pids if pid is not None]
        self._roots = [pid for pid in dict.fromkeys(known) if pid != os.getpid()]
        self.speed = speed
        """How many times slower than the reference this machine runs (at least 1)."""
        self._machine = machine
        self._used = self._read()
        self._sampled = time.monotonic()
        self._machine_at = None if machine is None else machine.sample()
        self.background = 0.0
        """CPU seconds per second the watched processes used while idle before the action."""
        if idle_before is not None and self._sampled - idle_before[0] >= BACKGROUND_MIN_S:
            before = idle_before[1]
            common = {pid: ns for pid, ns in self._used.items() if pid in before}
            rate = self._grown(before, common) / 1e9 / (self._sampled - idle_before[0])
            self.background = min(rate, BACKGROUND_MAX)
        self.machine_background = 0.0
        """CPU seconds per second the machine's other processes used before the action."""
        if (
            machine is not None
            and self._machine_at is not None
            and machine_before is not None
            and self._machine_at.t - machine_before.t >= BACKGROUND_MIN_S
        ):
            other = machine.other_ns(machine_before, self._machine_at)
            rate = other / 1e9 / (self._machine_at.t - machine_before.t)
            self.machine_background = min(rate, BACKGROUND_MAX)
        self._busy = False
        self._samples: list[tuple[float, dict[int, int], MachineSample | None]] = [
            (self._sampled, self._used, self._machine_at)
        ]
        """The samples :meth:`idle_since` took (time, CPU per pid, the machine), oldest first."""
        self.available = (
            len(known) == len(pids)
            and bool(self._used)
            and all(root in self._used for root in self._roots)
        )
        """Whether every root is known and its CPU can be read (``/proc/PID/task/*/schedstat``):
        otherwise "idle" cannot be told from "unknown" (:meth:`idle_since` never says idle)."""

    def watch(self, pid: int | None) -> None:
        """Watch ``pid`` (and its descendants) too, counting from now (a launched program once
        its window is drawn, the program under the pointer); ``None``, a program that is not
        known, makes the watch unavailable."""
        if pid is None:
            self.available = False
            return
        if pid in self._roots or pid == os.getpid():
            return
        self._roots.append(pid)
        now = {
            tid: ns for tree_pid in process_tree(pid) for tid, ns in _threads_ns(tree_pid).items()
        }
        if pid not in now:  # its main thread (the thread id of a process's first thread is its pid)
            self.available = False
        self._used = {**now, **self._used}
        self._samples = [(taken, {**now, **used}, seen) for taken, used, seen in self._samples]

    def _programs_now(self) -> dict[int, int]:
        """The programs' CPU for a sample: read, or with the machine watched the last reading
        (the machine's other CPU holds theirs, and reading the machine costs the guest far less
        than walking ``/proc``: under TCG the agent's sampling competes with the app for the one
        vCPU, and a file dialog that waits took twice as long to draw)."""
        return self._read() if self._machine is None else self._used

    def _read(self) -> dict[int, int]:
        """CPU (ns) of every thread of the watched process trees, by thread id."""
        used: dict[int, int] = {}
        for pid in process_trees(self._roots):
            used.update(_threads_ns(pid))
        return used

    @staticmethod
    def _grown(before: dict[int, int], after: dict[int, int]) -> int:
        return sum(max(0, ns - before.get(pid, 0)) for pid, ns in after.items())

    def _over(self, grown_ns: int, elapsed: float) -> bool:
        limit = BUSY_MIN_CPU_S / BUSY_SAMPLE_S + BACKGROUND_MARGIN * self.background
        return grown_ns / 1e9 > limit * elapsed

    def snapshot(self) -> tuple[float, dict[int, int]]:
        """Now, and the CPU (ns) of every watched process: the next action's ``idle_before``
        (the last sample when it is younger than :data:`BUSY_SAMPLE_S`: a wait that just saw
        the programs idle has read them, and the agent's reads compete with them for a CPU)."""
        now = time.monotonic()
        latest = max((self._sampled, self._used), self._samples[-1][:2], key=lambda s: s[0])
        if now - latest[0] < BUSY_SAMPLE_S or self._machine is not None:
            return latest
        return now, self._read()

    def machine_snapshot(self) -> MachineSample | None:
        """The machine now (``None`` without one): the next action's ``machine_before``."""
        return None if self._machine is None else self._machine.sample()

    def busy(self) -> bool:
        """True when the program used CPU above the threshold since the previous sample (or
        since creation)."""
        now = time.monotonic()
        elapsed = now - self._sampled
        if elapsed < BUSY_SAMPLE_S:
            return self._busy
        used = self._programs_now()
        self._busy = self._over(self._grown(self._used, used), elapsed)
        if self._machine is not None and self._machine_at is not None:
            seen = self._machine.sample()
            machine_busy = self._machine.busy(self._machine_at, seen, self.machine_background)
            self._busy = self._busy or machine_busy
            self._machine_at = seen
        self._used, self._sampled = used, now
        return self._busy

    def idle_since(self, start: float, window: float) -> bool | None:
        """Whether the watched programs used no CPU (none above :data:`BUSY_MIN_CPU_S` per
        :data:`BUSY_SAMPLE_S`, the busy threshold; no thread started or ended either) over the last
        ``window`` seconds or more: from the latest earlier sample taken at or after ``start``
        (monotonic seconds) that is at least ``window`` old, until now. Each call takes a
        sample, so calls every few milliseconds judge a window that slides with them: programs
        that worked a while after ``start`` are seen idle ``window`` after they stopped.

        ``None``: cannot tell yet — no sample since ``start`` is ``window`` old (ask again
        later), or the last one is younger than :data:`IDLE_MIN_STEP_S` (none taken).
        Always ``False`` when :attr:`available` is false.
        """
        if not self.available:
            return False
        now = time.monotonic()
        samples = [sample for sample in self._samples if sample[0] >= start]
        if samples and now - samples[-1][0] < IDLE_MIN_STEP_S:
            return None
        used = self._programs_now()
        seen = None if self._machine is None else self._machine.sample()
        base = next((sample for sample in reversed(samples) if now - sample[0] >= window), None)
        self._samples = [*samples[-IDLE_SAMPLES_KEPT:], (now, used, seen)]
        if base is None:
            return None
        if self._over(self._grown(base[1], used), now - base[0]):
            return False
        if self._machine is not None and seen is not None:
            if base[2] is None or self._machine.busy(base[2], seen, self.machine_background):
                return False
            # a task runnable at any sample inside the window: not idle
            inside = [s[2] for s in self._samples if s[0] > base[0] and s[2] is not None]
            if any(sample.running > 1 for sample in inside):
                return False
        # no thread started or ended in the window: a new one is work, and one that ended took
        # what it used after the base sample with it (a worker that just finished its job)
        return set(used) == set(base[1])


def client_window(display: xdisplay.Display, frame: Window) -> Window | None:
    """The client window (with ``WM_STATE``) at or under a top-level ``frame``."""
    wm_state = display.intern_atom("WM_STATE")
    level = [frame]
    try:
        for _ in range(3):
            for window in level:
                if window.get_full_property(wm_state, X.AnyPropertyType) is not None:
                    return window
            level = [child for window in level for child in window.query_tree().children]
    except xerror.XError:
        return None
    return None


def pointer_programs(display: xdisplay.Display) -> list[int | None]:
    """The program to watch for the top-level window under the pointer: ``[pid]`` (its client
    window's ``_NET_WM_PID``, or the top-level's own without a window manager), ``[None]`` when
    that window names no program, ``[]`` over the bare root window (the window manager's)."""
    try:
        top = display.screen().root.query_pointer().child
        if not top:
            return []
        client = client_window(display, top)
        return [window_pid(display, int((client or top).id))]
    except xerror.XError:
        return [None]


def is_drawn(image: Image.Image) -> bool:
    """Whether a window's contents show anything: not one flat colour (``FLAT_TOLERANCE``)."""
    extrema = image.convert("RGB").getextrema()
    return any(high - low > FLAT_TOLERANCE for low, high in extrema)  # type: ignore[misc]


@dataclass
class _Launch:
    began: float
    ended: float | None = None
    pid: int | None = None
    """The ``_NET_WM_PID`` of the window that ended the launch (``None``: unknown)."""


class LaunchWatcher:
    """Launches in progress on one display (see the module docstring).

    :param on_change: called (from the watcher's thread, holding no lock) when a launch begins
        or ends, so a waiter can look again.
    :raises Xlib.error.DisplayError: or ``OSError``, when the display cannot be opened (the
        change tracker then runs without launch tracking).
    """

    def __init__(self, display_name: str | None, on_change: Callable[[], None]) -> None:
        self._display = xdisplay.Display(display_name)
        try:
            self._begin_atom = self._display.intern_atom("_NET_STARTUP_INFO_BEGIN")
            self._more_atom = self._display.intern_atom("_NET_STARTUP_INFO")
            root = self._display.screen().root
            root.change_attributes(event_mask=X.PropertyChangeMask | X.SubstructureNotifyMask)
            self._display.sync()
        except BaseException:
            self._display.close()
            raise
        self._on_change = on_change
        self._lock = threading.Lock()
        self._launches: dict[str, _Launch] = {}
        self._partial: dict[int, bytearray] = {}
        self._mapped: dict[int, Window] = {}
        """Client windows mapped during an open launch, not drawn yet (looked at by the reader)."""
        self._wake_read, self._wake_write = os.pipe()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="cubicle-launches", daemon=True)
        self._thread.start()

    # -- queries (any thread) -----------------------------------------------------------------

    def pending(self, now: float | None = None, *, within_s: float = LAUNCH_TIMEOUT_S) -> bool:
        """Whether some launch began less than ``within_s`` ago (capped at
        :data:`LAUNCH_TRACK_S`) and has not ended."""
        now = time.monotonic() if now is None else now
        within_s = min(within_s, LAUNCH_TRACK_S)
        with self._lock:
            return any(
                launch.ended is None and now - launch.began < within_s
                for launch in self._launches.values()
            )

    def ended_since(self, since: float) -> float | None:
        """The latest time at or after ``since`` a launch ended (``None``: none did)."""
        with self._lock:
            ends = [
                launch.ended
                for launch in self._launches.values()
                if launch.ended is not None and launch.ended >= since
            ]
        return max(ends) if ends else None

    def ended_pids(self, since: float) -> list[int]:
        """The programs (``_NET_WM_PID`` of their first drawn window) of the launches that ended
        at or after ``since``: a program that has just drawn its first frame is often still
        building what it shows (Chromium's new-tab page), so the busy probe watches it too."""
        with self._lock:
            return [
                launch.pid
                for launch in self._launches.values()
                if launch.ended is not None and launch.ended >= since and launch.pid is not None
            ]

    # -- the reader thread ----------------------------------------------------------------------

    def _read(self) -> None:
        fd = self._display.fileno()
        try:
            while not self._stop.is_set():
                # replies read meanwhile may have queued events inside Xlib: no select then
                if not self._display.pending_events():
                    timeout = DRAWN_POLL_S if self._mapped else None
                    readable, _, _ = select.select([fd, self._wake_read], [], [], timeout)
                    if self._wake_read in readable:
                        return
                changed = False
                for _ in range(self._display.pending_events()):
                    changed = self._handle(self._display.next_event()) or changed
                changed = self._look_at_mapped() or changed
                if changed:
                    self._on_change()
        except Exception:  # the X server went away: waits no longer see launches
            if not self._stop.is_set():
                log.exception("launch watcher stopped")

    def _handle(self, event: object) -> bool:
        """Update the state from one event; True when a launch began or ended."""
        now = time.monotonic()
        kind = getattr(event, "type", None)
        if kind == X.MapNotify:
            if getattr(event, "override", False) or not self.pending(now, within_s=LAUNCH_TRACK_S):
                return False
            client = self._client_of(event.window)  # type: ignore[attr-defined]
            if client is not None:
                self._mapped[int(client.id)] = client
            return False
        if kind != X.ClientMessage:
            return False
        message_type = getattr(event, "client_type", None)
        if message_type not in (self._begin_atom, self._more_atom):
            return False
        format_, data = event.data  # type: ignore[attr-defined]
        if format_ != 8:
            return False
        sender = int(event.window.id)  # type: ignore[attr-defined]
        chunk = bytes(data)
        if message_type == self._begin_atom:
            self._partial[sender] = bytearray()
        buffer = self._partial.get(sender)
        if buffer is None:  # a continuation without a beginning
            return False
        end = chunk.find(b"\0")
        buffer.extend(chunk if end < 0 else chunk[:end])
        if len(buffer) > MAX_MESSAGE_BYTES:
            del self._partial[sender]
            return False
        if end < 0:
            return False
        del self._partial[sender]
        return self._message(buffer.decode("utf-8", "replace"), now)

    def _message(self, text: str, now: float) -> bool:
        try:
            kind, fields = parse_startup_message(text)
        except ValueError:
            return False
        launch_id = fields.get("ID")
        if not launch_id:
            return False
        with self._lock:
            self._forget_old(now)
            if kind == "new":
                self._launches[launch_id] = _Launch(now)
                return True
        return False

    def _client_of(self, frame: Window) -> Window | None:
        return client_window(self._display, frame)

    def _look_at_mapped(self) -> bool:
        """End the open launches once a window mapped for them is drawn; True when they end."""
        if not self._mapped:
            return False
        now = time.monotonic()
        if not self.pending(now, within_s=LAUNCH_TRACK_S):
            self._mapped.clear()
            return False
        for window in list(self._mapped.values()):
            try:
                geometry = window.get_geometry()
                raw = window.get_image(0, 0, geometry.width, geometry.height, X.ZPixmap, 0xFFFFFFFF)
                image = Image.frombytes(
                    "RGB", (geometry.width, geometry.height), raw.data, "raw", "BGRX"
                )
            except (xerror.XError, ValueError):
                image = None  # gone, or not readable: the launch ends (damage takes over)
            if image is None or is_drawn(image):
                self._mapped.clear()
                pid = window_pid(self._display, int(window.id))
                with self._lock:
                    for launch in self._launches.values():
                        if launch.ended is None:
                            launch.ended, launch.pid = now, pid
                return True
        return False

    def _forget_old(self, now: float) -> None:
        old = [
            key
            for key, launch in self._launches.items()
            if now - (launch.ended or launch.began) > 2 * LAUNCH_TRACK_S
        ]
        for key in old:
            del self._launches[key]

    def close(self) -> None:
        """Stop the thread and close the X connection (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        os.write(self._wake_write, b"x")
        self._thread.join(timeout=1.0)
        os.close(self._wake_read)
        os.close(self._wake_write)
        try:
            self._display.close()
        except (xerror.XError, OSError) as exc:
            log.debug("closing the launch watcher's connection: %s", exc)
