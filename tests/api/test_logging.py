"""Logging (issue 44): the core's events reach the standard ``logging`` module, logger ``tflux``
(``tflux.share``, ``tflux.store``, ``tflux.log``), and never one line per record.

Events reported on the caller's thread are logged before the call returns; those of the owner's
server threads are handed over by a thread of their own that takes the GIL holding nothing else
(never from inside the core, where a lock may be held), so they arrive shortly after.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import pytest
import tflux
from conftest import parse_segment, segment_files
from test_fork import in_child

FAST = {"log_preallocate_segments": False, "log_sync_policy": "never"}
CHILD_TIMEOUT = 60.0


def tflux_records(caplog: pytest.LogCaptureFixture, level: int = logging.DEBUG):
    return [r for r in caplog.records if r.name.startswith("tflux") and r.levelno >= level]


def wait_for(caplog: pytest.LogCaptureFixture, text: str, within: float = 10.0):
    """The tflux records whose message holds ``text``, waiting for one to arrive."""
    deadline = time.monotonic() + within
    while True:
        found = [r for r in tflux_records(caplog) if text in r.getMessage()]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_a_torn_tail_cut_at_open_is_one_warning_naming_the_file_and_offset(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="tflux")
    base = tmp_path / "base"
    with tflux.open(base, **FAST) as store:
        store.enqueue_many("", [(0, b"first"), (0, b"second")])
    log_dir = base / "data" / "log"
    (name,) = segment_files(log_dir)
    offset = parse_segment((log_dir / name).read_bytes()).end  # where the third record goes
    with tflux.open(base, **FAST) as store:
        store.enqueue("", 0, b"third" * 20)
    path = log_dir / name
    buf = path.read_bytes()
    path.write_bytes(buf[: parse_segment(buf).end - 7])  # cut inside the third record
    assert not tflux_records(caplog, logging.WARNING)
    with tflux.open(base, **FAST) as store:
        assert [r.payload for r in store.records("")] == [b"first", b"second"]
    (warning,) = tflux_records(caplog, logging.WARNING)
    assert warning.name == "tflux.log" and warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert "torn tail" in message
    assert f"{path} at offset {offset}" in message
    assert str(base / "data" / "temp") in message  # where the cut bytes are kept


def test_repair_says_what_it_cut_and_moved(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    base = tmp_path / "base"
    with tflux.open(base, **FAST) as store:
        store.enqueue_many("", [(0, b"first"), (0, b"second" * 30)])
    log_dir = base / "data" / "log"
    (name,) = segment_files(log_dir)
    buf = bytearray((log_dir / name).read_bytes())
    buf[parse_segment(bytes(buf)).end - 10] ^= 1  # a bad checksum in the last record
    (log_dir / name).write_bytes(bytes(buf))
    with tflux.Log.open(log_dir, repair=True, preallocate=False) as log:
        assert log.recovery.truncated
    (warning,) = tflux_records(caplog, logging.WARNING)
    assert warning.name == "tflux.log"
    assert warning.getMessage().startswith(f"repair of {log_dir}:")
    assert f"cut {log_dir / name} at offset" in warning.getMessage()


def test_a_snapshot_that_cannot_be_written_is_an_error_saying_writes_stop(tmp_path, caplog):
    # ... and how they resume (issue 43 leftover: a later write tries the snapshot again).
    caplog.set_level(logging.INFO, logger="tflux")
    base = tmp_path / "base"
    small = {
        **FAST,
        "log_file_soft_limit": 256,
        "log_file_hard_limit": 1024,
        "snapshot_creation_segments_threshold": 1,
    }
    with tflux.open(base, **small) as store:
        store.create_queue("q")
        (base / "data" / "tflux.snapshot" / "x").mkdir(parents=True)  # no rename over it
        with pytest.raises(tflux.TfluxIOError):
            for _ in range(100):
                store.enqueue("q", 0, b"x" * 40)
    (error,) = tflux_records(caplog, logging.ERROR)
    assert error.name == "tflux.store"
    assert error.getMessage().startswith(f"writes to {base} are refused: the snapshot")
    assert "tflux.snapshot" in error.getMessage()
    assert "tries it again, and reopening also recovers" in error.getMessage()


def test_a_lease_that_runs_out_is_a_warning_at_the_next_call(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    with tflux.open(tmp_path / "base", **FAST) as store:
        store.create_queue("jobs")
        rid = store.enqueue("jobs", 0, b"slow")
        assert store.dequeue("jobs", timeout=0, lease=0.05).id == rid
        time.sleep(0.1)
        assert not tflux_records(caplog, logging.WARNING)
        assert store.dequeue("jobs", timeout=0).id == rid  # the sweep before it: expired
        (warning,) = tflux_records(caplog, logging.WARNING)
    assert warning.name == "tflux.store"
    message = warning.getMessage()
    assert 'lease expired on 1 record(s) of queue "jobs"' in message
    assert f"(id {rid})" in message and str(tmp_path / "base") in message


def test_a_nack_that_dead_letters_is_a_warning_naming_both_queues(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    with tflux.open(tmp_path / "base", **FAST) as store:
        store.create_queue("jobs", dead_letter=("dead", 1))
        rid = store.enqueue("jobs", 0, b"poison")
        store.nack(store.dequeue("jobs", timeout=0))
        assert store.count("dead") == 1
        (warning,) = tflux_records(caplog, logging.WARNING)
    assert warning.name == "tflux.store"
    message = warning.getMessage()
    assert 'dead-lettered 1 record(s) of queue "jobs" to "dead"' in message
    assert "after 1 deliveries" in message and f"(id {rid})" in message


def test_one_sweep_that_expires_many_leases_is_one_line_with_the_count(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    with tflux.open(tmp_path / "base", **FAST) as store:
        store.create_queue("jobs", dead_letter=("dead", 1))
        store.enqueue_many("jobs", [(0, b"%d" % k) for k in range(2000)])
        # Leases long enough that none runs out before the last is taken: one sweep ends all.
        taken = [store.dequeue("jobs", timeout=0, lease=2.0) for _ in range(2000)]
        assert all(taken)
        time.sleep(2.1)
        assert store.dequeue("jobs", timeout=0) is None  # every one dead-lettered
        assert store.count("dead") == 2000
        lines = tflux_records(caplog, logging.WARNING)
    assert [r.getMessage().split(" (")[0] for r in lines] == [
        f'lease expired on 2000 record(s) of queue "jobs" in {tmp_path / "base"}',
        f'dead-lettered 2000 record(s) of queue "jobs" to "dead" in {tmp_path / "base"} '
        "after 1 deliveries",
    ]
    assert "and 1995 more" in lines[0].getMessage()


def test_events_reach_logging_in_order_when_two_threads_hand_them_over(tmp_path, caplog):
    """Regression: a thread handing events to ``logging`` lets the GIL go inside a handler; a
    second thread returning from its call meanwhile logged its later event first (CI saw a
    sweep's dead-letter line before its lease-expired line, which came after the test)."""
    import threading

    caplog.set_level(logging.INFO, logger="tflux")
    entered = threading.Event()

    def slow_for_a(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "dead-lettered" in message and str(tmp_path / "a") in message and not entered.is_set():
            entered.set()
            time.sleep(0.5)  # lets the GIL go, as a handler writing to a slow stream does
        return True

    class Discard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            pass

    slow = Discard()
    slow.addFilter(slow_for_a)  # a filter runs outside the handler's lock
    logging.getLogger("tflux").addHandler(slow)
    try:
        with tflux.open(tmp_path / "a", **FAST) as a, tflux.open(tmp_path / "b", **FAST) as b:
            taken = []
            for store in (a, b):
                store.create_queue("jobs", dead_letter=("dead", 1))
                store.enqueue("jobs", 0, b"poison")
                taken.append(store.dequeue("jobs", timeout=0))
            first = threading.Thread(target=a.nack, args=(taken[0],))
            first.start()
            assert entered.wait(10.0)
            b.nack(taken[1])  # its line is logged before this returns, after a's
            first.join(10.0)
            order = [
                "a" if str(tmp_path / "a") in r.getMessage() else "b"
                for r in tflux_records(caplog, logging.WARNING)
            ]
    finally:
        logging.getLogger("tflux").removeHandler(slow)
    assert order == ["a", "b"]


BUSY_LOOP = r"""
import logging, sys, tflux
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s",
                    stream=sys.stdout)
store = tflux.open(sys.argv[1], log_preallocate_segments=False, log_sync_policy="never")
store.create_queue("jobs")
store.enqueue("jobs", 0, b"x")
n = int(sys.argv[2])
while store.stats("jobs").expired < n:
    store.dequeue("jobs", timeout=0, lease=1e-6)  # the last delivery expires at every call
print("expired", store.stats("jobs").expired, flush=True)
"""


def test_a_busy_loop_of_10k_expiries_logs_a_bounded_number_of_lines(tmp_path):
    """One sweep per call, one expiry each: the first is reported at once, the rest summed into
    one line (reported when the quiet time ends, or at exit: not lost)."""
    done = subprocess.run(
        [sys.executable, "-c", BUSY_LOOP, str(tmp_path / "base"), "10000"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    expired = int(next(line for line in out if line.startswith("expired")).split()[1])
    warnings = [line for line in out if line.startswith("WARNING tflux.store lease expired")]
    assert 2 <= len(warnings) <= 3, out[:10]
    counts = [int(w.split("lease expired on ")[1].split(" ")[0]) for w in warnings]
    assert counts[0] == 1 and sum(counts) == expired >= 10_000
    assert warnings[-1].endswith(" s)")  # a summed line says over how long


OWNER = r"""
import sys, time, tflux
store = tflux.open(sys.argv[1])
store.create_queue("jobs", exist_ok=True)
assert store.is_owner
print(__import__("os").getpid(), flush=True)
time.sleep(3600)
"""


def test_taking_over_from_an_owner_killed_with_kill_9_is_info(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    base = tmp_path / "base"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(base)], stdout=subprocess.PIPE, text=True
    )
    try:
        pid = int(owner.stdout.readline())
        client = tflux.open(base)
        assert not client.is_owner
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert client.count("jobs") == 0  # the next call takes over
        assert client.is_owner
        client.close()
    finally:
        owner.kill()
        owner.wait()
    messages = [(r.name, r.levelno, r.getMessage()) for r in tflux_records(caplog, logging.INFO)]
    assert messages == [
        (
            "tflux.share",
            logging.INFO,
            f"the owner of {base} (process {pid}) is gone; process {os.getpid()} finds the "
            "next one or takes over",
        ),
        (
            "tflux.share",
            logging.INFO,
            f"process {os.getpid()} took over {base} as its owner: the previous owner died "
            f"without closing (it left {base / 'data' / 'tflux.sock'} behind)",
        ),
    ]


def test_an_open_after_the_owner_was_killed_says_it_took_over(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    base = tmp_path / "base"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(base)], stdout=subprocess.PIPE, text=True
    )
    owner.stdout.readline()
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    with tflux.open(base) as store:
        assert store.is_owner
    (info,) = tflux_records(caplog, logging.INFO)
    assert info.name == "tflux.share" and "took over" in info.getMessage()
    with tflux.open(base):
        pass
    assert tflux_records(caplog, logging.INFO)[-1].getMessage() == (
        f"process {os.getpid()} is the owner of {base}"
    )


CLIENT = r"""
import sys, time, tflux
store = tflux.open(sys.argv[1])
assert not store.is_owner
assert store.dequeue("jobs", timeout=5, lease=0.05) is not None
time.sleep(0.2)
store.dequeue("jobs", timeout=0)  # the owner sweeps the expired lease first
print("done", flush=True)
"""


def test_events_of_the_owners_server_threads_reach_logging(tmp_path, caplog):
    """A client's dequeue runs in the owner's server thread: its sweep of expired leases is
    reported there, with no Python call to carry it, while this thread holds the GIL."""
    caplog.set_level(logging.INFO, logger="tflux")
    base = tmp_path / "base"
    with tflux.open(base, **FAST) as store:
        store.create_queue("jobs")
        rid = store.enqueue("jobs", 0, b"slow")
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, str(base)],
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
        )
        assert client.stdout.strip() == "done", client.stderr
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            pass  # busy, holding the GIL: the events arrive when it lets go
        (warning,) = wait_for(caplog, "lease expired")
    assert warning.name == "tflux.store" and f"(id {rid})" in warning.getMessage()


