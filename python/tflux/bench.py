"""``tflux bench``: the headline ratios of ``docs/benchmarks.md``, measured on this machine.

Three side-by-side measurements, each a ratio between tflux and its baseline measured seconds
apart on the same data, so a user can check the published figures on their own hardware in well
under a minute:

- **verify-scan vs crc32fast**: ``tflux.verify`` over a log of 64 B records (framing and CRC of
  every record) against one ``tflux.crc32`` (crc32fast) over the same bytes as one buffer, in MB/s.
- **restore vs pure Python**: ``tflux.open`` replaying a log of Add, Add, Remove(front) deltas
  against the pure-Python replay of ``tflux._pyref`` (``read_batch`` + ``struct`` + ``heapq``), in
  deltas/s.
- **durable enqueue vs persist-queue**: one ``store.enqueue`` per call (fsync before it returns)
  against persist-queue's ``SQLiteQueue.put`` (``auto_commit=True``, SQLite ``synchronous=FULL``),
  in records/s; without persist-queue installed, against a raw ``os.pwrite`` + ``os.fdatasync`` of
  the same bytes per call (the disk's own ceiling), and the output says so.

The full suite (every group, plots, the page) needs a source checkout: ``make bench``.
This module has no dependency beyond tflux itself (persist-queue is optional).
"""

from __future__ import annotations

import heapq
import os
import random
import shutil
import statistics
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tflux
from tflux import _pyref
from tflux._layout import Layout

# (log bytes for the scan, restore deltas, pure-Python deltas, durable calls, repeats)
SIZES = {
    "quick": (128 << 20, 2_000_000, 300_000, 300, 5),
    "tiny": (1 << 20, 20_000, 20_000, 20, 2),
}
SCAN_PAYLOAD = 64
QUEUE_PAYLOAD = 64
KEYS = 1024
QUEUE = "bench"


@dataclass
class Ratio:
    """One headline: tflux's rate over the baseline's rate (higher is better for tflux)."""

    name: str
    tflux: str
    baseline: str
    tflux_rate: float
    baseline_rate: float
    unit: str
    target: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        """tflux's rate divided by the baseline's."""
        return self.tflux_rate / self.baseline_rate

    @property
    def met(self) -> bool | None:
        """Whether ``ratio`` reaches ``target`` (``None``: no target)."""
        return None if self.target is None else self.ratio >= self.target


