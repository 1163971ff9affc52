"""The eval's live display on a terminal (``rich``): a panel kept at the bottom of the screen,
redrawn twice a second — a bar of attempts done out of those to run, the counts (done, running,
failed), the ETA, the tokens so far, and each running attempt with its seconds so far. The
progress lines (:mod:`cubicle.orchestrator.eval.progress`) scroll above it, as they are written
without a terminal. :class:`LiveDisplay` draws; the counts are the progress object's
(:class:`Snapshot`, read under its lock).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

__all__ = ["LiveDisplay", "Snapshot"]

REFRESH_PER_SECOND = 2
SHOWN_RUNNING = 8
"""Running attempts listed at most (the rest are counted)."""


@dataclass(frozen=True)
class Snapshot:
    """The counts at one moment: ``running`` maps ``task #attempt`` to when it started
    (monotonic seconds); ``eta`` is the text of the ETA."""

    total: int
    done: int
    failed: int
    tokens: int
    eta: str
    running: dict[str, float]


class LiveDisplay:
    """A rich ``Live`` panel on ``stream`` (a terminal) showing ``snapshot()``; :meth:`print`
    writes a line above it. Start with :meth:`start`, end with :meth:`stop` (the last panel
    stays on the screen)."""

    def __init__(self, stream: TextIO, snapshot: Callable[[], Snapshot]) -> None:
        self.console = Console(file=stream, force_terminal=True, highlight=False)
        self._snapshot = snapshot
        self._live = Live(
            get_renderable=self._render,
            console=self.console,
            refresh_per_second=REFRESH_PER_SECOND,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def start(self) -> None:
        self._live.start()

    def stop(self) -> None:
        self._live.stop()

    def print(self, text: str) -> None:
        """``text`` as a line above the panel (no markup read in it)."""
        self.console.print(Text(text), soft_wrap=True)

    def _render(self) -> Group:
        now = self._snapshot()
        head = Table.grid(padding=(0, 1))
        head.add_row(
            Text("cubicle eval", style="bold"),
            ProgressBar(total=max(now.total, 1), completed=now.done, width=30),
            Text(f"{now.done}/{now.total}"),
        )
        counts = Text.assemble(
            ("done ", "dim"),
            (str(now.done), "bold green"),
            ("  running ", "dim"),
            (str(len(now.running)), "bold cyan"),
            ("  failed ", "dim"),
            (str(now.failed), "bold red" if now.failed else "bold"),
            (f"  {now.eta}", ""),
            ("  tokens ", "dim"),
            (f"{now.tokens:,}", "bold"),
        )
        lines: list[Table | Text] = [head, counts]
        clock = time.monotonic()
        for name, started in sorted(now.running.items(), key=lambda item: item[1])[:SHOWN_RUNNING]:
            lines.append(Text(f"  ▸ {name}  {clock - started:5.0f} s", style="cyan"))
        if len(now.running) > SHOWN_RUNNING:
            lines.append(Text(f"  … and {len(now.running) - SHOWN_RUNNING} more", style="dim"))
        return Group(*lines)
