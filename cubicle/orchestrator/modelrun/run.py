"""One model run on a desktop: the skeleton ``cubicle run``, the drill and ``cubicle serve``'s
turns share.

:func:`run` does, in this order, always writing the trajectory folder and its ``report.html``:

1. open the trajectory (:class:`~cubicle.orchestrator.trajectory.TrajectoryRecorder`, with the
   caller's observers) and an agent connection (a guest that cannot be reached still leaves a
   trajectory with the error and an ``end`` record);
2. the hand-over gate (a person holding control pauses every action), the recorded session
   (approvals, actions, screenshots, model turns, stall detection), who answers an ``ask:``
   sandbox's origin questions;
3. the task's set-up (:class:`~cubicle.orchestrator.modelrun.guest_steps.GuestSteps`), then the
   screen recording, the driver at the model's view and the ``run`` record;
4. the model (:class:`ModelSource`: a provider's endpoint — OpenAI's Responses API, Anthropic's
   Messages API, Gemini's ``generateContent`` — or the drill's scripted stand-in for one) and that
   provider's SDK loop in a worker thread (:func:`start_loop`: openai's ``LoopThread``,
   :class:`~cubicle.orchestrator.modelrun.claude_loop.ClaudeLoop`,
   :class:`~cubicle.orchestrator.modelrun.gemini_loop.GeminiLoop`), polled for cancellation and
   stalls. Everything else here is provider-neutral: the trajectory, the report, the recording,
   stall detection, takeover, usage and the checks are the same for every provider;
5. the checks of the guest's real state — after the loop, also when it failed (not when the run
   was cancelled) — then the model's own checks, clean-up, ``end`` and the report.

Tearing the desktop down stays the caller's: ``run`` closes only what it opened (the agent
connection, the model's client, the recording, the answerer).
"""

from __future__ import annotations

import base64
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, cast

from openai import OpenAI
from openai.lib.responses_tool_runner import ResponsesToolLedger
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

from cubicle.drivers.approvals import ApprovalPolicy, ApproveAll
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.settle import SettleOption
from cubicle.drivers.stall import DEFAULT_STALL_LIMIT, StallDetector
from cubicle.drivers.viewport import Viewport
from cubicle.orchestrator.modelrun import Desktop
from cubicle.orchestrator.modelrun.budget import BudgetSpec, describe_budget, resolve_budget
from cubicle.orchestrator.modelrun.errors import RunCancelled, RunError, RunStalled
from cubicle.orchestrator.modelrun.functions import FunctionCalls, FunctionTool
from cubicle.orchestrator.modelrun.guest_steps import GuestSteps, TaskGuest
from cubicle.orchestrator.modelrun.ledger import RunLedger, SavedLedger
from cubicle.orchestrator.modelrun.loop import (
    LoopKind,
    LoopOutcome,
    LoopThread,
    RecordedSession,
    error_chain,
)
from cubicle.orchestrator.modelrun.model_providers import (
    PROVIDER_LOOPS,
    ModelProviderName,
    provider_of_loop,
)
from cubicle.orchestrator.modelrun.signin import SigninCallback, SigninWatch
from cubicle.orchestrator.modelrun.verify import Check, Verifier, task_verifiers
from cubicle.orchestrator.origin_answers import Answering
from cubicle.orchestrator.tasks import Task
from cubicle.orchestrator.trajectory.recorder import TrajectoryObserver, TrajectoryRecorder
from cubicle.orchestrator.trajectory.report import write_report
from cubicle.orchestrator.view.handover import recorded_gate, take_over
from cubicle.orchestrator.view.recording import Recording, recording_event
from cubicle_guest.client import AgentClient
from cubicle_guest.errors import CubicleError

if TYPE_CHECKING:  # anthropic and google-genai load only where their loop starts (start_loop)
    from cubicle.orchestrator.modelrun.claude_loop import ClaudeLoop
    from cubicle.orchestrator.modelrun.gemini_loop import GeminiLoop

__all__ = [
    "FAILURE_SCREEN",
    "LoopContext",
    "ModelEndpoint",
    "ModelSource",
    "RunResult",
    "RunSpec",
    "run",
    "start_loop",
]

DEFAULT_MAX_STEPS = 30
FAILURE_SCREEN = "failure.png"
POLL_S = 0.2


