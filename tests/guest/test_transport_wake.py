"""The virtio loop's wait for a host (cubicle_guest.transport): the port's SIGIO ends it at once,
so a host that connects (a VM just restored from a warm state) is not answered a sleep later."""

from __future__ import annotations

import os
import signal
import time

from cubicle_guest.transport import HOST_ABSENT_SLEEP_S, _HostWake


def test_sigio_of_the_port_ends_the_wait_and_close_restores_the_handlers() -> None:
    # a pipe stands in for the port: its read end signals SIGIO (O_ASYNC) when data arrives,
    # as the virtio console does when a host connects
    read_end, write_end = os.pipe()
    handler_before = signal.getsignal(signal.SIGIO)
    wake = _HostWake(read_end)
    try:
        assert os.get_blocking(read_end)  # only O_ASYNC was added
        os.write(write_end, b"x")  # SIGIO now, before the wait: the signal must not be lost
        started = time.monotonic()
        wake.wait(60.0)
        assert time.monotonic() - started < 30.0, "the wait ignored the port's SIGIO"
        # drained: the next wait without a signal lasts its full (short) time
        started = time.monotonic()
        wake.wait(HOST_ABSENT_SLEEP_S)
        assert time.monotonic() - started >= HOST_ABSENT_SLEEP_S * 0.9
    finally:
        wake.close()
        os.close(read_end)
        os.close(write_end)
    assert signal.getsignal(signal.SIGIO) == handler_before
    assert signal.set_wakeup_fd(-1) == -1  # no wake-up fd left installed
