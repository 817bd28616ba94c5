"""One ``tflux.Log`` shared by threads, the writer lock between processes, and what read-only and
closed logs refuse.

Expected values come from the spec (section 3 and 3.1), the implementer's documented semantics and
the hand encoder in conftest.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tflux
from _log_support import lsns, open_log, seg_layout
from conftest import (
    entry_tuples,
)

# --- threads ---


@pytest.mark.parametrize("sync", ["always", "never"])
def test_appends_from_several_threads_get_distinct_consecutive_lsns(log_dir, sync):
    # Spec 7.1: with "always", concurrent writers share one fsync, so concurrent calls are expected.
    def worker(k: int) -> list[tuple[int, list[bytes]]]:
        calls = []
        for i in range(80):
            data = f"{k}-{i}".encode()
            if i % 10 == 0:
                batch = [data + b"a", data + b"b"]
                calls.append((log.append_many(1, batch), batch))
            else:
                calls.append((log.append(1, data), [data]))
        return calls

    opts = dict(soft_limit=256, hard_limit=512, sync=sync)
    with open_log(log_dir, **opts) as log:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(worker, range(4)))
        got = {e.data: e.lsn for e in log.entries()}
        written = [d for calls in results for _, batch in calls for d in batch]
        assert sorted(got.values()) == list(range(len(written)))
        assert sorted(got) == sorted(written)
        for calls in results:
            previous = -1
            for ret, batch in calls:
                where = [got[d] for d in batch]
                assert where == list(range(where[0], where[0] + len(batch))), "batch split"
                assert ret in (where[0], where[-1])
                assert where[0] > previous, "one thread's appends must get increasing LSNs"
                previous = where[-1]
        layout = seg_layout(log)
    with open_log(log_dir, **opts) as log:
        assert {e.data: e.lsn for e in log.entries()} == got
        assert seg_layout(log) == layout


def test_reads_run_while_another_thread_appends(log_dir):
    with open_log(log_dir, soft_limit=256, hard_limit=512, sync="never") as log:
        log.append(1, b"seed")
        stop = threading.Event()
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                while not stop.is_set():
                    last = log.last_index
                    seen = lsns(log.read(0))
                    assert seen[: last + 1] == list(range(last + 1))
                    # Small budget (keeps the GIL): at least one entry, then more only while the
                    # data bytes stay within the budget (an empty entry lets the next one in).
                    small = log.read(last, 1)
                    assert lsns(small) == list(range(last, last + len(small)))
                    assert len(small) == 1 or sum(len(e.data) for e in small) <= 1
                    assert lsns(log.entries(0, last + 1)) == list(range(last + 1))
            except BaseException as err:  # reported in the main thread
                errors.append(err)

        t = threading.Thread(target=reader)
        t.start()
        try:
            for i in range(300):
                log.append(1, bytes([i % 256]) * (i % 37))
        finally:
            stop.set()
            t.join()
        assert errors == []
        assert log.last_index == 300


# --- lock ----------------------------------------------------------------------------------------


def test_a_second_writer_in_the_same_process_raises_locked_error(log_dir):
    with open_log(log_dir):
        with pytest.raises(tflux.LockedError) as info:
            open_log(log_dir)
        assert isinstance(info.value, tflux.TfluxIOError)
        assert isinstance(info.value, OSError)


def test_close_releases_the_lock(log_dir):
    first = open_log(log_dir)
    first.append(1, b"a")
    first.close()
    with open_log(log_dir) as second:
        assert second.last_index == 0


def test_a_readonly_log_opens_while_a_writer_holds_the_lock(log_dir):
    with open_log(log_dir) as writer:
        writer.append(1, b"a")
        with open_log(log_dir, readonly=True) as reader:
            assert reader.readonly
            assert entry_tuples(reader.entries()) == [(0, 1, b"a")]
        writer.append(1, b"b")


TRY_OPEN = textwrap.dedent(
    """
    import sys, tflux
    try:
        log = tflux.Log.open(sys.argv[1], preallocate=False)
    except tflux.LockedError:
        print("locked")
    else:
        print("opened", log.last_index)
        log.close()
    """
)

HOLD_OPEN = textwrap.dedent(
    """
    import sys, tflux
    log = tflux.Log.open(sys.argv[1], preallocate=False)
    log.append(1, b"child")
    print("ready", flush=True)
    sys.stdin.readline()
    log.close()
    print("closed", flush=True)
    """
)


def run_child(code: str, log_dir: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, str(log_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_writer_in_another_process_is_locked_out(log_dir):
    with open_log(log_dir) as log:
        log.append(1, b"a")
        assert run_child(TRY_OPEN, log_dir) == "locked"
    assert run_child(TRY_OPEN, log_dir) == "opened 0"


def test_a_lock_held_by_another_process_blocks_until_that_process_closes(log_dir):
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_OPEN, str(log_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(tflux.LockedError):
            open_log(log_dir)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
        with open_log(log_dir) as log:
            assert entry_tuples(log.entries()) == [(0, 1, b"child")]
    finally:
        child.kill()
        child.wait()


def test_the_lock_of_a_killed_process_does_not_outlive_it(log_dir):
    # Recovery at open presumes a crashed writer can be replaced: its lock must die with it.
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_OPEN, str(log_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
    finally:
        child.kill()
        child.wait()
    with open_log(log_dir) as log:
        assert entry_tuples(log.entries()) == [(0, 1, b"child")]


# --- read-only and closed ------------------------------------------------------------------------

WRITES = {
    "append": lambda log: log.append(1, b"x"),
    "append_many": lambda log: log.append_many(1, [b"x"]),
    "insert_range": lambda log: log.insert_range(1, [(1, b"x")]),
    "truncate_after": lambda log: log.truncate_after(0),
    "compact": lambda log: log.compact(-1),
}


@pytest.mark.parametrize("method", WRITES)
def test_every_write_method_of_a_readonly_log_raises_read_only_error(log_dir, method):
    with open_log(log_dir) as log:
        log.append_many(1, [b"a", b"b"])
    before = {p.name: p.read_bytes() for p in log_dir.iterdir()}
    with open_log(log_dir, readonly=True) as log:
        assert log.readonly
        with pytest.raises(tflux.ReadOnlyError) as info:
            WRITES[method](log)
        assert isinstance(info.value, PermissionError)
        assert entry_tuples(log.entries()) == [(0, 1, b"a"), (1, 1, b"b")]
    assert {p.name: p.read_bytes() for p in log_dir.iterdir()} == before


CALLS = {
    **WRITES,
    "commit": lambda log: log.commit(0),
    "read": lambda log: log.read(0),
    "read_small": lambda log: log.read(0, 1),  # the path that keeps the GIL
    "read_batch": lambda log: log.read_batch(),
    "entries": lambda log: list(log.entries()),
    "term_at": lambda log: log.term_at(0),
    "sync": lambda log: log.sync(),
}


@pytest.mark.parametrize("method", CALLS)
def test_methods_of_a_closed_log_raise_closed_error(log_dir, method):
    log = open_log(log_dir)
    log.append(1, b"a")
    log.close()
    assert log.closed
    with pytest.raises(tflux.ClosedError):
        CALLS[method](log)


def test_a_closed_log_keeps_its_data_for_the_next_open(log_dir):
    log = open_log(log_dir)
    log.append(1, b"a")
    log.close()
    with pytest.raises(tflux.ClosedError):
        log.append(1, b"b")
    with open_log(log_dir) as again:
        assert entry_tuples(again.entries()) == [(0, 1, b"a")]


def test_close_stops_the_interval_fsync_thread_at_once(log_dir):
    """``sync="interval"`` runs the core's one interval thread; close wakes and ends it, instead
    of leaving it asleep for the rest of its interval (a minute here)."""
    script = textwrap.dedent(
        f"""
        import os, time, tflux
        def threads():
            return len(os.listdir("/proc/self/task"))
        before = threads()
        log = tflux.Log.open({str(log_dir)!r}, sync="interval", sync_interval_ms=60_000)
        log.append(1, b"x")
        during = threads()
        log.close()
        deadline = time.monotonic() + 10
        while threads() >= during and time.monotonic() < deadline:
            time.sleep(0.02)
        print(before, during, threads())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, during, after = map(int, out.stdout.split())
    assert during > before, "the interval thread never started"
    assert after < during, "the interval thread outlived close"
