"""Several processes on one base directory (issue 29): tflux beside the SQLite-backed queues.

Not a test (pytest collects ``bench_*.py`` only): run it by hand::

    python benches/lab/multiprocess.py [--seconds N] [--out FILE.json] [--dir DIR] [--rules]
        [--extra-commit] [--batch K[,K...]]

Three parts, printed as tables (and written to ``--out`` as JSON):

1. **4 producers + 4 consumers**, each its own process (``spawn``), every process opening the
   store itself. Producers enqueue one 64-byte record per call; consumers dequeue + ack one at a
   time. Every enqueue and ack is durable before it returns (the row's ``sync`` says what gives
   that). The figure is records fully processed (enqueued, dequeued and acked) per second over a
   window of ``--seconds``: acks that returned inside the window, divided by the window. After
   the window the producers stop and the consumers drain the rest (untimed), then every record
   a producer was told was enqueued is matched with the acks: ``lost`` (never delivered),
   ``dup`` (delivered and acked more than once) and ``alien`` (acked, never enqueued) must be 0.
   Libraries: tflux (``LogSyncPolicy`` "always"); persist-queue ``SQLiteAckQueue``
   (``auto_commit=True``; WAL, its ``synchronous`` is read back and shown); litequeue
   ``LiteQueue`` (``pop`` + ``done``; it sets ``synchronous=NORMAL`` with WAL, which does not
   sync a commit, so the benchmark sets ``FULL`` on its connection); huey's ``SqliteStorage``
   used directly (``enqueue``/``dequeue`` of raw bytes, ``fsync=True``; its dequeue deletes the
   row, so dequeue and ack are one commit: at-most-once). The SQLite queues have no blocking
   dequeue across processes: their consumers poll every millisecond when the queue is empty.
   ``--rules`` runs each tflux row a second time right after it, on a queue with a dead-letter
   rule (``tflux with rules``: every delivery counted exactly, a logged write; issue 44's target is
   >= 0.7x of the row without rules), and prints the ratio. ``--batch 1,16`` runs each tflux row
   once per K: its consumers take up to K records a call (``dequeue_many``: one round trip and,
   with rules, one logged write for the batch) and ack them with one ``ack_many``; the ratios are
   printed per K. ``--extra-commit`` runs each tflux row once more (after its rules row) with
   one more durable round trip per delivery call and no rules (``tflux extra commit``: a durable
   ``enqueue_many`` into a side queue ``extra``, one tiny record per record taken, which waits
   for the group commit as a Delivered does): the ceiling "3 durable round trips per record
   instead of 2" to set beside the rules row, and prints its ratio too.
2. **Client vs owner**: durable ``enqueue`` latency (p50/p99) of the owner enqueuing alone,
   then of a client process enqueuing while the owner is idle, sequential calls, one directory;
   then ``enqueue_many`` of 100 records (records/s), owner and client.
3. **Open of a ~1M-record base**: ``tflux.open(base, readonly=True)`` and a writable open, timed
   inside a forked child (its parent opened the base read-only, used and closed it) and inside a
   fresh ``python -c`` process. Medians of a few rounds; the fresh process's start-up and
   ``import tflux`` are shown apart.

A missing competitor library (``pip install -e '.[bench]'``) skips its row with a note.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from array import array
from collections import Counter
from pathlib import Path

PRODUCERS = 4
CONSUMERS = 4
PAYLOAD_SIZE = 64
QUEUE = "jobs"
POLL = 0.001  # seconds between polls of an empty SQLite queue
RECORD = struct.Struct("<IQ")  # producer index, sequence number: the head of each payload
PAD = b"x" * (PAYLOAD_SIZE - RECORD.size)
SEQ_BITS = 40


def payload(producer: int, seq: int) -> bytes:
    return RECORD.pack(producer, seq) + PAD


def record_id(data: bytes) -> int:
    producer, seq = RECORD.unpack_from(data)
    return producer << SEQ_BITS | seq


# --- adapters: one per library; ``setup`` runs in the parent, ``Adapter(path)`` in each worker --


class Adapter:
    #: fsyncs a processed record needs when nothing shares them: its durable calls (tflux:
    #: enqueue and ack) or its commits (SQLite in WAL mode with synchronous=FULL syncs the WAL
    #: at every commit, and one connection commits at a time).
    commits_per_record = 2
    #: Whether concurrent callers share an fsync (a group commit).
    shares_fsyncs = False
    name = ""
    module = ""  # imported to decide whether the library is installed

    @classmethod
    def setup(cls, path: Path) -> dict:
        """Create the queue once (so workers do not race on the schema); return what gives
        durability (shown in the table)."""
        raise NotImplementedError

    def put(self, data: bytes) -> None:
        raise NotImplementedError

    def get(self):
        """``(token, payload)`` of the next record, or ``None`` when the queue looks empty (after
        a short wait)."""
        raise NotImplementedError

    def ack(self, token) -> None:
        raise NotImplementedError

    def get_many(self, k: int) -> list:
        """Up to ``k`` ``(token, payload)`` pairs (``--batch``); one at a time unless the library
        takes several in a call."""
        got = self.get()
        return [] if got is None else [got]

    def ack_many(self, tokens: list) -> None:
        for token in tokens:
            self.ack(token)

    def close(self) -> None:
        pass

    def info(self) -> dict:
        return {}


class Tflux(Adapter):
    shares_fsyncs = True
    name = "tflux"
    module = "tflux"
    retryable: tuple = ()

    @classmethod
    def setup(cls, path: Path) -> dict:
        import tflux

        with tflux.open(path) as store:
            store.create_queue(QUEUE, exist_ok=True)
            policy = store.settings["LogSyncPolicy"]
        return {"sync": f"LogSyncPolicy={policy}"}

    def __init__(self, path: Path) -> None:
        import tflux

        self.retryable = (tflux.OwnerLostError,)
        self.store = tflux.open(path)
        self.retries = 0

    def _retry(self, call, *args):
        for attempt in range(100):
            try:
                return call(*args)
            except self.retryable:
                self.retries += 1
                if attempt == 99:
                    raise
                time.sleep(0.01)
        return None

    def put(self, data: bytes) -> None:
        self._retry(self.store.enqueue, QUEUE, 0, data)

    def get(self):
        rec = self._retry(self.store.dequeue, QUEUE, 0.05)
        return None if rec is None else (rec, rec.payload)

    def ack(self, token) -> None:
        self._retry(self.store.ack, token)

    def get_many(self, k: int) -> list:
        if k == 1:
            return super().get_many(k)
        recs = self._retry(self.store.dequeue_many, QUEUE, k, 0.05) or []
        return [(rec, rec.payload) for rec in recs]

    def ack_many(self, tokens: list) -> None:
        if len(tokens) == 1:
            self.ack(tokens[0])
        else:
            self._retry(self.store.ack_many, tokens)

    def close(self) -> None:
        self.store.close()

    def info(self) -> dict:
        return {"is_owner": self.store.is_owner, "owner_lost_retries": self.retries}


class TfluxOwnerApart(Tflux):
    """The same workload with the owner in a process of its own (the benchmark's parent, which
    opens the store first and only holds it), so all 8 workers are clients: the shape of a
    service that owns the queue with workers beside it, and a steadier figure for comparing
    owner designs (in the first row whichever worker opens first is the owner, and its calls
    skip the socket)."""

    name = "tflux (owner apart)"
    held = None

    @classmethod
    def setup(cls, path: Path) -> dict:
        import tflux

        row = super().setup(path)
        cls.held = tflux.open(path)
        return row

    @classmethod
    def teardown(cls) -> None:
        if cls.held is not None:
            cls.held.close()
            cls.held = None


def _sqlite_sync(conn) -> str:
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return f"{journal.upper()}+synchronous={('OFF', 'NORMAL', 'FULL', 'EXTRA')[sync]}"


class PersistQueue(Adapter):
    """``get`` marks the row unacked (a SELECT, then an UPDATE in its own commit), ``ack`` marks
    it acked. Acked rows stay in the table and every ``get`` walks past them, so each consumer
    clears them every 1,000 acks, as persist-queue's docs advise."""

    commits_per_record = 3  # put, get (an UPDATE), ack
    name = "persist-queue SQLiteAckQueue"
    module = "persistqueue"

    @classmethod
    def setup(cls, path: Path) -> dict:
        from persistqueue import SQLiteAckQueue

        q = SQLiteAckQueue(os.fspath(path), auto_commit=True)
        try:
            return {"sync": _sqlite_sync(q._putter) + ", auto_commit=True"}
        finally:
            q.close()

    def __init__(self, path: Path) -> None:
        from persistqueue import SQLiteAckQueue
        from persistqueue.exceptions import Empty

        self.empty = Empty
        self.q = SQLiteAckQueue(os.fspath(path), auto_commit=True)
        self.acks = 0

    def put(self, data: bytes) -> None:
        self.q.put(data)

    def get(self):
        try:
            item = self.q.get(block=False, raw=True)
        except self.empty:
            time.sleep(POLL)
            return None
        return item["pqid"], item["data"]

    def ack(self, token) -> None:
        self.q.ack(id=token)
        self.acks += 1
        if self.acks % 1000 == 0:
            self.q.clear_acked_data(max_delete=None, keep_latest=None)

    def close(self) -> None:
        self.q.close()


