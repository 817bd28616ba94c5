"""tflux's queue store beside the Python persistent queues a user would pick instead.

One workload for every library: enqueue N records, then dequeue + ack all N (each library's
closest equivalent of an ack, named per row), on a fresh directory per round, with 1 thread or 8
threads sharing one queue object (each thread enqueues and then drains N/8). Groups
``queue-100B`` and ``queue-1KiB`` (payload sizes). Each row states its durability class and the
knobs that give it:

- ``fsync``: every operation is on disk (``fsync``/``fdatasync``) before the call returns.
- ``batched``: a sync every 100 operations per thread (or on a timer, said so): a crash loses at
  most the last batch.
- ``none``: nothing is synced by the library (the OS writes back when it likes); a process crash
  loses nothing the library already wrote, a power cut may lose anything not yet written back.

Libraries without a mode get no row in that class, and the skip says why (e.g. queuelib never
syncs; persist-queue's file queue syncs only when a chunk file fills). Libraries that are not
thread-safe get no 8-thread row. A missing peer library skips its rows with the reason.

Every body asserts what it computed (N records drained, payloads intact), so the default
(``--benchmark-disable``) run is a smoke test at N = 16.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from itertools import count
from pathlib import Path

import pytest
import tflux

ROUNDS = int(os.environ.get("TFLUX_BENCH_PEER_ROUNDS", "3"))
BATCH = 100  # operations per sync in the "batched" class
KEYS = 10  # priorities used by the priority queues (tflux, queuelib.PriorityQueue)
# Records per round when timed: fewer where every operation waits for the disk.
TIMED_N = {"fsync": 1_000, "batched": 10_000, "none": 20_000}
if os.environ.get("TFLUX_BENCH_PEER_N"):  # one N for every class (a quick timed trial)
    TIMED_N = dict.fromkeys(TIMED_N, int(os.environ["TFLUX_BENCH_PEER_N"]))
SMOKE_N = 16


def _have(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# --- adapters: one object per (library, durability), fresh directory per round -------------------


class Adapter:
    """A queue under test. ``enqueue`` and ``drain`` run in one thread each (several at once for
    thread-safe libraries); ``drain`` returns the payloads it took, in order."""

    thread_safe = True

    def enqueue(self, items: list[tuple[int, bytes]]) -> None:
        raise NotImplementedError

    def drain(self, n: int) -> list[bytes]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class TfluxQueue(Adapter):
    def __init__(self, path: Path, durability: str, variant: str) -> None:
        policy = {"fsync": "always", "batched": "always", "none": "never"}[durability]
        settings: dict = {"log_sync_policy": policy}
        if variant == "interval":
            settings = {"log_sync_policy": "interval", "log_sync_interval_ms": 100}
        self.store = tflux.open(path, **settings)
        self.many = durability == "batched" and variant == "enqueue_many"

    def enqueue(self, items: list[tuple[int, bytes]]) -> None:
        store = self.store
        if self.many:
            for i in range(0, len(items), BATCH):
                store.enqueue_many("", items[i : i + BATCH])
        else:
            for key, payload in items:
                store.enqueue("", key, payload)

    def drain(self, n: int) -> list[bytes]:
        store, out = self.store, []
        for _ in range(n):
            r = store.dequeue("", timeout=0)
            store.ack(r)
            out.append(r.payload)
        return out

    def close(self) -> None:
        self.store.close()


def _sqlite_synchronous(conns, value: int | None) -> str:
    """Sets ``PRAGMA synchronous`` on persist-queue's connections; returns what is in force."""
    for c in conns:
        if value is not None:
            c.execute(f"PRAGMA synchronous={value}")
    got = {c.execute("PRAGMA synchronous").fetchone()[0] for c in conns}
    return "/".join(("OFF", "NORMAL", "FULL", "EXTRA")[g] for g in sorted(got))


class PersistSQLiteQueue(Adapter):
    """persist-queue ``SQLiteQueue`` (WAL journal): ``get`` deletes the row, so dequeue and ack are
    one step. ``auto_commit=False`` defers commits to ``task_done()``."""

    def __init__(self, path: Path, durability: str, variant: str) -> None:
        import persistqueue

        self.batched = durability == "batched"
        self.q = persistqueue.SQLiteQueue(
            os.fspath(path), multithreading=True, auto_commit=not self.batched
        )
        self.synchronous = _sqlite_synchronous(
            {self.q._getter, self.q._putter}, 0 if durability == "none" else None
        )

    def enqueue(self, items: list[tuple[int, bytes]]) -> None:
        put = self.q.put
        for i, (_, payload) in enumerate(items, 1):
            put(payload)
            if self.batched and (i % BATCH == 0 or i == len(items)):
                self.q.task_done()

    def drain(self, n: int) -> list[bytes]:
        get, out = self.q.get, []
        for i in range(1, n + 1):
            out.append(get(block=False))
            if self.batched and (i % BATCH == 0 or i == n):
                self.q.task_done()
        return out

    def close(self) -> None:
        self.q.close()


