"""Who answers an ``ask:`` sandbox's origin questions when no server does: ``cubicle run`` and
``cubicle ask ID``.

:class:`OriginAnswerer` listens on the sandbox's control channel
(:class:`~cubicle.orchestrator.origin_questions.OriginQuestions`) on a thread of its own and
answers each question, in order:

1. a policy file's ``[[origin]]`` rules (:meth:`cubicle.drivers.policy_file.Policy.decide_origin`;
   ``allow`` approves, ``deny`` denies, ``ask`` — or no rule and ``origin_access = "ask"`` —
   goes on);
2. the terminal, when there is one: the question is printed and ``y``/``yes`` approves;
   anything else, an empty line or end of input denies (default deny);
3. otherwise deny, saying no one is there to ask (a non-interactive stdin).

Every decision — by these answers, by the proxy's timeout, or by anyone else on the channel —
becomes a trajectory event ``origin_access`` (question, origin, host, port, answer, by), which
the report lists.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, Self, TextIO

from cubicle.drivers.approvals import ApprovalPolicy, FilePolicy, TerminalPrompt
from cubicle.drivers.policy_file import Policy
from cubicle.egress.questions import MAX_BY_CHARS
from cubicle.orchestrator.errors import ConfigError
from cubicle.orchestrator.network import DEFAULT_ASK_TIMEOUT_S, NetworkPolicy
from cubicle.orchestrator.origin_questions import (
    Answer,
    OriginDecision,
    OriginQuestion,
    OriginQuestions,
    QuestionClosed,
    QuestionError,
    seconds_left,
)
from cubicle.orchestrator.sandbox import Sandbox, teardown_on_signals
from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder

__all__ = [
    "Answering",
    "OriginAnswerer",
    "TerminalQuestions",
    "add_ask_timeout_argument",
    "register_ask",
    "run_answers",
    "with_ask_timeout",
]

Record = Callable[[OriginDecision], None]


class TerminalQuestions:
    """Asks a person on a text stream; one question at a time (``lock`` may be shared with
    other prompts on the same terminal). Default answer: deny."""

    def __init__(self, input: TextIO, output: TextIO, lock: threading.Lock | None = None):
        self.input = input
        self.output = output
        self.lock = lock or threading.Lock()

    def ask(self, question: OriginQuestion) -> tuple[Answer, str]:
        """``(answer, why)`` from one line of input."""
        with self.lock:
            self.output.write(
                f"The guest wants to reach {question.origin} ({question.method} "
                f"{question.target[:120]}): {question.reason}.\n"
                f"Allow it for this sandbox? (no answer within {seconds_left(question):.0f} s "
                "= deny) [y/N] "
            )
            self.output.flush()
            line = self.input.readline()
        word = line.strip().lower()
        if word in ("y", "yes"):
            return "approve", "approved at the prompt"
        if line == "":
            return "deny", "no answer (end of input); default is deny"
        return "deny", "denied at the prompt" if word else "empty answer; default is deny"


class Answering(Protocol):
    """What :func:`cubicle.orchestrator.run_task.run_task` holds for the length of a run (its
    ``origin_answers`` hook's result): closed when the run ends."""

    def close(self) -> None: ...


class OriginAnswerer:
    """Answers the questions of ``questions`` (one sandbox's control connection, which it then
    owns) until closed (see the module docstring).

    :param policy: a policy file whose ``[[origin]]`` rules decide first.
    :param terminal: who is asked when the policy says ``ask`` (``None``: deny).
    :param record: called with every decision seen (e.g. a trajectory event).
    :param who: how answers are signed in the log (``by``).
    """

    def __init__(
        self,
        questions: OriginQuestions,
        *,
        policy: Policy | None = None,
        terminal: TerminalQuestions | None = None,
        who: str = "cubicle run",
    ) -> None:
        self.policy = policy
        self.terminal = terminal
        self.who = who
        self.problems: list[str] = []
        self.questions = questions
        self._thread = threading.Thread(
            target=self._run, name=f"origin-answers-{questions.sandbox_id}", daemon=True
        )
        self._thread.start()

    def choose(self, question: OriginQuestion) -> tuple[Answer, str]:
        """``(answer, by)`` for one question (policy, then terminal, then deny)."""
        verdict, decided_by = "ask", ""
        if self.policy is not None:
            verdict, decided_by = self.policy.decide_origin(question.host, question.port)
            if verdict == "allow":
                return "approve", decided_by
            if verdict == "deny":
                return "deny", decided_by
        prefix = f"{decided_by} -> " if decided_by else ""
        if self.terminal is None:
            return "deny", f"{prefix}{self.who} (no terminal to ask; default deny)"
        answer, why = self.terminal.ask(question)
        return answer, f"{prefix}{self.who} terminal ({why})"

    def _run(self) -> None:
        for question in self.questions:
            answer, by = self.choose(question)
            try:
                self.questions.answer(question.id, answer, by=by[:MAX_BY_CHARS])
            except QuestionClosed as exc:  # timed out (or answered elsewhere) meanwhile
                self.problems.append(str(exc))
            except QuestionError as exc:
                self.problems.append(str(exc))
                return

    def close(self) -> None:
        """Stop answering (questions asked later wait for their timeout: deny)."""
        self.questions.close()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def run_answers(
    sandbox: Sandbox, network: NetworkPolicy, approvals: ApprovalPolicy
) -> Callable[[TrajectoryRecorder], OriginAnswerer] | None:
    """For ``cubicle run``: who answers an ``ask:`` sandbox's questions, from the run's own
    approvals — its policy file's ``[[origin]]`` rules, its terminal prompt (same terminal, one
    question at a time), or no one (deny); ``None`` for other networks."""
    if network.mode != "ask":
        return None
    file_policy = approvals.policy if isinstance(approvals, FilePolicy) else None
    prompt = approvals.ask if isinstance(approvals, FilePolicy) else approvals
    terminal = None
    if isinstance(prompt, TerminalPrompt):
        terminal = TerminalQuestions(sys.stdin, sys.stderr, lock=prompt.lock)

    def start(recorder: TrajectoryRecorder) -> OriginAnswerer:
        def record(decision: OriginDecision) -> None:
            recorder.event("origin_access", **decision.event())

        questions = OriginQuestions.open(sandbox, on_decision=record)
        return OriginAnswerer(questions, policy=file_policy, terminal=terminal)

    return start


# --------------------------------------------------------------------------- command line


def add_ask_timeout_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ask-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --network ask:…, how long a held connection waits for an answer before it "
        f"is refused (default {DEFAULT_ASK_TIMEOUT_S:g})",
    )


