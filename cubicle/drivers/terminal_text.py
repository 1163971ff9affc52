"""Text from the guest or a model, made safe to print on a person's terminal.

A guest's log, an egress decision or a model's action may hold terminal control sequences: an
OSC 52 that writes the person's clipboard, a clear-screen, a carriage return that overprints a
line with a fake ``cubicle:`` one, bidirectional overrides that reorder what is read.
:func:`terminal_safe` shows each such character as a visible escape (``\\x1b``, ``\\u202e``)
instead: nothing is dropped, nothing is interpreted.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["terminal_safe"]

_UNSAFE: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
"""C0 controls but tab and newline, DEL, C1 controls, and the bidirectional marks, embeddings,
overrides and isolates (and the line/paragraph separators)."""


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` with every control character but ``\\n`` and ``\\t`` shown as an escape."""
    return _UNSAFE.sub(_visible, text)
