"""A local scripted stand-in for Gemini's ``generateContent``, so the real ``google-genai``
client runs offline, without a key::

    turns = [[("click_at", {"x": 500, "y": 500})], "done"]
    with ScriptedGemini(turns) as model:
        options = types.HttpOptions(base_url=model.base_url)
        client = genai.Client(api_key="drill", http_options=options)
        reply = client.models.generate_content(model="drill", contents=..., config=...)

Turn ``n`` answers the ``n``-th request: a list of ``(name, args)`` function calls becomes one
candidate whose parts are ``functionCall``s; a string is the final text. From the second request
on, the stand-in checks that the last content answers every call of the previous turn, in order,
with a ``functionResponse`` of its name, an ``error`` only where the call was scripted to fail
(``(name, args, "error")``), and a PNG screenshot on the last response. A request off script is
answered HTTP 400 and recorded (:class:`~cubicle.drivers.stand_in_http.StandIn`); leaving the
``with`` cleanly raises it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cubicle.drivers.stand_in_http import ScriptedStandIn

__all__ = ["GeminiCall", "GeminiTurn", "ScriptedGemini"]

GeminiCall = tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]
"""``(name, args)``, or ``(name, args, "error")`` for a call expected to be refused."""
GeminiTurn = Sequence[GeminiCall] | str


class ScriptedGemini(ScriptedStandIn[Sequence[GeminiCall]]):
    """Serve ``turns`` as ``generateContent`` on ``127.0.0.1`` (see the module docstring)."""

    def __init__(
        self,
        turns: Sequence[GeminiTurn],
        *,
        name: str = "gemini-drill",
        on_turn: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(turns, name=name, what="a Gemini script", on_turn=on_turn)

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if not path.split("?", 1)[0].endswith(":generateContent"):
            raise self.violation(f"unexpected path {path!r} (the stand-in serves generateContent)")
        if self._next >= len(self.turns):
            raise self.violation("a request after the final turn")
        if self._next > 0:
            self._check_responses(body, self.turns[self._next - 1])
        self.begin_turn()
        turn = self.turns[self._next]
        self._next += 1
        if isinstance(turn, str):
            parts: list[dict[str, Any]] = [{"text": turn}]
        else:
            parts = [{"functionCall": {"name": call[0], "args": call[1]}} for call in turn]
        return {
            "candidates": [
                {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": {
                "promptTokenCount": 1,
                "candidatesTokenCount": 1,
                "totalTokenCount": 2,
            },
            "modelVersion": "drill",
        }

    def _check_responses(self, body: dict[str, Any], previous: GeminiTurn) -> None:
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            raise self.violation("the request has no contents")
        last = contents[-1] if isinstance(contents[-1], dict) else {}
        responses = [
            part["functionResponse"]
            for part in last.get("parts") or []
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)
        ]
        if len(responses) != len(previous):
            raise self.violation(
                f"{len(responses)} functionResponse parts for {len(previous)} calls"
            )
        for number, (call, response) in enumerate(zip(previous, responses, strict=True)):
            if response.get("name") != call[0]:
                raise self.violation(f"response {number} is for {response.get('name')!r}")
            error = (response.get("response") or {}).get("error")
            if (error is not None) != (len(call) > 2):
                raise self.violation(f"call {number} ({call[0]}): error {error!r:.300}")
        inline = [  # the client writes these nested parts in either spelling
            part.get("inlineData") or part.get("inline_data") or {}
            for part in responses[-1].get("parts") or []
            if isinstance(part, dict)
        ]
        if not any(
            (blob.get("mimeType") or blob.get("mime_type")) == "image/png" and blob.get("data")
            for blob in inline
        ):
            raise self.violation("the last functionResponse carries no PNG screenshot")
