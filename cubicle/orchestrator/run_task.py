"""``cubicle run "TASK"``: one task for a real model in a fresh sandbox.

The same pipeline as the drill (:mod:`cubicle.orchestrator.drill`): a sandbox (network ``none``
unless ``--network``), the :class:`cubicle.drivers.computer.GuestDriver` at a model view, the
provider's real loop (``--provider``, or the task file's ``provider``: openai's
``ComputerToolset`` or ``ResponsesToolRunner``, anthropic's ``tool_runner`` with Claude's computer
toolset, google-genai's ``generate_content`` with Gemini's computer use; the key from the SDK's
usual variable, :mod:`cubicle.orchestrator.modelrun.model_providers`), a trajectory folder with
``report.html``, and optional verification of the guest's state before success is claimed.

Approvals: pending safety checks are asked on the terminal when stdin is one (default answer
deny) and denied when it is not (``--approvals deny`` forces that); ``--policy FILE`` decides
checks *and* actions by a :mod:`cubicle.drivers.policy_file` policy (its ``ask`` verdicts go to the
terminal, or are denied when there is none). Ctrl-C cancels cooperatively (the SDK's
``cancelled``), waits for the loop to drain, then tears the sandbox down; a second Ctrl-C stops
at once (the sandbox is still removed).

Sign-in: a sign-in form in the guest's browser is asked on the terminal (the destination shown,
every value read without echo; :mod:`cubicle.orchestrator.modelrun.signin`) and cancelled when
stdin is not one; ``--policy`` never answers it.

Verification (``--verify-file GUEST_PATH=TEXT``, repeatable; ``--verify module:function`` called
with the agent client, returning a bool, a :class:`~cubicle.orchestrator.modelrun.verify.Check` or
a list of them) runs after the loop (also when it failed, not when cancelled); any failed check
makes the exit status 1.

Task files (``--task NAME|FILE``, :mod:`cubicle.orchestrator.tasks`): the task's set-up runs before
the first model turn, its prompt is the task, its checks run before the ``--verify…`` ones, and its
network, screen size, step and stall limits apply unless a flag gives them
(:func:`effective_settings`; every effective setting is printed with where it came from). TASK
text together with ``--task`` is an error.

Offline: ``OPENAI_BASE_URL`` pointing at a :class:`cubicle.drivers.scripted_model.ScriptedModel`
runs the whole command without a key or network (tests do this); ``ANTHROPIC_BASE_URL`` and
``GOOGLE_GEMINI_BASE_URL`` do the same for the other providers' stand-ins.

The run itself is :func:`cubicle.orchestrator.modelrun.run.run` with the provider's model source
(:func:`~cubicle.orchestrator.modelrun.provider_models.model_source`), the skeleton the drill and
serve's turns use too; this module is the command line around it (registered by
:mod:`cubicle.orchestrator.cli` through :func:`register`).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cubicle.drivers.approvals import ApprovalPolicy, FilePolicy, NonInteractive, TerminalPrompt
from cubicle.drivers.errors import SettleOptionError
from cubicle.drivers.policy_file import load_policy
from cubicle.drivers.settle import SettleOption, SettleSpec, check_settle
from cubicle.drivers.stall import DEFAULT_STALL_LIMIT
from cubicle.drivers.viewport import Viewport
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.modelrun.budget import BudgetSpec, parse_context_budget
from cubicle.orchestrator.modelrun.console import default_out, destroy_quietly, progress
from cubicle.orchestrator.modelrun.loop import LoopKind
from cubicle.orchestrator.modelrun.model_providers import (
    DEFAULT_MODELS,
    KEY_VARIABLES,
    MODEL_PROVIDERS,
    PROVIDER_LOOPS,
    ModelProviderName,
    api_key,
    check_loop,
)
from cubicle.orchestrator.modelrun.provider_models import model_source
from cubicle.orchestrator.modelrun.resumable import (
    add_resume_arguments,
    namespace_settings,
    parse_window,
    read_resume_file,
    reattach,
    turn_completed_hook,
    write_resume_file,
)
from cubicle.orchestrator.modelrun.run import DEFAULT_MAX_STEPS, RunSpec, run
from cubicle.orchestrator.modelrun.signals import cancel_on_signals
from cubicle.orchestrator.modelrun.signin import terminal_callback
from cubicle.orchestrator.modelrun.usage import usage_line
from cubicle.orchestrator.modelrun.verify import Verifier, check_file, function_verifier
from cubicle.orchestrator.network import NetworkPolicy
from cubicle.orchestrator.origin_answers import (
    add_ask_timeout_argument,
    run_answers,
    with_ask_timeout,
)
from cubicle.orchestrator.provider import parse_size
from cubicle.orchestrator.providers import PROVIDERS
from cubicle.orchestrator.resume_marks import read_mark
from cubicle.orchestrator.sandbox import Sandbox, teardown_on_signals
from cubicle.orchestrator.shape_options import (
    add_internal_networks_argument,
    with_internal_networks,
)
from cubicle.orchestrator.tasks import Task, load_task
from cubicle.orchestrator.view.recording import add_record_argument, parse_record

__all__ = ["cmd_run", "file_verifier", "parse_verify_file", "register"]

DEFAULT_MODEL = DEFAULT_MODELS["openai"]
"""A model with native computer use through the GA ``{"type": "computer"}`` tool."""


def parse_verify_file(text: str) -> tuple[str, str]:
    """``GUEST_PATH=TEXT`` → (path, text); the path must be absolute."""
    path, sep, expected = text.partition("=")
    if not sep or not path.startswith("/"):
        raise ConfigError(f"--verify-file wants ABSOLUTE_GUEST_PATH=EXPECTED_TEXT, got {text!r}")
    return path, expected


def file_verifier(path: str, expected: str) -> Verifier:
    return lambda client: [check_file(client, f"file {path}", path, expected)]


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
        "--provider",
        choices=MODEL_PROVIDERS,
        default=None,
        help="whose model: openai (Responses API, OPENAI_API_KEY), anthropic (Claude's computer "
        "toolset, ANTHROPIC_API_KEY) or gemini (computer use, GEMINI_API_KEY or GOOGLE_API_KEY) "
        "(default: the task file's provider, else openai)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="the provider's model (default: the task file's model, else $CUBICLE_MODEL, else "
        + ", ".join(f"{p}: {m}" for p, m in DEFAULT_MODELS.items())
        + ")",
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
        choices=sorted({loop for loops in PROVIDER_LOOPS.values() for loop in loops}),
        default=None,
        help="the provider's SDK loop (default: its first; openai: runner). openai: runner, "
        "ResponsesToolRunner.run with a context budget, or toolset, ComputerToolset.run, which "
        "replays the full history (no budget); anthropic: tool_runner; gemini: "
        "generate_content",
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
    add_resume_arguments(p, command="run")
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


def _context_budget(
    args: argparse.Namespace, loop: LoopKind
) -> BudgetSpec | Literal["default"] | None:
    """``--context-budget`` for ``loop``; only the openai runner takes one but ``off``."""
    if args.context_budget is None:
        return "default"
    budget = parse_context_budget(args.context_budget)
    if budget is not None and loop != "runner":
        raise ConfigError(
            f"--context-budget needs --loop runner (openai): the {loop} loop replays the full "
            "history"
        )
    return budget


def _provider_loop_model(
    args: argparse.Namespace, task: Task | None
) -> tuple[ModelProviderName, LoopKind, str]:
    """The provider (flag, task file, openai), its loop (flag or its default) and the model
    (flag, task file, ``$CUBICLE_MODEL``, the provider's default).

    :raises ConfigError: a loop the provider does not have; the provider's key is not set.
    """
    provider: ModelProviderName = args.provider or (task and task.provider) or "openai"
    default_loop: LoopKind = "runner" if provider == "openai" else PROVIDER_LOOPS[provider][0]
    loop = check_loop(provider, args.loop) if args.loop is not None else default_loop
    model = (
        args.model
        or (task and task.model)
        or os.environ.get("CUBICLE_MODEL")
        or DEFAULT_MODELS[provider]
    )
    if not api_key(provider):
        names = " or ".join(KEY_VARIABLES[provider])
        raise ConfigError(
            f"{names} is not set (the {provider} provider's key)",
            hint=f"export {KEY_VARIABLES[provider][0]}=...; for a keyless check run: "
            f"cubicle drill --provider {provider}",
        )
    return provider, loop, model


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


RESUMED_SETTINGS = (
    "task",
    "task_file",
    "provider",
    "model",
    "max_steps",
    "network",
    "ask_timeout",
    "allow_internal",
    "backend",
    "size",
    "view",
    "loop",
    "context_budget",
    "approvals",
    "policy",
    "verify_file",
    "verify",
    "stall",
    "record",
    "takeover_on_stall",
    "settle",
)
"""The options a resumed run takes from the interrupted one (``resume.json``), not the command
line: the same task, model, view and checks."""


def cmd_run(args: argparse.Namespace) -> int:
    window = parse_window(args.resume_window)
    if args.resume is not None:
        saved = read_resume_file(args.resume, "run")["settings"]
        for name in RESUMED_SETTINGS:
            if name in saved:
                setattr(args, name, saved[name])
        args.policy = Path(args.policy) if args.policy is not None else None
    task_file, settings = effective_settings(args)
    provider, loop, model_name = _provider_loop_model(args, task_file)
    progress(f"effective provider: {provider} (loop {loop}, model {model_name})")
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
    budget = _context_budget(args, loop)
    out: Path = args.resume or args.out or default_out("run")
    model = model_source(provider, model_name)
    resumed = reattach(args.resume, "run", window) if args.resume is not None else None
    if resumed is not None:
        sandbox = resumed.sandbox
        progress(
            f"{sandbox.id}: resuming after {resumed.ledger.completed_turns} completed turns "
            f"({resumed.ledger.remaining_steps} model requests left)"
        )
    else:
        with teardown_on_signals():
            sandbox = Sandbox.create(
                args.backend,
                network=network,
                screen=screen,
                detached=args.keep,
                progress=progress,
            )
    keep = args.keep
    try:
        if resumed is None:
            # the effective provider, loop and model (a task file's or a default, not only flags)
            settings_saved = namespace_settings(args, RESUMED_SETTINGS) | {
                "provider": provider,
                "loop": loop,
                "model": model_name,
            }
            write_resume_file(out, command="run", sandbox=sandbox, settings=settings_saved)
        spec = RunSpec(
            out=out,
            loop=loop,
            context_budget=budget,
            prompt=args.task or "",
            task=task_file,
            viewport=viewport,
            settle=settle,
            max_steps=settings.max_steps,
            safety_policy=safety,
            action_policy=actions,
            verifiers=tuple(verifiers),
            stall_limit=settings.stall,
            on_stall="takeover" if args.takeover_on_stall else "stop",
            record=record,
            origin_answers=run_answers(sandbox, network, safety),
            signin=terminal_callback() if sys.stdin.isatty() else None,
            ledger=True,
            resume=resumed.ledger if resumed is not None else None,
            on_turn_completed=turn_completed_hook(sandbox, out, window),
        )
        with cancel_on_signals() as cancel:
            result = run(sandbox, spec, model, cancel_requested=cancel)
        if args.keep_for_resume and result.cancelled and read_mark(sandbox.id) is not None:
            keep = True
            progress(f"{sandbox.id} kept for resume; continue with: cubicle run --resume {out}")
    finally:
        if args.keep:
            progress(f"{sandbox.id} kept; remove it with: cubicle down {sandbox.id}")
        elif not keep:
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
