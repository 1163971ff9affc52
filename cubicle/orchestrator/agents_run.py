"""Record an OpenAI Agents SDK run on a cubicle computer the way ``cubicle run`` records its own.

::

    with AgentsRunRecording(out, task=task, model=name, safety_policy=NonInteractive()) as rec:
        driver = GuestDriver(client, on_action=rec.on_action)
        computer = CubicleComputer(driver, before_action=rec.before_action)
        tool = ComputerTool(computer=computer, on_safety_check=rec.on_safety_check)
        model = OpenAIResponsesModel(name, rec.openai_client(base_url=url, api_key=key))
        rec.begin(driver)                       # the "run" event and the first screenshot
        result = Runner.run_sync(Agent(name="desk", model=model, tools=[tool]), task)
        rec.finish(result.final_output)
    # leaving the block writes the "end" event and OUT/report.html, even after an error

The folder gets what ``cubicle run`` writes (:mod:`cubicle.orchestrator.trajectory.recorder`):
``trajectory.jsonl`` with the model turns (from the OpenAI client's HTTP hooks), every safety
check and action decision, every action with its model and screen coordinates and its receipt,
every screenshot under ``shots/``, then ``report.html``. The glue is
:class:`cubicle.orchestrator.modelrun.loop.RecordedSession`, shared with ``cubicle run``; the
``loop`` of the ``run`` event is ``agents``.

Stalls (:mod:`cubicle.drivers.stall`) are recorded as ``warning`` events; after one,
:meth:`before_action` refuses every further action, so the computer raises ``ActionDenied`` and the
run stops.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import openai

from cubicle.drivers.agents_computer import AsyncSafetyCheckApproval, SafetyCheckApproval
from cubicle.drivers.approvals import ApprovalPolicy
from cubicle.drivers.async_computer import AsyncGuestDriver
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.records import ActionRecord
from cubicle.drivers.stall import DEFAULT_STALL_LIMIT
from cubicle.orchestrator.modelrun.loop import RecordedSession, error_chain, is_loopback
from cubicle.orchestrator.trajectory.recorder import TrajectoryRecorder
from cubicle.orchestrator.trajectory.report import write_report

__all__ = ["AgentsRunRecording"]


class AgentsRunRecording:
    """One Agents SDK run recorded into ``out`` (see the module docstring).

    :param out: the trajectory folder (created; earlier trajectory files are replaced).
    :param task: the task given to the agent (recorded).
    :param model: the model name (recorded).
    :param safety_policy: decides the safety checks (:attr:`on_safety_check`).
    :param action_policy: decides each action (:meth:`before_action`); ``None`` lets every
        action run.
    :param stall_limit: see :class:`~cubicle.orchestrator.modelrun.loop.RecordedSession` (0: never).
    """

    def __init__(
        self,
        out: Path,
        *,
        task: str,
        model: str,
        safety_policy: ApprovalPolicy,
        action_policy: ApprovalPolicy | None = None,
        stall_limit: int = DEFAULT_STALL_LIMIT,
    ) -> None:
        self.out = out
        self.task = task
        self.model = model
        self.recorder = TrajectoryRecorder(out)
        self.session = RecordedSession(
            self.recorder,
            safety_policy=safety_policy,
            action_policy=action_policy,
            stall_limit=stall_limit,
        )
        self.on_safety_check = SafetyCheckApproval(self.session.approve_safety_checks)
        """``ComputerTool(on_safety_check=...)`` for a sync computer: decided by
        ``safety_policy``, recorded."""
        self.async_on_safety_check = AsyncSafetyCheckApproval(self.session.approve_safety_checks)
        """The same for async runs (the policy runs in a worker thread)."""
        self.final_message: str | None = None
        self.error: str | None = None
        self._started = time.monotonic()
        self._clients: list[openai.AsyncOpenAI] = []

    # -- wiring ----------------------------------------------------------------------------------

    def on_action(self, record: ActionRecord) -> None:
        """The driver's ``on_action`` observer: actions, receipts and screenshots → trajectory."""
        self.session.on_action(record)

    def before_action(self, action: Any) -> bool:
        """The computer's ``before_action``: ``action_policy`` decides (recorded); after a
        stall every action is refused."""
        if self.session.stalled is not None:
            return False
        return self.session.before_action(action)

    def openai_client(self, *, base_url: str, api_key: str) -> openai.AsyncOpenAI:
        """An ``AsyncOpenAI`` client for ``OpenAIResponsesModel`` whose every model turn is
        recorded (never the request bodies). Closed when the recording ends; a loopback
        ``base_url`` (the scripted model) ignores proxy variables."""
        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=0 if is_loopback(base_url) else 2,
            http_client=self.session.async_http_client(trust_env=not is_loopback(base_url)),
        )
        self._clients.append(client)
        return client

    def _run_event(self, driver: GuestDriver | AsyncGuestDriver) -> None:
        for policy in (self.session.safety_policy, self.session.action_policy):
            if policy is not None and policy.geometry is None:
                policy.geometry = driver
        geometry = driver.geometry
        self.recorder.event(
            "run",
            task=self.task,
            loop="agents",
            model=self.model,
            screen=list(geometry.screen),
            model_view=[geometry.width, geometry.height],
            meta={"sdk": "openai-agents"},
        )

    def begin(self, driver: GuestDriver) -> None:
        """Record the ``run`` event and the screen before the first turn (as ``cubicle run``);
        policies without a geometry get ``driver``'s."""
        self._run_event(driver)
        driver.screenshot()

    async def abegin(self, driver: AsyncGuestDriver) -> None:
        """:meth:`begin` for an async driver."""
        self._run_event(driver)
        await driver.screenshot()

    def finish(self, final_message: object) -> None:
        """Record the agent's final output (``RunResult.final_output``)."""
        self.final_message = None if final_message is None else str(final_message)

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    async def __aenter__(self) -> Self:
        return self

    def _end(self, exc: BaseException | None) -> None:
        try:
            if exc is not None:
                self.error = error_chain(exc)
                if self.session.stalled is not None:  # what made before_action refuse
                    self.error = f"{self.session.stalled} ({self.error})"
                self.recorder.event("error", where="run", type=type(exc).__name__, message=str(exc))
            elif self.session.stalled is not None:
                self.error = self.session.stalled
            self.recorder.event(
                "end",
                ok=self.error is None,
                final_message=self.final_message,
                wall_s=round(time.monotonic() - self._started, 2),
                error=self.error,
                usage=self.session.usage.as_dict(),
            )
        finally:
            self.recorder.close()
        write_report(self.out)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        clients, self._clients = self._clients, []
        try:
            if clients:
                # Runner.run_sync ran the clients on this thread's default loop (it leaves it
                # open): close their connections there.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    loop = asyncio.get_event_loop_policy().get_event_loop()
                for client in clients:
                    loop.run_until_complete(client.close())
        finally:
            self._end(exc)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        clients, self._clients = self._clients, []
        for client in clients:
            await client.close()
        self._end(exc)
