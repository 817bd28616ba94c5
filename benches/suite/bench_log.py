"""Benchmarks of the segmented log: tflux beside its baselines, one group per workload.

Groups ``scan-64B`` and ``scan-1KiB`` scan the same cached segments with
- ``tflux.verify`` (framing + CRC of every record, GIL released),
- ``Log.read_batch`` in a loop (the bulk path that hands every entry to Python as buffers), with
  the default budget (4 MiB of data per call) and with 1 MiB,
- ``Log.entries`` and the pure-Python reader ``pyref`` (struct + zlib.crc32) on a subset of the
  leading segments, since they need seconds per GiB; the report normalises them per record,
- ``tflux.crc32`` (crc32fast) and ``zlib.crc32`` over the same bytes as one buffer: the ceiling.
Group ``append-64B`` times ``Log.append_many`` with each sync policy (``always``: fsync before
every call returns; ``batch``: only at roll-over, ``sync()`` and close; ``never``).
Group ``read-random`` reads single records at random LSNs of the scan logs with ``Log.read`` and
``Log.read_batch``, beside a pure-Python ``os.pread`` + ``struct`` + ``zlib.crc32`` of the same
record at an offset computed from the fixed record size.

Every body asserts what it computed, so the default (``--benchmark-disable``) run is a smoke test.
"""

from __future__ import annotations

import bisect
import os
import random
import shutil
import struct
import zlib
from collections.abc import Callable
from itertools import count
from pathlib import Path

import pytest
import tflux

from benches.suite._benchdata import LogData, record_size
from benches.suite.pyref import scan_log as pyref_scan_log

ROUNDS = int(os.environ.get("TFLUX_BENCH_ROUNDS", "7"))
# Slow readers scan the leading segments up to this many bytes (at least one segment).
SUBSET_BYTES = 16 << 20


def run(benchmark, target: Callable, *args, rounds: int = ROUNDS, **info):
    """Times ``target(*args)`` for ``rounds`` rounds after one warm-up round; returns its result."""
    benchmark.extra_info.update(info)
    return benchmark.pedantic(target, args=args, rounds=rounds, warmup_rounds=1, iterations=1)


# --- scans ---------------------------------------------------------------------------------


def test_verify_scans_every_record(benchmark, scan_log: LogData) -> None:
    report = run(
        benchmark,
        tflux.verify,
        scan_log.path,
        label="tflux.verify",
        role="tflux",
        records=scan_log.records,
        bytes=scan_log.bytes,
    )
    assert report.ok and not report.problems
    assert report.records == scan_log.records
    assert report.bytes == scan_log.bytes


def read_all(log: tflux.Log, max_bytes: int | None) -> tuple[int, int]:
    """Every entry through ``read_batch`` in chunks of ``max_bytes`` of data (None: the default
    budget); returns (entries, data bytes)."""
    start, end = log.start_index, log.last_index + 1
    entries = nbytes = 0
    budget = {} if max_bytes is None else {"max_bytes": max_bytes}
    while start < end:
        batch = log.read_batch(start, **budget)
        entries += len(batch)
        nbytes += batch.nbytes
        start += len(batch)
    return entries, nbytes


# The default budget (4 MiB of data per call since 72ffee7; 64 MiB before), and 1 MiB.
READ_BUDGETS = [
    pytest.param(None, id="default"),
    pytest.param(1 << 20, id="1MiB"),
]


@pytest.mark.parametrize("max_bytes", READ_BUDGETS)
def test_read_batch_returns_every_entry(
    benchmark, scan_log: LogData, max_bytes: int | None
) -> None:
    budget = "default, 4 MiB" if max_bytes is None else f"max_bytes={max_bytes >> 20} MiB"
    with tflux.Log.open(scan_log.path, readonly=True) as log:
        entries, nbytes = run(
            benchmark,
            read_all,
            log,
            max_bytes,
            label=f"Log.read_batch loop ({budget})",
            role="tflux",
            max_bytes=max_bytes,
            records=scan_log.records,
            bytes=scan_log.bytes,
        )
        last = log.read_batch(scan_log.records - 1)
        assert len(last) == 1 and len(last.data) == scan_log.payload
        assert last.offsets.tolist() == [0, scan_log.payload]
    assert entries == scan_log.records
    assert nbytes == scan_log.records * scan_log.payload


