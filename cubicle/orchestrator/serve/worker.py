"""One thread per session: provision its sandbox, then run its turns one at a time.

Provisioning (:meth:`SessionWorker.provision`): ``Sandbox.create`` on the server's backend with
the session's network policy (owned by the server process, :mod:`cubicle.orchestrator.ownership`,
and recorded in the server's registry before anything else happens to it), then the environment's
files, env and setup commands (:mod:`cubicle.orchestrator.serve.environment`), then
``agent.session.environment.ready`` — or ``environment.failed`` and a failed session, naming
what failed.

Spend (:mod:`cubicle.orchestrator.serve.spend`): each model response's usage is counted as its
record is written (:class:`~cubicle.orchestrator.serve.reporter.TurnReporter`, in the loop's
thread, before the SDK acts on the response); when it reaches the session's limit the turn is
cancelled before that response's computer calls run, and the session pauses (``budget_reached``,
the event ``agent.session.budget_reached``) until ``sessions.update`` raises the limit.

A turn (:meth:`SessionWorker.run_turn`) runs the agent's loop
(:mod:`cubicle.orchestrator.serve.agents`) into a trajectory folder that
:mod:`cubicle.orchestrator.serve.reporter` turns into events while it is written. Safety checks go
to :class:`ApiApproval` (``review: "none"``: a required action the client answers) or to the
server's policy file (``review: "auto_review"``:
:class:`cubicle.drivers.approvals.FilePolicy`, whose ``ask`` verdicts are denied). Cancellation is
cooperative: the loop polls the turn's cancel flag, and a pending approval is released as a
denial. Turn outcome: completed (the loop finished and, for the drill, every check held),
cancelled, or failed with the loop's error.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import queue
import shlex
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cubicle.drivers.approvals import ApprovalPolicy, FilePolicy
from cubicle.drivers.decisions import ActionFacts, Judgement, SafetyCheck
from cubicle.drivers.policy_file import Policy
from cubicle.orchestrator import file_transfer
from cubicle.orchestrator.errors import ProviderError
from cubicle.orchestrator.provider import SandboxSpec
from cubicle.orchestrator.sandbox import Sandbox
from cubicle.orchestrator.serve import origins, wire
from cubicle.orchestrator.serve.environment import WORKSPACE, EnvironmentPlan
from cubicle.orchestrator.serve.registry import Registry
from cubicle.orchestrator.serve.reporter import TurnReporter
from cubicle.orchestrator.serve.store import PendingApproval, Session, TurnState
from cubicle_guest.errors import CubicleError

__all__ = ["ApiApproval", "SessionWorker", "TurnOutcome"]

log = logging.getLogger("cubicle.serve")

SETUP_TIMEOUT_S = 600.0
ENV_FILE = "/home/cubicle/.cubicle-session-env"


class ApiApproval(ApprovalPolicy):
    """Safety checks as a required action of the session; blocks the loop until answered.

    Actions without safety checks are not asked about (``before_action`` is not wired).
    """

    name = "api"

    def __init__(self, session: Session, turn: TurnState) -> None:
        super().__init__()
        self.session = session
        self.turn = turn

    def judge_checks(self, call_id: str, checks: tuple[SafetyCheck, ...]) -> Judgement:
        request_id = wire.new_id("req")
        pending = PendingApproval(
            {
                "type": "computer_use_approval_request",
                "request_id": request_id,
                "turn_id": self.turn.id,
                "request": {
                    "type": wire.SAFETY_CHECK_KIND,
                    "call_id": call_id,
                    "checks": [{"id": c.id, "code": c.code, "message": c.message} for c in checks],
                },
            }
        )
        decision = self.session.ask(self.turn, pending)
        if decision is None:
            return Judgement(
                False, self.name, "the turn was cancelled while the request was pending"
            )
        return Judgement(decision == "approve", self.name, f"the client answered {decision!r}")

    def judge_action(self, facts: ActionFacts) -> Judgement:
        return Judgement(True, self.name, "actions run without approval (review: none)")


class TurnOutcome:
    """How a turn ended: ``completed`` | ``failed`` | ``cancelled`` and the error, if any."""

    def __init__(self, status: str, error: str | None = None, code: str = "internal_error"):
        self.status = status
        self.error = error
        self.code = code


TurnRun = Callable[[Sandbox, TurnState, Path, ApprovalPolicy, TurnReporter], TurnOutcome]
"""Runs one turn: ``(sandbox, turn, trajectory folder, approval policy, the turn's reporter,
which observes the run's trajectory)``."""


class SessionWorker:
    """The thread of one session (see the module doc).

    :param run: runs one turn's loop (:func:`cubicle.orchestrator.serve.turns.run_agent`).
    """

    def __init__(
        self,
        session: Session,
        *,
        backend: str,
        registry: Registry,
        folder: Path,
        run: TurnRun,
        policy: Policy | None,
    ) -> None:
        self.session = session
        self.backend = backend
        self.registry = registry
        self.folder = folder
        self._run = run
        self._policy = policy
        self.jobs: queue.Queue[TurnState | None] = queue.Queue()
        self._questions: Any = None
        self._records = origins.TurnRecords()
        self.ready = threading.Event()
        self.thread = threading.Thread(
            target=self._main, name=f"cubicle-serve-{session.id}", daemon=True
        )

    def start(self) -> SessionWorker:
        self.thread.start()
        return self

    # -- the thread ------------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            if not self.provision():
                self._fail_queued("the environment failed")
                return
            while True:
                job = self.jobs.get()
                if job is None or self.session.deleted:
                    break
                self.run_turn(job)
        except BaseException:  # a bug: the session fails with it, the server lives on
            log.exception("session %s: worker failed", self.session.id)
            self.session.set_status("failed", error="internal error: " + traceback.format_exc(-1))
        finally:
            self._fail_queued("the session ended")

    def _fail_queued(self, why: str) -> None:
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                self._end_turn(job, TurnOutcome("failed", why))

    def provision(self) -> bool:
        """Create and prepare the sandbox; ``False`` when it failed (events published)."""
        session, plan = self.session, self.session.plan
        spec = SandboxSpec(network=plan.network, memory_mb=plan.memory_mb)
        if plan.cpus is not None:
            spec = dataclasses.replace(spec, cpus=plan.cpus)
        try:
            sandbox = Sandbox.create(self.backend, spec=spec)
            self.registry.add(sandbox.id)
        except CubicleError as exc:
            return self._environment_failed("sandbox_error", f"creating the sandbox failed: {exc}")
        with session.lock:
            session.sandbox = sandbox
            deleted = session.deleted
        if deleted:  # deleted while it was being created: the DELETE may have stopped waiting
            sandbox.destroy()
            self.registry.discard(sandbox.id)
            return False
        try:
            # relaying first: a setup command's request to an origin outside the list is refused
            # at once (no turn to ask in), not held until the proxy's timeout denies it for good
            self._start_origin_relay(sandbox)
            prepare(sandbox, plan)
        except CubicleError as exc:
            return self._environment_failed("setup_failed", str(exc))
        with session.lock:
            session.environment_status = "ready"
        session.publish(
            wire.event(
                "agent.session.environment.ready",
                session_id=session.id,
                environment=session.environment_state(),
            )
        )
        self.ready.set()
        return True

    def _start_origin_relay(self, sandbox: Sandbox) -> None:
        """Relay the origin questions of an ask-mode sandbox
        (:mod:`cubicle.orchestrator.serve.origins`)."""
        questions = origins.open_questions(sandbox, on_decision=self._records.record)
        if questions is None:
            return
        self._questions = questions
        threading.Thread(
            target=origins.relay,
            args=(self.session, questions, lambda: self.session.deleted),
            name=f"cubicle-serve-origins-{self.session.id}",
            daemon=True,
        ).start()

    def _environment_failed(self, code: str, message: str) -> bool:
        session = self.session
        with session.lock:
            session.environment_status = "failed"
            session.environment_error = {
                "code": code,
                "message": message,
                "type": "environment_error",
            }
        session.publish(
            wire.event(
                "agent.session.environment.failed",
                session_id=session.id,
                environment=session.environment_state(),
            )
        )
        session.set_status("failed", error=message)
        return False

    def run_turn(self, turn: TurnState) -> None:
        session = self.session
        if session.status != "in_progress":
            session.set_status("in_progress")
        session.publish(
            wire.event(
                "agent.session.turn.in_progress",
                session_id=session.id,
                turn_id=turn.id,
                turn=self._turn_object(turn, "in_progress"),
            )
        )
        out = self.folder / turn.id
        reporter = TurnReporter(session, turn.id)
        policy: ApprovalPolicy = (
            FilePolicy(self._policy)
            if session.review == "auto_review" and self._policy
            else ApiApproval(session, turn)
        )
        assert session.sandbox is not None
        if self._questions is not None:
            turn.origin_records = self._records.attach
        try:
            outcome = self._run(session.sandbox, turn, out, policy, reporter)
        except Exception as exc:  # the loop's own failures come back as outcomes
            log.exception("session %s: turn %s failed", session.id, turn.id)
            outcome = TurnOutcome("failed", f"{type(exc).__name__}: {exc}")
        finally:
            reporter.finish()
        if turn.cancel.is_set() and outcome.status != "completed":
            outcome = TurnOutcome("cancelled", outcome.error)
        self._end_turn(turn, outcome, wire.token_usage(reporter.usage))

    def _turn_object(
        self,
        turn: TurnState,
        status: str,
        outcome: TurnOutcome | None = None,
        usage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        error = None
        if outcome is not None and outcome.status == "failed":
            error = {"code": outcome.code, "message": outcome.error or "the turn failed"}
        return wire.turn_object(
            turn.id,
            self.session.id,
            self.session.agent.id,
            status=status,
            created_at=turn.created_at,
            started_at=turn.created_at,
            completed_at=wire.now() if outcome is not None else None,
            error=error,
            usage=usage,
        )

    def _end_turn(
        self, turn: TurnState, outcome: TurnOutcome, usage: dict[str, Any] | None = None
    ) -> None:
        """Publish the turn's end (with its token ``usage``); the session goes ``idle``, or
        ``budget_reached`` (event ``agent.session.budget_reached``) when its spend reached its
        limit."""
        session = self.session
        session.publish(
            wire.event(
                f"agent.session.turn.{outcome.status}",
                session_id=session.id,
                turn_id=turn.id,
                turn=self._turn_object(turn, outcome.status, outcome, usage),
            )
        )
        with session.lock:
            if session.turn is turn:
                session.turn = None
            failed = session.status == "failed"
        if not failed and not session.deleted:
            session.set_status("budget_reached" if session.spend.reached else "idle")

    # -- deletion --------------------------------------------------------------------------------

    def stop(self, timeout: float) -> None:
        """Cancel the running turn, end the thread (waiting up to ``timeout`` s)."""
        with self.session.lock:
            turn = self.session.turn
        if turn is not None:
            turn.cancel.set()
        self.jobs.put(None)
        self.thread.join(timeout)
        if self._questions is not None:
            self._questions.close()


def prepare(sandbox: Sandbox, plan: EnvironmentPlan) -> None:
    """Workspace, files, env file, setup commands (in order) in the guest, as the desktop user.

    :raises CubicleError: naming what failed (a setup command's exit status and output tail).
    """
    with sandbox.connect() as client:
        folders = sorted({WORKSPACE, *(posixpath.dirname(item.guest_path) for item in plan.files)})
        client.exec(["mkdir", "-p", "--", *folders])
        for item in plan.files:  # the path of Sandbox.upload: chunks, complete or absent
            file_transfer.write_bytes(client, item.guest_path, item.data)
        if plan.env:
            lines = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(plan.env.items()))
            client.write_file(ENV_FILE, lines.encode())
            client.exec(
                [
                    "sh",
                    "-c",
                    "grep -qs cubicle-session-env ~/.bashrc || "
                    'echo ". ~/.cubicle-session-env" >> ~/.bashrc',
                ]
            )
    for index, command in enumerate(plan.setup_commands):
        with sandbox.connect() as client:
            reply = client.exec(
                ["sh", "-c", command.command],
                cwd=command.cwd,
                env=plan.env,
                timeout_ms=int(SETUP_TIMEOUT_S * 1000),
                timeout=SETUP_TIMEOUT_S + 10,
            ).result
        code = reply.get("exit_code")
        if code != 0:
            tail = (str(reply.get("stderr", "")) or str(reply.get("stdout", "")))[-500:]
            raise ProviderError(
                f"environment.setup_commands[{index}] exited with status {code}"
                + (" (timed out)" if reply.get("timed_out") else "")
                + (f": {tail.strip()}" if tail.strip() else "")
            )
