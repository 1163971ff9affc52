"""cubicle's host side: providers (Docker, VM), sandbox lifecycle, network policy and the CLI."""

from __future__ import annotations

__version__ = "0.1.0"
