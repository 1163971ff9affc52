"""google-genai's loop for a run: ``client.models.generate_content`` with the computer-use tool,
each turn's function calls run on the run's driver by
:class:`~cubicle.drivers.gemini_actions.GeminiComputer` and answered with
:func:`~cubicle.drivers.gemini_turn.function_responses` (the last one carrying the screenshot).

A thin adapter on the provider-neutral core, like :mod:`~cubicle.orchestrator.modelrun.claude_loop`:

* the first request carries the prompt and a screenshot of the screen as the run starts;
* before each call: the hand-over gate and the action policy (the call judged as
  :func:`gemini_facts` describes it; a ``--policy`` file's ``actions`` name Gemini's functions),
  recorded; a refused call is answered with an error naming it and the turn's later calls are
  not run;
* a call whose ``safety_decision`` asks for confirmation is one pending safety check for the
  safety policy, as a Responses API ``pending_safety_checks`` is
  (:meth:`~cubicle.orchestrator.modelrun.loop.RecordedSession.approve_confirmation`);
* a reply without function calls ends the loop (its text is the final message); ``max_steps``
  requests without one fail the run, naming the limit.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from google import genai
from google.genai import types

from cubicle.drivers.computer import GuestDriver
from cubicle.drivers.decisions import ActionFacts
from cubicle.drivers.errors import ActionRejected
from cubicle.drivers.gemini_actions import (
    GeminiComputer,
    computer_use_tool,
    grid_to_native,
)
from cubicle.drivers.gemini_turn import function_responses
from cubicle.drivers.viewport import Point, ViewGeometry
from cubicle.orchestrator.modelrun.errors import RunCancelled, RunError
from cubicle.orchestrator.modelrun.loop import RecordedSession
from cubicle.orchestrator.modelrun.worker import SdkLoop, TurnFacts, TurnHooks

__all__ = ["GeminiLoop", "RecordedGeminiComputer", "gemini_facts", "read_reply"]

_PNG_PREFIX = "data:image/png;base64,"


def read_reply(body: dict[str, Any]) -> TurnFacts:
    """A ``generateContent`` response body as a ``model_turn``."""
    calls: list[dict[str, Any]] = []
    texts: list[str] = []
    candidates = body.get("candidates") or []
    first = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
    for part in (first.get("content") or {}).get("parts") or []:
        if not isinstance(part, dict):
            continue
        call = part.get("functionCall") or part.get("function_call")
        if isinstance(call, dict):
            calls.append({"name": call.get("name"), "input": call.get("args")})
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
    meta = body.get("usageMetadata")
    counts = None
    if isinstance(meta, dict):
        prompt, output = meta.get("promptTokenCount"), meta.get("candidatesTokenCount")
        if isinstance(prompt, int) and isinstance(output, int):
            total = meta.get("totalTokenCount")
            counts = {
                "input_tokens": prompt,
                "output_tokens": output,
                "total_tokens": total if isinstance(total, int) else prompt + output,
            }
    return TurnFacts(
        response_id=body.get("responseId"),
        status=str(first.get("finishReason")),
        calls=calls,
        message="\n".join(texts) or None,
        usage=meta if isinstance(meta, dict) else None,
        counts=counts,
    )


def _grid_point(args: Mapping[str, Any], x: str, y: str) -> Point | None:
    values = args.get(x), args.get(y)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return int(values[0] or 0), int(values[1] or 0)
    return None


def gemini_facts(name: str, args: Mapping[str, Any], geometry: ViewGeometry) -> ActionFacts:
    """A function call as a policy sees it: its grid points (model points), the screen points
    they land on (``None`` when one is off the grid: the call is refused anyway), the chord of
    ``key_combination``, the text of ``type_text_at``."""
    model = tuple(
        point
        for point in (
            _grid_point(args, "x", "y"),
            _grid_point(args, "destination_x", "destination_y"),
        )
        if point is not None
    )
    native: tuple[Point, ...] | None
    try:
        native = tuple(grid_to_native(name, geometry, x, y) for x, y in model)
    except ActionRejected:
        native = None
    keys = args.get("keys")
    text = args.get("text")
    return ActionFacts(
        name,
        model,
        native,
        tuple(keys.split("+")) if isinstance(keys, str) else (),
        text if isinstance(text, str) else None,
        "left" if name in ("click_at", "type_text_at") else None,
    )


class RecordedGeminiComputer(GeminiComputer):
    """:class:`GeminiComputer` whose calls pass the run's gate and action policy first (module
    docstring)."""

    def __init__(
        self, driver: GuestDriver, session: RecordedSession, cancelled: Callable[[], bool]
    ) -> None:
        super().__init__(driver, confirm=self._confirm_call, cancelled=cancelled)
        self.session = session
        self._calls = 0

    def _confirm_call(self, name: str, args: Mapping[str, Any]) -> bool:
        decision = args.get("safety_decision") or {}
        explanation = decision.get("explanation") if isinstance(decision, Mapping) else None
        return self.session.approve_confirmation(
            f"{name}#{self._calls}", "require_confirmation", str(explanation or "")
        )

    def execute(self, name: str, args: Mapping[str, Any]) -> None:
        self._calls += 1
        facts = gemini_facts(name, args, self.driver.geometry)
        sent: dict[str, Any] = {"type": name}
        if facts.text is not None:
            sent["text"] = facts.text
        if facts.keys:
            sent["keys"] = list(facts.keys)
        if not self.session.approve(name, sent, lambda policy: policy.allows(facts)):
            raise ActionRejected(name, "refused by the run's action policy (or a cancel)")
        super().execute(name, args)


class GeminiLoop(SdkLoop):
    """The ``generate_content`` loop against ``base_url`` with the run's driver and session
    (module docstring); the final text lands in ``outcome.message``."""

    LOOP = "generate_content"

    def _run(self, cancelled: Callable[[], bool]) -> str | None:
        hooks = TurnHooks(self.session, ":generateContent", read_reply)
        http = hooks.client(trust_env=self.trust_env)
        options = types.HttpOptions(base_url=self.base_url, httpx_client=http)
        client = genai.Client(api_key=self.api_key, http_options=options)
        computer = RecordedGeminiComputer(self.driver, self.session, cancelled)
        config = types.GenerateContentConfig(tools=[computer_use_tool()])
        shot = self.driver.screenshot(cancelled=cancelled)["image_url"]
        png = base64.b64decode(shot.removeprefix(_PNG_PREFIX))
        contents: list[types.Content] = [
            types.Content(
                role="user",
                parts=[
                    types.Part(text=self.prompt),
                    types.Part(inline_data=types.Blob(mime_type="image/png", data=png)),
                ],
            )
        ]
        try:
            for _ in range(self.max_steps):
                if cancelled():
                    raise RunCancelled("the run was cancelled")
                reply = client.models.generate_content(
                    model=self.model, contents=contents, config=config
                )
                content = reply.candidates[0].content if reply.candidates else None
                if content is None:
                    raise RunError("the model's reply has no candidate content")
                contents.append(content)
                calls = [part.function_call for part in content.parts or [] if part.function_call]
                if not calls:
                    return reply.text
                parts = function_responses(computer, calls)
                contents.append(types.Content(role="user", parts=parts))
        finally:
            client.close()
            http.close()
        raise RunError(f"the model did not finish within {self.max_steps} requests (max steps)")