EXPIRING_CLIENT = r"""
import sys, tflux
s = tflux.open(sys.argv[1])
print("client", flush=True)
for k in range(int(sys.argv[2])):  # a first expiry per queue: a line each, in the owner
    s.dequeue(f"q{k}", timeout=0, lease=1e-6)
    s.dequeue(f"q{k}", timeout=0)
"""

EXIT_WHILE_SERVING = r"""
import logging, subprocess, sys, time, tflux
logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
base, client_code, n = sys.argv[1], sys.argv[2], 3000
store = tflux.open(base, log_preallocate_segments=False, log_sync_policy="never")
for k in range(n):
    store.create_queue(f"q{k}")
    store.enqueue(f"q{k}", 0, b"x")
client = subprocess.Popen([sys.executable, "-c", client_code, base, str(n)], stdout=subprocess.PIPE)
client.stdout.readline()
time.sleep(0.3)
client.kill()
"""


def test_exiting_while_the_server_threads_report_is_clean(tmp_path):
    """At exit the thread that hands events over stops taking the GIL before the interpreter
    finalises (CPython stops a thread that takes it then, in the middle of Rust code: once seen
    as ``Fatal Python error: PyGILState_Release``); what was queued is logged."""
    done = subprocess.run(
        [sys.executable, "-c", EXIT_WHILE_SERVING, str(tmp_path / "base"), EXPIRING_CLIENT],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Fatal" not in done.stderr
    assert "tflux.store lease expired" in done.stderr


def test_logging_works_in_a_forked_child(tmp_path, caplog):
    """The parent's queue and thread are the parent's: a child has its own, for the events of
    its calls and of its own threads (its server's)."""
    caplog.set_level(logging.INFO, logger="tflux")
    with tflux.open(tmp_path / "parent"):
        pass
    assert wait_for(caplog, "is the owner")

    def child() -> int:
        seen: list[str] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                seen.append(record.getMessage())

        logging.getLogger("tflux").addHandler(Keep())
        base = tmp_path / "child"
        with tflux.open(base, **FAST) as store:
            if not any("is the owner" in m for m in seen):
                return 1
            store.create_queue("jobs")
            store.enqueue("jobs", 0, b"slow")
            client = subprocess.run(
                [sys.executable, "-c", CLIENT, str(base)],
                capture_output=True,
                timeout=CHILD_TIMEOUT,
            )
            if client.returncode != 0:
                return 3
            deadline = time.monotonic() + 10
            while not any("lease expired" in m for m in seen):
                if time.monotonic() > deadline:
                    return 2
                time.sleep(0.02)
        return 0

    assert in_child(child) == 0


def test_a_handler_that_raises_does_not_break_the_call(tmp_path, caplog, monkeypatch):
    """Its exception is reported as unraisable, never left set on the call's return."""
    caplog.set_level(logging.INFO, logger="tflux")
    unraisable: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(u.exc_value))

    class Broken(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            raise RuntimeError("broken handler")

    broken = Broken()
    logger = logging.getLogger("tflux")
    logger.addHandler(broken)
    try:
        with tflux.open(tmp_path / "base", **FAST) as store:
            store.create_queue("jobs", dead_letter=("dead", 1))
            store.enqueue("jobs", 0, b"x")
            store.nack(store.dequeue("jobs", timeout=0))
            assert store.count("dead") == 1
    finally:
        logger.removeHandler(broken)
    assert unraisable and all(str(e) == "broken handler" for e in unraisable)


def test_nothing_is_logged_while_a_queue_works_normally(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="tflux")
    with tflux.open(tmp_path / "base", **FAST) as store:
        store.create_queue("jobs")
        for k in range(200):
            store.enqueue("jobs", k, b"x")
        for _ in range(200):
            store.ack(store.dequeue("jobs", timeout=0, lease=30))
    assert [r.getMessage() for r in tflux_records(caplog)] == [
        f"process {os.getpid()} is the owner of {tmp_path / 'base'}"
    ]


def test_child_loggers_follow_the_tflux_logger(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    logging.getLogger("tflux.share").setLevel(logging.WARNING)
    try:
        with tflux.open(tmp_path / "base"):
            pass
    finally:
        logging.getLogger("tflux.share").setLevel(logging.NOTSET)
    assert tflux_records(caplog) == []
