"""Benchmarks of the queue store: restore, memory per queued record, durable enqueue.

Groups ``restore-64B-1M``, ``restore-64B-10M``, ``restore-1KiB-1M`` and ``restore-1KiB-10M``
restore logs of Add, Add, Remove(front) deltas (``restore_log``: 1M or 10M deltas, 64 B or
1 KiB messages) three ways:
- ``QueueState().replay(log)``: the state machine alone over an open log (GIL released),
- ``tflux.open(base)``: a whole store restore (open the log, replay, close),
- ``pyref_replay``: the pure-Python baseline (``Log.read_batch`` + ``struct`` + ``heapq``) on the
  leading deltas only; the report normalises it per delta.

Group ``memory-64B`` runs a child process per round that fills a store with 64 B records and
reports ``/proc/self/status`` before and after; the figures go to ``extra_info`` (the timing is
the child's whole run, interpreter start included).

Group ``enqueue-64B`` times durable writes with the default sync policy (fsync before each call
returns; concurrent callers share one fsync) beside the raw ``os.write`` + ``os.fdatasync`` of
one record-sized write on the same file system.

Every body asserts what it computed, so the default (``--benchmark-disable``) run is a smoke test.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
from itertools import count
from pathlib import Path

import pytest
import tflux

from benches.suite import pyref_replay
from benches.suite._benchdata import record_size
from benches.suite._queuedata import QueueLog, add_record
from benches.suite.bench_log import ROUNDS, run

# The pure-Python replay runs on the leading deltas of the restore log only.
PYREF_DELTAS = int(os.environ.get("TFLUX_BENCH_PYREF_DELTAS", "1000000"))
MEMORY_ROUNDS = 3
MEMCHILD = Path(__file__).with_name("_memchild.py")
PAYLOAD = 64
RECORD = record_size(len(add_record("", 0, bytes(PAYLOAD))))  # 96 B on disk per enqueue


# --- restore ---------------------------------------------------------------------------------


def check_front(r: tflux.Record, data: QueueLog) -> None:
    """The record a dequeue returns is the one the writer's heap put at the front."""
    assert (r.key, r.id) == data.front, ((r.key, r.id), data.front)
    assert len(r.payload) == data.payload


def check_queues(queues: list[tflux.QueueInfo], data: QueueLog) -> None:
    info = {q.name: q for q in queues}
    assert set(info) == {"", data.queue}
    assert info[data.queue].count == data.live
    assert info[data.queue].last_id == data.adds
    assert info[""].count == 0


def restore_rounds(data: QueueLog) -> int:
    """Fewer rounds for the multi-second restores (10M deltas)."""
    return ROUNDS if data.deltas <= 2_000_000 else min(ROUNDS, 3)


def test_state_replay(benchmark, restore_log: QueueLog) -> None:
    benchmark.group = restore_log.group

    def replay(log: tflux.Log) -> tuple[tflux.QueueState, int]:
        state = tflux.QueueState()
        return state, state.replay(log)

    with tflux.Log.open(restore_log.log_dir, readonly=True) as log:
        state, n = run(
            benchmark,
            replay,
            log,
            label="QueueState().replay(log)",
            role="tflux",
            rounds=restore_rounds(restore_log),
            payload=restore_log.payload,
            records=restore_log.deltas,
            bytes=restore_log.bytes,
            live=restore_log.live,
        )
    assert n == restore_log.deltas
    check_queues(state.queues(), restore_log)


def test_store_open_restores(benchmark, restore_log: QueueLog) -> None:
    benchmark.group = restore_log.group
    opened: list[tflux.Store] = []

    def restore() -> tflux.Store:
        store = tflux.open(restore_log.base)
        opened.append(store)
        return store

    def close_all() -> None:
        while opened:
            opened.pop().close()

    benchmark.extra_info.update(
        label="tflux.open(base): full store restore",
        role="tflux",
        payload=restore_log.payload,
        records=restore_log.deltas,
        bytes=restore_log.bytes,
        live=restore_log.live,
    )
    # The store holds the directory's writer lock: each round closes the previous round's store
    # (untimed, in setup) before opening it again.
    store = benchmark.pedantic(
        restore,
        setup=lambda: close_all() or ((), {}),
        rounds=restore_rounds(restore_log),
        warmup_rounds=1,
        iterations=1,
    )
    assert store.replayed == restore_log.deltas
    assert store.restored_snapshot_index is None
    check_queues(store.queues(), restore_log)
    check_front(store.dequeue(restore_log.queue, timeout=0), restore_log)  # writes nothing
    close_all()