class PersistSQLiteAckQueue(Adapter):
    """persist-queue ``SQLiteAckQueue``: ``get`` marks the row unacked, ``ack`` marks it acked
    (two commits per record). Acked rows stay in the table, and every ``get`` walks past them
    (``WHERE _id > 0 AND status < unack ORDER BY _id LIMIT 1``), so a drain is quadratic unless
    ``clear_acked_data`` runs now and then: every 1,000 acks per thread here, as its docs advise."""

    def __init__(self, path: Path, durability: str, variant: str) -> None:
        import persistqueue

        self.q = persistqueue.SQLiteAckQueue(os.fspath(path), multithreading=True)
        self.synchronous = _sqlite_synchronous(
            {self.q._getter, self.q._putter}, 0 if durability == "none" else None
        )

    def enqueue(self, items: list[tuple[int, bytes]]) -> None:
        put = self.q.put
        for _, payload in items:
            put(payload)

    def drain(self, n: int) -> list[bytes]:
        get, ack, out = self.q.get, self.q.ack, []
        for i in range(1, n + 1):
            item = get(block=False, raw=True)
            ack(id=item["pqid"])
            out.append(item["data"])
            if i % 1000 == 0:
                self.q.clear_acked_data(max_delete=None, keep_latest=None)
        return out

    def close(self) -> None:
        self.q.close()


class PersistFileQueue(Adapter):
    """persist-queue ``Queue`` (chunk files + an info file replaced by rename): ``get`` then
    ``task_done()`` (the ack, which saves the read position)."""

    def __init__(self, path: Path, durability: str, variant: str) -> None:
        import persistqueue

        self.q = persistqueue.Queue(os.fspath(path), tempdir=os.fspath(path.parent))

    def enqueue(self, items: list[tuple[int, bytes]]) -> None:
        put = self.q.put
        for _, payload in items:
            put(payload)

    def drain(self, n: int) -> list[bytes]:
        q, out = self.q, []
        for _ in range(n):
            out.append(q.get(block=False))
            q.task_done()
        return out

    def close(self) -> None:
        q = self.q
        for f in (q.headf, q.tailf):
            f.close()


class QueuelibFifo(Adapter):
    """queuelib ``FifoDiskQueue``: ``pop`` is the dequeue and the ack (no separate ack)."""

    thread_safe = False

    def __init__(self, path: Path, durability: str, variant: str) -> None:
        from queuelib import FifoDiskQueue

        self.q = FifoDiskQueue(path)

    def enqueue(self, items: list[tuple[int, bytes]]) -> None:
        push = self.q.push
        for _, payload in items:
            push(payload)

    def drain(self, n: int) -> list[bytes]:
        pop = self.q.pop
        return [pop() for _ in range(n)]

    def close(self) -> None:
        self.q.close()


class QueuelibPriority(QueuelibFifo):
    """queuelib ``PriorityQueue`` over one ``FifoDiskQueue`` per priority."""

    def __init__(self, path: Path, durability: str, variant: str) -> None:
        from queuelib import FifoDiskQueue, PriorityQueue

        self.q = PriorityQueue(lambda p: FifoDiskQueue(path / f"p{p}"))

    def enqueue(self, items: list[tuple[int, bytes]]) -> None:
        push = self.q.push
        for key, payload in items:
            push(payload, key)


class DiskcacheDeque(Adapter):
    """diskcache ``Deque`` on a ``Cache`` (SQLite, WAL): ``popleft`` is the dequeue and the ack.
    ``transact()`` groups the batched class's 100 operations into one transaction."""

    def __init__(self, path: Path, durability: str, variant: str) -> None:
        from diskcache import Cache, Deque

        sync = {"fsync": 2, "batched": 2, "none": 0}[durability]
        self.cache = Cache(os.fspath(path), sqlite_synchronous=sync)
        self.q = Deque.fromcache(self.cache)
        self.batched = durability == "batched"

    def enqueue(self, items: list[tuple[int, bytes]]) -> None:
        q = self.q
        if self.batched:
            for i in range(0, len(items), BATCH):
                with q.transact():
                    for _, payload in items[i : i + BATCH]:
                        q.append(payload)
        else:
            for _, payload in items:
                q.append(payload)

    def drain(self, n: int) -> list[bytes]:
        q, out = self.q, []
        if self.batched:
            for i in range(0, n, BATCH):
                with q.transact():
                    out.extend(q.popleft() for _ in range(min(BATCH, n - i)))
        else:
            out.extend(q.popleft() for _ in range(n))
        return out

    def close(self) -> None:
        self.cache.close()