class LiteQueueAdapter(Adapter):
    """``pop`` locks the row (one IMMEDIATE transaction), ``done`` marks it done."""

    commits_per_record = 3  # put, pop (an UPDATE), done
    name = "litequeue LiteQueue"
    module = "litequeue"

    @classmethod
    def setup(cls, path: Path) -> dict:
        from litequeue import LiteQueue

        path.mkdir(parents=True, exist_ok=True)
        q = LiteQueue(os.fspath(path / "queue.db"))
        try:
            default = _sqlite_sync(q.conn)
            q.conn.execute("PRAGMA synchronous=FULL")
            return {"sync": f"{_sqlite_sync(q.conn)} (set; default {default.split('=')[-1]})"}
        finally:
            q.close()

    def __init__(self, path: Path) -> None:
        from litequeue import LiteQueue

        self.q = LiteQueue(os.fspath(path / "queue.db"), timeout=30)
        self.q.conn.execute("PRAGMA synchronous=FULL")  # its own NORMAL does not sync commits

    def put(self, data: bytes) -> None:
        self.q.put(data)

    def get(self):
        msg = self.q.pop()
        if msg is None:
            time.sleep(POLL)
            return None
        return msg.message_id, msg.data

    def ack(self, token) -> None:
        self.q.done(token)

    def close(self) -> None:
        self.q.close()


