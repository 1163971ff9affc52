"""Check an incoming request body against the script (pure): is the conversation on script?

The request answering turn ``n`` (after a ``computer_call`` turn ``n-1``) must end with the
``computer_call_output`` for that call's ``call_id``, carrying a ``data:image/png;base64,``
screenshot of the expected size (PNG header decoded) and ``acknowledged_safety_checks`` equal to
the scripted checks (none when none were scripted). After a ``function_call`` turn the request
must end with a ``function_call_output`` for that call's ``call_id`` (any output). Every
request declares exactly one computer tool: the GA ``computer`` or the preview
``computer_use_preview``, whose ``environment`` must be valid and whose display size must be the
script's ``model_view`` when it has one.
"""

from __future__ import annotations

from typing import Any

from cubicle.drivers.png import PngError, png_size_from_data_url
from cubicle.drivers.scripted_model.script import Script, Turn
from cubicle.drivers.scripted_model.wire import call_id

__all__ = ["check_request", "tool_output"]


def check_request(
    script: Script, prefix: str, index: int, body: object, *, resumed: bool = False
) -> str | None:
    """Return what is wrong with ``body`` as the request for turn ``index``, or ``None``.

    :param resumed: the first request of a resumed run: it must end with a user message
        carrying a screenshot (the fresh observation), not the previous call's output.
    """
    if not isinstance(body, dict):
        return f"the request body is a {type(body).__name__}, expected a JSON object"
    tools = body.get("tools")
    listed = tools if isinstance(tools, list) else []
    computer = [
        t
        for t in listed
        if isinstance(t, dict) and t.get("type") in ("computer", "computer_use_preview")
    ]
    if not computer:
        return f"the request declares no computer tool (tools={tools!r:.80})"
    if len(computer) > 1:
        return f"the request declares {len(computer)} computer tools; the API takes one"
    if computer[0]["type"] == "computer_use_preview":
        problem = _check_preview_tool(script, computer[0])
        if problem is not None:
            return problem
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        return "the request has no input items"
    if resumed:
        return _check_observation(items[-1])
    previous = script.turns[index - 1] if index > 0 else None
    if previous is not None and previous.is_function_call:
        return _check_function_output(prefix, previous, items[-1])
    if previous is None or not previous.is_call:
        return None
    return _check_output(script, prefix, previous, items[-1])


def _check_observation(last: Any) -> str | None:
    content = last.get("content") if isinstance(last, dict) else None
    if not isinstance(last, dict) or last.get("role") != "user" or not isinstance(content, list):
        return "a resumed run's first request must end with a user message (its observation)"
    images = [
        part
        for part in content
        if isinstance(part, dict)
        and part.get("type") == "input_image"
        and str(part.get("image_url", "")).startswith("data:image/png;base64,")
    ]
    if not images:
        return "a resumed run's observation carries no data:image/png screenshot"
    return None


def _check_function_output(prefix: str, previous: Turn, last: Any) -> str | None:
    expected_id = call_id(prefix, previous)
    if not isinstance(last, dict) or last.get("type") != "function_call_output":
        kind = last.get("type", last.get("role")) if isinstance(last, dict) else type(last).__name__
        return (
            f"the last input item is {kind!r}, expected the function_call_output for {expected_id}"
        )
    if last.get("call_id") != expected_id:
        return f"the function_call_output answers {last.get('call_id')!r}, expected {expected_id}"
    if not isinstance(last.get("output"), str | list):
        return f"the output of {expected_id} is neither text nor a list of parts"
    return None


def tool_output(body: dict[str, Any]) -> str | None:
    """The output of the latest ``function_call_output`` in a request's input (a text output
    verbatim, a list's ``input_text`` parts joined), or ``None``."""
    items = body.get("input")
    for item in reversed(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, str):
                return output
            parts = output if isinstance(output, list) else []
            return "".join(
                str(part.get("text", ""))
                for part in parts
                if isinstance(part, dict) and part.get("type") == "input_text"
            )
    return None


PREVIEW_ENVIRONMENTS = ("windows", "mac", "linux", "ubuntu", "browser")
"""The ``environment`` values the ``computer_use_preview`` tool takes."""


def _check_preview_tool(script: Script, tool: dict[str, Any]) -> str | None:
    """The preview tool (the Agents SDK sends it for ``computer-use-preview`` models) declares
    the environment and the display size; the size must be the script's ``model_view``."""
    environment = tool.get("environment")
    if environment not in PREVIEW_ENVIRONMENTS:
        return (
            f"the computer_use_preview tool's environment is {environment!r:.40}; "
            f"expected one of {', '.join(PREVIEW_ENVIRONMENTS)}"
        )
    size = (tool.get("display_width"), tool.get("display_height"))
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
        return f"the computer_use_preview tool's display size is {size!r:.60}, not two pixel counts"
    if script.model_view is not None and size != script.model_view:
        return (
            f"the computer_use_preview tool declares a {size[0]}x{size[1]} display, "
            f"but the model sees {script.model_view[0]}x{script.model_view[1]} screenshots"
        )
    return None


def _check_output(script: Script, prefix: str, previous: Turn, last: Any) -> str | None:
    expected_id = call_id(prefix, previous)
    if not isinstance(last, dict) or last.get("type") != "computer_call_output":
        kind = last.get("type", last.get("role")) if isinstance(last, dict) else type(last).__name__
        return (
            f"the last input item is {kind!r}, expected the computer_call_output for {expected_id}"
        )
    if last.get("call_id") != expected_id:
        return f"the computer_call_output answers {last.get('call_id')!r}, expected {expected_id}"
    output = last.get("output")
    if not isinstance(output, dict) or output.get("type") != "computer_screenshot":
        return f"the output of {expected_id} is not a computer_screenshot: {output!r:.80}"
    url = output.get("image_url")
    if not isinstance(url, str):
        return f"the screenshot of {expected_id} has no image_url (file_id is not supported here)"
    try:
        size = png_size_from_data_url(url)
    except PngError as exc:
        return f"the screenshot of {expected_id} is not a PNG data URL: {exc}"
    wanted = script.expected_size(previous)
    if wanted is not None and size != wanted:
        return (
            f"the screenshot of {expected_id} is {size[0]}x{size[1]}, "
            f"expected {wanted[0]}x{wanted[1]}"
        )
    acknowledged = last.get("acknowledged_safety_checks") or []
    scripted = [check.as_json() for check in previous.safety_checks]
    if acknowledged != scripted:
        ids = [a.get("id") if isinstance(a, dict) else a for a in acknowledged]
        return (
            f"acknowledged_safety_checks of {expected_id} are {ids!r:.120}, expected "
            f"{[c['id'] for c in scripted]!r} echoed with their code and message"
        )
    return None
