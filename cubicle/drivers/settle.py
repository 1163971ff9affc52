"""The drivers' ``settle`` option: how each action waits for its effect before the next one.

``GuestDriver(..., settle=...)`` and ``AsyncGuestDriver`` accept:

* ``True`` (default) — :class:`cubicle_guest.protocol.SettleSpec` defaults: wait up to ``expect_ms``
  (300) for a first change, then until the screen has been quiet ``quiet_ms`` (400; 150, the
  ``typing_quiet_ms``, after typing into a normal window; 70, the ``idle_quiet_ms``, once the
  programs the action reached use no CPU), at most ``cap_ms`` (3000);
* a :class:`~cubicle_guest.protocol.SettleSpec`, or a mapping with any of ``expect_ms``,
``quiet_ms``,
  ``cap_ms``, ``typing_quiet_ms``, ``idle_quiet_ms``, ``launch_cap_ms`` (milliseconds; the others
  keep their defaults; ``typing_quiet_ms: None`` waits ``quiet_ms`` after typing too,
  ``idle_quiet_ms: None`` waits it whether the programs are idle or not; ``launch_cap_ms``, unset
  by default, lets an action that launched a program wait past ``cap_ms`` for its first window);
* ``False`` or ``None`` — off: actions return as soon as their input is sent, screenshots show
  whatever is on screen then, and records carry no receipt.

With settling on, every input action (click, double_click, drag, keypress, move, scroll, type)
returns only once the app has taken it in, so the next action of a batch and the screenshot the
SDK takes after the batch see its effect. ``wait`` is a plain wait either way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from cubicle.drivers.errors import SettleOptionError
from cubicle_guest.errors import GuestError
from cubicle_guest.protocol import SettleSpec

__all__ = ["SettleOption", "SettleSpec", "check_settle", "settle_for_agent"]

SettleOption = SettleSpec | Mapping[str, int] | bool | None
"""What the drivers' ``settle`` parameter accepts (module docstring)."""


def check_settle(value: object) -> SettleSpec | None:
    """The settle spec a ``settle`` option stands for (``None``: settling off).

    :raises SettleOptionError: naming the option that is wrong (not an integer, negative,
        ``cap_ms`` over its limit, ``expect_ms``/``quiet_ms`` over ``cap_ms``, unknown name).
    """
    if value is None or value is False:
        return None
    if value is True:
        return SettleSpec()
    if isinstance(value, SettleSpec):
        value = value.as_args()
    try:
        return SettleSpec.parse(value)
    except GuestError as exc:
        raise SettleOptionError(exc.reason) from None


def settle_for_agent(spec: SettleSpec, hello: Mapping[str, object], name: str) -> SettleSpec:
    """``spec`` as the agent that said ``hello`` takes it: without each optional field whose
    feature the agent lacks (:attr:`SettleSpec.FEATURE_OF`) — without ``typing_quiet_ms`` it waits
    ``quiet_ms`` after typing too, without ``idle_quiet_ms`` it waits it when idle too, without
    ``launch_cap_ms`` a pending launch holds an action only up to ``cap_ms``.

    :raises SettleOptionError: the agent cannot settle actions at all (no ``receipts``).
    """
    features = hello.get("features")  # cubicle_guest.protocol.FEATURES of the agent
    if not isinstance(features, list) or "receipts" not in features:
        raise SettleOptionError(
            f"the agent at {name} does not settle actions (features {features!r}; protocol "
            f"{hello.get('protocol')}, feature 'receipts' needed)",
            hint="update the guest image (cubicle image build), or pass settle=False",
        )
    for key, feature in SettleSpec.FEATURE_OF.items():
        if feature not in features:
            off: dict[str, Any] = {key: None}
            spec = dataclasses.replace(spec, unsupported=spec.unsupported | {key}, **off)
    return spec
