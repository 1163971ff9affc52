"""Approval policies for ``ComputerToolset.run(approve_safety_checks=..., before_action=...)``.

Each policy object has two methods to pass to the SDK::

    policy = TerminalPrompt(sys.stdin, sys.stderr, geometry=driver)
    ComputerToolset(driver).run(client, params,
                                approve_safety_checks=policy.approve_safety_checks,
                                before_action=policy.before_action)

Subclasses answer with a :class:`~cubicle.drivers.decisions.Judgement` (approved, by whom, why).
Both callbacks return exactly ``True`` to allow and ``False`` to refuse (the SDK then stops the run
before the action). Every decision is appended to the policy's
:class:`~cubicle.drivers.decisions.DecisionLog` (who decided, what, why). Policies that show or
judge screen coordinates read them from ``geometry`` — the driver, whose current geometry maps the
model's coordinates.

* :class:`TerminalPrompt` — asks a human on a text stream; default answer deny.
* :class:`NonInteractive` — the default for unattended runs: denies and says why.
* :class:`ApproveAll` — approves everything, logging each approval (for drills).
* :class:`FilePolicy` — a declarative policy file (:mod:`cubicle.drivers.policy_file`); ``ask``
  verdicts go to an ``ask`` policy (e.g. a :class:`TerminalPrompt`) or are denied.
* :class:`AsyncApprovals` — wraps any of them for ``AsyncComputerToolset`` (async callbacks).
"""

from __future__ import annotations

import logging
import threading
from typing import TextIO

import anyio.to_thread

from cubicle.drivers.decisions import (
    ActionFacts,
    Decision,
    DecisionLog,
    GeometrySource,
    Judgement,
    SafetyCheck,
    action_facts,
    safety_checks_of,
)
from cubicle.drivers.policy_file import Policy
from cubicle.drivers.terminal_text import terminal_safe

__all__ = [
    "ApprovalPolicy",
    "ApproveAll",
    "AsyncApprovals",
    "FilePolicy",
    "NonInteractive",
    "TerminalPrompt",
]

logger = logging.getLogger("cubicle.approvals")


class ApprovalPolicy:
    """Base: turns SDK callbacks into :meth:`judge_checks` / :meth:`judge_action` and logs them.

    :param log: where decisions go (a new one if omitted; shared logs are fine).
    :param geometry: the driver (or anything with ``.geometry``) for screen coordinates.
    """

    name = "policy"

    def __init__(self, *, log: DecisionLog | None = None, geometry: GeometrySource | None = None):
        self.log = log if log is not None else DecisionLog()
        self.geometry = geometry

    # -- SDK callbacks -----------------------------------------------------------------------

    def approve_safety_checks(self, call: object) -> bool:
        """``approve_safety_checks`` callback: ``True`` acknowledges all the call's checks."""
        checks = safety_checks_of(call)
        call_id = getattr(call, "call_id", None)
        judgement = self.judge_checks(str(call_id), checks)
        self.log.append(
            Decision(
                "safety_checks",
                judgement.approved,
                judgement.decided_by,
                judgement.reason,
                call_id=str(call_id),
                check_codes=tuple(check.code for check in checks),
            )
        )
        return judgement.approved is True

    def before_action(self, action: object) -> bool:
        """``before_action`` callback: ``True`` lets the action run."""
        return self.allows(action_facts(action, self.geometry.geometry if self.geometry else None))

    def allows(self, facts: ActionFacts) -> bool:
        """Judge one action (from any provider's adapter, e.g.
        :mod:`cubicle.drivers.claude_confirm`) and log the decision; ``True`` lets it run."""
        judgement = self.judge_action(facts)
        self.log.append(
            Decision(
                "action",
                judgement.approved,
                judgement.decided_by,
                judgement.reason,
                action=facts.kind,
                model_points=facts.model_points,
                native_points=facts.native_points,
                summary=facts.summary(),
            )
        )
        return judgement.approved is True

    # -- what subclasses decide --------------------------------------------------------------

    def judge_checks(self, call_id: str, checks: tuple[SafetyCheck, ...]) -> Judgement:
        """The answer for a call's pending safety checks."""
        raise NotImplementedError

    def judge_action(self, facts: ActionFacts) -> Judgement:
        """The answer for one action."""
        raise NotImplementedError


class NonInteractive(ApprovalPolicy):
    """Denies everything and says why (logged at WARNING and in the decision log)."""

    name = "non-interactive"

    def __init__(
        self,
        reason: str = "no approver is configured (non-interactive run)",
        *,
        log: DecisionLog | None = None,
        geometry: GeometrySource | None = None,
    ) -> None:
        super().__init__(log=log, geometry=geometry)
        self.reason = reason

    def judge_checks(self, call_id: str, checks: tuple[SafetyCheck, ...]) -> Judgement:
        codes = ", ".join(str(c.code) for c in checks)
        logger.warning("denied safety checks [%s] of %s: %s", codes, call_id, self.reason)
        return Judgement(False, self.name, self.reason)

    def judge_action(self, facts: ActionFacts) -> Judgement:
        logger.warning("denied %s: %s", facts.summary(), self.reason)
        return Judgement(False, self.name, self.reason)


