"""One Gemini computer-use turn on the desktop: run its function calls, answer each with a
``FunctionResponse`` (the parts the next ``generate_content`` request carries).

:func:`function_responses` executes the calls in order on a
:class:`~cubicle.drivers.gemini_actions.GeminiComputer`. A call that is refused or fails is
answered ``{"error": "<what was wrong>"}`` and the turn's later calls are not run (answered
``{"error": "not executed: ..."}``), as Anthropic's runner does. The last response carries a
screenshot of the view as it is after the turn (PNG, ``inline_data``), so the model sees the
effect of the whole turn.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from google.genai import types

from cubicle.drivers.errors import DriverError
from cubicle.drivers.gemini_actions import AsyncGeminiComputer, GeminiComputer

__all__ = ["NOT_EXECUTED", "async_function_responses", "function_responses"]

NOT_EXECUTED = "not executed: an earlier call of this turn failed"
_PNG_PREFIX = "data:image/png;base64,"


def function_responses(
    computer: GeminiComputer, calls: Sequence[types.FunctionCall]
) -> list[types.Part]:
    """Run ``calls`` and return one ``function_response`` part per call, in order."""
    responses: list[dict[str, Any]] = []
    for call in calls:
        if responses and "error" in responses[-1]:
            responses.append({"error": NOT_EXECUTED})
            continue
        try:
            computer.execute(call.name or "", dict(call.args or {}))
            responses.append({})
        except DriverError as exc:
            responses.append({"error": str(exc)})
    if not calls:
        return []
    return _parts(calls, responses, computer.driver.screenshot()["image_url"])


async def async_function_responses(
    computer: AsyncGeminiComputer, calls: Sequence[types.FunctionCall]
) -> list[types.Part]:
    """:func:`function_responses` for an :class:`AsyncGeminiComputer`."""
    responses: list[dict[str, Any]] = []
    for call in calls:
        if responses and "error" in responses[-1]:
            responses.append({"error": NOT_EXECUTED})
            continue
        try:
            await computer.execute(call.name or "", dict(call.args or {}))
            responses.append({})
        except DriverError as exc:
            responses.append({"error": str(exc)})
    if not calls:
        return []
    return _parts(calls, responses, (await computer.driver.screenshot())["image_url"])


def _parts(
    calls: Sequence[types.FunctionCall], responses: list[dict[str, Any]], image_url: str
) -> list[types.Part]:
    parts = [
        types.Part(
            function_response=types.FunctionResponse(
                id=call.id, name=call.name or "", response=response
            )
        )
        for call, response in zip(calls, responses, strict=True)
    ]
    png = base64.b64decode(image_url.removeprefix(_PNG_PREFIX))
    last = parts[-1].function_response
    assert last is not None
    last.parts = [
        types.FunctionResponsePart(
            inline_data=types.FunctionResponseBlob(mime_type="image/png", data=png)
        )
    ]
    return parts
