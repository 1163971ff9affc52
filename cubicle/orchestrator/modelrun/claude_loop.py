"""Anthropic's loop for a run: ``client.beta.messages.tool_runner`` with a
:class:`~cubicle.drivers.claude_toolset.ClaudeToolset` over the run's driver, in a worker thread.

A thin adapter on the provider-neutral core (:mod:`cubicle.orchestrator.modelrun.loop`,
:mod:`cubicle.orchestrator.modelrun.worker`):

* ``confirm`` — the SDK asks it before every member call — is the run's ``before_action``:
  the hand-over gate, then the action policy judging the member as
  :class:`~cubicle.drivers.claude_confirm.ClaudeConfirm` describes it (a ``--policy`` file's
  ``actions`` name Claude's members), the decision recorded
  (:meth:`~cubicle.orchestrator.modelrun.loop.RecordedSession.approve`); no action policy lets
  every member run, as on the OpenAI path;
* every member's driver record becomes the trajectory's ``action``/``screenshot`` (through the
  driver's ``on_action``), with stall detection; each response a ``model_turn``
  (:class:`~cubicle.orchestrator.modelrun.worker.TurnHooks`);
* a button ``left_mouse_down`` left pressed is released when each turn ends and when the loop
  ends (:func:`~cubicle.drivers.claude_toolset.claude_turns`);
* cancelling stops the loop before its next request or member call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
from anthropic.tools import BetaComputerConfirmContext

from cubicle.drivers.claude_confirm import claude_facts
from cubicle.drivers.claude_toolset import ClaudeToolset, claude_turns
from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.decisions import ActionFacts
from cubicle.orchestrator.modelrun.errors import RunCancelled, RunError
from cubicle.orchestrator.modelrun.loop import RecordedSession
from cubicle.orchestrator.modelrun.worker import SdkLoop, TurnFacts, TurnHooks

__all__ = ["DEFAULT_MAX_TOKENS", "ClaudeLoop", "SessionConfirm", "read_message"]

DEFAULT_MAX_TOKENS = 4096


def read_message(body: dict[str, Any]) -> TurnFacts:
    """A Messages API response body as a ``model_turn``."""
    calls: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in body.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            calls.append(
                {"call_id": block.get("id"), "name": block.get("name"), "input": block.get("input")}
            )
        elif block.get("type") == "text":
            texts.append(str(block.get("text", "")))
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
    counts = None
    if usage is not None:
        tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens")
        if isinstance(tokens_in, int) and isinstance(tokens_out, int):
            counts = {
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            }
    return TurnFacts(
        response_id=body.get("id"),
        status=str(body.get("stop_reason")),
        calls=calls,
        message="\n".join(texts) or None,
        usage=usage,
        counts=counts,
    )


def _sent(facts: ActionFacts) -> dict[str, Any]:
    """What the trajectory pairs with the member's driver record."""
    sent: dict[str, Any] = {"type": facts.kind}
    if facts.text is not None:
        sent["text"] = facts.text
    if facts.keys:
        sent["keys"] = list(facts.keys)
    return sent


class SessionConfirm:
    """The SDK's ``confirm`` as the run's ``before_action`` (module docstring)."""

    def __init__(self, session: RecordedSession, driver: GuestDriver) -> None:
        self.session = session
        self.driver = driver

    def __call__(self, context: BetaComputerConfirmContext) -> bool:
        values = context.input.model_dump(exclude_none=True)
        facts = claude_facts(context.member, values, self.driver.geometry)
        return self.session.approve(facts.kind, _sent(facts), lambda policy: policy.allows(facts))


class ClaudeLoop(SdkLoop):
    """``tool_runner`` against ``base_url`` with the run's driver and session (module
    docstring); the final text lands in ``outcome.message``.

    :param max_steps: model requests at most (the SDK's ``max_iterations``); a run that reaches
        it without a final text fails, naming the limit.
    :param max_retries: the client's retries (``None``: the SDK's default).
    """

    LOOP = "tool_runner"

    def __init__(
        self,
        driver: GuestDriver,
        session: RecordedSession,
        *,
        base_url: str,
        api_key: str,
        model: str,
        prompt: str,
        max_steps: int,
        trust_env: bool = True,
        max_retries: int | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        super().__init__(
            driver,
            session,
            base_url=base_url,
            api_key=api_key,
            model=model,
            prompt=prompt,
            max_steps=max_steps,
            trust_env=trust_env,
        )
        self.max_retries = max_retries
        self.max_tokens = max_tokens

    def _run(self, cancelled: Callable[[], bool]) -> str | None:
        hooks = TurnHooks(self.session, "/v1/messages", read_message)
        options: dict[str, Any] = {}
        if self.max_retries is not None:
            options["max_retries"] = self.max_retries
        client = anthropic.Anthropic(
            base_url=self.base_url,
            api_key=self.api_key,
            http_client=hooks.client(trust_env=self.trust_env),
            **options,
        )
        confirm = SessionConfirm(self.session, self.driver)
        with client, ClaudeToolset(self.driver, confirm=confirm, cancelled=cancelled) as toolset:
            runner = client.beta.messages.tool_runner(
                model=self.model,
                max_tokens=self.max_tokens,
                tools=[toolset],
                messages=[{"role": "user", "content": self.prompt}],
                max_iterations=self.max_steps,
            )
            last: anthropic.types.beta.BetaMessage | None = None
            for message in claude_turns(runner, toolset):
                if cancelled():
                    raise RunCancelled("the run was cancelled")
                last = message
        if last is None or last.stop_reason == "tool_use":
            raise RunError(f"the model did not finish within {self.max_steps} requests (max steps)")
        return "\n".join(b.text for b in last.content if b.type == "text") or None
