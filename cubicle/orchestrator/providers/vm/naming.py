"""Names of the VM backend's sandboxes: ids are ``vm-<10 hex>`` (:data:`ID_PREFIX`; golden guests
being saved, ``vm-golden…``: :mod:`.warm_start`), each with its run folder ``<home>/run/<id>/``
and its domain ``cubicle-<id>``. Below :mod:`.provider` and :mod:`.pool_members`, which both
need it (the pool members never import the provider)."""

from __future__ import annotations

from typing import Final

__all__ = ["ID_PREFIX"]

ID_PREFIX: Final = "vm-"