# (id, module needed, adapter, variant, {durability: knobs}, note when a class has no mode)
SQLITE_FULL = "SQLite `PRAGMA synchronous=FULL` (default), WAL: the WAL is synced at each commit"
LIBRARIES = [
    (
        "tflux",
        "tflux",
        TfluxQueue,
        "",
        {
            "fsync": '`log_sync_policy="always"` (default): `enqueue`, `dequeue` + `ack` '
            "per record",
            "none": '`log_sync_policy="never"`',
        },
    ),
    (
        "tflux-many",
        "tflux",
        TfluxQueue,
        "enqueue_many",
        {
            "batched": '`log_sync_policy="always"`, `enqueue_many` of 100; the drain still syncs '
            "every `ack` (no batch ack in the API)",
        },
    ),
    (
        "tflux-interval",
        "tflux",
        TfluxQueue,
        "interval",
        {
            "batched": '`log_sync_policy="interval"`, `log_sync_interval_ms=100`: a background '
            "fsync every 100 ms (bounded by time, not by count)",
        },
    ),
    (
        "persist-queue SQLiteQueue",
        "persistqueue",
        PersistSQLiteQueue,
        "",
        {
            "fsync": f"`auto_commit=True`, {SQLITE_FULL}; `get` deletes the row",
            "batched": "`auto_commit=False`, `task_done()` every 100 operations, "
            "`synchronous=FULL`",
            "none": "`auto_commit=True`, `PRAGMA synchronous=OFF` set on its connections",
        },
    ),
    (
        "persist-queue SQLiteAckQueue",
        "persistqueue",
        PersistSQLiteAckQueue,
        "",
        {
            "fsync": f"{SQLITE_FULL}; `get` + `ack`: two commits per record; "
            "`clear_acked_data()` every 1,000 acks",
            "none": "`PRAGMA synchronous=OFF` set on its connections; `clear_acked_data()` "
            "every 1,000 acks",
        },
    ),
    (
        "persist-queue Queue (files)",
        "persistqueue",
        PersistFileQueue,
        "",
        {"none": "defaults: write + flush per `put`, `get` + `task_done()` saves the position"},
    ),
    (
        "queuelib FifoDiskQueue",
        "queuelib",
        QueuelibFifo,
        "",
        {"none": "defaults: `os.write` per `push`; the read position is saved only at `close()`"},
    ),
    (
        "queuelib PriorityQueue",
        "queuelib",
        QueuelibPriority,
        "",
        {"none": "one `FifoDiskQueue` per priority (10 priorities), as queuelib's docs suggest"},
    ),
    (
        "diskcache Deque",
        "diskcache",
        DiskcacheDeque,
        "",
        {
            "fsync": "`Cache(sqlite_synchronous=2)` (FULL; the default is NORMAL), WAL: "
            "one transaction per `append`/`popleft`",
            "batched": "`sqlite_synchronous=2`, `Deque.transact()` around every 100 operations",
            "none": "`sqlite_synchronous=0` (OFF)",
        },
    ),
]

WHY_NO_MODE = {
    ("tflux", "batched"): "see the tflux-many and tflux-interval rows",
    ("tflux-many", "fsync"): "same as tflux",
    ("tflux-many", "none"): "same as tflux",
    ("tflux-interval", "fsync"): "interval is a batched mode",
    ("tflux-interval", "none"): "interval is a batched mode",
    ("persist-queue SQLiteAckQueue", "batched"): "auto_commit=False is not supported by "
    "SQLiteAckQueue (it warns and commits every operation)",
    ("persist-queue Queue (files)", "fsync"): "no fsync-per-operation knob: it fsyncs a chunk "
    "file only when it is full (every `chunksize` puts) and never the info file",
    ("persist-queue Queue (files)", "batched"): "no batch-sync knob (only the chunk-full fsync)",
    ("queuelib FifoDiskQueue", "fsync"): "queuelib never calls fsync",
    ("queuelib FifoDiskQueue", "batched"): "queuelib never calls fsync",
    ("queuelib PriorityQueue", "fsync"): "queuelib never calls fsync",
    ("queuelib PriorityQueue", "batched"): "queuelib never calls fsync",
}

