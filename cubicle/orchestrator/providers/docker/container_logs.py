"""The log of every container cubicle creates is capped on the engine's disk.

What a guest writes to its container's stdout/stderr (``/proc/1/fd/1`` is the supervisor's, which
the guest user owns) lands in a file of the engine's data root; uncapped, a guest filled the host
disk through it (issue 38, LG2), and the egress proxy's decision log grows with every request the
guest makes. Every container (guest, egress proxy, warm-pool claim marker) gets
:func:`log_config`: Docker's ``json-file`` driver (what ``cubicle logs`` and the egress log read
with ``docker logs``) rotated at :data:`LOG_MAX_SIZE_MB` MiB, :data:`LOG_MAX_FILES` files kept, so
at most ``LOG_MAX_SIZE_MB * LOG_MAX_FILES`` MiB per container, whatever the daemon's defaults.
Older lines are dropped (the newest are what ``cubicle logs`` shows).
"""

from __future__ import annotations

from typing import Final

from docker.types import LogConfig

__all__ = ["LOG_MAX_FILES", "LOG_MAX_SIZE_MB", "log_config"]

LOG_MAX_SIZE_MB: Final = 8
LOG_MAX_FILES: Final = 2


def log_config() -> LogConfig:
    """The ``log_config`` of every container cubicle creates (a new object each call)."""
    return LogConfig(
        type=LogConfig.types.JSON,
        config={"max-size": f"{LOG_MAX_SIZE_MB}m", "max-file": str(LOG_MAX_FILES)},
    )
