"""One drill run of a task: set up the guest, play the task's scripted model through the real
SDK loop, verify.

**Pixels only.** The task's ``[setup]`` runs before the first model turn (files, the form server,
apps it asks to open). After that everything in the guest happens through the model's actions:
the scripted model opens apps by clicking the panel's launchers, types URLs, saves through
dialogs. Between turns the drill only *looks*: it checks that the screenshot the model just
received was not stale (:mod:`cubicle.orchestrator.drill.stale`) and that it shows what the turn
``sees`` (:mod:`cubicle.drivers.scripted_model.expect`); a turn whose expectation fails stops the
run, naming it. A script with ``before`` guest steps is refused. The report holds only the
screenshots the model received.

:func:`run_drill` takes anything that gives an agent connection
(:class:`~cubicle.orchestrator.modelrun.Desktop`: a :class:`cubicle.orchestrator.sandbox.Sandbox`,
or a local desktop in tests). It always writes the trajectory folder and its ``report.html``,
verifies the guest's state through the agent even when the loop failed, and stops the programs the
set-up launched (unless ``keep_apps``).
Tearing the guest down is the caller's job: one fresh guest per run, as the apps the model
opened stay open.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openai import OpenAI
from PIL import Image

from cubicle.drivers.approvals import ApprovalPolicy, ApproveAll
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.errors import ScriptViolation
from cubicle.drivers.scripted_model import ScriptedModel, Turn, parse_script
from cubicle.drivers.viewport import Viewport
from cubicle.orchestrator.drill.stale import StaleCheck
from cubicle.orchestrator.modelrun import Desktop
from cubicle.orchestrator.modelrun.budget import describe_budget, resolve_budget
from cubicle.orchestrator.modelrun.errors import DrillCancelled, DrillError, ExpectationFailed
from cubicle.orchestrator.modelrun.guest_steps import GuestSteps, TaskGuest
from cubicle.orchestrator.modelrun.loop import LoopKind, LoopThread, RecordedSession, error_chain
from cubicle.orchestrator.modelrun.verify import Check, task_verifiers
from cubicle.orchestrator.provider import SandboxInfo
from cubicle.orchestrator.tasks import DEFAULT_TASK, Task, fill, load_task
from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder
from cubicle.orchestrator.trajectory.report import write_report
from cubicle.orchestrator.view.handover import recorded_gate
from cubicle.orchestrator.view.recording import Recording, recording_event
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError
from cubicle_guest.protocol import MAX_LAUNCH_CAP_MS, MAX_SETTLE_CAP_MS, SettleSpec

__all__ = [
    "DRILL_SETTLE",
    "SLOW_GUEST_TIME_SCALE",
    "DrillResult",
    "guest_time_scale",
    "run_drill",
]

DRILL_MODEL = "drill-scripted"
DRILL_SETTLE = SettleSpec(expect_ms=300, quiet_ms=400, cap_ms=10_000)
"""The drill's settle: the defaults, with a cap that covers an application's start (the agent
waits while a launch is pending, bounded by the cap; measured on a loaded 2-core host: 2-3.5 s
from a click on the browser's launcher to Chromium's first drawn frame)."""


@dataclass
class DrillResult:
    """What one drill run found. ``ok`` only when the loop finished and every check holds."""

    loop: LoopKind
    out: Path
    task: str = DEFAULT_TASK
    checks: list[Check] = field(default_factory=list)
    final_message: str | None = None
    error: str | None = None
    wall_s: float = 0.0
    guest_wait_s: float = 0.0
    """Seconds in scripted guest steps (set-up, window waits, settles)."""
    driver_s: float = 0.0
    """Seconds the driver spent on actions and screenshots."""
    model_s: float = 0.0
    """Seconds of model HTTP requests (the scripted steps run inside them)."""
    actions: int = 0
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)
    """Workarounds the drill applied to the guest (printed in the summary)."""
    stale_check: StaleCheck | None = None
    """The stale-screenshot counter of the run (``None`` when the loop never started)."""
    sandbox_s: float = 0.0
    """Seconds of the whole run including creating and removing its sandbox (0: not known)."""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def report(self) -> Path:
        return self.out / "report.html"

    def summary(self) -> str:
        """A short human summary: verdict, checks (expected vs got when failed), timings."""
        verdict = "PASSED" if self.ok else ("CANCELLED" if self.cancelled else "FAILED")
        lines = [f"drill {self.task} ({self.loop}): {verdict}"]
        if self.error:
            lines.append(f"  error: {self.error}")
        lines.extend("  " + check.describe() for check in self.checks)
        if self.final_message:
            lines.append(f"  model's final message: {self.final_message}")
        lines.extend(f"  note: {note}" for note in self.notes)
        if self.stale_check is not None:
            lines.append(
                f"  stale model-visible screenshots: {self.stale_check.stale} of "
                f"{self.stale_check.checked} checked"
            )
        guest = self.guest_wait_s + self.driver_s
        share = guest / self.wall_s * 100 if self.wall_s else 0.0
        lines.append(
            f"  wall {self.wall_s:.1f} s, of which waiting on the guest {guest:.1f} s "
            f"({share:.0f}%: scripted waits/set-up {self.guest_wait_s:.1f} s, actions and "
            f"screenshots {self.driver_s:.1f} s); {self.actions} actions"
        )
        lines.append(f"  trajectory: {self.out / 'trajectory.jsonl'}  report: {self.report}")
        return "\n".join(lines)


SLOW_GUEST_TIME_SCALE = 4.0
"""How much longer the scripted waits are on a guest under software emulation (TCG)."""


def guest_time_scale(info: SandboxInfo) -> float:
    """The wait scale for a sandbox: 4x for a VM emulated by TCG (measured: its dialogs draw
    their contents seconds after mapping, and chromium takes 24-41 s to show a page), else 1."""
    return SLOW_GUEST_TIME_SCALE if info.detail.get("accelerator") == "tcg" else 1.0


SLOW_GUEST_SETTLE_FACTOR = 2.5
"""On a slow guest the settle values grow by ``time_scale`` times this (10x under TCG): measured
there, Chromium with one emulated vCPU pauses for over 1.6 s in the middle of drawing typed text
(the first CJK glyphs load a large font), so a 4x quiet period cut the wait early."""


def scaled_settle(time_scale: float) -> SettleSpec:
    """The driver's settle spec for a guest ``time_scale`` times slower than a container: expect
    and quiet periods x(``time_scale`` x :data:`SLOW_GUEST_SETTLE_FACTOR`), the cap the largest
    the protocol allows (60 s: measured under TCG, a click on the browser's launcher took 25 s
    to Chromium's first drawn frame, and 29-34 s in two CI runs, after which its new-tab page
    still takes seconds; the cost is that the actions whose app keeps drawing — a blinking caret
    in a field — wait that long), and a launch cap of 180 s, the most the protocol allows, for
    an action that launched a program (on a slower TCG host Chromium's first frame came more
    than 60 s after the click: ``make conformance``, 2026-12-01)."""
    base = DRILL_SETTLE
    factor = 1.0 if time_scale <= 1.0 else time_scale * SLOW_GUEST_SETTLE_FACTOR
    cap = base.cap_ms if time_scale <= 1.0 else MAX_SETTLE_CAP_MS
    return SettleSpec(
        min(cap, round(base.expect_ms * factor)),
        min(cap, round(base.quiet_ms * factor)),
        cap,
        # typing: scaled like the rest (until 2026-12-01 a null here never reached the agent, so
        # every TCG drill ran with the unscaled 150 ms and the busy probe, never stale; scaled is
        # the longer, safer wait); the idle quiet period was measured on containers only: off
        None if base.typing_quiet_ms is None else min(cap, round(base.typing_quiet_ms * factor)),
        base.idle_quiet_ms if factor == 1.0 else None,
        base.launch_cap_ms if factor == 1.0 else MAX_LAUNCH_CAP_MS,
    )


def stale_screenshots_check(stale: StaleCheck) -> Check:
    """A check that no model-visible screenshot was stale
    (:mod:`cubicle.orchestrator.drill.stale`)."""
    return Check(
        "stale model-visible screenshots",
        stale.stale == 0,
        0,
        stale.stale,
        ""
        if stale.stale == 0
        else f"{stale.stale} of {stale.checked} screenshots the model received changed visibly "
        f"within {stale.window_s:.0f} s without new input (see 'stale_check' in the trajectory)",
    )


FAILURE_SCREEN = "failure.png"


def _keep_failure_screen(client: AgentClient, recorder: TrajectoryRecorder, out: Path) -> None:
    """Save the screen as it was when the drill failed, as ``out/failure.png`` (native size).

    Outside ``shots/``: the report holds only what the model received. Best effort: a guest that
    cannot answer any more leaves no file, and the drill's own error stays the one reported.
    """
    try:
        png = client.screenshot(timeout=30.0).blob
    except CubicleError:
        return
    (out / FAILURE_SCREEN).write_bytes(png)
    recorder.event("failure_screen", file=FAILURE_SCREEN)


def run_drill(
    desktop: Desktop,
    *,
    loop: LoopKind,
    out: Path,
    task: Task | None = None,
    workdir: str | None = None,
    script_template: dict[str, Any] | None = None,
    safety_policy: ApprovalPolicy | None = None,
    cancel_requested: Callable[[], bool] = lambda: False,
    keep_apps: bool = False,
    time_scale: float = 1.0,
    record: tuple[float, int] | None = None,
) -> DrillResult:
    """Run ``task`` (default: the shipped ``desktop`` task) once with the ``loop`` flavour of
    the SDK and its scripted model.

    :param out: trajectory folder (created).
    :param workdir: overrides the task's ``setup.workdir`` (an absolute guest folder).
    :param script_template: the scripted model's script (default: the task's own).
    :param safety_policy: decides scripted safety checks (default: :class:`ApproveAll`; every
        decision is recorded). Actions without a safety check run without approval.
    :param cancel_requested: polled; when true the loop and the guest waits stop cooperatively.
    :param keep_apps: leave the programs the set-up started running.
    :param time_scale: multiplies set-up waits and the settle values for slow guests; see
        :func:`guest_time_scale`.
    :param record: ``(fps, kbps)``: write ``out/recording.mp4``
        (:mod:`cubicle.orchestrator.view.recording`).
    """
    task = task or load_task(DEFAULT_TASK)
    if workdir is not None:
        task = task.model_copy(update={"setup": task.setup.model_copy(update={"workdir": workdir})})
    script = script_template if script_template is not None else task.script()
    started = time.monotonic()
    result = DrillResult(loop=loop, out=out, task=task.name)
    with TrajectoryRecorder(out) as recorder:
        try:
            client = desktop.connect()
        except CubicleError as exc:
            # the guest is gone or unreachable: still leave a trajectory and a report behind
            result.error = error_chain(exc)
            recorder.event("error", where="connect", type=type(exc).__name__, message=str(exc))
            recorder.event("end", ok=False, final_message=None, wall_s=0.0, error=result.error)
            recorder.close()
            write_report(out)
            return result
        steps: GuestSteps | None = None
        guest: TaskGuest | None = None
        session = RecordedSession(recorder, safety_policy=safety_policy or ApproveAll())
        recording = None
        try:
            steps = GuestSteps(
                client, recorder=recorder, cancelled=cancel_requested, time_scale=time_scale
            )
            gate = recorded_gate(desktop, recorder, cancel_requested)
            session.gate = gate.wait if gate is not None else None
            guest = steps.prepare(task)
            model_view = task.scripted.model_view if task.scripted else [1024, 640]
            recording = Recording(desktop, out, fps=record[0], kbps=record[1]) if record else None
            if recording is not None:
                recording.start()
            recorder.event(
                "run",
                task=guest.prompt,
                loop=loop,
                context_budget=describe_budget(resolve_budget(loop, "default")),
                model=DRILL_MODEL,
                screen=list(steps.screen),
                model_view=list(model_view),
                meta={"task": task.name, "workdir": guest.workdir, "port": task.port},
            )
            _play(
                client,
                steps,
                session,
                result,
                loop=loop,
                model_view=(model_view[0], model_view[1]),
                script={"model_view": list(model_view), **fill(script, guest.values)},
                prompt=guest.prompt,
                cancel_requested=cancel_requested,
            )
        except BaseException as exc:
            result.error = error_chain(exc)
            result.cancelled = result.cancelled or isinstance(
                exc, DrillCancelled | KeyboardInterrupt
            )
            recorder.event("error", where="drill", type=type(exc).__name__, message=str(exc))
            if not isinstance(exc, Exception):
                raise
            if not result.cancelled:
                _keep_failure_screen(client, recorder, out)
        finally:
            try:
                if not result.cancelled and guest is not None:
                    result.checks = [c for v in task_verifiers(guest) for c in v(client)]
                    if result.stale_check is not None:
                        result.checks.append(stale_screenshots_check(result.stale_check))
                    for check in result.checks:
                        recorder.event(
                            "check",
                            name=check.name,
                            ok=check.ok,
                            expected=check.expected,
                            got=check.got,
                            detail=check.detail,
                        )
                if not keep_apps and steps is not None:
                    steps.stop_launched()
            finally:
                client.close()
                if recording is not None:
                    recorder.event("recording", **recording_event(recording.stop(), out))
                result.wall_s = time.monotonic() - started
                result.guest_wait_s = steps.wait_s if steps is not None else 0.0
                result.model_s = session.model_s
                result.driver_s = session.driver_s
                result.notes = list(steps.notes) if steps is not None else []
                result.actions = session.executed_actions
                recorder.event(
                    "end",
                    ok=result.ok,
                    final_message=result.final_message,
                    wall_s=round(result.wall_s, 2),
                    guest_wait_s=round(result.guest_wait_s, 2),
                    driver_s=round(result.driver_s, 2),
                    error=result.error,
                    usage=session.usage.as_dict(),
                )
    write_report(out)
    return result


def _play(
    client: AgentClient,
    steps: GuestSteps,
    session: RecordedSession,
    result: DrillResult,
    *,
    loop: LoopKind,
    model_view: tuple[int, int],
    script: dict[str, Any],
    prompt: str,
    cancel_requested: Callable[[], bool],
) -> None:
    parsed = parse_script(script)
    for turn in parsed.turns:
        if turn.before:
            raise DrillError(
                f"script turn {turn.index} has 'before' guest steps; the drill is pixels-only "
                "after the first turn (put set-up in the task's [setup])"
            )
    driver = GuestDriver(
        client,
        viewport=Viewport.exact(*model_view),
        on_action=session.on_action,
        settle=scaled_settle(steps.time_scale),
    )
    turns = parsed.turns
    stale = StaleCheck(
        client,
        driver.screenshot_request,
        screen=steps.screen,
        view=model_view,
        recorder=session.recorder,
    )
    result.stale_check = stale
    # what "changed" on the first screenshot compares with: the screen before the model acts
    # (taken now, not recorded: the model never receives it)
    previous = [_image(client.screenshot(**driver.screenshot_request, timeout=30).blob)]

    def before_turn(index: int, turn: Turn) -> None:
        """Look only: was the screenshot the model just received stale, and does it show what
        the turn expects to see?"""
        if index == 0 or session.last_model_shot is None:
            return
        stale.check(session.last_model_shot, session.recorder.last_shot)
        shot = _image(session.last_model_shot)
        if turn.sees:
            windows = client.windows(timeout=10).result.get("windows") or []
            for number, expectation in enumerate(turn.sees):
                problem = expectation.failure(shot, previous[0], windows)
                session.recorder.event(
                    "expectation",
                    turn=index,
                    shot=session.recorder.last_shot,
                    expected=expectation.describe(),
                    ok=problem is None,
                    got=problem,
                )
                if problem is not None:
                    raise ExpectationFailed(
                        f"turn {index}, sees[{number}]: expected {expectation.describe()}; "
                        f"{problem}"
                    )
        previous[0] = shot

    with ScriptedModel(
        parsed,
        on_turn=lambda index, turn, body: before_turn(index, turn),
        raise_on_exit=False,
    ) as model:
        openai_client = OpenAI(
            base_url=model.base_url,
            api_key="drill",
            max_retries=0,
            http_client=session.http_client(trust_env=False),
        )
        try:
            thread = LoopThread(
                loop,
                driver,
                openai_client,
                {"model": DRILL_MODEL, "input": prompt},
                session,
                max_steps=len(turns) + 1,
            )
            steps.cancelled = lambda: cancel_requested() or thread.cancelled()
            thread.start()
            while not thread.wait(0.5):
                if cancel_requested() and not thread.cancelled():
                    status = thread.cancel()
                    session.recorder.event("cancel", toolset_status=status)
            if cancel_requested():
                result.cancelled = True
        finally:
            openai_client.close()
        if model.failures:
            # the model's own record says why (a guest step failed, the run went off script);
            # the SDK only saw an HTTP error
            failure: ScriptViolation | BaseException = model.failures[0]
            if failure.__cause__ is not None:
                failure = failure.__cause__
            raise failure from thread.outcome.error
        if thread.outcome.error is not None:
            raise thread.outcome.error
        result.final_message = thread.outcome.final_message
        model.assert_finished()


def _image(png: bytes) -> Image.Image:
    with Image.open(io.BytesIO(png)) as image:
        return image.convert("RGB")