class Huey(Adapter):
    """``SqliteStorage.dequeue`` selects and deletes the row in one exclusive transaction: the
    dequeue is the ack (a consumer that dies after it loses the record)."""

    commits_per_record = 2  # enqueue, dequeue (a DELETE)
    name = "huey SqliteStorage"
    module = "huey"

    @classmethod
    def setup(cls, path: Path) -> dict:
        from huey.storage import SqliteStorage

        path.mkdir(parents=True, exist_ok=True)
        s = SqliteStorage(name=QUEUE, filename=os.fspath(path / "huey.db"), fsync=True)
        try:
            return {"sync": _sqlite_sync(s.conn) + ", fsync=True; dequeue = ack"}
        finally:
            s.close()

    def __init__(self, path: Path) -> None:
        from huey.storage import SqliteStorage

        self.s = SqliteStorage(
            name=QUEUE, filename=os.fspath(path / "huey.db"), fsync=True, timeout=30
        )

    def put(self, data: bytes) -> None:
        self.s.enqueue(data)

    def get(self):
        data = self.s.dequeue()
        if data is None:
            time.sleep(POLL)
            return None
        return None, bytes(data)

    def ack(self, token) -> None:
        pass  # dequeue deleted the row

    def close(self) -> None:
        self.s.close()


class TfluxRules(Tflux):
    """The ``tflux`` row on a queue with a dead-letter rule (issue 44): every delivery is
    counted exactly, so each dequeue is a logged write (a Delivered delta, durable before the
    record is handed out, sharing the group commit) besides the enqueue and the ack. No record
    fails here: the rule only has to be obeyed, never applied."""

    name = "tflux with rules"

    @classmethod
    def setup(cls, path: Path) -> dict:
        import tflux

        with tflux.open(path) as store:
            store.create_queue(QUEUE, exist_ok=True, dead_letter=(QUEUE + "-dead", 5))
            policy = store.settings["LogSyncPolicy"]
        return {"sync": f"LogSyncPolicy={policy}, dead_letter=({QUEUE}-dead, 5)"}


class TfluxOwnerApartRules(TfluxOwnerApart, TfluxRules):
    """``tflux (owner apart)`` on a queue with a dead-letter rule (no comma in a row's name:
    ``--libs`` splits at commas)."""

    name = "tflux (owner apart) with rules"


EXTRA_QUEUE = "extra"


class TfluxExtra(Tflux):
    """The ``tflux`` row (no rules) with one more durable round trip per delivery call: after
    each dequeue (``dequeue_many`` with ``--batch``), before the records are processed, a
    durable ``enqueue_many`` of one 1-byte record per record taken into the side queue
    ``extra``, never read. It waits for the group commit as a Delivered delta of the
    dead-letter-rule row does, so the row measures the ceiling "3 durable round trips per
    record instead of 2" beside that row (``--extra-commit``)."""

    name = "tflux extra commit"
    commits_per_record = 3

    @classmethod
    def setup(cls, path: Path) -> dict:
        import tflux

        row = super().setup(path)
        with tflux.open(path) as store:
            store.create_queue(EXTRA_QUEUE, exist_ok=True)
        return row | {"sync": row["sync"] + f", +1 durable enqueue into {EXTRA_QUEUE}"}

    def _extra(self, got: list) -> list:
        if got:
            self._retry(self.store.enqueue_many, EXTRA_QUEUE, [(0, b"x")] * len(got))
        return got

    def get(self):
        got = super().get()
        self._extra([] if got is None else [got])
        return got

    def get_many(self, k: int) -> list:
        if k == 1:
            return super().get_many(k)  # through ``get``: one extra enqueue
        return self._extra(super().get_many(k))


class TfluxOwnerApartExtra(TfluxOwnerApart, TfluxExtra):
    """``tflux (owner apart)`` with the extra durable round trip of ``TfluxExtra``."""

    name = "tflux (owner apart) extra commit"


#: ``--rules``: the rows run beside each tflux row, in the same run (issue 44's target: >= 0.7x).
RULES_OF = {Tflux.name: TfluxRules.name, TfluxOwnerApart.name: TfluxOwnerApartRules.name}

#: ``--extra-commit``: the rows run after each tflux row (and its rules row with ``--rules``).
EXTRA_OF = {Tflux.name: TfluxExtra.name, TfluxOwnerApart.name: TfluxOwnerApartExtra.name}

ADAPTERS: dict[str, type[Adapter]] = {
    a.name: a
    for a in (
        Tflux,
        TfluxOwnerApart,
        TfluxRules,
        TfluxOwnerApartRules,
        TfluxExtra,
        TfluxOwnerApartExtra,
        PersistQueue,
        LiteQueueAdapter,
        Huey,
    )
}


def _missing(adapter: type[Adapter]) -> str | None:
    try:
        __import__(adapter.module)
    except ImportError as exc:
        return f"not installed ({exc}); pip install -e '.[bench]'"
    return None


# --- part 1: 4 producers + 4 consumers ------------------------------------------------------------