def iterate_entries(log: tflux.Log, end: int) -> int:
    n = 0
    for _ in log.entries(0, end):
        n += 1
    return n


def test_entries_iterates_a_subset(benchmark, scan_log: LogData) -> None:
    subset = scan_log.subset(SUBSET_BYTES)
    records = sum(s.count for s in subset)
    with tflux.Log.open(scan_log.path, readonly=True) as log:
        n = run(
            benchmark,
            iterate_entries,
            log,
            records,
            label="Log.entries (one Entry per record, subset)",
            role="tflux",
            subset=len(subset),
            records=records,
            bytes=sum(s.size for s in subset),
        )
    assert n == records


def test_pure_python_reader_scans_a_subset(benchmark, scan_log: LogData) -> None:
    subset = scan_log.subset(SUBSET_BYTES)
    records = sum(s.count for s in subset)
    n = run(
        benchmark,
        pyref_scan_log,
        [Path(s.path) for s in subset],
        label="pure Python reader (struct + zlib.crc32, subset)",
        role="baseline",
        subset=len(subset),
        records=records,
        bytes=sum(s.size for s in subset),
    )
    assert n == records


@pytest.fixture(scope="session")
def scan_crc(scan_bytes: bytes) -> int:
    return zlib.crc32(scan_bytes)


def test_crc32fast_over_the_same_bytes(benchmark, scan_log: LogData, scan_bytes, scan_crc) -> None:
    crc = run(
        benchmark,
        tflux.crc32,
        scan_bytes,
        label="tflux.crc32 (crc32fast) over all bytes as one buffer",
        role="baseline",
        records=scan_log.records,
        bytes=len(scan_bytes),
    )
    assert len(scan_bytes) == scan_log.bytes
    assert crc == scan_crc


def test_zlib_crc32_over_the_same_bytes(benchmark, scan_log: LogData, scan_bytes, scan_crc) -> None:
    crc = run(
        benchmark,
        zlib.crc32,
        scan_bytes,
        label="zlib.crc32 over all bytes as one buffer",
        role="context",
        records=scan_log.records,
        bytes=len(scan_bytes),
    )
    assert crc == scan_crc == tflux.crc32(scan_bytes)


# --- appends -------------------------------------------------------------------------------

APPEND_PAYLOAD = 64

# (sync policy, records per append_many call, calls per round when timed)
APPENDS = [
    pytest.param("never", 10_000, 100, id="never-batch10000"),
    pytest.param("never", 1, 100_000, id="never-batch1"),
    pytest.param("batch", 10_000, 100, id="batch-batch10000"),
    pytest.param("always", 10_000, 20, id="always-batch10000"),
    pytest.param("always", 100, 100, id="always-batch100"),
    pytest.param("always", 1, 500, id="always-batch1"),
]


@pytest.mark.benchmark(group="append-64B")
@pytest.mark.parametrize(("sync", "batch", "calls"), APPENDS)
def test_append_many(benchmark, bench_root: Path, timed: bool, sync, batch, calls) -> None:
    if not timed:
        calls = min(calls, 3)
    rng = random.Random(batch)
    pool = [rng.randbytes(APPEND_PAYLOAD) for _ in range(batch)]
    fresh = count()
    opened: list[tflux.Log] = []

    def setup():
        # A new, empty log per round, so every round appends to the same state.
        path = bench_root / f"append-{sync}-{batch}-{next(fresh)}"
        log = tflux.Log.open(path, sync=sync)
        opened.append(log)
        return (log,), {}

    def append(log: tflux.Log) -> int:
        for _ in range(calls):
            log.append_many(1, pool)
        return len(log)

    def teardown(log: tflux.Log) -> None:
        log.close()
        shutil.rmtree(log.path, ignore_errors=True)

    benchmark.extra_info.update(
        label=f'Log.append_many, sync="{sync}", {batch} per call',
        role="tflux",
        records=calls * batch,
        bytes=calls * batch * record_size(APPEND_PAYLOAD),
        sync=sync,
        batch=batch,
    )
    n = benchmark.pedantic(
        append, setup=setup, teardown=teardown, rounds=ROUNDS, warmup_rounds=1, iterations=1
    )
    assert n == calls * batch
    last = opened[-1]
    if not last.closed:  # --benchmark-disable runs the body once without the teardown
        assert last.read(len(last) - 1)[0].data == pool[-1]
        teardown(last)


