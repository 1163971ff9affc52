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

import dataclasses
import io
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from PIL import Image

from cubicle.drivers.approvals import ApprovalPolicy, ApproveAll
from cubicle.drivers.scripted_gemini import ScriptedGemini
from cubicle.drivers.scripted_messages import ScriptedMessages
from cubicle.drivers.scripted_model import ScriptedModel, Turn, parse_script
from cubicle.drivers.scripted_model.expect import Expectation
from cubicle.drivers.viewport import Viewport
from cubicle.orchestrator.drill.provider_scripts import parse_provider_script
from cubicle.orchestrator.drill.stale import StaleCheck
from cubicle.orchestrator.modelrun import Desktop
from cubicle.orchestrator.modelrun.errors import ExpectationFailed, RunError
from cubicle.orchestrator.modelrun.functions import FunctionTool
from cubicle.orchestrator.modelrun.ledger import SavedLedger
from cubicle.orchestrator.modelrun.loop import LoopKind, LoopOutcome
from cubicle.orchestrator.modelrun.model_providers import provider_of_loop
from cubicle.orchestrator.modelrun.run import (
    FAILURE_SCREEN,
    RESUME_NOTE,
    LoopContext,
    ModelEndpoint,
    RunResult,
    RunSpec,
    run,
)
from cubicle.orchestrator.modelrun.signin import SigninCallback, credentials_callback
from cubicle.orchestrator.modelrun.verify import Check
from cubicle.orchestrator.provider import SandboxInfo
from cubicle.orchestrator.tasks import (
    DEFAULT_TASK,
    ModelProviderName,
    Task,
    fill,
    load_task,
)
from cubicle.orchestrator.trajectory.recorder import (
    TrajectoryObserver,
    TrajectoryRecorder,
    read_trajectory,
)
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError
from cubicle_guest.input_log import DEFAULT_INPUT_LOG, INPUT_OPS
from cubicle_guest.protocol import MAX_LAUNCH_CAP_MS, MAX_SETTLE_CAP_MS, SettleSpec

__all__ = [
    "DRILL_SETTLE",
    "FAILURE_SCREEN",
    "SLOW_GUEST_TIME_SCALE",
    "DrillModel",
    "DrillResult",
    "actions_performed",
    "guest_time_scale",
    "input_log",
    "run_drill",
]

DRILL_MODEL = "drill-scripted"
DRILL_SETTLE = SettleSpec(expect_ms=300, quiet_ms=400, cap_ms=10_000)
"""The drill's settle: the defaults, with a cap that covers an application's start (the agent
waits while a launch is pending, bounded by the cap; measured on a loaded 2-core host: 2-3.5 s
from a click on the browser's launcher to Chromium's first drawn frame)."""


@dataclass
class DrillResult(RunResult):
    """What one drill run found: a :class:`RunResult` (``ok`` only when the loop finished and
    every check holds, with at least one check) plus the stale-screenshot counter."""

    task: str = DEFAULT_TASK
    stale_check: StaleCheck | None = None
    """The stale-screenshot counter of the run (``None`` when the loop never started)."""
    sandbox_s: float = 0.0
    """Seconds of the whole run including creating and removing its sandbox (0: not known)."""
    require_checks: bool = True
    sandbox: str = ""
    """The sandbox id it ran on (set by the CLI)."""
    model_requests: list[dict[str, Any]] = field(default_factory=list)
    """Every request body the scripted model received: what the run sent to the model."""

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


