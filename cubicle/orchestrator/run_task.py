"""``cubicle run "TASK"``: one task for a real model (Responses API) in a fresh sandbox.

The same pipeline as the drill (:mod:`cubicle.orchestrator.drill`): a sandbox (network ``none``
unless ``--network``), the :class:`cubicle.drivers.computer.GuestDriver` at a model view, the real
openai loop (``ComputerToolset`` or ``ResponsesToolRunner``), a trajectory folder with
``report.html``, and optional verification of the guest's state before success is claimed.

Approvals: pending safety checks are asked on the terminal when stdin is one (default answer
deny) and denied when it is not (``--approvals deny`` forces that); ``--policy FILE`` decides
checks *and* actions by a :mod:`cubicle.drivers.policy_file` policy (its ``ask`` verdicts go to the
terminal, or are denied when there is none). Ctrl-C cancels cooperatively (the SDK's
``cancelled``), waits for the loop to drain, then tears the sandbox down; a second Ctrl-C stops
at once (the sandbox is still removed).

Verification (``--verify-file GUEST_PATH=TEXT``, repeatable; ``--verify module:function`` called
with the agent client, returning a bool, a :class:`~cubicle.orchestrator.modelrun.verify.Check` or
a list of them) runs after the model's final message; any failed check makes the exit status 1.

Task files (``--task NAME|FILE``, :mod:`cubicle.orchestrator.tasks`): the task's set-up runs before
the first model turn, its prompt is the task, its checks run before the ``--verify…`` ones, and its
network, screen size, step and stall limits apply unless a flag gives them
(:func:`effective_settings`; every effective setting is printed with where it came from). TASK
text together with ``--task`` is an error.

Offline: ``OPENAI_BASE_URL`` pointing at a :class:`cubicle.drivers.scripted_model.ScriptedModel`
runs the whole command without a key or network (tests do this).

What this shares with the drill (the loop thread and its recording, guest set-up, checks,
cancellation, console) is :mod:`cubicle.orchestrator.modelrun`; neither imports the other. ``cubicle
run`` is registered by :mod:`cubicle.orchestrator.cli` through :func:`register`.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from openai import OpenAI

from cubicle.drivers.approvals import ApprovalPolicy, FilePolicy, NonInteractive, TerminalPrompt
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.errors import SettleOptionError
from cubicle.drivers.policy_file import load_policy
from cubicle.drivers.settle import SettleOption, SettleSpec, check_settle
from cubicle.drivers.stall import DEFAULT_STALL_LIMIT, StallDetector
from cubicle.drivers.viewport import Viewport
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.modelrun import Desktop
from cubicle.orchestrator.modelrun.budget import (
    BudgetSpec,
    describe_budget,
    parse_context_budget,
    resolve_budget,
)
from cubicle.orchestrator.modelrun.console import default_out, destroy_quietly, progress
from cubicle.orchestrator.modelrun.errors import DrillCancelled
from cubicle.orchestrator.modelrun.guest_steps import GuestSteps
from cubicle.orchestrator.modelrun.loop import (
    LoopKind,
    LoopThread,
    RecordedSession,
    error_chain,
    is_loopback,
)
from cubicle.orchestrator.modelrun.signals import cancel_on_signals
from cubicle.orchestrator.modelrun.usage import usage_line
from cubicle.orchestrator.modelrun.verify import (
    Check,
    Verifier,
    check_file,
    function_verifier,
    task_verifiers,
)
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.origin_answers import (
    Answering,
    add_ask_timeout_argument,
    run_answers,
    with_ask_timeout,
)
from cubicle.orchestrator.provider import parse_size
from cubicle.orchestrator.providers import PROVIDERS
from cubicle.orchestrator.sandbox import Sandbox, teardown_on_signals
from cubicle.orchestrator.shape_options import (
    add_internal_networks_argument,
    with_internal_networks,
)
from cubicle.orchestrator.tasks import Task, load_task
from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder
from cubicle.orchestrator.trajectory.report import write_report
from cubicle.orchestrator.view.handover import recorded_gate, take_over
from cubicle.orchestrator.view.recording import (
    Recording,
    add_record_argument,
    parse_record,
    recording_event,
)
from cubicle_guest.errors import CubicleError

__all__ = ["TaskResult", "Verifier", "cmd_run", "parse_verify_file", "register", "run_task"]

DEFAULT_MODEL = "gpt-5.4"
"""A model with native computer use through the GA ``{"type": "computer"}`` tool."""
DEFAULT_MAX_STEPS = 30


@dataclass
class TaskResult:
    """How a task run ended. ``ok``: the loop finished and every verification check holds."""

    out: Path
    final_message: str | None = None
    error: str | None = None
    checks: list[Check] = field(default_factory=list)
    cancelled: bool = False
    wall_s: float = 0.0
    actions: int = 0
    stalled: str | None = None
    """Why the run was stopped as stalled (:mod:`cubicle.drivers.stall`), or ``None``."""
    usage: dict[str, Any] = field(default_factory=dict)
    """Token usage totals (:meth:`cubicle.orchestrator.modelrun.usage.UsageTotals.as_dict`)."""

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and not self.cancelled
            and self.stalled is None
            and all(c.ok for c in self.checks)
        )


def parse_verify_file(text: str) -> tuple[str, str]:
    """``GUEST_PATH=TEXT`` → (path, text); the path must be absolute."""
    path, sep, expected = text.partition("=")
    if not sep or not path.startswith("/"):
        raise ConfigError(f"--verify-file wants ABSOLUTE_GUEST_PATH=EXPECTED_TEXT, got {text!r}")
    return path, expected


def file_verifier(path: str, expected: str) -> Verifier:
    return lambda client: [check_file(client, f"file {path}", path, expected)]


def run_task(
    desktop: Desktop,
    *,
    base_url: str,
    api_key: str,
    task: str,
    model: str,
    out: Path,
    loop: LoopKind = "runner",
    context_budget: BudgetSpec | Literal["default"] | None = "default",
    max_steps: int = DEFAULT_MAX_STEPS,
    viewport: Viewport | None = None,
    safety_policy: ApprovalPolicy,
    action_policy: ApprovalPolicy | None = None,
    verifiers: list[Verifier] | None = None,
    cancel_requested: Callable[[], bool] = lambda: False,
    settle: SettleOption = True,
    stall_limit: int = DEFAULT_STALL_LIMIT,
    takeover_on_stall: bool = False,
    record: tuple[float, int] | None = None,
    origin_answers: Callable[[TrajectoryRecorder], Answering] | None = None,
    task_file: Task | None = None,
    on_response: Callable[[dict[str, Any]], None] | None = None,
) -> TaskResult:
    """Run ``task`` with ``model`` through ``client`` on ``desktop``; record and verify.

    :param base_url: the Responses API (``https://api.openai.com/v1``, or a local stand-in; a
        loopback URL ignores proxy variables).
    :param context_budget: the runner's context budget (:mod:`cubicle.orchestrator.modelrun.budget`;
        ``"default"``: the default budget for the runner, none for the toolset; ``None``: full
        replay).
    :param viewport: the model's view (default: the whole screen at native size).
    :param settle: the driver's settle option (:mod:`cubicle.drivers.settle`).
    :param stall_limit: stop the run after this many state-changing actions in a row changed
        nothing visible (:mod:`cubicle.drivers.stall`; 0: never).
    :param takeover_on_stall: on a stall, hand control to a person (``cubicle view``) instead
        of stopping; the run waits until they release it. While a person holds control
        (``cubicle view ID --takeover``) every run on a sandbox waits
        (:mod:`cubicle.orchestrator.view`).
    :param record: ``(fps, kbps)``: write ``out/recording.mp4`` of the screen
        (:mod:`cubicle.orchestrator.view.recording`); ``None``: no video.
    :param origin_answers: for an ``ask:`` sandbox, starts who answers its origin questions
        (:mod:`cubicle.orchestrator.origin_answers`) for the length of the run, recording each
        decision.
    :param task_file: a task (:mod:`cubicle.orchestrator.tasks`): its set-up runs before the first
    model
        turn, its prompt (placeholders filled) replaces an empty ``task``, and its checks run
        before ``verifiers``.
    :param on_response: called with each completed model response's body before the loop acts
        on it (:attr:`~cubicle.orchestrator.modelrun.loop.RecordedSession.on_response`).
    """
    started = time.monotonic()
    result = TaskResult(out=out)
    with TrajectoryRecorder(out) as recorder:
        stall_hit = threading.Event()
        gate = recorded_gate(desktop, recorder, cancel_requested)

        def on_stall(message: str) -> None:
            if takeover_on_stall and gate is not None:
                session.stalled = None
                session.stall = StallDetector(stall_limit)
                take_over(gate, recorder, message)
            else:
                stall_hit.set()

        session = RecordedSession(
            recorder,
            safety_policy=safety_policy,
            action_policy=action_policy,
            stall_limit=stall_limit,
            on_stall=on_stall,
            gate=gate.wait if gate is not None else None,
        )
        session.on_response = on_response
        client = OpenAI(
            base_url=base_url,
            api_key=api_key,
            http_client=session.http_client(trust_env=not is_loopback(base_url)),
        )
        recording = Recording(desktop, out, fps=record[0], kbps=record[1]) if record else None
        agent = desktop.connect()
        if recording is not None:
            recording.start()
        answers = origin_answers(recorder) if origin_answers is not None else None
        try:
            if task_file is not None:
                guest = GuestSteps(agent, recorder=recorder, cancelled=cancel_requested).prepare(
                    task_file
                )
                task = task or guest.prompt
                verifiers = [*task_verifiers(guest), *(verifiers or [])]
            driver = GuestDriver(
                agent, viewport=viewport, on_action=session.on_action, settle=settle
            )
            for policy in (safety_policy, action_policy):
                if policy is not None and policy.geometry is None:
                    policy.geometry = driver
            geometry = driver.geometry
            recorder.event(
                "run",
                task=task,
                loop=loop,
                context_budget=describe_budget(resolve_budget(loop, context_budget)),
                model=model,
                screen=list(geometry.screen),
                model_view=[geometry.width, geometry.height],
                meta={},
            )
            driver.screenshot()
            thread = LoopThread(
                loop,
                driver,
                client,
                {"model": model, "input": task},
                session,
                max_steps=max_steps,
                context_budget=context_budget,
            ).start()
            while not thread.wait(0.2):
                if (cancel_requested() or stall_hit.is_set()) and not thread.cancelled():
                    recorder.event("cancel", toolset_status=thread.cancel())
            result.cancelled = cancel_requested()
            result.stalled = session.stalled
            if result.stalled is not None:
                raise RunStalled(result.stalled)
            if thread.outcome.error is not None:
                raise thread.outcome.error
            result.final_message = thread.outcome.final_message
            for verify in verifiers or []:
                result.checks.extend(verify(agent))
        except Exception as exc:
            result.error = error_chain(exc)
            result.cancelled = result.cancelled or isinstance(exc, DrillCancelled)
            recorder.event("error", where="run", type=type(exc).__name__, message=str(exc))
        finally:
            if answers is not None:
                answers.close()
            agent.close()
            client.close()
            if recording is not None:
                recorder.event("recording", **recording_event(recording.stop(), out))
            for check in result.checks:
                recorder.event(
                    "check",
                    name=check.name,
                    ok=check.ok,
                    expected=check.expected,
                    got=check.got,
                    detail=check.detail,
                )
            result.wall_s = time.monotonic() - started
            result.actions = session.executed_actions
            result.usage = session.usage.as_dict()
            recorder.event(
                "end",
                ok=result.ok,
                final_message=result.final_message,
                wall_s=round(result.wall_s, 2),
                error=result.error,
                usage=result.usage,
            )
    write_report(out)
    return result


class RunStalled(CubicleError):
    """The model kept acting with nothing visible changing (``--stall``)."""


# --------------------------------------------------------------------------- command line


def register(sub: Any) -> None:
    """Add ``run`` to the ``cubicle`` subcommand parser (by :mod:`cubicle.orchestrator.cli`)."""
    p = sub.add_parser(
        "run",
        help="run one task with a real model in a fresh sandbox",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    p.add_argument(
        "task", nargs="?", default=None, help="what the model should do, in words (or --task)"
    )
    p.add_argument(
        "--task",
        dest="task_file",
        default=None,
        metavar="NAME|FILE",
        help="a task file (tasks/*.toml, or a shipped task's name): prompt, set-up, checks, "
        "limits; a flag given here overrides the file's value",
    )
    p.add_argument(
        "--model",
        default=os.environ.get("CUBICLE_MODEL", DEFAULT_MODEL),
        help=f"Responses API model (default $CUBICLE_MODEL or {DEFAULT_MODEL})",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help=f"model requests at most, the final one included (default {DEFAULT_MAX_STEPS})",
    )
    p.add_argument(
        "--network",
        default=None,
        help="none (default), open, allow:ENTRY,..., block:NAME,... or ask:[ENTRY,...] "
        "(questions asked on the terminal or decided by --policy's [[origin]] rules; "
        "default deny)",
    )
    add_ask_timeout_argument(p)
    add_internal_networks_argument(p)
    p.add_argument("--backend", default="docker", choices=sorted(PROVIDERS), help="sandbox backend")
    p.add_argument("--size", default=None, help="screen WxH in pixels (default 1280x800)")
    p.add_argument(
        "--view",
        default=None,
        help="model view: screenshots fitted within WxH (default: native screen size)",
    )
    p.add_argument(
        "--loop",
        choices=["toolset", "runner"],
        default="runner",
        help="ResponsesToolRunner.run with a context budget (default), or ComputerToolset.run, "
        "which replays the full history, every screenshot, every step (no budget)",
    )
    p.add_argument(
        "--context-budget",
        default=None,
        metavar="images=N,bytes=M|off",
        help="the runner's limit per request: older steps are dropped for a short summary "
        "(default images=8,bytes=4M; off: full replay, what is sent grows every step)",
    )
    p.add_argument(
        "--approvals",
        choices=["ask", "deny"],
        default=None,
        help="safety checks: ask on the terminal (default when stdin is a terminal) "
        "or deny (default otherwise)",
    )
    p.add_argument(
        "--policy",
        type=Path,
        default=None,
        help="approval policy file (TOML) deciding safety checks and actions",
    )
    p.add_argument(
        "--verify-file",
        action="append",
        default=[],
        metavar="GUEST_PATH=TEXT",
        help="after the run, the guest file must hold exactly TEXT (repeatable)",
    )
    p.add_argument(
        "--verify",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="after the run, FUNCTION(agent_client) must pass (repeatable)",
    )
    p.add_argument(
        "--stall",
        type=int,
        default=None,
        metavar="N",
        help="stop after N state-changing actions in a row changed nothing visible "
        f"(default {DEFAULT_STALL_LIMIT}; 0 turns it off)",
    )
    add_record_argument(p, where="the report")
    p.add_argument(
        "--takeover-on-stall",
        action="store_true",
        help="on a stall, hand control to you in the live view (cubicle view) instead of "
        "stopping; the run resumes when you give it back",
    )
    p.add_argument(
        "--settle",
        default="on",
        metavar="on|off|expect_ms=N,quiet_ms=N,cap_ms=N",
        help="how each action waits for its effect before the next one and the screenshot "
        "(default on: expect_ms=300,quiet_ms=400,cap_ms=3000)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="trajectory folder (default runs/run-<time>)"
    )
    p.add_argument("--keep", action="store_true", help="leave the sandbox running afterwards")
    p.set_defaults(func=cmd_run)


def parse_settle(text: str) -> SettleOption:
    """``--settle``: ``on``, ``off`` or ``expect_ms=N,quiet_ms=N,cap_ms=N,typing_quiet_ms=N``
    (any subset).

    :raises ConfigError: naming the part that is wrong.
    """
    if text in ("on", "off"):
        return text == "on"
    values: dict[str, int] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdecimal() or not value.strip().isascii():
            raise ConfigError(
                f"--settle: {part!r} is not NAME=MILLISECONDS (names: "
                f"{', '.join(SettleSpec.NAMES)})"
            )
        values[name.strip()] = int(value)
    try:
        check_settle(values)
    except SettleOptionError as exc:
        raise ConfigError(f"--settle: {exc}") from None
    return values


def _context_budget(args: argparse.Namespace) -> BudgetSpec | Literal["default"] | None:
    """``--context-budget`` for ``--loop``; the toolset takes none but ``off``."""
    if args.context_budget is None:
        return "default"
    budget = parse_context_budget(args.context_budget)
    if budget is not None and args.loop == "toolset":
        raise ConfigError(
            "--context-budget needs --loop runner: the toolset loop replays the full history"
        )
    return budget


def _policies(args: argparse.Namespace) -> tuple[ApprovalPolicy, ApprovalPolicy | None]:
    interactive = sys.stdin.isatty() and args.approvals != "deny"
    if args.approvals == "ask" and not sys.stdin.isatty():
        raise ConfigError("--approvals ask needs a terminal on stdin; use --policy FILE instead")
    prompt = TerminalPrompt(sys.stdin, sys.stderr) if interactive else None
    if args.policy is not None:
        policy = FilePolicy(load_policy(args.policy), ask=prompt)
        return policy, policy
    return prompt or NonInteractive("stdin is not a terminal; pass --policy FILE to approve"), None


@dataclass(frozen=True)
class Setting:
    """One effective setting of a run and where its value came from."""

    value: Any
    source: str
    """``--flag``, ``task file`` or ``default``."""


@dataclass(frozen=True)
class RunSettings:
    """The settings ``cubicle run`` uses: a flag beats the task file, which beats the default."""

    values: dict[str, Setting]

    @property
    def network(self) -> str:
        return str(self.values["network"].value)

    @property
    def size(self) -> str:
        return str(self.values["size"].value)

    @property
    def max_steps(self) -> int:
        return int(self.values["max_steps"].value)

    @property
    def stall(self) -> int:
        return int(self.values["stall"].value)

    def lines(self) -> list[str]:
        """``effective NAME: VALUE (SOURCE)`` per setting, for the terminal."""
        return [
            f"effective {name}: {setting.value} ({setting.source})"
            for name, setting in self.values.items()
        ]


def effective_settings(args: argparse.Namespace) -> tuple[Task | None, RunSettings]:
    """Resolve the task file (if any) and the settings from flags, the file and defaults.

    :raises ConfigError: a positional TASK together with ``--task``; neither given.
    """
    if args.task is not None and args.task_file is not None:
        raise ConfigError(
            'give the task either as text (cubicle run "TEXT") or as a file (--task FILE), '
            "not both: the file's prompt would be ignored"
        )
    if args.task is None and args.task_file is None:
        raise ConfigError("what should the model do? give TASK text or --task FILE")
    task = load_task(args.task_file) if args.task_file is not None else None

    def pick(name: str, flag: str, from_task: Any, default: Any) -> Setting:
        given = getattr(args, name)
        if given is not None:
            return Setting(given, flag)
        if task is not None:
            return Setting(from_task, "task file")
        return Setting(default, "default")

    values = {
        "network": pick("network", "--network", task and task.setup.network, "none"),
        "size": pick("size", "--size", task and task.setup.screen, "1280x800"),
        "max_steps": pick(
            "max_steps", "--max-steps", task and task.limits.max_steps, DEFAULT_MAX_STEPS
        ),
        "stall": pick("stall", "--stall", task and task.limits.stall, DEFAULT_STALL_LIMIT),
    }
    if task is not None:
        values = {"task": Setting(task.name, str(task.source)), **values}
    return task, RunSettings(values)


def cmd_run(args: argparse.Namespace) -> int:
    base_url = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    if not os.environ.get("OPENAI_API_KEY"):
        raise ConfigError(
            "OPENAI_API_KEY is not set",
            hint="export OPENAI_API_KEY=...; for a keyless check run: cubicle drill",
        )
    task_file, settings = effective_settings(args)
    for line in settings.lines():
        progress(line)
    screen = parse_size(settings.size, "--size")
    viewport = Viewport.fit(*parse_size(args.view, "--view")) if args.view else None
    verifiers = [file_verifier(*parse_verify_file(v)) for v in args.verify_file]
    verifiers += [function_verifier(spec) for spec in args.verify]
    safety, actions = _policies(args)
    network = with_ask_timeout(NetworkPolicy.parse(settings.network), args.ask_timeout)
    network = with_internal_networks(network, args.allow_internal)
    settle = parse_settle(args.settle)
    if settings.stall < 0:
        raise ConfigError(f"--stall must be 0 (off) or a positive count, got {settings.stall}")
    if settings.max_steps < 1:
        raise ConfigError(f"--max-steps must be at least 1, got {settings.max_steps}")
    record = parse_record(args.record) if args.record is not None else None
    budget = _context_budget(args)
    out: Path = args.out or default_out("run")
    with teardown_on_signals():
        sandbox = Sandbox.create(
            args.backend,
            network=network,
            screen=screen,
            detached=args.keep,
            progress=progress,
        )
    try:
        with cancel_on_signals() as cancel:
            result = run_task(
                sandbox,
                base_url=base_url,
                api_key=os.environ["OPENAI_API_KEY"],
                task=args.task or "",
                model=args.model,
                out=out,
                loop=args.loop,
                context_budget=budget,
                max_steps=settings.max_steps,
                viewport=viewport,
                safety_policy=safety,
                action_policy=actions,
                verifiers=verifiers,
                cancel_requested=cancel,
                settle=settle,
                stall_limit=settings.stall,
                takeover_on_stall=args.takeover_on_stall,
                record=record,
                origin_answers=run_answers(sandbox, network, safety),
                task_file=task_file,
            )
    finally:
        if args.keep:
            progress(f"{sandbox.id} kept; remove it with: cubicle down {sandbox.id}")
        else:
            destroy_quietly(sandbox)
    if result.final_message:
        print(result.final_message, flush=True)
    for check in result.checks:
        print(check.describe(), flush=True)
    if result.error:
        print(f"cubicle run: stopped: {result.error}", file=sys.stderr, flush=True)
    if result.usage:
        print(f"cubicle run: {usage_line(result.usage)}", file=sys.stderr, flush=True)
    print(
        f"cubicle run: {'succeeded' if result.ok else 'FAILED'} in {result.wall_s:.1f} s, "
        f"{result.actions} actions; report: {out / 'report.html'}",
        file=sys.stderr,
        flush=True,
    )
    if result.cancelled:
        return cancel.exit_code
    return 0 if result.ok else 1