class ApproveAll(ApprovalPolicy):
    """Approves every check and action — for drills only; logs each approval at WARNING."""

    name = "approve-all"

    def judge_checks(self, call_id: str, checks: tuple[SafetyCheck, ...]) -> Judgement:
        codes = ", ".join(str(c.code) for c in checks)
        logger.warning("approve-all: acknowledged safety checks [%s] of %s", codes, call_id)
        return Judgement(True, self.name, "approve-all policy (drill)")

    def judge_action(self, facts: ActionFacts) -> Judgement:
        logger.warning("approve-all: approved %s", facts.summary())
        return Judgement(True, self.name, "approve-all policy (drill)")


class TerminalPrompt(ApprovalPolicy):
    """Asks a human: shows the check's code and message, or the action with its model and
    screen coordinates, and reads one line. ``y``/``yes`` approves; anything else, an empty
    line or end of input denies (default answer: deny).

    :param input: the stream answers are read from (a tty, a pipe).
    :param output: where questions are written.
    """

    name = "terminal"

    def __init__(
        self,
        input: TextIO,
        output: TextIO,
        *,
        log: DecisionLog | None = None,
        geometry: GeometrySource | None = None,
    ) -> None:
        super().__init__(log=log, geometry=geometry)
        self._input = input
        self._output = output
        self.lock = threading.Lock()
        """Held while a question is on the terminal (share it with other prompts there)."""

    def _ask(self, question: str) -> Judgement:
        with self.lock:
            # the question quotes the model (and through it, pages): show, never send, controls
            self._output.write(terminal_safe(question) + "\nApprove? [y/N] ")
            self._output.flush()
            answer = self._input.readline()
        if answer == "":
            return Judgement(False, self.name, "no answer (end of input); default is deny")
        word = answer.strip().lower()
        if word in ("y", "yes"):
            return Judgement(True, self.name, "approved at the prompt")
        if word == "":
            return Judgement(False, self.name, "empty answer; default is deny")
        return Judgement(False, self.name, f"answered {word[:20]!r} at the prompt")

    def judge_checks(self, call_id: str, checks: tuple[SafetyCheck, ...]) -> Judgement:
        lines = [f"Safety checks for computer call {call_id}:"]
        lines += [f"  [{c.code}] {c.message}" for c in checks]
        return self._ask("\n".join(lines))

    def judge_action(self, facts: ActionFacts) -> Judgement:
        return self._ask(f"Action: {facts.describe()}")


class FilePolicy(ApprovalPolicy):
    """Decides with a :class:`~cubicle.drivers.policy_file.Policy`; ``ask`` goes to ``ask`` or is
    denied.

    :param policy: from :func:`cubicle.drivers.policy_file.load_policy`.
    :param ask: who answers ``ask`` verdicts (e.g. a :class:`TerminalPrompt`); ``None`` denies
        them, saying so.
    """

    name = "policy"

    def __init__(
        self,
        policy: Policy,
        *,
        ask: ApprovalPolicy | None = None,
        log: DecisionLog | None = None,
        geometry: GeometrySource | None = None,
    ) -> None:
        super().__init__(log=log, geometry=geometry)
        self.policy = policy
        self.ask = ask

    def judge_checks(self, call_id: str, checks: tuple[SafetyCheck, ...]) -> Judgement:
        verdict, decided_by = self.policy.decide_checks(checks)
        if verdict == "ask" and self.ask is not None:
            return self.ask.judge_checks(call_id, checks).passed_on(decided_by)
        return self._verdict(verdict, decided_by)

    def judge_action(self, facts: ActionFacts) -> Judgement:
        verdict, decided_by = self.policy.decide_action(facts)
        if verdict == "ask" and self.ask is not None:
            return self.ask.judge_action(facts).passed_on(decided_by)
        return self._verdict(verdict, decided_by)

    @staticmethod
    def _verdict(verdict: str, decided_by: str) -> Judgement:
        if verdict == "ask":
            return Judgement(False, decided_by, "the policy says ask, and no one is there to ask")
        return Judgement(verdict == "allow", decided_by, f"the policy says {verdict}")


class AsyncApprovals:
    """Async callbacks for ``AsyncComputerToolset`` over any :class:`ApprovalPolicy`.

    Decisions run in a worker thread (a terminal prompt blocks on input); if the run's task is
    cancelled the thread is abandoned and its late answer is ignored by the SDK.
    """

    def __init__(self, policy: ApprovalPolicy) -> None:
        self.policy = policy
        self.log = policy.log

    async def approve_safety_checks(self, call: object) -> bool:
        return await anyio.to_thread.run_sync(
            self.policy.approve_safety_checks, call, abandon_on_cancel=True
        )

    async def before_action(self, action: object) -> bool:
        return await anyio.to_thread.run_sync(
            self.policy.before_action, action, abandon_on_cancel=True
        )
