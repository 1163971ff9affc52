"""The guest desktop: its configuration files and the panel layout a model (or a test) clicks on.

The desktop is the same on every backend (``images/desktop``, installed by its ``install``
script into the Docker image and the VM image): openbox, a tint2 panel along the bottom of the
screen with launchers at its left end, the window list, and a clock (HH:MM) at its right end.

:data:`PANEL` describes the panel's geometry in screen pixels, for any screen size (the panel
spans the full width; everything in it is anchored to the bottom-left corner), so tests and
drills can click a launcher where it is drawn::

    x, y = PANEL.launcher_center("editor", screen=(1280, 800))   # -> (54, 780)

It mirrors ``images/desktop/tint2rc``; ``tests/desktop/test_layout.py`` checks the two agree and
the Docker/VM desktop tests click these very pixels. Change them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cubicle.orchestrator.shipped import source_root

__all__ = ["DESKTOP_DIR", "PANEL", "Launcher", "PanelLayout", "desktop_files"]

DESKTOP_DIR: Final = source_root() / "images" / "desktop"
"""The desktop's configuration in a checkout (building an image needs a checkout)."""


@dataclass(frozen=True)
class Launcher:
    """One panel launcher: what it starts and how its window is recognised.

    :param name: the key tests and drills use (``terminal``, ``editor``, ``browser``, ``files``).
    :param desktop_file: its entry in ``images/desktop/applications``.
    :param wm_class: the class (second ``WM_CLASS`` string) of the window it opens, as the
        agent's ``windows`` op reports it.
    """

    name: str
    desktop_file: str
    wm_class: str


@dataclass(frozen=True)
class PanelLayout:
    """Geometry of the panel in screen pixels (see ``images/desktop/tint2rc``)."""

    height: int
    """Panel height; it spans the screen's full width at its bottom edge."""
    padding_x: int
    """Space between the screen's left edge and the first launcher icon."""
    icon_size: int
    """Launcher icons are squares of this side, vertically centred in the panel."""
    icon_spacing: int
    """Space between two launcher icons."""
    background: tuple[int, int, int]
    """The panel's background colour (RGB)."""
    launchers: tuple[Launcher, ...]
    """Left to right."""

    def top(self, screen: tuple[int, int]) -> int:
        """The first screen row of the panel."""
        return screen[1] - self.height

    def launcher(self, name: str) -> Launcher:
        """The launcher called ``name``. :raises KeyError: naming the launchers there are."""
        for launcher in self.launchers:
            if launcher.name == name:
                return launcher
        known = ", ".join(launcher.name for launcher in self.launchers)
        raise KeyError(f"no launcher {name!r} on the panel (there are: {known})")

    def launcher_box(self, name: str, screen: tuple[int, int]) -> tuple[int, int, int, int]:
        """``(left, top, right, bottom)`` of the launcher's icon (right/bottom exclusive)."""
        index = self.launchers.index(self.launcher(name))
        left = self.padding_x + index * (self.icon_size + self.icon_spacing)
        top = self.top(screen) + (self.height - self.icon_size) // 2
        return left, top, left + self.icon_size, top + self.icon_size

    def launcher_center(self, name: str, screen: tuple[int, int]) -> tuple[int, int]:
        """The pixel at the centre of the launcher's icon: click there to start it."""
        left, top, right, bottom = self.launcher_box(name, screen)
        return (left + right) // 2, (top + bottom) // 2


PANEL: Final = PanelLayout(
    height=40,
    padding_x=4,
    icon_size=28,
    icon_spacing=8,
    background=(0x20, 0x24, 0x2C),
    launchers=(
        Launcher("terminal", "cubicle-terminal.desktop", "XTerm"),
        Launcher("editor", "cubicle-editor.desktop", "Mousepad"),
        Launcher("browser", "cubicle-browser.desktop", "Chromium"),
        Launcher("files", "cubicle-files.desktop", "Thunar"),
    ),
)


def desktop_files(root: Path | None = None) -> dict[str, Path]:
    """The desktop's configuration files: path relative to ``images/desktop`` → source file.

    :param root: a checkout (default: the one this module lives in). ``images/desktop/install``
        puts each file in place in a guest root file system.
    """
    folder = DESKTOP_DIR if root is None else root / "images" / "desktop"
    return {
        path.relative_to(folder).as_posix(): path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