@dataclass
class RunResult:
    """How a run ended. ``ok``: the loop finished and every check holds (and, with
    ``require_checks``, there was at least one)."""

    out: Path
    loop: LoopKind = "toolset"
    provider: ModelProviderName = "openai"
    task: str = ""
    """The task's name (a task file), or empty for a run given as text."""
    final_message: str | None = None
    error: str | None = None
    checks: list[Check] = field(default_factory=list)
    cancelled: bool = False
    stalled: str | None = None
    """Why the run was stopped as stalled (:mod:`cubicle.drivers.stall`), or ``None``."""
    wall_s: float = 0.0
    guest_wait_s: float = 0.0
    """Seconds in scripted guest steps (set-up, window waits, settles)."""
    driver_s: float = 0.0
    """Seconds the driver spent on actions and screenshots."""
    model_s: float = 0.0
    """Seconds of model HTTP requests."""
    actions: int = 0
    notes: list[str] = field(default_factory=list)
    """Workarounds applied to the guest during set-up (printed in the drill's summary)."""
    require_checks: bool = False
    usage: dict[str, Any] = field(default_factory=dict)
    """Token usage totals (:meth:`cubicle.orchestrator.modelrun.usage.UsageTotals.as_dict`)."""

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and not self.cancelled
            and self.stalled is None
            and (bool(self.checks) or not self.require_checks)
            and all(c.ok for c in self.checks)
        )

    @property
    def report(self) -> Path:
        return self.out / "report.html"


@dataclass(frozen=True)
class RunSpec:
    """Everything a run does but its desktop and its model.

    :param prompt: what the model is asked; empty: the task's prompt.
    :param task: a task (:mod:`cubicle.orchestrator.tasks`): its set-up runs before the first
        model turn and its checks before ``verifiers``.
    :param viewport: the model's view (default: the whole screen at native size).
    :param settle: the driver's settle option (:mod:`cubicle.drivers.settle`).
    :param max_steps: model requests at most.
    :param context_budget: the runner's context budget
        (:mod:`cubicle.orchestrator.modelrun.budget`; ``"default"``: the default budget for the
        runner, none for the toolset; ``None``: the full history every request).
    :param stall_limit: state-changing actions in a row that changed nothing visible before the
        run counts as stalled (0: never); ``on_stall`` says what then happens: ``stop`` the run,
        hand control to a person (``takeover``, the run waits until released), or only
        ``record`` the warning.
    :param record: ``(fps, kbps)``: write ``out/recording.mp4``; ``None``: no video.
    :param origin_answers: for an ``ask:`` sandbox, starts who answers its questions for the
        length of the run.
    :param time_scale: multiplies the set-up's waits (slow guests).
    :param stop_launched_apps: stop the programs the set-up launched when the run ends.
    :param functions: function tools declared beside the computer tool
        (:mod:`cubicle.orchestrator.modelrun.functions`; the ``runner`` loop only).
    :param signin: who answers a sign-in form in the browser (the person, never a policy;
        :mod:`cubicle.orchestrator.modelrun.signin`); None: every sign-in is cancelled.
    :param ledger: keep the SDK's ledger in ``out`` (:mod:`cubicle.orchestrator.modelrun.ledger`;
        the ``runner`` loop only, ignored for the toolset).
    :param resume: continue the interrupted run whose ledger this is, on the same desktop and in
        the same ``out`` (the trajectory goes on; no set-up runs again; the ledger's request
        count and ``max_steps`` apply); the ``runner`` loop only.
    :param on_turn_completed: called after every turn whose calls all returned (with a ledger):
        the caller makes the sandbox resumable there.
    :raises ValueError: ``resume`` with the toolset loop.
    """

    out: Path
    loop: LoopKind = "runner"
    context_budget: BudgetSpec | Literal["default"] | None = "default"
    prompt: str = ""
    task: Task | None = None
    viewport: Viewport | None = None
    settle: SettleOption = True
    max_steps: int = DEFAULT_MAX_STEPS
    safety_policy: ApprovalPolicy = field(default_factory=ApproveAll)
    action_policy: ApprovalPolicy | None = None
    verifiers: tuple[Verifier, ...] = ()
    stall_limit: int = DEFAULT_STALL_LIMIT
    on_stall: Literal["stop", "takeover", "record"] = "stop"
    record: tuple[float, int] | None = None
    origin_answers: Callable[[TrajectoryRecorder], Answering] | None = None
    time_scale: float = 1.0
    stop_launched_apps: bool = False
    require_checks: bool = False
    functions: tuple[FunctionTool, ...] = ()
    signin: SigninCallback | None = None
    ledger: bool = False
    resume: SavedLedger | None = None
    on_turn_completed: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        if self.resume is not None and self.loop != "runner":
            raise ValueError(
                f"a {self.loop} loop run cannot be resumed: only the runner loop keeps a ledger"
            )