# --- random reads ----------------------------------------------------------------------------

RANDOM_READS = 20_000


def _random_lsns(data: LogData, n: int) -> list[int]:
    rng = random.Random(data.records)
    return [rng.randrange(data.records) for _ in range(n)]


def test_random_read(benchmark, scan_log: LogData, timed: bool) -> None:
    benchmark.group = "read-random"
    lsns = _random_lsns(scan_log, RANDOM_READS if timed else 100)
    with tflux.Log.open(scan_log.path, readonly=True) as log:

        def read_each() -> int:
            read, n = log.read, 0
            for lsn in lsns:
                n += len(read(lsn, 1)[0].data)
            return n

        n = run(
            benchmark,
            read_each,
            label=f"Log.read(lsn, max_bytes=1), {scan_log.payload} B records",
            role="tflux",
            payload=scan_log.payload,
            records=len(lsns),
            bytes=len(lsns) * scan_log.payload,
        )
    assert n == len(lsns) * scan_log.payload


def test_random_read_batch_of_one(benchmark, scan_log: LogData, timed: bool) -> None:
    benchmark.group = "read-random"
    lsns = _random_lsns(scan_log, RANDOM_READS if timed else 100)
    with tflux.Log.open(scan_log.path, readonly=True) as log:

        def read_each() -> int:
            read, n = log.read_batch, 0
            for lsn in lsns:
                n += read(lsn, lsn + 1).nbytes
            return n

        n = run(
            benchmark,
            read_each,
            label=f"Log.read_batch(lsn, lsn + 1), {scan_log.payload} B records",
            role="tflux",
            payload=scan_log.payload,
            records=len(lsns),
            bytes=len(lsns) * scan_log.payload,
        )
    assert n == len(lsns) * scan_log.payload


def test_random_pread_pure_python(benchmark, scan_log: LogData, timed: bool) -> None:
    """The baseline: every segment open, the record's offset computed (all records have one
    size), one ``os.pread`` of header + data, the header checked and the CRC compared."""
    benchmark.group = "read-random"
    lsns = _random_lsns(scan_log, RANDOM_READS if timed else 100)
    size = record_size(scan_log.payload)
    starts = [s.start_lsn for s in scan_log.segments]
    fds = [os.open(s.path, os.O_RDONLY) for s in scan_log.segments]
    header = struct.Struct(">4siIi")
    try:

        def read_each() -> int:
            n = 0
            for lsn in lsns:
                i = bisect.bisect_right(starts, lsn) - 1
                buf = os.pread(fds[i], size, 8 + (lsn - starts[i]) * size)
                marker, _term, crc, length = header.unpack_from(buf)
                data = buf[16 : 16 + length]
                if marker != b"\xaa\xf5\x34\xc4" or zlib.crc32(data) != crc:
                    raise ValueError(f"bad record at LSN {lsn}")
                n += len(data)
            return n

        n = run(
            benchmark,
            read_each,
            label=f"pure Python os.pread + struct + zlib.crc32, {scan_log.payload} B records",
            role="baseline",
            payload=scan_log.payload,
            records=len(lsns),
            bytes=len(lsns) * scan_log.payload,
        )
    finally:
        for fd in fds:
            os.close(fd)
    assert n == len(lsns) * scan_log.payload
