"""Request bodies of ``cubicle serve``: the one place the server parses JSON a client sent.

A body nested deeper than :data:`MAX_JSON_DEPTH` is refused with a 400 (issue 38, SV6: a
200,000-deep array made ``json.loads`` raise ``RecursionError``, answered 500), both when the
parser gives up (``RecursionError``) and when it does not, so that everything accepted can be
encoded again (events, snapshots) far from the interpreter's recursion limit.
"""

from __future__ import annotations

import json
from typing import Any

from cubicle.orchestrator.serve.errors import bad_request

__all__ = ["MAX_JSON_DEPTH", "json_depth", "parse_object"]

MAX_JSON_DEPTH = 100
"""Deepest nesting of arrays and objects accepted (levels; the body's own object is level 1).
No request of the API nests near it (a tool's JSON schema included); the interpreter's recursion
limit is 1000 frames."""


def json_depth(value: object) -> int:
    """Nesting depth of arrays and objects in ``value`` (0 for a scalar), without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse_object(raw: bytes) -> dict[str, Any]:
    """The JSON object in ``raw``.

    :raises ApiError: 400 when it is not valid JSON, nests deeper than :data:`MAX_JSON_DEPTH`
        (code ``json_too_deep``), or is not an object."""
    too_deep = bad_request(
        f"the request body nests arrays/objects deeper than {MAX_JSON_DEPTH} levels",
        code="json_too_deep",
    )
    try:
        body = json.loads(raw)
    except RecursionError:
        raise too_deep from None
    except (ValueError, UnicodeDecodeError):
        raise bad_request("the request body is not valid JSON") from None
    if json_depth(body) > MAX_JSON_DEPTH:
        raise too_deep
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body