RESUME_NOTE = "settle: after resume"
"""The ``note`` of the fresh screenshot a resumed run starts with."""
RESUME_TEXT = (
    "The run was interrupted and has been resumed on the same desktop. Actions of the last "
    "turn may or may not have happened; this is the screen now."
)


@dataclass
class LoopContext:
    """What a model source may use while the loop runs (all owned by :func:`run`)."""

    agent: AgentClient
    driver: GuestDriver
    session: RecordedSession
    steps: GuestSteps
    guest: TaskGuest | None
    """The prepared task, when the run has one."""
    prompt: str
    cancel_requested: Callable[[], bool]
    resume: SavedLedger | None = None
    """The ledger a resumed run continues from (the scripted model starts at its turn)."""


@dataclass
class ModelEndpoint:
    """Where the SDK's client sends its requests, and what the source checks afterwards.

    :param provider: whose API ``base_url`` speaks; it picks the loop (:func:`start_loop`).
    :param after_loop: called with the loop's outcome once it ended, while the model is still
        served (before the loop's own error is raised): a source that knows better why the loop
        failed raises that.
    :param checks: the source's own checks of the run (after the task's and the caller's).
    """

    base_url: str
    api_key: str = field(repr=False)
    model: str
    provider: ModelProviderName = "openai"
    trust_env: bool = True
    max_retries: int | None = None
    after_loop: Callable[[LoopOutcome], None] = lambda outcome: None
    checks: Callable[[], list[Check]] = list


class ModelSource(Protocol):
    """The model of a run: a provider's endpoint
    (:class:`cubicle.orchestrator.modelrun.responses_model.ResponsesModel`,
    :class:`~cubicle.orchestrator.modelrun.provider_models.AnthropicModel`,
    :class:`~cubicle.orchestrator.modelrun.provider_models.GeminiModel`) or the drill's scripted
    model (:class:`cubicle.orchestrator.drill.runner.DrillModel`)."""

    @property
    def name(self) -> str:
        """Recorded as the run's ``model``."""
        ...

    def serve(self, context: LoopContext) -> AbstractContextManager[ModelEndpoint]:
        """Make the model reachable for the length of the loop."""
        ...


def run(
    desktop: Desktop,
    spec: RunSpec,
    model: ModelSource,
    *,
    observers: Iterable[TrajectoryObserver] = (),
    cancel_requested: Callable[[], bool] = lambda: False,
) -> RunResult:
    """Run ``spec`` with ``model`` on ``desktop`` (module docstring); never raises for what
    happened in the run — it is in the result and the trajectory — except ``KeyboardInterrupt``
    and other non-``Exception`` exits, after the trajectory is closed.

    :param observers: see every trajectory record as it is written.
    :param cancel_requested: polled; when true the loop and the guest waits stop cooperatively.
    """
    started = time.monotonic()
    result = RunResult(
        out=spec.out,
        loop=spec.loop,
        provider=provider_of_loop(spec.loop),
        task=spec.task.name if spec.task is not None else "",
        require_checks=spec.require_checks,
    )
    with TrajectoryRecorder(spec.out, observers, append=spec.resume is not None) as recorder:
        try:
            agent = desktop.connect()
        except CubicleError as exc:
            result.error = error_chain(exc)
            recorder.event("error", where="connect", type=type(exc).__name__, message=str(exc))
            recorder.event("end", ok=False, final_message=None, wall_s=0.0, error=result.error)
        else:
            _run_connected(
                desktop,
                agent,
                spec,
                model,
                recorder,
                result=result,
                cancel_requested=cancel_requested,
                started=started,
            )
    write_report(spec.out)
    return result