def _worker(name, role, idx, path, sync, prod_done, finish, seconds, drain_limit, out, batch=1):
    """One producer or consumer process: open, wait for the common start, work, report."""
    result: dict = {"role": role, "idx": idx, "pid": os.getpid()}
    adapter = None
    barrier, go, start = sync
    try:
        adapter = ADAPTERS[name](Path(path))
        barrier.wait(timeout=120)  # every process has opened the store
        if not go.wait(timeout=60):
            raise RuntimeError("no start signal")
        t0 = start.value
        deadline = t0 + seconds
        while time.monotonic() < t0:
            time.sleep(0.0005)
        if role == "producer":
            seq, errors = 0, 0
            while time.monotonic() < deadline:
                try:
                    adapter.put(payload(idx, seq))
                except Exception as exc:  # a refused enqueue is not counted as enqueued
                    errors += 1
                    result.setdefault("first_error", repr(exc))
                    continue
                seq += 1
            result.update(enqueued=seq, errors=errors)
        else:
            ids, in_window, errors, complete = array("Q"), 0, 0, True
            while True:
                try:
                    got = adapter.get_many(batch)
                except Exception as exc:
                    errors += 1
                    result.setdefault("first_error", repr(exc))
                    if errors > 10_000:
                        raise
                    continue
                if not got:
                    if prod_done.is_set():
                        # One more look: the producers were done before it.
                        got = adapter.get_many(batch)
                        if not got:
                            break
                    elif time.monotonic() > deadline + drain_limit:
                        complete = False
                        break
                    else:
                        continue
                for _attempt in range(10):
                    try:
                        adapter.ack_many([token for token, _ in got])
                        break
                    except Exception as exc:
                        errors += 1
                        result.setdefault("first_error", repr(exc))
                if time.monotonic() < deadline:
                    in_window += len(got)
                ids.extend(record_id(data) for _, data in got)
                if time.monotonic() > deadline + drain_limit:
                    complete = False
                    break
            result.update(
                acked=len(ids), in_window=in_window, ids=ids.tobytes(), errors=errors,
                complete=complete,
            )  # fmt: skip
        result.update(adapter.info())
    except BaseException:
        result["error"] = traceback.format_exc()
        try:
            barrier.abort()
        except Exception:
            pass
    out.put(result)
    finish.wait(
        timeout=drain_limit + 120
    )  # tflux: the owner may be any worker; stay until all done
    if adapter is not None:
        try:
            adapter.close()
        except Exception:
            pass


def fsync_rate(root: Path, seconds: float = 1.5) -> dict:
    """This disk's fsyncs per second back to back, one thread: a 64-byte overwrite of a
    preallocated file then ``fdatasync``, as a log append that changes no metadata. No queue
    that fsyncs every commit alone can commit faster, and one that shares each fsync among its
    callers covers at most one call per waiting process with each. Measured while the machine
    is otherwise quiet (before and after the libraries): on busy cores the loop waits for CPU."""
    path = root / "fsync-probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        size = 4 << 20
        os.write(fd, bytes(size))
        os.fsync(fd)
        lat, n, t0 = [], 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            os.pwrite(fd, PAD + RECORD.pack(0, n), (n * PAYLOAD_SIZE) % size)
            t = time.perf_counter()
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
            n += 1
        wall = time.perf_counter() - t0
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    lat.sort()
    return {"per_s": n / wall, "p50_us": lat[len(lat) // 2] * 1e6, "calls": n}


def _busy_cpu_s() -> float:
    """CPU seconds all cores spent busy since boot (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _sample_window(start: float, seconds: float, into: dict) -> None:
    """The machine's busy CPU over the window (every process on it, the benchmark's own too)."""
    time.sleep(max(0.0, start - time.monotonic()))
    before, own = _busy_cpu_s(), _own_cpu_s()
    time.sleep(seconds)
    into["busy_cpu_s"] = _busy_cpu_s() - before
    into["own_cpu_s"] = _own_cpu_s() - own


def _own_cpu_s() -> float:
    """This process's CPU seconds (all its threads: the owner's, in the "owner apart" row)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def bound(adapter: type[Adapter], fsyncs_per_s: float) -> float:
    """Records per second the adapter's fsyncs allow at most on a disk that does
    ``fsyncs_per_s`` (see ``fsync_rate``)."""
    callers = PRODUCERS + CONSUMERS if adapter.shares_fsyncs else 1
    return callers * fsyncs_per_s / adapter.commits_per_record