def scaled_settle(time_scale: float) -> SettleSpec:
    """The driver's settle spec for a guest ``time_scale`` times slower than a container: the
    same expect, quiet and idle periods as a container's (:data:`DRILL_SETTLE`) — the wait ends
    on the app's own signals (damage, launches, the idle programs and, on a VM, the idle guest:
    :mod:`cubicle_guest.machine`), and the agent itself lets busy CPU hold a wait longer on a
    machine it measured slower, so nothing here is scaled by the accelerator's name (until
    2026-12 every period was scaled 10x under TCG: the wait ended seconds after the screen was
    final). Only the caps grow on a slow guest: the largest the protocol allows (60 s: measured
    under TCG, a click on the browser's launcher took 25 s to Chromium's first drawn frame, and
    29-34 s in two CI runs), and a launch cap of 180 s, the most the protocol allows, for an
    action that launched a program (on a slower TCG host Chromium's first frame came more than
    60 s after the click: ``make conformance``, 2026-12-01)."""
    base = DRILL_SETTLE
    if time_scale <= 1.0:
        return base
    return dataclasses.replace(base, cap_ms=MAX_SETTLE_CAP_MS, launch_cap_ms=MAX_LAUNCH_CAP_MS)


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
    observers: Iterable[TrajectoryObserver] = (),
    functions: Sequence[FunctionTool] = (),
    signin: SigninCallback | None = None,
    ledger: bool = False,
    resume: SavedLedger | None = None,
    on_turn_completed: Callable[[], None] | None = None,
) -> DrillResult:
    """Run ``task`` (default: the shipped ``desktop`` task) once with the ``loop`` flavour of
    its provider's SDK (:data:`~cubicle.orchestrator.modelrun.model_providers.PROVIDER_LOOPS`)
    and the task's script for that provider: :func:`cubicle.orchestrator.modelrun.run.run` with
    a :class:`DrillModel`.

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
    :param observers: see every trajectory record as it is written
        (:class:`cubicle.orchestrator.trajectory.TrajectoryObserver`).
    :param functions: the function tools the script calls, with who answers them (the
        ``runner`` loop only; ``cubicle serve`` asks its client).
    :param signin: who answers a sign-in form (``cubicle serve``: its client); default: the
        task's test credentials (``[signin]``), given as a person would.
    :param ledger: keep the runner loop's ledger in ``out`` (``cubicle drill`` does; see
        :mod:`cubicle.orchestrator.modelrun.ledger`).
    :param resume: continue the interrupted runner-loop drill whose ledger this is (in ``out``,
        on the same desktop): no set-up again, the script from its next turn.
    :param on_turn_completed: called after every completed turn (the CLI marks the sandbox
        resumable there).
    """
    task = task or load_task(DEFAULT_TASK)
    if workdir is not None:
        task = task.model_copy(update={"setup": task.setup.model_copy(update={"workdir": workdir})})
    provider = provider_of_loop(loop)
    script = script_template if script_template is not None else task.script(provider)
    model_view = task.scripted.model_view if task.scripted else [1024, 640]
    model = DrillModel(script, (model_view[0], model_view[1]), provider)
    spec = RunSpec(
        out=out,
        loop=loop,
        task=task,
        viewport=Viewport.exact(model_view[0], model_view[1]),
        settle=scaled_settle(time_scale),
        max_steps=len(script.get("turns") or []) + 1,
        safety_policy=safety_policy or ApproveAll(),
        on_stall="record",
        record=record,
        time_scale=time_scale,
        stop_launched_apps=not keep_apps,
        require_checks=True,
        functions=tuple(functions),
        signin=signin
        if signin is not None or task.signin is None
        else credentials_callback(**task.signin.model_dump()),
        ledger=ledger,
        resume=resume,
        on_turn_completed=on_turn_completed,
    )
    result = run(desktop, spec, model, observers=observers, cancel_requested=cancel_requested)
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(RunResult)}
    return DrillResult(
        **{**fields, "task": task.name},
        stale_check=model.stale_check,
        model_requests=model.requests,
    )