def _run_connected(
    desktop: Desktop,
    agent: AgentClient,
    spec: RunSpec,
    model: ModelSource,
    recorder: TrajectoryRecorder,
    *,
    result: RunResult,
    cancel_requested: Callable[[], bool],
    started: float,
) -> None:
    """The run once the agent answers; ``started``: when :func:`run` began (monotonic s), so
    the ``end`` record's ``wall_s`` and the result's are the same number."""
    stall_hit = threading.Event()
    gate = recorded_gate(desktop, recorder, cancel_requested, agent)

    def on_stall(message: str) -> None:
        if spec.on_stall == "takeover" and gate is not None:
            session.stalled = None
            session.stall = StallDetector(spec.stall_limit)
            take_over(gate, recorder, message)
        elif spec.on_stall != "record":
            stall_hit.set()

    session = RecordedSession(
        recorder,
        safety_policy=spec.safety_policy,
        action_policy=spec.action_policy,
        stall_limit=spec.stall_limit,
        on_stall=on_stall,
        gate=gate.wait if gate is not None else None,
    )
    session.functions = FunctionCalls(spec.functions, recorder) if spec.functions else None
    session.signin = SigninWatch(agent, spec.signin, recorder).check
    steps: GuestSteps | None = None
    guest: TaskGuest | None = None
    recording: Recording | None = None
    answers = spec.origin_answers(recorder) if spec.origin_answers is not None else None
    verifiers = list(spec.verifiers)
    model_checks: Callable[[], list[Check]] = list
    try:
        steps = GuestSteps(
            agent, recorder=recorder, cancelled=cancel_requested, time_scale=spec.time_scale
        )
        prompt = spec.prompt
        if spec.task is not None:
            guest = steps.prepare(spec.task) if spec.resume is None else steps.reattach(spec.task)
            if session.functions is not None:  # the task's {TOOL_OUTPUT} checks read them
                session.functions.outputs = guest.tool_outputs
            prompt = prompt or guest.prompt
            verifiers = [*task_verifiers(guest), *verifiers]
        if spec.record is not None:
            recording = Recording(desktop, spec.out, fps=spec.record[0], kbps=spec.record[1])
            recording.start()
        driver = GuestDriver(
            agent, viewport=spec.viewport, on_action=session.on_action, settle=spec.settle
        )
        for policy in (spec.safety_policy, spec.action_policy):
            if policy is not None and policy.geometry is None:
                policy.geometry = driver
        geometry = driver.geometry
        meta: dict[str, Any] = {}
        if guest is not None:
            meta = {"task": guest.task.name, "workdir": guest.workdir, "port": guest.task.port}
        sandbox = getattr(desktop, "id", None)
        sandbox = sandbox if isinstance(sandbox, str) else None
        loop_input: str | list[Any] = prompt
        if spec.resume is None:
            recorder.event(
                "run",
                task=prompt,
                loop=spec.loop,
                provider=result.provider,
                context_budget=describe_budget(resolve_budget(spec.loop, spec.context_budget)),
                model=model.name,
                screen=list(geometry.screen),
                model_view=[geometry.width, geometry.height],
                meta=meta,
                sandbox=sandbox,
            )
        else:
            loop_input = _settle_after_resume(spec.resume, driver, session, recorder, sandbox)
        context = LoopContext(
            agent, driver, session, steps, guest, prompt, cancel_requested, spec.resume
        )
        with model.serve(context) as endpoint:
            model_checks = endpoint.checks
            outcome = _loop(spec, endpoint, context, stall_hit, recorder, loop_input=loop_input)
            result.cancelled = cancel_requested()
            result.stalled = session.stalled if spec.on_stall == "stop" else None
            if result.stalled is not None:
                raise RunStalled(result.stalled)
            endpoint.after_loop(outcome)
            if outcome.error is not None:
                raise outcome.error
            result.final_message = outcome.final_message
    except BaseException as exc:
        result.error = error_chain(exc)
        result.cancelled = result.cancelled or isinstance(exc, RunCancelled | KeyboardInterrupt)
        recorder.event("error", where="run", type=type(exc).__name__, message=str(exc))
        if not isinstance(exc, Exception):
            raise
        if not result.cancelled:
            _keep_failure_screen(agent, recorder)
    finally:
        try:
            if not result.cancelled:
                _verify(agent, verifiers, model_checks, result, recorder)
            if spec.stop_launched_apps and steps is not None:
                steps.stop_launched()
        finally:
            if answers is not None:
                answers.close()
            agent.close()
            if recording is not None:
                recorder.event("recording", **recording_event(recording.stop(), spec.out))
            result.wall_s = time.monotonic() - started
            result.guest_wait_s = steps.wait_s if steps is not None else 0.0
            result.model_s = session.model_s
            result.driver_s = session.driver_s
            result.notes = list(steps.notes) if steps is not None else []
            result.actions = session.executed_actions
            result.usage = session.usage.as_dict()
            recorder.event(
                "end",
                ok=result.ok,
                final_message=result.final_message,
                wall_s=round(result.wall_s, 2),
                guest_wait_s=round(result.guest_wait_s, 2),
                driver_s=round(result.driver_s, 2),
                error=result.error,
                usage=result.usage,
            )