def run_mpmc(name: str, root: Path, seconds: float, batch: int = 1) -> dict:
    adapter = ADAPTERS[name]
    path = root / name.split()[0]  # the two tflux rows run one after the other
    shutil.rmtree(path, ignore_errors=True)
    row: dict = {"library": name, "batch": batch, "row": _row_name(name, batch)}
    missing = _missing(adapter)
    if missing:
        return row | {"skipped": missing}
    row.update(adapter.setup(path))
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PRODUCERS + CONSUMERS + 1)
    start = ctx.Value("d", 0.0)
    sync = (barrier, ctx.Event(), start)
    prod_done, finish, out = ctx.Event(), ctx.Event(), ctx.Queue()
    drain_limit = max(120.0, 10 * seconds)
    procs = []
    for role, n in (("producer", PRODUCERS), ("consumer", CONSUMERS)):
        for i in range(n):
            args = (name, role, i, os.fspath(path), sync, prod_done, finish)
            p = ctx.Process(target=_worker, args=(*args, seconds, drain_limit, out, batch))
            p.start()
            procs.append(p)
    results: list[dict] = []
    try:
        barrier.wait(timeout=180)
        start.value = time.monotonic() + 0.1
        cpu: dict = {}
        sampler = threading.Thread(
            target=_sample_window, args=(start.value, seconds, cpu), daemon=True
        )
        sampler.start()
        sync[1].set()
        producers = []
        while len(producers) < PRODUCERS:
            r = out.get(timeout=seconds + drain_limit + 60)
            results.append(r)
            if r.get("error"):
                raise RuntimeError(f"{r['role']} {r['idx']}: {r['error']}")
            if r["role"] == "producer":
                producers.append(r)
        prod_done.set()
        drain_from = time.monotonic()
        while len(results) < PRODUCERS + CONSUMERS:
            r = out.get(timeout=drain_limit + 60)
            results.append(r)
            if r.get("error"):
                raise RuntimeError(f"{r['role']} {r['idx']}: {r['error']}")
    except Exception as exc:
        errors = [r["error"] for r in results if r.get("error")]
        row["error"] = errors[0].strip().splitlines()[-1] if errors else repr(exc)
        row["error_detail"] = errors[0] if errors else traceback.format_exc()
    finally:
        finish.set()
        for p in procs:
            p.join(timeout=30)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        getattr(adapter, "teardown", lambda: None)()
    if "error" in row:
        return row
    sampler.join(timeout=seconds + 5)
    prods = [r for r in results if r["role"] == "producer"]
    cons = [r for r in results if r["role"] == "consumer"]
    enqueued = sum(r["enqueued"] for r in prods)
    got: Counter = Counter()
    for r in cons:
        got.update(array("Q", r["ids"]))
    expected = {p["idx"] << SEQ_BITS | s for p in prods for s in range(p["enqueued"])}
    in_window = sum(r["in_window"] for r in cons)
    row.update(
        seconds=seconds,
        enqueued=enqueued,
        drain_s=time.monotonic() - drain_from,
        acked=sum(r["acked"] for r in cons),
        in_window=in_window,
        rate=in_window / seconds,
        cpu_us_per_record=cpu.get("busy_cpu_s", float("nan")) * 1e6 / max(in_window, 1),
        cpu_busy=cpu.get("busy_cpu_s", float("nan")) / seconds / (os.cpu_count() or 1),
        parent_cpu_us_per_record=cpu.get("own_cpu_s", float("nan")) * 1e6 / max(in_window, 1),
        enqueue_rate=enqueued / seconds,
        lost=len(expected - got.keys()),
        dup=sum(c - 1 for c in got.values() if c > 1),
        alien=len(got.keys() - expected),
        drained=all(r["complete"] for r in cons),
        call_errors=sum(r["errors"] for r in results),
        first_error=next((r["first_error"] for r in results if "first_error" in r), None),
    )
    if name.startswith("tflux"):
        owners = [f"{r['role']} {r['idx']}" for r in results if r.get("is_owner")]
        row["owner"] = ", ".join(owners) or "none of the workers at the end"
        row["owner_lost_retries"] = sum(r.get("owner_lost_retries", 0) for r in results)
    return row


# --- part 2: a client's enqueue beside the owner's own --------------------------------------------


