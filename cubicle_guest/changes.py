"""Knowing when the screen changed: X DAMAGE events (or frame polling), quiet periods, receipts.

The agent performs an action and then asks a :class:`ChangeTracker` to wait until the action has
been *taken in*: :meth:`ChangeTracker.wait` returns

* at once after ``expect_ms`` when nothing changed on screen (a click on an inert pixel), or
* once the screen has been quiet for ``quiet_ms`` after the last change — or for the shorter
  ``idle_quiet_ms`` when the programs the action reached are seen idle (below), or
* at ``cap_ms`` at the latest (``settled`` is then false).

:class:`DamageTracker` is event-driven: a thread reads DAMAGE ``RawRectangles`` notifications for
the root window (every drawing into any window shows up there, with its rectangle) and keeps a
short history. Nothing grabs or hashes frames in a loop. :class:`PollingTracker` is the fallback
for an X server without DAMAGE: it hashes grabs every 30 ms and diffs the first and last grab
for the changed box. ``hello``/``info`` say which one runs (``settle_method``).

**Background activity is ignored.** A blinking caret, a spinner or an animated page damages the
same places again and again while nobody types. The tracker remembers the damage that arrived
while no action was in progress ("idle" damage); a 32x32-pixel cell that was damaged in at least
:data:`BACKGROUND_MIN_BUCKETS` tenth-of-a-second buckets spread over at least
:data:`BACKGROUND_MIN_SPAN_S` within the last :data:`BACKGROUND_WINDOW_S`, the last of them at
most :data:`BACKGROUND_RECENT_S` before the action, is *background* — ongoing, repeated activity,
not a window that opened or closed (rectangles over :data:`BACKGROUND_MAX_SCREEN_SHARE` of the
screen are never learnt) — and damage lying entirely inside background cells neither
counts as a change nor breaks a quiet period. Damage caused while an
action is in progress never becomes background, so typing into the same field twice is seen
twice. An animation that an action itself starts is waited on until ``cap_ms``; from then on it
is idle background and no longer holds later screenshots.

**Visible change.** A wait's ``changed`` is true when some group of nearby (non-background)
damage rectangles since the action began has a bounding box larger than
:data:`protocol.VISIBLE_CHANGE_AREA` (400 px²): more than a caret (:func:`is_visible`; groups
are judged apart, so a caret moving from one end of the screen to the other is not a visible
change). Smaller damage still counts for the quiet period (a caret that moved was drawn).

**Damage is confirmed with pixels.** A program may repaint more than changed: tint2 redraws its
whole panel (1280x40) when its clock turns a minute, though only a digit or two differ. So when
the damage says "visible", :class:`DamageTracker` compares the damaged places with a grab of the
screen taken as the action began (:func:`pixel_changes`; ~2 ms, no conversion of its pixels):
``changed`` and ``box`` are then what differs between the screen before the action and after
the wait, by the same rule as frame polling and the bench's stale check. Repainted identical
pixels never make a receipt say ``changed`` (nor reset the stall detector). Only the receipt is
judged so: any damage still counts for the quiet period (finding that pixels are identical
would cost a grab per damage event).

**Idle programs end the quiet period early.** ``quiet_ms`` (400 ms) covers pauses inside one
effect (a dialog that repaints, then closes). A pause while the app computes the next frame
shows as CPU use; the agent samples the CPU of the programs the action reached (an
:class:`Activity`: :class:`cubicle_guest.launches.CpuWatch`) every :data:`IDLE_STEP_S` and, when
they used none over a window of :data:`IDLE_WINDOW_S` (sliding with the samples) after the last
change and no launch is pending or ended meanwhile, ends the wait at the first such sample from
``idle_quiet_ms`` after the last change on (:func:`_quiet_period`).

Times are ``time.monotonic()`` seconds inside, milliseconds in results; rectangles are native
screen pixels.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import select
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from PIL import Image, ImageChops
from Xlib import error as xerror
from Xlib.ext import damage

from cubicle_guest import protocol
from cubicle_guest.errors import GuestError
from cubicle_guest.geometry import CELL_PX, Rect, clusters, largest_cluster
from cubicle_guest.launches import LAUNCH_TIMEOUT_S, LaunchWatcher
from cubicle_guest.xdamage import open_root_damage

__all__ = [
    "ChangeTracker",
    "DamageTracker",
    "PollingTracker",
    "SettleOutcome",
    "changed_rects",
    "is_visible",
    "open_tracker",
    "pixel_changes",
]

log = logging.getLogger("cubicle_guest.changes")

BACKGROUND_WINDOW_S: Final = 5.0
"""How far back idle damage is looked at to find background activity (seconds)."""
BACKGROUND_BUCKET_S: Final = 0.1
"""Idle damage is counted per cell in time buckets this long (a window mapping, however many
rectangles it draws, fills one or two buckets; an animation fills one every frame)."""
BACKGROUND_MIN_BUCKETS: Final = 5
"""Buckets with idle damage a cell needs within the window to be background (a caret blinking
every 0.5-0.8 s fills 6-10 in 5 s)."""
BACKGROUND_MIN_SPAN_S: Final = 1.0
"""...spread over at least this long..."""
BACKGROUND_RECENT_S: Final = 1.0
"""...and still going on: the last one at most this long before the action."""
BACKGROUND_MAX_SCREEN_SHARE: Final = 1 / 8
"""Idle damage rectangles larger than this share of the screen are not learnt as background:
windows opening, closing and repainting whole are events, not background activity (an
animation larger than this holds an action's wait until its cap)."""
HISTORY_EVENTS: Final = 20_000
"""Damage events kept (oldest dropped first); enough for several seconds of full-rate video."""
IDLE_WINDOW_S: Final = 0.05
"""The short quiet period (``idle_quiet_ms``) ends only after a CPU sample window this long, all
of it after the last change, showed the programs the action reached idle."""
IDLE_WINDOW_MIN_S: Final = 0.04
"""...and that idle window must be at least this long (the first sample may come late)."""
IDLE_STEP_S: Final = 0.02
"""How often the CPU is sampled while the short quiet period waits for an idle window."""
BUSY_POLL_S: Final = 0.05
"""While the focused application is busy, a wait that would end looks again this much later."""
BUSY_LIMIT_QUIETS: Final = 5
"""Busy CPU alone keeps a wait going for at most this many ``max(expect_ms, quiet_ms)`` (2 s by
default; times the machine's measured slowness, :attr:`Activity.speed`) after the action, the
end of a launch it caused, or the last damage it counted larger than a caret
(:data:`protocol.VISIBLE_CHANGE_AREA`), whichever came last: an animated page keeps its program
busy for ever, and must not hold every action until the cap, but a program that has just drawn
and is still working is building what it shows (Chromium under TCG drew a local page's first
part 18.6 s after Enter, then the rest)."""
DENSE_CELL_PIXELS: Final = protocol.VISIBLE_CHANGE_AREA + 1
"""A :data:`CELL_PX` cell with this many changed pixels is a visible change by itself (its
changed box is at least that large): :func:`pixel_changes` needs no finer look then."""
POLL_INTERVAL_S: Final = 0.03
"""Frame polling period of the fallback tracker (seconds)."""


@dataclass(frozen=True)
class SettleOutcome:
    """What one wait saw. ``box`` is the bounding box of the counted damage (None: none)."""

    changed: bool
    settled: bool
    waited_ms: int
    box: Rect | None
    events: int
    method: str
    quiet_ms: int | None = None
    """The quiet period that ended the wait (``None``: none did — nothing changed, or the cap)."""
    last_change_ms: int | None = None
    """When the last counted change came, milliseconds after the action's input began (``None``:
    none came): how long the program took to show the effect, the rest of the wait is ours."""

    def result(self) -> dict[str, Any]:
        """The protocol's receipt fields (see :data:`cubicle_guest.protocol.RECEIPT_FIELDS`)."""
        return {
            "quiet_ms": self.quiet_ms,
            "last_change_ms": self.last_change_ms,
            "changed": self.changed,
            "settled": self.settled,
            "settle_ms": self.waited_ms,
            "damage": None if self.box is None else self.box.as_region(),
            "damage_events": self.events,
            "method": self.method,
        }


class Activity(Protocol):
    """What the agent knows of the programs an action reached
    (:class:`cubicle_guest.launches.CpuWatch`): whether they still use CPU."""

    available: bool
    """Whether their CPU can be read at all (otherwise nothing is ever idle)."""
    speed: float
    """How many times slower than the reference the machine runs
    (:func:`cubicle_guest.machine.measure_speed`): busy CPU alone holds a wait that much longer
    (:data:`BUSY_LIMIT_QUIETS`)."""

    def busy(self) -> bool:
        """Using CPU right now (sampled at most every ~40 ms)."""
        ...

    def idle_since(self, start: float, window: float) -> bool | None:
        """No CPU used over the last ``window`` seconds or more, all at or after ``start``;
        each call samples, so the window slides with the calls (``None``: cannot tell yet, ask
        again later)."""
        ...

    def watch(self, pid: int) -> None:
        """Count ``pid``'s process tree too (a program the action launched)."""
        ...


class ChangeTracker(Protocol):
    """What the agent needs to pace actions on the screen's changes."""

    method: str
    """``damage`` or ``poll``."""

    def begin_input(self) -> float:
        """Mark that an action starts sending input; return its start (monotonic seconds)."""
        ...

    def end_input(self) -> None:
        """Mark that the action and its wait are over: later damage is idle again."""
        ...

    def wait(
        self,
        since: float,
        spec: protocol.SettleSpec,
        region: Rect | None = None,
        activity: Activity | None = None,
    ) -> SettleOutcome:
        """Wait for the changes since ``since`` to settle (module docstring). ``activity`` (the
        programs the action reached): busy keeps a wait that would end going, up to the cap;
        idle ends the quiet period after ``spec.idle_quiet_ms`` (:func:`_quiet_period`)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class _Damage:
    t: float
    rect: Rect
    idle: bool


class DamageTracker:
    """Event-driven change tracking with the X DAMAGE extension (see the module docstring).

    Owns one X connection and one daemon thread; :meth:`close` stops both.

    :param grab: returns an image of a region (native pixels; ``None``: the whole screen) —
        the agent's screen, in any mode that compares
        (:meth:`cubicle_guest.screen.Screen.grab_raw`); an action's damage is confirmed with it
        (module docstring).
    :raises GuestError: ``x11_error`` when the display cannot be opened or has no DAMAGE.
    """

    method = "damage"

    def __init__(
        self, display_name: str | None, grab: Callable[[Rect | None], Image.Image]
    ) -> None:
        self._grab = grab
        self._before: tuple[float, Image.Image] | None = None
        """The grab taken as the current action began, with its start time."""
        opened = open_root_damage(display_name, damage.DamageReportRawRectangles)
        self._display = opened.display
        self._damage = opened.damage
        self._event_type = opened.event_type
        root = opened.root
        self._history: collections.deque[_Damage] = collections.deque(maxlen=HISTORY_EVENTS)
        self._changed = threading.Condition()
        self._busy = 0
        self._screen = Rect(0, 0, int(root.get_geometry().width), int(root.get_geometry().height))
        self._initial_pending = True
        self._launches = _launch_watcher(display_name, self._wake)
        self._stop = threading.Event()
        # the reader blocks on the X connection and this pipe (close() writes to it): an idle
        # desktop costs no wake-ups
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._read, name="cubicle-damage", daemon=True)
        self._thread.start()

    # -- the reader thread ------------------------------------------------------------------

    def _read(self) -> None:
        fd = self._display.fileno()
        try:
            while not self._stop.is_set():
                if self._display.pending_events() == 0:
                    select.select([fd, self._wake_r], [], [])
                for _ in range(self._display.pending_events()):
                    event = self._display.next_event()
                    if event.type != self._event_type:
                        continue
                    area = event.area
                    self._add(Rect(int(area.x), int(area.y), int(area.width), int(area.height)))
        except Exception:  # the X server went away: waits fall back to their timeouts
            if not self._stop.is_set():
                log.exception("damage reader stopped")

    def _add(self, rect: Rect) -> None:
        now = time.monotonic()
        with self._changed:
            # creating the damage object reports the whole screen once: that is not a change
            initial, self._initial_pending = self._initial_pending and rect == self._screen, False
            if not initial:
                self._history.append(_Damage(now, rect, self._busy == 0))
            self._changed.notify_all()

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # -- ChangeTracker ----------------------------------------------------------------------

    def begin_input(self) -> float:
        try:
            image: Image.Image | None = self._grab(None)
        except GuestError as exc:  # receipts then judge by damage alone
            log.warning("no grab before the action: %s", exc)
            image = None
        with self._changed:
            self._busy += 1
            now = time.monotonic()
            self._before = None if image is None else (now, image)
        return now

    def end_input(self) -> None:
        with self._changed:
            self._busy = max(0, self._busy - 1)
            self._before = None

    def _background(self, before: float) -> set[tuple[int, int]]:
        """Cells with ongoing, repeated idle damage just before ``before`` (module docstring)."""
        buckets: dict[tuple[int, int], set[int]] = {}
        largest = self._screen.area * BACKGROUND_MAX_SCREEN_SHARE
        for item in self._history:
            if not item.idle or item.t >= before or item.t < before - BACKGROUND_WINDOW_S:
                continue
            if item.rect.area > largest:
                continue
            bucket = int(item.t / BACKGROUND_BUCKET_S)
            for cell in item.rect.cells():
                buckets.setdefault(cell, set()).add(bucket)
        recent = int((before - BACKGROUND_RECENT_S) / BACKGROUND_BUCKET_S)
        span = round(BACKGROUND_MIN_SPAN_S / BACKGROUND_BUCKET_S)
        return {
            cell
            for cell, seen in buckets.items()
            if len(seen) >= BACKGROUND_MIN_BUCKETS
            and max(seen) - min(seen) >= span
            and max(seen) >= recent
        }

    def wait(
        self,
        since: float,
        spec: protocol.SettleSpec,
        region: Rect | None = None,
        activity: Activity | None = None,
    ) -> SettleOutcome:
        with self._changed:
            background = self._background(since)
            before = self._before[1] if self._before and self._before[0] == since else None

        def counts(item: _Damage) -> bool:
            if region is not None and not item.rect.intersects(region):
                return False
            return not background or not item.rect.cells() <= background

        outcome, rects = _quiet_period(
            self._changed,
            self._history,
            since,
            spec,
            counts,
            launches=self._launches,
            activity=activity,
        )
        if before is None or not outcome.changed:
            return outcome  # pixels can only show less than damage that is not visible
        try:
            changed, box = pixel_changes(before, self._grab, rects)
        except GuestError as exc:
            log.warning("cannot confirm the damage with pixels: %s", exc)
            return outcome
        return dataclasses.replace(outcome, changed=changed, box=box)

    def close(self) -> None:
        if self._launches is not None:
            self._launches.close()
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=1.0)
        os.close(self._wake_r)
        os.close(self._wake_w)
        try:
            self._display.damage_destroy(self._damage)
            self._display.close()
        except Exception as exc:  # the X server is already gone
            log.debug("closing the damage connection: %s", exc)


def _quiet_period(
    condition: threading.Condition,
    history: collections.deque[_Damage],
    since: float,
    spec: protocol.SettleSpec,
    counts: Callable[[_Damage], bool],
    *,
    launches: LaunchWatcher | None = None,
    activity: Activity | None = None,
) -> tuple[SettleOutcome, list[Rect]]:
    """Wait on ``condition`` (which guards ``history``) per ``spec`` (module docstring);
    return what it saw and the damage rectangles it counted.

    * While ``launches`` has one pending, keep waiting (up to ``launch_cap_ms`` when set, else the
      cap); a launch's end counts as a change for the quiet period (:mod:`cubicle_guest.launches`),
      its program joins ``activity``, and the rest of the wait keeps the launch cap.
    * When the wait would end (not capped) while ``activity`` is busy, look again a little later
      (at most until :data:`BUSY_LIMIT_QUIETS` quiet periods after the action, the end of a
      launch it caused, or the last counted damage larger than a caret, whichever came last).
    * Once the screen has been quiet for ``spec.idle_quiet_ms`` (shorter than ``quiet_ms``),
      the wait ends there when ``activity`` is available and says idle over a sample window of
      at least :data:`IDLE_WINDOW_S` that began after the last change — unless a launch is
      pending or ended during the wait (a program just started keeps building what it shows).
      While the programs keep working, each later window is judged again.
    """
    method = DamageTracker.method
    start = time.monotonic()
    cap_at = start + spec.cap_ms / 1000
    launch_cap_at = start + spec.longest_ms() / 1000
    pending_within_s = max(LAUNCH_TIMEOUT_S, spec.longest_ms() / 1000)
    expect_at = start + spec.expect_ms / 1000
    speed = 1.0 if activity is None else activity.speed
    busy_span = BUSY_LIMIT_QUIETS * max(spec.expect_ms, spec.quiet_ms) / 1000 * speed
    # the busy limit's origin: the action's start, the end of a launch it caused, or the last
    # counted damage larger than a caret, whichever is latest (monotonic seconds)
    drew = start
    quiet = spec.quiet_ms / 1000
    idle_quiet = spec.quiet_when_idle() / 1000
    short = activity is not None and activity.available and idle_quiet < quiet
    with condition:
        while True:
            box: Rect | None = None
            last: float | None = None
            rects: list[Rect] = []
            for item in reversed(history):
                if item.t < since:
                    break
                if counts(item):
                    rects.append(item.rect)
                    box = item.rect if box is None else box.union(item.rect)
                    last = item.t if last is None else max(last, item.t)
                    if item.rect.area > protocol.VISIBLE_CHANGE_AREA:
                        drew = max(drew, item.t)
            events = len(rects)
            now = time.monotonic()
            launching = launched = idle = False
            if launches is not None:
                ended = launches.ended_since(since)
                if ended is not None:
                    launched = True
                    last = ended if last is None else max(last, ended)
                    drew = max(drew, ended)  # the program just drew its first frame
                    if activity is not None:
                        for pid in launches.ended_pids(since):
                            activity.watch(pid)  # a program this action started, once drawn
                launching = launches.pending(now, within_s=pending_within_s)
            cap = launch_cap_at if launching or launched else cap_at
            if launching:
                deadline = cap
                done = now >= deadline
                settled = False
            elif last is None:
                deadline = min(expect_at, cap)
                done = now >= deadline
                settled = True
            else:
                deadline = min(last + quiet, cap)
                done = now >= deadline
                settled = last + quiet <= now
                if not done and short and not launched and activity is not None:
                    idle, deadline = _idle_end(activity, last + idle_quiet, now, deadline)
                    done = settled = settled or idle
            busy_end = drew + busy_span  # busy CPU counts for this long after it last drew
            if (
                done
                and not idle  # just seen idle after the last change: no need to look again
                and now < min(cap, busy_end)
                and activity is not None
                and activity.busy()
            ):
                done, deadline = False, min(cap, busy_end, now + BUSY_POLL_S)
            if done:
                ended_on = None if last is None or not settled or launching else spec.quiet_ms
                return SettleOutcome(
                    is_visible(rects),
                    settled,
                    round((now - start) * 1000),
                    box,
                    events,
                    method,
                    spec.quiet_when_idle() if idle else ended_on,
                    None if last is None else max(0, round((last - since) * 1000)),
                ), rects
            timeout = max(0.001, deadline - now)
            if last is None or launching:
                condition.wait(timeout=timeout)  # a first change or a launch's end: look at once
            else:
                # once a change came, more damage only moves the end later: look again at the
                # deadline, not at every damage event (each look walks the damage since the
                # action, and for a dialog drawing hundreds of rectangles that competed with
                # it for a slow guest's one vCPU)
                condition.wait_for(lambda: False, timeout=timeout)


def _idle_end(
    activity: Activity, idle_at: float, now: float, deadline: float
) -> tuple[bool, float]:
    """The short quiet period of :func:`_quiet_period`: (done, next deadline) at ``now`` for a
    wait whose screen is quiet from ``idle_at - idle_quiet`` and whose long period ends at
    ``deadline``. The CPU is sampled every :data:`IDLE_STEP_S` from :data:`IDLE_WINDOW_S` before
    ``idle_at`` on; the wait ends at the first sample from ``idle_at`` on that closes an idle
    window of :data:`IDLE_WINDOW_S` (programs still working when the screen went quiet are
    seen idle that long after they stop, not a whole window later)."""
    window_at = idle_at - IDLE_WINDOW_S
    if now < window_at:
        return False, min(deadline, window_at)
    verdict = activity.idle_since(window_at, IDLE_WINDOW_MIN_S)
    if verdict and now >= idle_at:
        return True, now
    later = min(idle_at, now + IDLE_STEP_S) if now < idle_at else now + IDLE_STEP_S
    return False, min(deadline, max(later, now + 0.001))


class PollingTracker:
    """Fallback without DAMAGE: hash grabs every 30 ms (see the module docstring).

    :param grab: returns an image of a region (native pixels; ``None``: the whole screen) —
        the agent's screen, in any mode that compares
        (:meth:`cubicle_guest.screen.Screen.grab_raw`).
    """

    method = "poll"

    def __init__(self, grab: Callable[[Rect | None], Image.Image]) -> None:
        self._grab = grab
        self._before: tuple[float, Image.Image] | None = None
        """The grab taken when the current action began, with its start time."""
        self._lock = threading.Lock()

    def begin_input(self) -> float:
        image = self._grab(None)
        now = time.monotonic()
        with self._lock:
            self._before = (now, image)
        return now

    def end_input(self) -> None:
        with self._lock:
            self._before = None

    def wait(
        self,
        since: float,
        spec: protocol.SettleSpec,
        region: Rect | None = None,
        activity: Activity | None = None,  # frame polling ignores it: always the long quiet
    ) -> SettleOutcome:
        with self._lock:
            before = self._before[1] if self._before and self._before[0] == since else None
        start = time.monotonic()
        if before is None:
            before = self._grab(None)
        reference = before.crop(_box(region)) if region is not None else before
        last_hash = zlib.crc32(reference.tobytes())
        last_change: float | None = None
        events = 0
        current = reference
        while True:
            now = time.monotonic()
            elapsed = now - start
            if last_change is None and elapsed * 1000 >= min(spec.expect_ms, spec.cap_ms):
                return SettleOutcome(False, True, round(elapsed * 1000), None, 0, self.method)
            if last_change is not None and (
                (now - last_change) * 1000 >= spec.quiet_ms
                and elapsed * 1000 >= min(spec.expect_ms, spec.cap_ms)
            ):
                break
            if elapsed * 1000 >= spec.cap_ms:
                break
            time.sleep(POLL_INTERVAL_S)
            image = self._grab(region)
            digest = zlib.crc32(image.tobytes())
            if digest != last_hash:
                last_hash, last_change, current = digest, time.monotonic(), image
                events += 1
        now = time.monotonic()
        settled = last_change is None or (now - last_change) * 1000 >= spec.quiet_ms
        offset = (region.x, region.y) if region is not None else (0, 0)
        rects = changed_rects(reference, current, offset=offset)
        box = None
        for rect in rects:
            box = rect if box is None else box.union(rect)
        return SettleOutcome(
            is_visible(rects),
            settled,
            round((now - start) * 1000),
            box,
            events,
            self.method,
            spec.quiet_ms if settled and last_change is not None else None,
            None if last_change is None else round((last_change - since) * 1000),
        )

    def close(self) -> None:
        with self._lock:
            self._before = None


def changed_rects(
    before: Image.Image, after: Image.Image, *, offset: tuple[int, int] = (0, 0)
) -> list[Rect]:
    """Where two same-size images differ: one exact box per :data:`CELL_PX` cell that changed,
    in the images' pixels plus ``offset`` (screen pixels when the images are screen regions)."""
    if before.size != after.size:
        raise ValueError(f"cannot compare images of sizes {before.size} and {after.size}")
    return _difference_rects(
        ImageChops.difference(before.convert("RGB"), after.convert("RGB")), offset
    )


def _difference_rects(difference: Image.Image, offset: tuple[int, int]) -> list[Rect]:
    """:func:`changed_rects` of a difference image (zero where unchanged)."""
    if difference.getbbox() is None:
        return []
    width, height = difference.size
    rects: list[Rect] = []
    for top in range(0, height, CELL_PX):
        for left in range(0, width, CELL_PX):
            cell = (left, top, min(left + CELL_PX, width), min(top + CELL_PX, height))
            found = difference.crop(cell).getbbox()
            if found is not None:
                x0, y0, x1, y1 = found
                rects.append(Rect(offset[0] + left + x0, offset[1] + top + y0, x1 - x0, y1 - y0))
    return rects


def pixel_changes(
    before: Image.Image, grab: Callable[[Rect], Image.Image], damage: list[Rect]
) -> tuple[bool, Rect | None]:
    """What really differs where ``damage`` was reported: (a visible change, the bounding box
    of the changed pixels or ``None``) between ``before`` (the whole screen as the action began)
    and ``grab(rect)`` (a region of the screen now, in ``before``'s mode).

    Each group of nearby damage (:func:`cubicle_guest.geometry.clusters`) is grabbed again and
    compared with ``before``; as every group of changed pixels lies inside one group of damage, the
    verdict is :func:`is_visible` of :func:`changed_rects` — computed only where needed: a group
    whose changed pixels fit in :data:`protocol.VISIBLE_CHANGE_AREA` cannot hold a visible change,
    and a group with a :data:`CELL_PX` cell of :data:`DENSE_CELL_PIXELS` changed pixels holds one.

    :raises GuestError: a grab failed.
    """
    screen = Rect(0, 0, before.width, before.height)
    visible = False
    box: Rect | None = None
    for group in sorted(clusters(damage), key=lambda rect: -rect.area):
        area = group.intersection(screen)
        if area is None:
            continue
        difference = ImageChops.difference(before.crop(_box(area)), grab(area))
        found = difference.getbbox()
        if found is None:
            continue
        x0, y0, x1, y1 = found
        changed = Rect(area.x + x0, area.y + y0, x1 - x0, y1 - y0)
        box = changed if box is None else box.union(changed)
        if visible or changed.area <= protocol.VISIBLE_CHANGE_AREA:
            continue
        visible = _has_dense_cell(difference) or is_visible(
            _grid_rects(difference.crop(found), changed)
        )
    return visible, box


def _grid_rects(difference: Image.Image, where: Rect) -> list[Rect]:
    """:func:`changed_rects` of a difference image that lies at ``where`` on the screen, in the
    screen's :data:`CELL_PX` grid (as a whole-screen comparison cuts it)."""
    left, top = where.x - where.x % CELL_PX, where.y - where.y % CELL_PX
    right = where.x + where.width + -(where.x + where.width) % CELL_PX
    bottom = where.y + where.height + -(where.y + where.height) % CELL_PX
    canvas = Image.new(difference.mode, (right - left, bottom - top))
    canvas.paste(difference, (where.x - left, where.y - top))
    return _difference_rects(canvas, (left, top))


def _has_dense_cell(difference: Image.Image) -> bool:
    """Whether some :data:`CELL_PX` cell of a difference image (zero: unchanged) has at least
    :data:`DENSE_CELL_PIXELS` changed pixels in one band (cells cut by the edges are left out)."""
    width = difference.width - difference.width % CELL_PX
    height = difference.height - difference.height % CELL_PX
    if not width or not height:
        return False
    changed = difference.point(lambda value: 255 if value else 0)  # every band
    levels = changed.reduce(CELL_PX, box=(0, 0, width, height)).getextrema()
    # a cell's level is 255 x its changed share, rounded (at most 0.5 off)
    densest = max(high for _, high in levels)  # type: ignore[misc]
    return densest - 0.5 >= DENSE_CELL_PIXELS * 255 / CELL_PX**2


def is_visible(rects: list[Rect]) -> bool:
    """A *visible change*: some group of nearby changed rectangles has a bounding box larger than
    :data:`cubicle_guest.protocol.VISIBLE_CHANGE_AREA` (a moved or blinking caret is not one)."""
    largest = largest_cluster(rects)
    return largest is not None and largest.area > protocol.VISIBLE_CHANGE_AREA


def _launch_watcher(
    display_name: str | None, on_change: Callable[[], None]
) -> LaunchWatcher | None:
    """A :class:`LaunchWatcher`, or ``None`` (logged) when it cannot watch this display."""
    try:
        return LaunchWatcher(display_name, on_change)
    except (xerror.DisplayError, xerror.XError, OSError) as exc:
        log.warning("no launch tracking (%s): launcher clicks settle on damage alone", exc)
        return None


def _box(region: Rect) -> tuple[int, int, int, int]:
    return (region.x, region.y, region.x + region.width, region.y + region.height)


def open_tracker(
    display_name: str | None, grab: Callable[[Rect | None], Image.Image], *, force_poll: bool
) -> ChangeTracker:
    """A :class:`DamageTracker`, or a :class:`PollingTracker` when DAMAGE is missing (logged)
    or ``force_poll`` is set."""
    if not force_poll:
        try:
            return DamageTracker(display_name, grab)
        except GuestError as exc:
            log.warning("no DAMAGE change tracking (%s): falling back to frame polling", exc)
    return PollingTracker(grab)