class DrillModel:
    """The task's scripted model as a :class:`~cubicle.orchestrator.modelrun.run.ModelSource`:
    for ``openai`` the Responses API stand-in
    (:class:`cubicle.drivers.scripted_model.ScriptedModel`), for ``anthropic`` the Messages API
    one (:class:`~cubicle.drivers.scripted_messages.ScriptedMessages`), for ``gemini`` the
    ``generateContent`` one (:class:`~cubicle.drivers.scripted_gemini.ScriptedGemini`), each
    playing the task's script for that provider to the provider's real client. Between turns it
    looks (module docstring): whether the screenshot the model just received was stale, and
    whether it shows what the turn ``sees``; its own check is that no model-visible screenshot
    was stale.

    :param script: the script template (placeholders are filled from the prepared task).
    :param model_view: the model's view in pixels (the screenshots' size).
    :param provider: whose API the stand-in speaks (``script`` is that provider's).
    """

    name = DRILL_MODEL

    def __init__(
        self,
        script: dict[str, Any],
        model_view: tuple[int, int],
        provider: ModelProviderName = "openai",
    ) -> None:
        self.script = script
        self.model_view = model_view
        self.provider = provider
        self.stale_check: StaleCheck | None = None
        self.requests: list[dict[str, Any]] = []
        """Every request body the stand-in received, in order (what was sent to the model)."""

    @contextmanager
    def serve(self, context: LoopContext) -> Iterator[ModelEndpoint]:
        values = context.guest.values if context.guest is not None else {}
        filled = fill(self.script, values)
        if self.provider == "openai":
            parsed = parse_script({"model_view": list(self.model_view), **filled})
            for turn in parsed.turns:
                if turn.before:
                    raise RunError(
                        f"script turn {turn.index} has 'before' guest steps; the drill is "
                        "pixels-only after the first turn (put set-up in the task's [setup])"
                    )
            turns: Sequence[_Looked] = parsed.turns
        else:
            provider_script = parse_provider_script(filled, f"{self.provider} script")
            turns = provider_script.turns
        # a resumed run's actions that happened before its interruption (the openai runner's)
        skip = _performed_of_uncertain(context, parsed.turns) if self.provider == "openai" else 0
        looker = self._looker(context, turns, skip=skip)
        if self.provider == "openai":
            with ScriptedModel(
                parsed,
                on_turn=lambda index, turn, body: looker(index),
                raise_on_exit=False,
                start=context.resume.completed_turns if context.resume is not None else 0,
                skip_actions=skip,
            ) as model:
                self.requests = model.requests
                yield ModelEndpoint(
                    base_url=model.base_url,
                    api_key="drill",
                    model=DRILL_MODEL,
                    trust_env=False,
                    max_retries=0,
                    after_loop=_after_loop(model.failures, model.assert_finished),
                    checks=self._checks,
                )
            return
        stand_in: ScriptedMessages | ScriptedGemini
        if self.provider == "anthropic":
            stand_in = ScriptedMessages(provider_script.stand_in_turns(), on_turn=looker)
        else:
            stand_in = ScriptedGemini(provider_script.stand_in_turns(), on_turn=looker)

        def finished() -> None:
            if not stand_in.finished:
                raise RunError(
                    f"the {self.provider} script was not played to its end "
                    f"({len(stand_in.requests)} of {len(stand_in.turns)} turns)"
                )

        with stand_in:
            self.requests = stand_in.requests
            yield ModelEndpoint(
                base_url=stand_in.base_url,
                api_key="drill",
                model=DRILL_MODEL,
                provider=self.provider,
                trust_env=False,
                max_retries=0,
                after_loop=_after_loop(stand_in.failures, finished),
                checks=self._checks,
            )

    def _checks(self) -> list[Check]:
        return [stale_screenshots_check(self.stale_check)] if self.stale_check else []

    def _looker(
        self, context: LoopContext, turns: Sequence[_Looked], *, skip: int = 0
    ) -> Callable[[int], None]:
        """What the drill does before answering turn ``index`` (module docstring). ``skip``:
        how many of a resumed turn's actions happened before the interruption."""
        client, driver, session = context.agent, context.driver, context.session
        stale = StaleCheck(
            client,
            driver.screenshot_request,
            screen=context.steps.screen,
            view=self.model_view,
            recorder=session.recorder,
        )
        self.stale_check = stale
        # what "changed" on the first screenshot compares with: the screen before the model
        # acts (taken now, not recorded: the model never receives it)
        previous = [_image(client.screenshot(**driver.screenshot_request, timeout=30).blob)]
        before_interruption = _shot_before_resume(session.recorder) if skip else None

        def before_turn(index: int) -> None:
            """Look only: was the screenshot the model just received stale, and does it show
            what the turn expects to see?"""
            if index == 0 or session.last_model_shot is None:
                return
            if context.resume is not None and index == context.resume.completed_turns:
                # the resumed run's fresh observation: no action made it. What the next turn's
                # "changed" compares with: the screen before this turn's first action — when
                # some of them happened before the interruption, the last shot before it
                previous[0] = before_interruption or _image(session.last_model_shot)
                return
            if not turns[index - 1].is_call:
                return  # a function call's answer: the model received no new screenshot
            stale.check(session.last_model_shot, session.recorder.last_shot)
            shot = _image(session.last_model_shot)
            turn = turns[index]
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

        return before_turn


