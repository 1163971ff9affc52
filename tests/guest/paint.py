"""Solid-colour windows at known places, for screenshot and window-list tests."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Self

from Xlib import X, Xatom, display


class Painter:
    """Owns one X connection and the windows it maps; ``close()`` destroys them all."""

    def __init__(self, display_name: str) -> None:
        self.display = display.Display(display_name)
        self.screen = self.display.screen()
        self.windows: list[Any] = []

    def rect(
        self,
        x: int,
        y: int,
        width: int,
        height: int,
        rgb: int,
        *,
        title: str = "",
        wm_class: tuple[str, str] | None = None,
        pid: int | None = None,
    ) -> Any:
        """Map an override-redirect window filled with ``rgb`` (0xRRGGBB, TrueColor)."""
        window = self.screen.root.create_window(
            x,
            y,
            width,
            height,
            0,
            self.screen.root_depth,
            X.InputOutput,
            X.CopyFromParent,
            background_pixel=rgb,
            override_redirect=True,
            event_mask=X.ExposureMask,
        )
        if title:
            window.change_property(
                Xatom.WM_NAME, Xatom.STRING, 8, title.encode("latin-1", "replace")
            )
            window.change_property(
                self.display.get_atom("_NET_WM_NAME"),
                self.display.get_atom("UTF8_STRING"),
                8,
                title.encode(),
            )
        if wm_class:
            window.set_wm_class(*wm_class)
        if pid is not None:
            window.change_property(self.display.get_atom("_NET_WM_PID"), Xatom.CARDINAL, 32, [pid])
        window.map()
        window.clear_area()
        self.display.sync()
        self.windows.append(window)
        return window

    def recolor(self, window: Any, rgb: int) -> None:
        window.change_attributes(background_pixel=rgb)
        window.clear_area()
        self.display.sync()

    def close(self) -> None:
        for window in self.windows:
            window.destroy()
        self.display.sync()
        self.display.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