def _measure(store, budget: float, max_calls: int, batch: int) -> dict:
    items = [(0, payload(0, i)) for i in range(batch)]
    for i in range(10):  # warm-up
        if batch == 1:
            store.enqueue(QUEUE, 0, payload(0, i))
        else:
            store.enqueue_many(QUEUE, items)
    lat = []
    t_end = time.perf_counter() + budget
    while len(lat) < max_calls and time.perf_counter() < t_end:
        t = time.perf_counter_ns()
        if batch == 1:
            store.enqueue(QUEUE, 0, items[0][1])
        else:
            store.enqueue_many(QUEUE, items)
        lat.append(time.perf_counter_ns() - t)
    lat.sort()
    return {
        "calls": len(lat),
        "p50_us": lat[len(lat) // 2] / 1e3,
        "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1e3,
        "mean_us": statistics.fmean(lat) / 1e3,
        "records_per_s": len(lat) * batch / (sum(lat) / 1e9),
    }


def _latency_proc(role, path, budget, out, done):
    import tflux

    try:
        store = tflux.open(path)
        if role == "owner":
            store.create_queue(QUEUE, exist_ok=True)
        res = {
            "role": role,
            "is_owner": store.is_owner,
            "policy": store.settings["LogSyncPolicy"],
            "single": _measure(store, budget, 5000, 1),
            "many100": _measure(store, budget, 2000, 100),
        }
    except BaseException:
        res = {"role": role, "error": traceback.format_exc()}
    out.put(res)
    if role == "owner":
        done.wait(timeout=600)  # stay the (idle) owner while the client measures
    try:
        store.close()
    except Exception:
        pass


def run_client_vs_owner(root: Path, budget: float) -> dict:
    path = root / "latency"
    shutil.rmtree(path, ignore_errors=True)
    ctx = mp.get_context("spawn")
    out, done = ctx.Queue(), ctx.Event()
    owner = ctx.Process(target=_latency_proc, args=("owner", os.fspath(path), budget, out, done))
    owner.start()
    res: dict = {}
    try:
        res["owner"] = out.get(timeout=budget * 4 + 120)
        if "error" not in res["owner"]:
            client = ctx.Process(
                target=_latency_proc, args=("client", os.fspath(path), budget, out, done)
            )
            client.start()
            res["client"] = out.get(timeout=budget * 4 + 120)
            client.join(timeout=60)
    finally:
        done.set()
        owner.join(timeout=60)
        if owner.is_alive():
            owner.terminate()
    return res


# --- part 3: opening a ~1M-record base, forked child vs fresh process ----------------------------

_OPEN_CODE = """
import json, sys, time
t0 = time.perf_counter()
import tflux
t1 = time.perf_counter()
base = sys.argv[1]
t = time.perf_counter(); s = tflux.open(base, readonly=True); ro = time.perf_counter() - t
n = s.count(sys.argv[2]); s.close()
t = time.perf_counter(); s = tflux.open(base); rw = time.perf_counter() - t
owner = s.is_owner; s.close()
print(json.dumps({"import_s": t1 - t0, "ro_s": ro, "rw_s": rw, "count": n, "owner": owner}))
"""


def _timed_opens(base: str) -> dict:
    import tflux

    t = time.perf_counter()
    s = tflux.open(base, readonly=True)
    ro = time.perf_counter() - t
    n = s.count(QUEUE)
    s.close()
    t = time.perf_counter()
    s = tflux.open(base)
    rw = time.perf_counter() - t
    owner = s.is_owner
    s.close()
    return {"ro_s": ro, "rw_s": rw, "count": n, "owner": owner}


def _forker(base, rounds, out):
    """Open the base read-only, use it, close it; then fork ``rounds`` children that time their
    opens."""
    import tflux

    try:
        t = time.perf_counter()
        with tflux.open(base, readonly=True) as s:
            first = time.perf_counter() - t
            n = s.count(QUEUE)
            s.peek(QUEUE)
        rows = []
        for _ in range(rounds):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: time the opens, report through the pipe, leave at once
                os.close(r)
                try:
                    msg = json.dumps(_timed_opens(base))
                except BaseException:
                    msg = json.dumps({"error": traceback.format_exc()})
                os.write(w, msg.encode())
                os._exit(0)
            os.close(w)
            chunks = []
            while True:
                ready, _, _ = select.select([r], [], [], 300)
                if not ready:
                    os.kill(pid, 9)  # our own child, hung
                    chunks = [json.dumps({"error": "forked child hung (300 s)"}).encode()]
                    break
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
            os.close(r)
            os.waitpid(pid, 0)
            rows.append(json.loads(b"".join(chunks) or b'{"error": "no output"}'))
        out.put({"parent_first_ro_s": first, "parent_count": n, "rounds": rows})
    except BaseException:
        out.put({"error": traceback.format_exc()})


def build_base(path: Path, records: int) -> dict:
    import tflux

    shutil.rmtree(path, ignore_errors=True)
    t = time.perf_counter()
    with tflux.open(path) as store:
        store.create_queue(QUEUE)
        step = 10_000
        for lo in range(0, records, step):
            store.enqueue_many(
                QUEUE, [(i % 1024, payload(0, i)) for i in range(lo, min(records, lo + step))]
            )
        n = store.count(QUEUE)
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return {"records": n, "build_s": time.perf_counter() - t, "bytes": size}


def run_open(root: Path, records: int, rounds: int) -> dict:
    import tflux

    path = root / "open1m"
    res: dict = {"base": build_base(path, records)}
    with tflux.open(path, readonly=True) as s:
        res["base"]["replayed"] = s.replayed
        res["base"]["snapshot_index"] = s.restored_snapshot_index
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_forker, args=(os.fspath(path), rounds, out))
    p.start()
    res["fork"] = out.get(timeout=600 * rounds)
    p.join(timeout=60)
    fresh = []
    for _ in range(rounds):
        t = time.perf_counter()
        cp = subprocess.run(
            [sys.executable, "-c", _OPEN_CODE, os.fspath(path), QUEUE],
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.perf_counter() - t
        if cp.returncode != 0:
            fresh.append({"error": cp.stderr.strip().splitlines()[-1:]})
            continue
        fresh.append(json.loads(cp.stdout) | {"wall_s": wall})
    res["fresh"] = fresh
    return res


# --- report -----------------------------------------------------------------------------------


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join("-" * w for w in widths)

    def fmt(r: list[str]) -> str:
        cells = (
            c.rjust(w) if i and c[:1] in "0123456789-" else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        return "  ".join(cells)

    return "\n".join([fmt(headers), line, *(fmt(r) for r in rows)])


def _row_name(name: str, batch: int) -> str:
    return name if batch == 1 else f"{name} batch {batch}"


def report_mpmc(rows: list[dict], disk: list[dict]) -> str:
    lines = [
        f"1. {PRODUCERS} producers + {CONSUMERS} consumers (processes), one directory, "
        f"{PAYLOAD_SIZE}-byte records, durable enqueue and ack, one record per call",
        "",
    ]
    body, notes = [], []
    for r in rows:
        if "skipped" in r or "error" in r:
            body.append([r["row"], "-", "-", "-", "-", "-", "-", "-", "-"])
            notes.append(f"  {r['row']}: {r.get('skipped') or 'ERROR ' + r['error']}")
            continue
        check = f"{r['lost']}/{r['dup']}/{r['alien']}" + ("" if r["drained"] else " (undrained)")
        body.append(
            [
                r["row"],
                f"{r['rate']:,.0f}",
                f"{r['enqueue_rate']:,.0f}",
                f"{r['in_window']:,}",
                f"{r['enqueued']:,}",
                f"{r['acked']:,}",
                f"{r['drain_s']:.1f}",
                check,
                r["sync"],
            ]
        )
        if r["call_errors"]:
            notes.append(f"  {r['row']}: {r['call_errors']} failed calls, e.g. {r['first_error']}")
        if "owner" in r:
            notes.append(
                f"  {r['row']}: owner = {r['owner']}; "
                f"OwnerLostError retries = {r['owner_lost_retries']}"
            )
    headers = ["library", "processed/s", "enqueued/s", "in window", "enqueued", "acked",
               "drain s", "lost/dup/alien", "sync"]  # fmt: skip
    lines.append(_table(headers, body))
    lines += notes
    lines.append(
        "  this disk, back to back (before / after): "
        + " / ".join(f"{d['per_s']:,.0f} fsyncs/s (p50 {d['p50_us']:.0f} us)" for d in disk)
    )
    done = [r for r in rows if "rate" in r]
    cpus = os.cpu_count() or 1
    for r in done:
        lines.append(
            f"  {r['row']}: at most {r['bound']:,.0f} records/s from the fsyncs "
            f"({r['rate'] / r['bound']:.0%} of it); CPU {r['cpu_busy']:.0%} busy, "
            f"{r['cpu_us_per_record']:,.0f} us per record (at most "
            f"{cpus * 1e6 / r['cpu_us_per_record']:,.0f} records/s on {cpus} cores)"
        )
        workers = r["cpu_us_per_record"] - r["parent_cpu_us_per_record"]
        if issubclass(ADAPTERS[r["library"]], TfluxOwnerApart) and workers > 0:
            lines.append(
                f"    of it the owner (this process) {r['parent_cpu_us_per_record']:,.0f} us, "
                f"the {PRODUCERS + CONSUMERS} workers and the rest {workers:,.0f} us (at most "
                f"{cpus * 1e6 / workers:,.0f} records/s with an owner that cost nothing)"
            )
    by_name = {(r["library"], r["batch"]): r for r in done}
    pairs = [(p, r, "; target >= 0.7x") for p, r in RULES_OF.items()]
    pairs += [(p, r, "") for p, r in EXTRA_OF.items()]
    for plain, other, target in pairs:
        for batch in sorted({r["batch"] for r in done}):
            a, b = by_name.get((plain, batch)), by_name.get((other, batch))
            if a is None or b is None:
                continue
            lines.append(
                f"  ratio {b['row']} / {a['row']}: {b['rate'] / a['rate']:.2f}x processed/s "
                f"({b['enqueue_rate'] / a['enqueue_rate']:.2f}x enqueued/s{target})"
            )
    ours = [r for r in done if r["library"].startswith("tflux")]
    others = [r for r in done if not r["library"].startswith("tflux")]
    for tf in ours if others else []:
        best = max(others, key=lambda r: r["rate"])
        lines.append(
            f"  ratio {tf['row']} / best other ({best['library']}): "
            f"{tf['rate'] / best['rate']:.2f}x (at most {tf['bound'] / best['rate']:.2f}x "
            "from the fsyncs)"
            if best["rate"]
            else "  ratio: best other processed nothing"
        )
    return "\n".join(lines)


def report_latency(res: dict) -> str:
    lines = [
        "2. Durable enqueue: a client process vs the owner (sequential calls, one directory)",
        "",
    ]
    body = []
    for role in ("owner", "client"):
        r = res.get(role)
        if r is None:
            continue
        if "error" in r:
            body.append([role, "ERROR", "", "", "", ""])
            lines.append(r["error"])
            continue
        s, m = r["single"], r["many100"]
        body.append(
            [
                f"{role} (is_owner={r['is_owner']})",
                f"{s['p50_us']:,.0f}",
                f"{s['p99_us']:,.0f}",
                f"{s['calls']:,}",
                f"{m['records_per_s']:,.0f}",
                f"{m['p50_us']:,.0f}",
            ]
        )
    headers = ["process", "enqueue p50 us", "p99 us", "calls", "enqueue_many(100) rec/s",
               "many p50 us"]  # fmt: skip
    lines.insert(1, f"   LogSyncPolicy={res.get('owner', {}).get('policy', '?')}")
    lines.append(_table(headers, body))
    o, c = res.get("owner", {}), res.get("client", {})
    if "single" in o and "single" in c:
        lines.append(
            f"  client/owner: p50 {c['single']['p50_us'] / o['single']['p50_us']:.2f}x, "
            f"p99 {c['single']['p99_us'] / o['single']['p99_us']:.2f}x, enqueue_many throughput "
            f"{c['many100']['records_per_s'] / o['many100']['records_per_s']:.2f}x"
        )
    return "\n".join(lines)


def report_open(res: dict) -> str:
    b = res["base"]
    lines = [
        f"3. Open of a {b['records']:,}-record base ({b['bytes'] / 2**20:.0f} MiB on disk, "
        f"built in {b['build_s']:.1f} s; a read-only open replays {b['replayed']:,} deltas, "
        f"snapshot index {b['snapshot_index']})",
        "",
    ]
    f = res["fork"]
    if "error" in f:
        lines.append("forker failed: " + f["error"])
        return "\n".join(lines)

    def med(rows, key):
        vals = [r[key] for r in rows if key in r]
        return f"{statistics.median(vals) * 1e3:,.0f}" if vals else "ERR"

    fork_rows, fresh_rows = f["rounds"], res["fresh"]
    body = [
        ["forked child", med(fork_rows, "ro_s"), med(fork_rows, "rw_s"), "-", "-"],
        ["fresh python -c", med(fresh_rows, "ro_s"), med(fresh_rows, "rw_s"),
         med(fresh_rows, "import_s"), med(fresh_rows, "wall_s")],
    ]  # fmt: skip
    headers = ["process", "readonly open ms", "writable open ms", "import tflux ms", "wall ms"]
    lines.append(_table(headers, body))
    lines.append(
        f"  medians of {len(fork_rows)} rounds; the forking parent's own first read-only open: "
        f"{f['parent_first_ro_s'] * 1e3:,.0f} ms"
    )
    for r in fork_rows + fresh_rows:
        if "error" in r:
            lines.append(f"  error: {r['error']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="window per library (part 1)")
    ap.add_argument("--out", type=Path, help="write the results as JSON")
    ap.add_argument("--dir", type=Path, help="where to put the directories (default: a temp dir)")
    ap.add_argument("--records", type=int, default=1_000_000, help="records of the part-3 base")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of part 3")
    ap.add_argument(
        "--only", choices=["1", "2", "3"], action="append", help="run these parts (default all)"
    )
    ap.add_argument(
        "--libs",
        help="comma-separated names for part 1 (default all but the rules rows): "
        + ", ".join(ADAPTERS),
    )
    ap.add_argument(
        "--rules",
        action="store_true",
        help="part 1: run each tflux row again right after it on a queue with a dead-letter "
        "rule (exact delivery counts; issue 44), and print the ratio",
    )
    ap.add_argument(
        "--extra-commit",
        action="store_true",
        help="part 1: run each tflux row again (after its rules row with --rules) with its "
        "consumers making one more durable round trip per delivery call (a durable enqueue "
        "into a side queue): the ceiling of 3 durable round trips per record instead of 2",
    )
    ap.add_argument(
        "--batch",
        default="1",
        help="part 1: comma-separated K: run each tflux row once per K, its consumers taking "
        "up to K records a call (dequeue_many) and acking them with one ack_many (default 1)",
    )
    args = ap.parse_args(argv)
    parts = set(args.only or ["1", "2", "3"])
    root = Path(tempfile.mkdtemp(prefix="tflux-mp-", dir=args.dir))
    load = os.getloadavg()
    results: dict = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_start": load,
        "seconds": args.seconds,
    }
    print(
        f"# {root}  cpus={os.cpu_count()}  load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    try:
        if "1" in parts:
            if args.libs:
                names = [n.strip() for n in args.libs.split(",")]
            else:
                extra = {*RULES_OF.values(), *EXTRA_OF.values()}
                names = [n for n in ADAPTERS if n not in extra]
            if args.rules or args.extra_commit:
                rules = RULES_OF if args.rules else {}
                more = EXTRA_OF if args.extra_commit else {}
                names = [m for n in names for m in (n, rules.get(n), more.get(n)) if m is not None]
                names = list(dict.fromkeys(names))
            rows = []
            disk = [fsync_rate(root)]
            batches = [int(k) for k in args.batch.split(",")]
            # Batch by batch, so that a row with rules runs right after its row without.
            for k in batches:
                for name in names if k == 1 else [n for n in names if n.startswith("tflux")]:
                    print(f"# part 1: {_row_name(name, k)} ...", file=sys.stderr, flush=True)
                    rows.append(run_mpmc(name, root, args.seconds, k))
            disk.append(fsync_rate(root))
            fsyncs = statistics.mean(d["per_s"] for d in disk)
            for r in rows:
                if "rate" in r:
                    r["bound"] = bound(ADAPTERS[r["library"]], fsyncs)
            results["mpmc"] = rows
            results["fsync"] = disk
            print(report_mpmc(rows, disk), "\n", flush=True)
        if "2" in parts:
            print("# part 2 ...", file=sys.stderr, flush=True)
            results["client_vs_owner"] = run_client_vs_owner(root, max(2.0, args.seconds / 4))
            print(report_latency(results["client_vs_owner"]), "\n", flush=True)
        if "3" in parts:
            print("# part 3 ...", file=sys.stderr, flush=True)
            results["open"] = run_open(root, args.records, args.rounds)
            print(report_open(results["open"]), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["loadavg_end"] = os.getloadavg()
    end = results["loadavg_end"]
    print(f"# load average at the end {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