@dataclass
class Results:
    """Every ratio measured by one ``run``, with the size, the directory and the seconds taken."""

    size: str
    directory: str
    ratios: list[Ratio] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the results (with tflux's version, each ratio and whether it met
        its target)."""
        return {
            "size": self.size,
            "directory": self.directory,
            "seconds": self.seconds,
            "tflux": tflux.__version__,
            "ratios": [asdict(r) | {"ratio": r.ratio, "met": r.met} for r in self.ratios],
        }


def _median_time(fn: Callable[[], Any], repeats: int, setup: Callable[[], Any] | None = None):
    """Median seconds of ``repeats`` calls after a warm-up call; returns (seconds, last result)."""
    times, result = [], None
    for i in range(repeats + 1):
        if setup is not None:
            setup()
        started = time.perf_counter()
        result = fn()
        if i:
            times.append(time.perf_counter() - started)
    return statistics.median(times), result


# --- verify-scan vs crc32fast ---------------------------------------------------------------------


def _write_scan_log(path: Path, total_bytes: int) -> int:
    rng = random.Random(1)
    pool = [rng.randbytes(SCAN_PAYLOAD) for _ in range(10_000)]
    record = 16 + SCAN_PAYLOAD
    records = max(1, total_bytes // record)
    with tflux.Log.open(path, sync="never") as log:
        written = 0
        while written < records:
            n = min(len(pool), records - written)
            first = log.append_many(1, pool[:n])
            log.commit(first + n - 1)
            written += n
    return records


def scan_ratio(root: Path, total_bytes: int, repeats: int) -> Ratio:
    """``tflux.verify`` of a log of ``total_bytes`` against ``tflux.crc32`` over the same bytes, in
    MB/s (median of ``repeats``); raises ``RuntimeError`` when the verify disagrees."""
    path = root / "scan"
    records = _write_scan_log(path, total_bytes)
    report = tflux.verify(path)
    data = b"".join(Path(s.path).read_bytes()[: s.size] for s in report.segments)
    seconds, report = _median_time(lambda: tflux.verify(path), repeats)
    if not report.ok or report.records != records:
        raise RuntimeError(f"verify of the benchmark log failed: {report.problems}")
    crc_seconds, _ = _median_time(lambda: tflux.crc32(data), repeats)
    shutil.rmtree(path, ignore_errors=True)
    return Ratio(
        "verify-scan vs crc32fast",
        f"tflux.verify, {records:,} records of {SCAN_PAYLOAD} B",
        "tflux.crc32 (crc32fast) over the same bytes as one buffer",
        len(data) / seconds / 1e6,
        len(data) / crc_seconds / 1e6,
        "MB/s",
        target=0.8,
    )


# --- restore vs pure Python -----------------------------------------------------------------------


def _name(name: str) -> bytes:
    raw = name.encode("ascii")
    return bytes([len(raw)]) + raw


def write_queue_log(base: Path, deltas: int) -> tuple[int, int]:
    """A CreateQueue, then Add, Add, Remove(front), ... (spec section 6, encoded with ``struct``);
    returns (adds, removes)."""
    rng = random.Random(deltas)
    pool = [rng.randbytes(QUEUE_PAYLOAD) for _ in range(1024)]
    keys = [rng.randrange(KEYS) for _ in range(4096)]
    add, remove = b"A" + _name(QUEUE), b"R" + _name(QUEUE)
    key_len, rid_of = struct.Struct(">qi").pack, struct.Struct(">Q").pack
    create = b"C" + _name(QUEUE) + struct.pack(">iii", 1, -1, -1) + b"\x00"
    heap: list[tuple[int, int]] = []
    batch, written, last_id, removes = [create], 0, 0, 0
    with tflux.Log.open(Layout(base).log, sync="never") as log:
        while written + len(batch) < deltas:
            if (written + len(batch)) % 3 == 0:
                batch.append(remove + rid_of(heapq.heappop(heap)[1]))
                removes += 1
            else:
                last_id += 1
                key = keys[last_id & 4095]
                batch.append(add + key_len(key, QUEUE_PAYLOAD) + pool[last_id & 1023])
                heapq.heappush(heap, (key, last_id))
            if len(batch) == 10_000:
                first = log.append_many(1, batch)
                log.commit(first + len(batch) - 1)
                written += len(batch)
                batch = []
        if batch:
            first = log.append_many(1, batch)
            log.commit(first + len(batch) - 1)
    return last_id, removes


def restore_ratio(root: Path, deltas: int, py_deltas: int, repeats: int) -> Ratio:
    """``tflux.open`` replaying ``deltas`` against the pure-Python replay of the first
    ``py_deltas``, in deltas/s; raises ``RuntimeError`` when either restores the wrong state."""
    base = root / "restore"
    adds, removes = write_queue_log(base, deltas)
    opened: list[tflux.Store] = []

    def close_previous() -> None:
        while opened:
            opened.pop().close()

    def restore() -> tflux.Store:
        opened.append(tflux.open(base))
        return opened[-1]

    seconds, store = _median_time(restore, repeats, setup=close_previous)
    counts = {q.name: q.count for q in store.queues()}
    close_previous()
    if store.replayed != deltas or counts.get(QUEUE) != adds - removes:
        raise RuntimeError(f"restore replayed {store.replayed} deltas, queues {counts}")
    end = min(py_deltas, deltas)
    with tflux.Log.open(Layout(base).log, readonly=True) as log:
        py_seconds, state = _median_time(lambda: _pyref.replay(log, end), max(1, repeats // 2))
    if state.queues[QUEUE.encode()].last_id != (end - 1) - (end - 1) // 3:
        raise RuntimeError("the pure-Python replay disagrees with the writer")
    shutil.rmtree(base, ignore_errors=True)
    return Ratio(
        "restore vs pure Python",
        f"tflux.open replaying {deltas:,} deltas ({QUEUE_PAYLOAD} B messages)",
        "pure-Python replay (read_batch + struct + heapq)"
        + (f", first {end:,} deltas" if end < deltas else ""),
        deltas / seconds,
        end / py_seconds,
        "deltas/s",
        target=50.0,
    )


# --- durable enqueue ------------------------------------------------------------------------------


def _tflux_enqueues(root: Path, calls: int, repeats: int) -> float:
    payload = random.Random(3).randbytes(QUEUE_PAYLOAD)
    made = iter(range(repeats + 1))
    stores: list[tflux.Store] = []

    def setup() -> None:
        while stores:
            stores.pop().close()
        stores.append(tflux.open(root / f"enqueue-{next(made)}"))  # default: fsync per call

    def enqueue() -> int:
        store = stores[-1]
        for _ in range(calls):
            store.enqueue("", 0, payload)
        return calls

    seconds, _ = _median_time(enqueue, repeats, setup=setup)
    count = {q.name: q.count for q in stores[-1].queues()}[""]
    while stores:
        stores.pop().close()
    if count != calls:
        raise RuntimeError(f"the store holds {count} records after {calls} enqueues")
    return calls / seconds


def _persist_queue_puts(root: Path, calls: int, repeats: int) -> float:
    import persistqueue

    payload = random.Random(3).randbytes(QUEUE_PAYLOAD)
    made = iter(range(repeats + 1))
    queues: list[Any] = []

    def setup() -> None:
        while queues:
            queues.pop().close()
        queues.append(persistqueue.SQLiteQueue(os.fspath(root / f"pq-{next(made)}")))

    def put() -> int:
        q = queues[-1]
        for _ in range(calls):
            q.put(payload)
        return calls

    seconds, _ = _median_time(put, repeats, setup=setup)
    size = queues[-1].qsize()
    while queues:
        queues.pop().close()
    if size != calls:
        raise RuntimeError(f"persist-queue holds {size} records after {calls} puts")
    return calls / seconds


def _raw_fdatasyncs(root: Path, calls: int, repeats: int) -> float:
    record = random.Random(3).randbytes(96)  # an enqueue's record on disk: header + delta
    path = root / "raw"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, bytes(calls * len(record)))
        os.fsync(fd)

        def write_sync() -> int:
            for i in range(calls):
                os.pwrite(fd, record, i * len(record))
                os.fdatasync(fd)
            return calls

        seconds, _ = _median_time(write_sync, repeats)
    finally:
        os.close(fd)
        path.unlink()
    return calls / seconds


def enqueue_ratio(root: Path, calls: int, repeats: int) -> Ratio:
    """Durable ``store.enqueue`` calls against persist-queue's ``put`` (or raw ``fdatasync``
    writes when persist-queue is not installed), in records/s."""
    mine = _tflux_enqueues(root, calls, repeats)
    try:
        import persistqueue  # noqa: F401
    except ImportError:
        raw = _raw_fdatasyncs(root, calls, repeats)
        return Ratio(
            "durable enqueue vs raw fdatasync",
            f"store.enqueue of {QUEUE_PAYLOAD} B, fsync per call",
            "os.pwrite + os.fdatasync of 96 B per call (persist-queue is not installed: "
            "pip install persist-queue to compare with it)",
            mine,
            raw,
            "records/s",
            target=0.9,
            note="persist-queue not installed",
        )
    theirs = _persist_queue_puts(root, calls, repeats)
    return Ratio(
        "durable enqueue vs persist-queue",
        f"store.enqueue of {QUEUE_PAYLOAD} B, fsync per call",
        "persist-queue SQLiteQueue.put (auto_commit=True, SQLite synchronous=FULL, WAL)",
        mine,
        theirs,
        "records/s",
    )


def run(size: str = "quick", directory: str | os.PathLike[str] | None = None) -> Results:
    """Runs the three measurements in a temporary directory under ``directory`` (deleted after)."""
    total_bytes, deltas, py_deltas, calls, repeats = SIZES[size]
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="tflux-bench-", dir=directory))
    results = Results(size, os.fspath(root.parent))
    try:
        results.ratios.append(scan_ratio(root, total_bytes, repeats))
        results.ratios.append(restore_ratio(root, deltas, py_deltas, repeats))
        results.ratios.append(enqueue_ratio(root, calls, repeats))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results.seconds = time.perf_counter() - started
    return results
