"""A read-only channel's bounds while the writer collects segments (issue 43 item 8).

The read-only side lists the log directory and then reads the segments it listed; a writer
that collects between the two deleted a listed file, and ``start_lsn`` (and a receiver opened
at it) raised ``TfluxIOError`` (ENOENT, "stat segment") instead of retrying or raising the
documented ``StaleReadError``. The writer sends from a thread with a byte retention, so
every roll-over collects.
"""

from __future__ import annotations

import threading
import time

import tflux
from _channel_support import small


def test_readonly_bounds_and_receivers_never_fail_with_a_vanished_segment(tmp_path):
    writer = small(tmp_path, sync="never", retention_bytes=2048)
    stop = threading.Event()

    def send() -> None:
        tx = writer.sender()
        while not stop.is_set():
            tx.send_many([b"m" * 40] * 8)

    sending = threading.Thread(target=send, daemon=True)
    sending.start()
    ro = tflux.Channel.open(tmp_path, readonly=True)
    calls = opened = stale = 0
    try:
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            calls += 1
            try:
                first, end = ro.start_lsn, ro.next_lsn
                assert 0 <= first <= end < 1 << 40, (first, end)
                rx = ro.receiver("r", start=ro.start_lsn)
            except (tflux.StaleReadError, tflux.OutOfRangeError):
                stale += 1  # the documented errors: the start was collected meanwhile
                continue
            opened += 1
            rx.close()
            writer.drop_receiver("r")  # its cursor would hold collection back
    finally:
        stop.set()
        sending.join(10)
        ro.close()
        writer.close()
    assert opened > 0 and calls > 100, (calls, opened, stale)
