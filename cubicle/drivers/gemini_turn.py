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
from cubicle.drivers.gemini_actions import GeminiComputer

__all__ = ["NOT_EXECUTED", "function_responses"]

NOT_EXECUTED = "not executed: an earlier call of this turn failed"
_PNG_PREFIX = "data:image/png;base64,"


def function_responses(
    computer: GeminiComputer, calls: Sequence[types.FunctionCall]
) -> list[types.Part]:
    """Run ``calls`` and return one ``function_response`` part per call, in order."""
    parts: list[types.Part] = []
    failed = False
    for call in calls:
        name = call.name or ""
        response: dict[str, Any]
        if failed:
            response = {"error": NOT_EXECUTED}
        else:
            try:
                computer.execute(name, dict(call.args or {}))
                response = {}
            except DriverError as exc:
                failed = True
                response = {"error": str(exc)}
        parts.append(
            types.Part(
                function_response=types.FunctionResponse(id=call.id, name=name, response=response)
            )
        )
    if parts:
        shot = computer.driver.screenshot()["image_url"]
        png = base64.b64decode(shot.removeprefix(_PNG_PREFIX))
        last = parts[-1].function_response
        assert last is not None
        last.parts = [
            types.FunctionResponsePart(
                inline_data=types.FunctionResponseBlob(mime_type="image/png", data=png)
            )
        ]
    return parts
