"""Where the files cubicle ships beside its code are: ``images/`` (what guest images are built
from), ``tasks/`` (the shipped task files), ``requirements/guest.txt`` (the guest agent's lock)
and the guest agent's sources (``cubicle_guest/``).

In a checkout (or an editable install of one) they are the repository's own folders, next to the
``cubicle`` package. An installed wheel carries copies of them as package data in
``cubicle/_shipped/`` (``setup.py``'s build step puts them there, in the same layout), so
``cubicle image build``, ``up``, ``drill`` and ``run --task`` work from a wheel as from a checkout.
:func:`source_root` is the one place that decides which; every reader takes its paths from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["PACKAGE_DIR", "SHIPPED_DIR", "source_root"]

PACKAGE_DIR: Final = Path(__file__).resolve().parents[1]
"""The ``cubicle`` package's folder."""
SHIPPED_DIR: Final = "_shipped"
"""The folder, inside the installed ``cubicle`` package, that holds a wheel's copies."""


def source_root() -> Path:
    """The folder holding ``images/``, ``tasks/``, ``requirements/guest.txt`` and
    ``cubicle_guest/``: the wheel's ``cubicle/_shipped`` when installed from one, else the
    checkout the ``cubicle`` package lives in."""
    shipped = PACKAGE_DIR / SHIPPED_DIR
    return shipped if shipped.is_dir() else PACKAGE_DIR.parent
