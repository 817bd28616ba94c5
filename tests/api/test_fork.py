"""Fork safety (issue 29): a store, log or channel opened before ``fork()`` belongs to the parent.

A shared store's copy in a child becomes a client of the parent; a log, a channel and an
unshared store refuse every use with :class:`tflux.ForkedError` and write nothing, so the
parent's records are exactly what was written through it (before, children that enqueued
through a store opened at module level wrote over each other at the same file offsets, and
100 of 400 records came back). Opening anew in a child works, also once the parent has used
rayon's pool (before, it waited forever on the pool's threads, which a child does not have).

Each child reports through its exit status; a child that hangs is killed after ``CHILD_TIMEOUT``
and fails the test.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import tflux

CHILD_TIMEOUT = 60.0
# The store the multiprocessing workers inherit (a module global, as an app's would be).
_POOL_STORE: tflux.Store | None = None
# Small segments and no automatic snapshot: the log keeps many segments to scan.
SMALL = dict(
    log_file_soft_limit=4096, log_file_hard_limit=8192, snapshot_creation_segments_threshold=0
)


def in_child(body: Callable[[], int]) -> int:
    """Runs ``body`` in a forked child; returns its exit status (killed after the timeout)."""
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            code = body()
        except BaseException as exc:  # anything unexpected: say what, fail the status
            print(f"child: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_TIMEOUT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child hung for {CHILD_TIMEOUT} s")


def refused(call: Callable[[], object]) -> bool:
    try:
        call()
    except tflux.ForkedError as exc:
        return "fork" in str(exc) and "open it again" in str(exc)
    return False


def many_segments(base: Path, records: int = 2000) -> None:
    with tflux.open(base, **SMALL) as store:
        store.create_queue("q")
        for start in range(0, records, 100):  # a batch never spans segments: many batches
            store.enqueue_many("q", [(k % 7, b"m%05d" % k) for k in range(start, start + 100)])


def test_a_store_opened_before_fork_is_a_client_of_the_parent_in_the_child(tmp_path):
    """gunicorn --preload: the store opened at import, workers forked from the master. Each
    child's copy becomes a client of the parent (its owner): every record arrives exactly once
    (before issue 29's fix 100 of 400 did; then the child was refused)."""
    base = tmp_path / "base"
    store = tflux.open(base)
    store.create_queue("jobs")
    store.enqueue_many("jobs", [(0, b"before-%d" % k) for k in range(10)])

    def worker(k: int) -> Callable[[], int]:
        def body() -> int:
            store.enqueue_many("jobs", [(1, b"w%d-%03d" % (k, i)) for i in range(100)])
            store.enqueue("jobs", 1, b"w%d-one" % k)
            if store.is_owner or store.owner_pid != os.getppid():
                return 2
            rec = store.dequeue("jobs", timeout=5)
            store.ack(rec)  # takes one of the parent's "before" records (key 0 first)
            return 0 if rec.payload.startswith(b"before-") else 3

        return body

    statuses = [in_child(worker(k)) for k in range(4)]
    assert statuses == [0, 0, 0, 0]
    store.enqueue_many("jobs", [(2, b"after-%d" % k) for k in range(10)])
    store.close()
    with tflux.open(base, readonly=True) as again:
        got = [r.payload for r in again.records("jobs")]
    workers = sorted(
        [b"w%d-%03d" % (k, i) for k in range(4) for i in range(100)]
        + [b"w%d-one" % k for k in range(4)]
    )
    assert got[:6] == [b"before-%d" % k for k in range(4, 10)]
    assert sorted(got[6:-10]) == workers
    assert got[-10:] == [b"after-%d" % k for k in range(10)]
    assert tflux.verify(base / "data" / "log").ok


def test_an_unshared_store_refuses_the_child_and_the_parent_keeps_every_record(tmp_path):
    """``share=False``: the child's copy refuses every use and writes nothing."""
    base = tmp_path / "base"
    store = tflux.open(base, share=False)
    store.create_queue("jobs")
    store.enqueue_many("jobs", [(0, b"before-%d" % k) for k in range(10)])

    def worker() -> int:
        calls = [
            lambda: store.enqueue_many("jobs", [(1, b"child")] * 100),
            lambda: store.enqueue("jobs", 1, b"child"),
            lambda: store.dequeue("jobs", timeout=0),
            lambda: store.count("jobs"),
            lambda: store.snapshot(),
        ]
        if not all(refused(c) for c in calls):
            return 1
        store.close()  # lets go without writing
        del calls
        return 0

    statuses = [in_child(worker) for _ in range(4)]
    assert statuses == [0, 0, 0, 0]
    store.enqueue_many("jobs", [(2, b"after-%d" % k) for k in range(10)])
    store.close()
    with tflux.open(base) as again:
        got = [again.dequeue("jobs", timeout=0).payload for _ in range(again.count("jobs"))]
    assert got == [b"before-%d" % k for k in range(10)] + [b"after-%d" % k for k in range(10)]


def _pool_worker(k: int) -> str:
    try:
        _POOL_STORE.enqueue("jobs", 0, b"from pool worker %d" % k)
    except tflux.ForkedError:
        return "refused"
    return "wrote" if not _POOL_STORE.is_owner else "owner?"


def test_multiprocessing_fork_workers_write_through_the_parent_exactly_once(tmp_path):
    global _POOL_STORE
    base = tmp_path / "base"
    _POOL_STORE = tflux.open(base)
    _POOL_STORE.create_queue("jobs")
    _POOL_STORE.enqueue("jobs", 0, b"parent")
    try:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            assert pool.map(_pool_worker, range(8)) == ["wrote"] * 8
        assert _POOL_STORE.count("jobs") == 9
    finally:
        _POOL_STORE.close()
    with tflux.open(base, readonly=True) as again:
        assert sorted(r.payload for r in again.records("jobs")) == sorted(
            [b"parent"] + [b"from pool worker %d" % k for k in range(8)]
        )
    log = tflux.verify(base / "data" / "log")
    assert log.ok


def test_an_open_in_a_forked_child_completes_after_the_parent_used_every_core(tmp_path):
    """The parent restores a log of many segments (the scan runs on rayon's pool); the child
    opens, restores and verifies on its own (one core: the pool's threads are the parent's)."""
    base = tmp_path / "base"
    many_segments(base)
    with tflux.open(base, readonly=True) as store:
        assert store.count("q") == 2000
    log_dir = base / "data" / "log"
    assert len(list(log_dir.iterdir())) > 4

    def child() -> int:
        with tflux.open(base, readonly=True) as store:
            ok = store.count("q") == 2000
        with tflux.Log.open(log_dir, readonly=True) as log:
            ok = ok and log.last_index == 2000
        ok = ok and tflux.verify(log_dir).ok
        with tflux.open(base, **SMALL) as store:  # writable: the parent holds no lock now
            store.enqueue("q", 0, b"from the child")
            ok = ok and store.count("q") == 2001
        return 0 if ok else 1

    assert in_child(child) == 0
    with tflux.open(base, readonly=True) as store:
        assert store.count("q") == 2001


def test_a_log_opened_before_fork_refuses_the_child_and_its_close_writes_nothing(tmp_path):
    log_dir = tmp_path / "log"
    log = tflux.Log.open(log_dir, sync="always")
    log.append_many(1, [b"a", b"b"])

    def child() -> int:
        calls = [
            lambda: log.append(1, b"child"),
            lambda: log.read(0),
            lambda: log.last_index,
            lambda: log.read_batch(0, 2),
        ]
        ok = all(refused(c) for c in calls)
        log.close()
        return 0 if ok else 1

    assert in_child(child) == 0
    assert log.append(1, b"c") == 2
    log.close()
    with tflux.Log.open(log_dir, readonly=True) as again:
        assert [(e.lsn, e.data) for e in again.entries()] == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert tflux.verify(log_dir).ok


def test_a_child_that_lets_go_of_the_parents_objects_changes_nothing(tmp_path):
    """The child's copies collected (their drop) while the parent goes on writing."""
    base = tmp_path / "base"
    held = [tflux.open(base), tflux.Channel.open(tmp_path / "channel")]
    store, channel = held
    store.create_queue("jobs")
    store.enqueue("jobs", 3, b"kept")
    channel.sender().send(b"one")
    del store, channel

    def child() -> int:
        import gc

        held.clear()
        gc.collect()
        return 0

    assert in_child(child) == 0
    store, channel = held
    assert store.enqueue("jobs", 4, b"after") == 2
    assert channel.sender().send(b"two") == 1
    store.close()
    channel.close()
    with tflux.open(base, readonly=True) as again:
        assert again.count("jobs") == 2
    assert tflux.verify(base / "data" / "log").ok
    assert tflux.verify(tmp_path / "channel" / "data" / "log").ok


def test_a_channel_and_its_receivers_opened_before_fork_refuse_the_child(tmp_path):
    """An unshared channel (``share=False``) and every receiver belong to the parent."""
    channel = tflux.Channel.open(tmp_path, share=False)
    sender = channel.sender()
    sender.send_many([b"m%d" % k for k in range(5)])
    rx = channel.receiver("r")

    def child() -> int:
        calls = [
            lambda: sender.send(b"child"),
            lambda: rx.recv(timeout=0),
            lambda: rx.ack(1),
            lambda: channel.receivers(),
            lambda: channel.collect(),
            lambda: channel.sync(),
        ]
        ok = all(refused(c) for c in calls)
        channel.close()
        return 0 if ok else 1

    assert in_child(child) == 0
    assert sender.send(b"parent") == 5
    assert [m.lsn for m in (rx.recv(timeout=0) for _ in range(6))] == list(range(6))
    channel.close()


def test_a_shared_channel_sends_through_the_parent_in_the_child(tmp_path):
    """A shared channel's sender in a forked child sends through the parent (its owner); the
    parent's receivers still refuse the child."""
    channel = tflux.Channel.open(tmp_path / "chan")
    sender = channel.sender()
    sender.send_many([b"m%d" % k for k in range(5)])
    rx = channel.receiver("r")

    def child() -> int:
        if sender.send(b"child") != 5 or channel.is_owner:
            return 1
        if not refused(lambda: rx.recv(timeout=0)):
            return 2
        fresh = channel.receiver("child", start="earliest")  # reads the files itself
        got = [fresh.recv(timeout=1).data for _ in range(6)]
        return 0 if got[-1] == b"child" else 3

    assert in_child(child) == 0
    assert sender.send(b"parent") == 6
    assert [m.data for m in (rx.recv(timeout=0) for _ in range(7))][-2:] == [b"child", b"parent"]
    channel.close()