class _Looked(Protocol):
    """A scripted turn as the drill looks at it (either script's)."""

    @property
    def is_call(self) -> bool: ...

    @property
    def sees(self) -> tuple[Expectation, ...]: ...


def _after_loop(
    failures: Sequence[BaseException], finished: Callable[[], None]
) -> Callable[[LoopOutcome], None]:
    def after_loop(outcome: LoopOutcome) -> None:
        if failures:
            # the model's own record says why (a guest step failed, the run went off script, an
            # expectation failed); the SDK only saw an HTTP error
            failure: BaseException = failures[0]
            if failure.__cause__ is not None:
                failure = failure.__cause__
            raise failure from outcome.error
        if outcome.error is None:
            finished()

    return after_loop


def input_log(client: AgentClient) -> list[dict[str, Any]]:
    """The guest agent's input log (:mod:`cubicle_guest.input_log`): every input request it
    injected, in order (a line cut short by a killed agent is left out)."""
    try:
        blob = client.read_file(DEFAULT_INPUT_LOG, timeout=30).blob
    except CubicleError:
        return []
    entries = []
    for line in blob.decode("utf-8", "replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def _input_actions(actions: Sequence[dict[str, Any]]) -> int:
    return sum(1 for action in actions if action.get("type") in INPUT_OPS)


def actions_performed(turns: Sequence[Turn], start: int, logged: int) -> int:
    """How many leading actions of script turn ``start`` (the turn a resumed run continues
    from) were performed before the interruption, given ``logged`` input requests in the
    guest's input log: those beyond the input actions of turns ``0..start-1``, with the
    non-input actions before them.

    :raises RunError: the log does not fit the script (more input than the turn holds).
    """
    if start >= len(turns) or turns[start].actions is None:
        return 0
    done_before = sum(_input_actions(turn.actions or ()) for turn in turns[:start])
    performed = logged - done_before
    batch = turns[start].actions or ()
    if not 0 <= performed <= _input_actions(batch):
        raise RunError(
            f"resume: the guest's input log holds {performed} input requests beyond the "
            f"{done_before} of the {start} completed turns; turn {start} has only "
            f"{_input_actions(batch)}"
        )
    skip, seen = 0, 0
    for action in batch:
        if seen == performed:
            break
        skip += 1
        seen += action.get("type") in INPUT_OPS
    return skip


def _performed_of_uncertain(context: LoopContext, turns: Sequence[Turn]) -> int:
    """:func:`actions_performed` for a resumed run with a call in flight at its interruption
    (what a model sees on the fresh screenshot, read here from the guest's input log), recorded
    as ``settled``; 0 when nothing was in flight."""
    resume = context.resume
    if resume is None or not resume.uncertain:
        return 0
    start = resume.completed_turns
    skip = actions_performed(turns, start, len(input_log(context.agent)))
    if start < len(turns) and turns[start].actions is not None:
        context.session.recorder.event(
            "settled",
            turn=start,
            performed_actions=skip,
            of=len(turns[start].actions or ()),
            by="the guest's input log",
        )
    return skip


def _shot_before_resume(recorder: TrajectoryRecorder) -> Image.Image | None:
    """The last screenshot the model received before the run was interrupted, or None: the one
    recorded before the interrupted run's last model request. (A screenshot taken after that
    request — the output of the call in flight at the interruption — never reached the model.)"""
    events = read_trajectory(recorder.folder)
    settles = [i for i, e in enumerate(events) if e.get("note") == RESUME_NOTE]
    shot: int | None = None
    received: int | None = None
    for event in events[: settles[-1] if settles else len(events)]:  # before this resume's
        if event["kind"] == "screenshot":
            shot = int(event["index"])
        elif event["kind"] == "model_request":
            received = shot
    if received is None:
        return None
    path = recorder.folder / "shots" / f"{received:04d}.png"
    return _image(path.read_bytes()) if path.is_file() else None


def _image(png: bytes) -> Image.Image:
    with Image.open(io.BytesIO(png)) as image:
        return image.convert("RGB")
