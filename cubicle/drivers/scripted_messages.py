"""A local scripted stand-in for Anthropic's Messages API (``POST /v1/messages``), so the real
``anthropic`` client (``client.beta.messages.tool_runner`` with a
:class:`~cubicle.drivers.claude_toolset.ClaudeToolset`) runs offline, without a key::

    turns = [[("screenshot", {}), ("left_click", {"coordinate": [10, 20]})], "done"]
    with ScriptedMessages(turns) as model:
        client = Anthropic(base_url=model.base_url, api_key="drill", max_retries=0)
        runner = client.beta.messages.tool_runner(model="drill", max_tokens=1024,
                                                  tools=[toolset], messages=[...])
        final = runner.until_done()

Turn ``n`` answers the ``n``-th request: a list of ``(member, input)`` computer-toolset calls
becomes one assistant message of ``tool_use`` blocks (``toolset_name: "computer"``,
``stop_reason: "tool_use"``); a string is the final text (``stop_reason: "end_turn"``). From the
second request on, the stand-in checks that the last user message answers every call of the
previous turn with a ``tool_result`` of its id and ``toolset_name``, not ``is_error`` unless the
call was scripted to fail (``("left_click", {...}, "error")``), and that ``screenshot`` and
``zoom`` results carry an image. A request off script is answered HTTP 400 and recorded
(:class:`~cubicle.drivers.stand_in_http.StandIn`); leaving the ``with`` cleanly raises it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cubicle.drivers.stand_in_http import ScriptedStandIn

__all__ = ["Call", "MessagesTurn", "ScriptedMessages"]

Call = tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]
"""``(member, input)``, or ``(member, input, "error")`` for a call expected to be refused."""
MessagesTurn = Sequence[Call] | str
"""The calls of one assistant turn, or the final text."""
IMAGE_MEMBERS = frozenset({"screenshot", "zoom"})


class ScriptedMessages(ScriptedStandIn[Sequence[Call]]):
    """Serve ``turns`` as the Messages API on ``127.0.0.1`` (see the module docstring)."""

    def __init__(
        self,
        turns: Sequence[MessagesTurn],
        *,
        name: str = "claude-drill",
        on_turn: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(turns, name=name, what="a Messages script", on_turn=on_turn)

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if not path.split("?", 1)[0].endswith("/v1/messages"):
            raise self.violation(f"unexpected path {path!r} (the stand-in serves /v1/messages)")
        if self._next >= len(self.turns):
            raise self.violation("a request after the final turn")
        if self._next > 0:
            self._check_results(body, self.turns[self._next - 1])
        self.begin_turn()
        turn = self.turns[self._next]
        index = self._next
        self._next += 1
        return _message(index, turn, str(body.get("model") or "drill"))

    def _check_results(self, body: dict[str, Any], previous: MessagesTurn) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise self.violation("the request has no messages")
        last = messages[-1]
        content = last.get("content") if isinstance(last, dict) else None
        if not isinstance(content, list):
            raise self.violation("the last message carries no tool results")
        results = {
            block.get("tool_use_id"): block
            for block in content
            if isinstance(block, dict) and block.get("type") == "tool_result"
        }
        for number, call in enumerate(previous):
            member, expect_error = call[0], len(call) > 2
            result = results.get(_tool_use_id(self._next - 1, number))
            if result is None:
                raise self.violation(f"no tool_result for call {number} ({member})")
            if result.get("toolset_name") != "computer":
                raise self.violation(f"call {number} ({member}): toolset_name is not computer")
            if bool(result.get("is_error")) != expect_error:
                raise self.violation(
                    f"call {number} ({member}): is_error={result.get('is_error')!r}, expected "
                    f"{expect_error}: {_text(result)!r:.300}"
                )
            if member in IMAGE_MEMBERS and not expect_error and not _has_image(result):
                raise self.violation(f"call {number} ({member}): the result has no image")


def _tool_use_id(turn: int, number: int) -> str:
    return f"toolu_{turn:03d}_{number:02d}"


def _message(index: int, turn: MessagesTurn, model: str) -> dict[str, Any]:
    if isinstance(turn, str):
        content: list[dict[str, Any]] = [{"type": "text", "text": turn}]
        stop = "end_turn"
    else:
        content = [
            {
                "type": "tool_use",
                "id": _tool_use_id(index, number),
                "name": call[0],
                "input": call[1],
                "toolset_name": "computer",
            }
            for number, call in enumerate(turn)
        ]
        stop = "tool_use"
    return {
        "id": f"msg_{index:03d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _blocks(result: dict[str, Any]) -> list[dict[str, Any]]:
    content = result.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def _has_image(result: dict[str, Any]) -> bool:
    return any(block.get("type") == "image" for block in _blocks(result))


def _text(result: dict[str, Any]) -> str:
    return " ".join(str(b.get("text")) for b in _blocks(result) if b.get("type") == "text")