def with_ask_timeout(policy: NetworkPolicy, seconds: float | None) -> NetworkPolicy:
    """``policy`` with ``--ask-timeout`` applied.

    :raises ConfigError: a timeout given for a policy that is not ``ask:``, or out of range.
    """
    if seconds is None:
        return policy
    if policy.mode != "ask":
        raise ConfigError(f"--ask-timeout applies to --network ask:…, not to {policy}")
    return dataclasses.replace(policy, ask_timeout=seconds)


def register_ask(sub: Any) -> None:
    p = sub.add_parser(
        "ask",
        help="answer the origin-access questions of an ask: sandbox (or list them)",
        description="Answer, on this terminal, the questions an ask: sandbox's egress proxy "
        "holds: one line per question, y approves (remembered for the sandbox), anything "
        "else denies. --list prints the pending ones as JSON; --approve/--deny/--cancel QID "
        "answers one.",
    )
    p.add_argument("id", help="sandbox id")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--list", action="store_true", help="print pending questions (JSON)")
    for answer in ("approve", "deny", "cancel"):
        group.add_argument(f"--{answer}", metavar="QID", help=f"{answer} question QID")
    p.add_argument(
        "--by", default=None, help="who answers, in the log (default: USER on cubicle ask)"
    )
    p.set_defaults(func=cmd_ask)


def cmd_ask(args: argparse.Namespace) -> int:
    sandbox = Sandbox.attach(args.id)
    by = args.by or f"{getpass.getuser()} (cubicle ask)"
    with OriginQuestions.open(sandbox) as questions:
        if args.list:
            for question in questions.pending():
                print(json.dumps(dataclasses.asdict(question)), flush=True)
            return 0
        for answer in ("approve", "deny", "cancel"):
            question_id = getattr(args, answer)
            if question_id is not None:
                questions.answer(question_id, answer, by=by)
                print(f"{question_id}: {answer}", flush=True)
                return 0
        if not sys.stdin.isatty():
            raise ConfigError("cubicle ask needs a terminal, or --list / --approve QID ...")
        terminal = TerminalQuestions(sys.stdin, sys.stderr)
        print(f"answering {sandbox.id} ({questions.policy}); Ctrl-C stops", file=sys.stderr)
        # Ctrl-C (and SIGTERM) stop the loop even when this process inherited SIGINT ignored (a
        # background job of a non-interactive shell): the control connection is closed on the
        # way out; the sandbox is not touched (no sandboxes are handed to the guard)
        with teardown_on_signals():
            for question in questions:
                answer, why = terminal.ask(question)
                try:
                    questions.answer(question.id, answer, by=f"{by}: {why}"[:MAX_BY_CHARS])
                except QuestionClosed as exc:
                    print(f"too late: {exc}", file=sys.stderr, flush=True)
    return 0