class LoopHandle(Protocol):
    """A provider's loop running in a worker thread."""

    @property
    def outcome(self) -> LoopOutcome: ...

    def cancelled(self) -> bool: ...

    def cancel(self) -> str: ...

    def wait(self, timeout: float | None = None, *, poll_s: float = 0.2) -> bool: ...


@contextmanager
def start_loop(
    spec: RunSpec,
    endpoint: ModelEndpoint,
    context: LoopContext,
    *,
    loop_input: str | list[Any] | None = None,
) -> Iterator[LoopHandle]:
    """Start ``endpoint.provider``'s loop (``spec.loop`` must be one of its loops) in a worker
    thread; leaving the block closes what the loop's client holds. ``loop_input``: the openai
    loop's first input (default: the prompt; a resumed run's fresh observation).

    :raises RunError: ``spec.loop`` is not a loop of the endpoint's provider.
    """
    session, driver = context.session, context.driver
    if spec.loop not in PROVIDER_LOOPS[endpoint.provider]:
        raise RunError(
            f"loop {spec.loop!r} is not a loop of the {endpoint.provider} provider "
            f"({', '.join(PROVIDER_LOOPS[endpoint.provider])})"
        )
    if endpoint.provider != "openai" and session.functions is not None:
        raise RunError("function tools are served on the openai runner loop only")
    thread: LoopThread | ClaudeLoop | GeminiLoop
    if endpoint.provider == "anthropic":
        from cubicle.orchestrator.modelrun.claude_loop import ClaudeLoop  # noqa: PLC0415

        thread = ClaudeLoop(
            driver,
            session,
            **_sdk_loop_args(spec, endpoint, context),
            max_retries=endpoint.max_retries,
        )
    elif endpoint.provider == "gemini":
        from cubicle.orchestrator.modelrun.gemini_loop import GeminiLoop  # noqa: PLC0415

        thread = GeminiLoop(driver, session, **_sdk_loop_args(spec, endpoint, context))
    else:
        ledger, max_steps = _ledger(spec)
        first = context.prompt if loop_input is None else loop_input
        with _openai_client(endpoint, session) as client:
            thread = LoopThread(
                spec.loop,
                driver,
                client,
                cast(ResponseCreateParamsNonStreaming, {"model": endpoint.model, "input": first}),
                session,
                max_steps=max_steps,
                functions=session.functions.registered() if session.functions else (),
                context_budget=spec.context_budget,
                ledger=ledger,
            )
            context.steps.cancelled = lambda: context.cancel_requested() or thread.cancelled()
            yield thread.start()
        return
    context.steps.cancelled = lambda: context.cancel_requested() or thread.cancelled()
    yield thread.start()


class _SdkLoopArgs(TypedDict):
    base_url: str
    api_key: str
    model: str
    prompt: str
    max_steps: int
    trust_env: bool


def _sdk_loop_args(spec: RunSpec, endpoint: ModelEndpoint, context: LoopContext) -> _SdkLoopArgs:
    """What the anthropic and gemini loops take alike: the endpoint, the prompt, the step limit."""
    return _SdkLoopArgs(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        model=endpoint.model,
        prompt=context.prompt,
        max_steps=spec.max_steps,
        trust_env=endpoint.trust_env,
    )


