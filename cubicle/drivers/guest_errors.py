"""Convert the guest client's exceptions into driver errors — the one place it happens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from cubicle.drivers.errors import ActionFailed, ActionTimeout
from cubicle_guest.client import AgentConnectionError, AgentTimeout
from cubicle_guest.errors import GuestError, ProtocolError

__all__ = ["map_guest_errors"]


@contextmanager
def map_guest_errors(action: str) -> Iterator[None]:
    """Re-raise guest-side failures of ``action`` as :class:`ActionFailed` (from the original).

    * :class:`GuestError` → ``ActionFailed`` with the guest's ``code`` and reason;
    * :class:`AgentTimeout` → :class:`ActionTimeout`;
    * :class:`AgentConnectionError`, :class:`ProtocolError` → ``ActionFailed`` (``code=None``).
    """
    try:
        yield
    except GuestError as exc:
        raise ActionFailed(action, exc.reason, code=exc.code, hint=exc.hint) from exc
    except AgentTimeout as exc:
        raise ActionTimeout(
            action, str(exc), hint="the connection is now broken; reconnect"
        ) from exc
    except (AgentConnectionError, ProtocolError) as exc:
        raise ActionFailed(action, str(exc)) from exc