def test_pure_python_replay_subset(benchmark, restore_log: QueueLog) -> None:
    benchmark.group = restore_log.group
    end = min(PYREF_DELTAS, restore_log.deltas)
    subset = end < restore_log.deltas
    with tflux.Log.open(restore_log.log_dir, readonly=True) as log:
        info = dict(
            label="pure Python replay (read_batch + struct + heapq)"
            + (f", first {end:,} deltas" if subset else ""),
            role="baseline",
            payload=restore_log.payload,
            records=end,
            bytes=_prefix_bytes(restore_log, end),
        )
        if subset:
            info["subset"] = end
        state = run(benchmark, pyref_replay.replay, log, end, rounds=3, **info)
        # Cross-check with tflux on the same prefix (untimed).
        q = state.queues[restore_log.queue.encode()]
        adds = (end - 1) - (end - 1) // 3
        assert q.last_id == adds and len(q) == adds - (end - 1) // 3
        if not subset:
            check_queues(_queue_infos(state), restore_log)
            key, rid, message = q.front()
            assert (key, rid) == restore_log.front and len(message) == restore_log.payload


def _prefix_bytes(data: QueueLog, end: int) -> int:
    """Approximate bytes of the first ``end`` deltas (the report only uses records/s here)."""
    return round(data.bytes * end / data.deltas)


class _Info:
    def __init__(self, name: str, q: pyref_replay.PyQueue) -> None:
        self.name, self.count, self.last_id = name, len(q), q.last_id


def _queue_infos(state: pyref_replay.PyState) -> list:
    return [_Info(name.decode(), q) for name, q in state.queues.items()]


# --- memory per queued record ----------------------------------------------------------------