def _ledger(spec: RunSpec) -> tuple[ResponsesToolLedger | None, int]:
    """The SDK's ledger of a runner-loop run that keeps one (in ``spec.out``; resuming from
    ``spec.resume``) and the step budget left: ``(None, spec.max_steps)`` otherwise."""
    if spec.loop != "runner" or not (spec.ledger or spec.resume is not None):
        return None, spec.max_steps
    resume = spec.resume
    run_id = resume.run_id if resume is not None else uuid.uuid4().hex
    keeper = RunLedger(spec.out, run_id, on_turn_completed=spec.on_turn_completed)
    ledger = keeper.sdk_ledger(resume.checkpoint if resume is not None else None)
    max_steps = int(resume.checkpoint["max_steps"]) if resume is not None else spec.max_steps
    return ledger, max_steps


def _loop(
    spec: RunSpec,
    endpoint: ModelEndpoint,
    context: LoopContext,
    stall_hit: threading.Event,
    recorder: TrajectoryRecorder,
    *,
    loop_input: str | list[Any],
) -> LoopOutcome:
    """The provider's loop against ``endpoint`` until it ends, cancelling it when asked or
    stalled; the openai runner loop with a ledger in ``spec.out`` (resuming from
    ``spec.resume``) when asked."""
    with start_loop(spec, endpoint, context, loop_input=loop_input) as thread:
        while not thread.wait(POLL_S):
            if (context.cancel_requested() or stall_hit.is_set()) and not thread.cancelled():
                recorder.event("cancel", toolset_status=thread.cancel())
        return thread.outcome


@contextmanager
def _openai_client(endpoint: ModelEndpoint, session: RecordedSession) -> Iterator[OpenAI]:
    options: dict[str, Any] = {}
    if endpoint.max_retries is not None:
        options["max_retries"] = endpoint.max_retries
    client = OpenAI(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        http_client=session.http_client(trust_env=endpoint.trust_env),
        **options,
    )
    try:
        yield client
    finally:
        client.close()


def _verify(
    agent: AgentClient,
    verifiers: list[Verifier],
    model_checks: Callable[[], list[Check]],
    result: RunResult,
    recorder: TrajectoryRecorder,
) -> None:
    """Run every check (the task's, the caller's, the model's own) and record each."""
    for verify in verifiers:
        result.checks.extend(verify(agent))
    result.checks.extend(model_checks())
    for check in result.checks:
        recorder.event(
            "check",
            name=check.name,
            ok=check.ok,
            expected=check.expected,
            got=check.got,
            detail=check.detail,
        )


def _settle_after_resume(
    resume: SavedLedger,
    driver: GuestDriver,
    session: RecordedSession,
    recorder: TrajectoryRecorder,
    sandbox: str | None,
) -> list[Any]:
    """Settle what was in flight when the run died: a fresh screenshot (recorded with
    :data:`RESUME_NOTE`), never a call sent again; record ``resume``; return the loop's input
    (the fresh observation the SDK appends to the saved history)."""
    session.next_shot_note = RESUME_NOTE
    shot = driver.screenshot()
    url = str(shot.get("image_url") or "")
    session.last_model_shot = base64.b64decode(url.partition(",")[2])  # what the model sees next
    checkpoint = resume.checkpoint
    recorder.event(
        "resume",
        sandbox=sandbox,
        from_revision=checkpoint["revision"],
        completed_turns=resume.completed_turns,
        consumed_requests=checkpoint["consumed_requests"],
        remaining_steps=resume.remaining_steps,
        uncertain=resume.uncertain,
        settle_shot=recorder.last_shot,
    )
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": RESUME_TEXT},
                {"type": "input_image", "image_url": url, "detail": "original"},
            ],
        }
    ]


def _keep_failure_screen(agent: AgentClient, recorder: TrajectoryRecorder) -> None:
    """Save the screen as it was when the run failed, as ``out/failure.png`` (native size).

    Outside ``shots/``: the report holds only what the model received. Best effort: a guest that
    cannot answer any more leaves no file, and the run's own error stays the one reported.
    """
    try:
        png = agent.screenshot(timeout=30.0).blob
    except CubicleError:
        return
    (recorder.folder / FAILURE_SCREEN).write_bytes(png)
    recorder.event("failure_screen", file=FAILURE_SCREEN)