PAYLOADS = [
    pytest.param(100, id="100B", marks=pytest.mark.benchmark(group="queue-100B")),
    pytest.param(1024, id="1KiB", marks=pytest.mark.benchmark(group="queue-1KiB")),
]


def _cases():
    for lib, module, cls, variant, modes in LIBRARIES:
        for durability in ("fsync", "batched", "none"):
            if durability not in modes:
                continue  # stated in the report from WHY_NO_MODE, not a skipped test each
            for threads in (1, 8):
                marks = []
                if threads > 1 and not cls.thread_safe:
                    marks.append(pytest.mark.skip(reason=f"{lib} is not thread-safe"))
                if not _have(module):
                    marks.append(
                        pytest.mark.skip(
                            reason=f"{module} is not installed (pip install '.[bench]')"
                        )
                    )
                yield pytest.param(
                    lib,
                    cls,
                    variant,
                    durability,
                    modes[durability],
                    threads,
                    id=f"{lib.replace(' ', '-')}-{durability}-{threads}t",
                    marks=marks,
                )


def _run_threads(target: Callable, args: list[tuple]) -> list:
    if len(args) == 1:
        return [target(*args[0])]
    results: list = [None] * len(args)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            results[i] = target(*args[i])
        except BaseException as e:  # surfaced in the benchmark thread below
            errors.append(e)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(len(args))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize(
    ("lib", "cls", "variant", "durability", "knobs", "threads"), list(_cases())
)
def test_enqueue_then_drain(
    benchmark, bench_root: Path, timed: bool, payload, lib, cls, variant, durability, knobs, threads
) -> None:
    n = TIMED_N[durability] if timed else SMOKE_N
    per_thread = n // threads
    rng = random.Random(payload * 31 + threads)
    items = [(rng.randrange(KEYS), rng.randbytes(payload)) for _ in range(n)]
    shares = [items[t * per_thread : (t + 1) * per_thread] for t in range(threads)]
    fresh = count()
    phases: list[tuple[float, float]] = []
    adapters: list[Adapter] = []

    def setup():
        path = bench_root / f"peer-{lib.replace(' ', '_')}-{durability}-{payload}-{next(fresh)}"
        path.mkdir()
        adapter = cls(path / "q", durability, variant)
        adapters.append(adapter)
        return (adapter, path), {}

    def workload(adapter: Adapter, path: Path) -> list[bytes]:
        t0 = time.perf_counter()
        _run_threads(adapter.enqueue, [(s,) for s in shares])
        t1 = time.perf_counter()
        drained = _run_threads(adapter.drain, [(per_thread,)] * threads)
        phases.append((t1 - t0, time.perf_counter() - t1))
        return [p for d in drained for p in d]

    def teardown(adapter: Adapter, path: Path) -> None:
        adapter.close()
        shutil.rmtree(path, ignore_errors=True)

    info = {
        "label": lib,
        "lib": lib,
        "role": "tflux" if lib.startswith("tflux") else "baseline",
        "durability": durability,
        "knobs": knobs,
        "threads": threads,
        "payload": payload,
        "records": n,
        "bytes": n * payload,
    }
    benchmark.extra_info.update(info)
    got = benchmark.pedantic(workload, setup=setup, teardown=teardown, rounds=ROUNDS, iterations=1)
    if timed is False:  # --benchmark-disable runs the body once, without the teardown
        teardown(adapters[-1], bench_root / "unused")
    for path in bench_root.glob(f"peer-{lib.replace(' ', '_')}-*"):
        shutil.rmtree(path, ignore_errors=True)
    assert len(got) == n
    assert sorted(got) == sorted(p for _, p in items)
    if hasattr(adapters[-1], "synchronous"):
        benchmark.extra_info["sqlite_synchronous"] = adapters[-1].synchronous
    benchmark.extra_info["enqueue_s"] = statistics.median(e for e, _ in phases)
    benchmark.extra_info["drain_s"] = statistics.median(d for _, d in phases)


def test_every_library_without_a_durability_class_says_why() -> None:
    """The report's 'no row' notes cover every (library, class) pair that has no row."""
    for lib, _, _, _, modes in LIBRARIES:
        for durability in ("fsync", "batched", "none"):
            assert durability in modes or (lib, durability) in WHY_NO_MODE, (lib, durability)