def memchild(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, os.fspath(MEMCHILD), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def memory_figures(results: list[dict], records: int, payload: int) -> dict:
    """Per-record growth beyond the payload (bytes), medians over the rounds."""

    def per_record(field: str, r: dict) -> float:
        grown = (r["after"][field] - r["before"][field]) * 1024
        return (grown - records * payload) / records

    def anon(r: dict) -> float:
        return per_record("RssAnon", r)

    fig = {
        f"bytes_per_record_{name}": statistics.median(f(r) for r in results)
        for name, f in (
            ("hwm", lambda r: per_record("VmHWM", r)),
            ("rss", lambda r: per_record("VmRSS", r)),
            ("anon", anon),
        )
    }
    fig["rss_file_growth_bytes"] = statistics.median(
        (r["after"]["RssFile"] - r["before"]["RssFile"]) * 1024 for r in results
    )
    fig["child_fill_seconds"] = statistics.median(r["seconds"] for r in results)
    fig["memory_rounds"] = len(results)
    fig["status_last_round"] = results[-1]
    return fig


@pytest.mark.benchmark(group="memory-64B")
def test_memory_per_record_after_restore(benchmark, memory_log: QueueLog) -> None:
    records = memory_log.live
    results: list[dict] = []

    def child() -> dict:
        r = memchild("restore", os.fspath(memory_log.base))
        results.append(r)
        return r

    benchmark.extra_info.update(
        label=f"child: tflux.open(base) restoring {records:,} queued records",
        role="tflux",
        records=records,
        bytes=memory_log.bytes,
        payload=memory_log.payload,
        mode="restore",
    )
    r = benchmark.pedantic(child, rounds=MEMORY_ROUNDS, warmup_rounds=1, iterations=1)
    assert r["replayed"] == memory_log.deltas
    assert r["queues"] == {"": [0, 0], memory_log.queue: [records, records]}
    benchmark.extra_info.update(
        memory_figures(results[-MEMORY_ROUNDS:], records, memory_log.payload)
    )


@pytest.mark.benchmark(group="memory-64B")
def test_memory_per_record_enqueue_many(benchmark, memory_records: int, bench_root: Path) -> None:
    records = memory_records
    results: list[dict] = []
    fresh = count()

    def setup():
        base = bench_root / f"memory-enqueue-{next(fresh)}"
        return (base,), {}

    def child(base: Path) -> dict:
        try:
            r = memchild("enqueue_many", os.fspath(base), str(records), str(PAYLOAD))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        results.append(r)
        return r

    benchmark.extra_info.update(
        label=f'child: enqueue_many of {records:,} records, 10,000 per call, sync "never"',
        role="tflux",
        records=records,
        bytes=records * RECORD,
        payload=PAYLOAD,
        mode="enqueue_many",
    )
    r = benchmark.pedantic(child, setup=setup, rounds=MEMORY_ROUNDS, iterations=1)
    assert r["queues"] == {"": [records, records]}
    benchmark.extra_info.update(memory_figures(results, records, PAYLOAD))


# --- durable enqueue -------------------------------------------------------------------------

# (test id, records per call, calls per thread per round, threads) when timed
ENQUEUES = [
    pytest.param(1, 300, 1, id="enqueue-1thread"),
    pytest.param(1, 100, 8, id="enqueue-8threads"),
    pytest.param(100, 50, 1, id="enqueue_many100"),
    pytest.param(1000, 20, 1, id="enqueue_many1000"),
]


@pytest.mark.benchmark(group="enqueue-64B")
@pytest.mark.parametrize(("batch", "calls", "threads"), ENQUEUES)
def test_durable_enqueue(
    benchmark, bench_root: Path, timed: bool, batch: int, calls: int, threads: int
) -> None:
    if not timed:
        calls = min(calls, 3)
    rng = random.Random(batch * threads)
    items = [(rng.randrange(1024), rng.randbytes(PAYLOAD)) for _ in range(batch)]
    fresh = count()
    opened: list[tflux.Store] = []
    closed: set[int] = set()

    def setup():
        # A fresh store per round (its first segment is created and synced here, untimed).
        store = tflux.open(bench_root / f"enqueue-{batch}-{threads}-{next(fresh)}")
        opened.append(store)
        return (store,), {}

    def one_thread(store: tflux.Store, out: list) -> None:
        if batch == 1:
            key, payload = items[0]
            out.extend(store.enqueue("", key, payload) for _ in range(calls))
        else:
            for _ in range(calls):
                out.extend(store.enqueue_many("", items))

    def enqueue(store: tflux.Store) -> list[int]:
        if threads == 1:
            ids: list[int] = []
            one_thread(store, ids)
            return ids
        outs: list[list[int]] = [[] for _ in range(threads)]
        workers = [threading.Thread(target=one_thread, args=(store, o)) for o in outs]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return [i for o in outs for i in o]

    def teardown(store: tflux.Store) -> None:
        store.close()
        closed.add(id(store))

    total = batch * calls * threads
    how = f"{threads} threads x store.enqueue" if threads > 1 and batch == 1 else "store.enqueue"
    if batch > 1:
        how = f"store.enqueue_many, {batch} per call"
    benchmark.extra_info.update(
        label=f"{how} (default sync: fsync per call, group commit)",
        role="tflux",
        records=total,
        bytes=total * RECORD,
        batch=batch,
        threads=threads,
        calls=calls * threads,
    )
    ids = benchmark.pedantic(
        enqueue, setup=setup, teardown=teardown, rounds=ROUNDS, warmup_rounds=1, iterations=1
    )
    assert sorted(ids) == list(range(1, total + 1))
    last = opened[-1]
    if id(last) not in closed:  # --benchmark-disable runs the body once without the teardown
        assert {q.name: q.count for q in last.queues()} == {"": total}
        teardown(last)
    # Durable and replayable: a reopen of the last round's store restores every record.
    with tflux.open(last.path) as store:
        assert store.replayed == total
        assert {q.name: q.count for q in store.queues()} == {"": total}
    for s in opened:
        shutil.rmtree(s.path, ignore_errors=True)


# Raw baseline: one record-sized write + fdatasync per call, into a file pre-filled with zeros
# and synced (as tflux preallocates its segments: data-only syncs) or into a file that grows.
RAW = [
    pytest.param(True, id="prezeroed"),
    pytest.param(False, id="growing"),
]
RAW_CALLS = 300


@pytest.mark.benchmark(group="enqueue-64B")
@pytest.mark.parametrize("prezeroed", RAW)
def test_raw_write_fdatasync(benchmark, bench_root: Path, timed: bool, prezeroed: bool) -> None:
    calls = RAW_CALLS if timed else 3
    record = random.Random(7).randbytes(RECORD)
    fresh = count()
    fds: set[int] = set()

    def setup():
        path = bench_root / f"raw-{prezeroed}-{next(fresh)}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        if prezeroed:
            os.write(fd, bytes(1 << 20))
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
        else:
            os.fsync(fd)
        dirfd = os.open(bench_root, os.O_RDONLY)
        os.fsync(dirfd)
        os.close(dirfd)
        fds.add(fd)
        return (fd, path), {}

    def write_sync(fd: int, path: Path) -> int:
        for _ in range(calls):
            os.write(fd, record)
            os.fdatasync(fd)
        return os.lseek(fd, 0, os.SEEK_CUR)

    def teardown(fd: int, path: Path) -> None:
        fds.discard(fd)
        os.close(fd)
        path.unlink()

    benchmark.extra_info.update(
        label=f"os.write + os.fdatasync of {RECORD} B per call ("
        + ("file pre-filled with zeros" if prezeroed else "file grows")
        + ")",
        role="baseline" if prezeroed else "context",
        records=calls,
        bytes=calls * RECORD,
        batch=1,
        threads=1,
        calls=calls,
    )
    end = benchmark.pedantic(
        write_sync, setup=setup, teardown=teardown, rounds=ROUNDS, warmup_rounds=1, iterations=1
    )
    assert end == calls * RECORD
    for fd in fds:  # --benchmark-disable runs the body once without the teardown
        os.close(fd)
    for p in bench_root.glob(f"raw-{prezeroed}-*"):
        p.unlink()
