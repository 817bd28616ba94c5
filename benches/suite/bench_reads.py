"""Reads to Python (issue 11): bulk columns and random single records, each beside its baseline
in the same session. ``benches/report/reads.py`` renders the JSON into docs/benchmarks.md.

    python -m pytest benches/suite/bench_reads.py --benchmark-enable \
        --benchmark-json=.benchmarks/reads.json -p no:cacheprovider
    python -m benches.report --reads .benchmarks/reads.json

Groups ``bulk-64B`` / ``bulk-1KiB`` read a cached log of ``TFLUX_BENCH_READ_BYTES`` (256 MiB)
with ``Log.read_batch`` in a loop (default 4 MiB budget), handing each batch to Python as
memoryviews or as a ``pyarrow.RecordBatch``; beside them ``tflux.verify`` of the same log (the
same framing and CRC work, nothing handed over), one crc32fast over the same bytes (the ceiling)
and the pure-Python reader (``benches/suite/pyref.py``, on the leading 16 MiB, normalised per
record).
Group ``deltas-64B`` decodes a log of AddRecord deltas (64 B messages) with ``Log.read_deltas``
+ ``to_arrow()`` beside a pure-Python decode of the same deltas into column lists (``struct``,
on the leading deltas). Groups ``random-64B`` / ``random-1KiB`` read single records at random
LSNs with ``Log.read(lsn, 1)`` and ``Log.read_batch(lsn, lsn + 1)`` beside a pure-Python
``os.pread`` + ``struct`` + ``zlib.crc32`` that already knows each record's offset.

Every body asserts what it computed, so the default (``--benchmark-disable``) run is a smoke test.
"""

from __future__ import annotations

import bisect
import os
import random
import shutil
import struct
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import tflux

from benches.suite._benchdata import LogData, build_log, record_size
from benches.suite._queuedata import QUEUE, QueueLog, build_queue_log
from benches.suite.pyref import scan_log as pyref_scan_log

ROUNDS = int(os.environ.get("TFLUX_BENCH_ROUNDS", "7"))
SUBSET_BYTES = 16 << 20
RANDOM_READS = 50_000
PLAIN_DELTAS = 200_000


def _bytes(text: str) -> int:
    """``268435456``, ``256M``, ``1G``."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def run(benchmark, target, *args, **info):
    benchmark.extra_info.update(info)
    return benchmark.pedantic(target, args=args, rounds=ROUNDS, warmup_rounds=1, iterations=1)


PAYLOADS = [pytest.param(64, id="64B"), pytest.param(1024, id="1KiB")]


@pytest.fixture(scope="module", params=PAYLOADS)
def read_log(request, bench_root: Path, timed: bool) -> Iterator[LogData]:
    """A cached log of one payload size (one at a time)."""
    text = os.environ.get("TFLUX_BENCH_READ_BYTES")
    size = _bytes(text) if text else (256 << 20 if timed else 4 << 20)
    path = bench_root / f"reads-{request.param}"
    started = time.perf_counter()
    data = build_log(path, request.param, size, flush=timed)
    print(
        f"\nbuilt {data.records} records of {request.param} B in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    yield data
    shutil.rmtree(path, ignore_errors=True)


def _size(data: LogData) -> str:
    return "1KiB" if data.payload == 1024 else f"{data.payload}B"


# --- bulk ------------------------------------------------------------------------------------


def batches(log: tflux.Log) -> Iterator[tflux.EntryBatch]:
    start, end = log.start_index, log.last_index + 1
    while start < end:
        batch = log.read_batch(start)
        start += len(batch)
        yield batch


def read_views(log: tflux.Log) -> int:
    """Every entry, each batch's columns taken as memoryviews."""
    n = 0
    for batch in batches(log):
        lsn, term, offsets, data = batch.lsn, batch.term, batch.offsets, batch.data_view
        assert len(lsn) == len(term) == len(offsets) - 1
        n += len(lsn) + 0 * len(data)
    return n


def read_arrow(log: tflux.Log) -> int:
    """Every entry, each batch handed over as a pyarrow.RecordBatch."""
    return sum(batch.to_arrow().num_rows for batch in batches(log))


@pytest.mark.parametrize(
    ("reader", "label"),
    [
        (read_views, "Log.read_batch loop, columns as memoryviews"),
        (read_arrow, "Log.read_batch loop + to_arrow() (pyarrow.RecordBatch)"),
    ],
    ids=["views", "arrow"],
)
def test_bulk_read_batch(benchmark, read_log: LogData, reader, label) -> None:
    benchmark.group = f"bulk-{_size(read_log)}"
    pytest.importorskip("pyarrow")
    with tflux.Log.open(read_log.path, readonly=True) as log:
        n = run(
            benchmark,
            reader,
            log,
            label=label,
            role="tflux",
            records=read_log.records,
            bytes=read_log.bytes,
        )
    assert n == read_log.records


def test_bulk_verify_same_log(benchmark, read_log: LogData) -> None:
    benchmark.group = f"bulk-{_size(read_log)}"
    report = run(
        benchmark,
        tflux.verify,
        read_log.path,
        label="tflux.verify (same framing + CRC, nothing handed to Python)",
        role="context",
        records=read_log.records,
        bytes=read_log.bytes,
    )
    assert report.ok and report.records == read_log.records


def test_bulk_crc32fast_same_bytes(benchmark, read_log: LogData) -> None:
    benchmark.group = f"bulk-{_size(read_log)}"
    parts = []
    for s in read_log.segments:
        with open(s.path, "rb") as f:
            parts.append(f.read(s.size))
    joined = b"".join(parts)
    crc = run(
        benchmark,
        tflux.crc32,
        joined,
        label="tflux.crc32 (crc32fast) over the same bytes, one buffer",
        role="ceiling",
        records=read_log.records,
        bytes=len(joined),
    )
    assert crc == zlib.crc32(joined)


def test_bulk_pure_python_reader(benchmark, read_log: LogData) -> None:
    benchmark.group = f"bulk-{_size(read_log)}"
    subset = read_log.subset(SUBSET_BYTES)
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


# --- deltas ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def delta_log(bench_root: Path, timed: bool) -> Iterator[QueueLog]:
    text = os.environ.get("TFLUX_BENCH_READ_DELTAS")
    deltas = int(text) if text else (3_000_000 if timed else 20_000)
    base = bench_root / "reads-deltas"
    yield build_queue_log(base, deltas, 64, removes=False, flush=timed)
    shutil.rmtree(base, ignore_errors=True)


def read_deltas_arrow(log: tflux.Log) -> int:
    start, end, n = log.start_index, log.last_index + 1, 0
    while start < end:
        table = log.read_deltas(start).to_arrow()
        start += table.num_rows
        n += table.num_rows
    return n


_ADD = struct.Struct(">qi")


def plain_decode(log: tflux.Log, end: int) -> int:
    """What a user without tflux's decoder writes: per record, struct-decode the AddRecord
    fields into one Python list per column."""
    lsns, kinds, queues, keys, messages = [], [], [], [], []
    start = 0
    while start < end:
        batch = log.read_batch(start, end)
        data, offsets, first = batch.data, batch.offsets.tolist(), start
        for i in range(len(batch)):
            rec = data[offsets[i] : offsets[i + 1]]
            lsns.append(first + i)
            kinds.append(rec[0:1])
            qlen = rec[1]
            queues.append(rec[2 : 2 + qlen].decode())
            key, mlen = _ADD.unpack_from(rec, 2 + qlen)
            keys.append(key)
            messages.append(rec[14 + qlen : 14 + qlen + mlen])
        start += len(batch)
    return len(lsns)


def test_deltas_read_deltas_arrow(benchmark, delta_log: QueueLog) -> None:
    benchmark.group = "deltas-64B"
    pytest.importorskip("pyarrow")
    with tflux.Log.open(delta_log.log_dir, readonly=True) as log:
        n = run(
            benchmark,
            read_deltas_arrow,
            log,
            label="Log.read_deltas loop + to_arrow() (12 decoded columns)",
            role="tflux",
            records=delta_log.deltas,
            bytes=delta_log.bytes,
        )
        first = log.read_deltas(1, 2).to_arrow().to_pylist()[0]
    assert n == delta_log.deltas
    assert first["kind"] == "add_record" and first["queue"] == QUEUE
    assert len(first["message"]) == 64


def test_deltas_read_batch_arrow(benchmark, delta_log: QueueLog) -> None:
    benchmark.group = "deltas-64B"
    with tflux.Log.open(delta_log.log_dir, readonly=True) as log:
        n = run(
            benchmark,
            read_arrow,
            log,
            label="Log.read_batch loop + to_arrow() (undecoded data, same log)",
            role="context",
            records=delta_log.deltas,
            bytes=delta_log.bytes,
        )
    assert n == delta_log.deltas


def test_deltas_plain_python_decode(benchmark, delta_log: QueueLog) -> None:
    benchmark.group = "deltas-64B"
    end = min(PLAIN_DELTAS, delta_log.deltas)
    with tflux.Log.open(delta_log.log_dir, readonly=True) as log:
        n = run(
            benchmark,
            plain_decode,
            log,
            end,
            label="pure Python decode to column lists (read_batch + struct, subset)",
            role="baseline",
            subset=1,
            records=end,
            bytes=0,
        )
    assert n == end


# --- random single records -------------------------------------------------------------------


def _random_lsns(data: LogData, timed: bool) -> list[int]:
    rng = random.Random(data.records)
    return [rng.randrange(data.records) for _ in range(RANDOM_READS if timed else 200)]


def test_random_read(benchmark, read_log: LogData, timed: bool) -> None:
    benchmark.group = f"random-{_size(read_log)}"
    lsns = _random_lsns(read_log, timed)
    with tflux.Log.open(read_log.path, readonly=True) as log:

        def read_each() -> int:
            read, n = log.read, 0
            for lsn in lsns:
                n += len(read(lsn, 1)[0].data)
            return n

        n = run(
            benchmark,
            read_each,
            label="Log.read(lsn, 1)",
            role="tflux",
            records=len(lsns),
            bytes=len(lsns) * read_log.payload,
        )
    assert n == len(lsns) * read_log.payload


def test_random_read_batch_of_one(benchmark, read_log: LogData, timed: bool) -> None:
    benchmark.group = f"random-{_size(read_log)}"
    lsns = _random_lsns(read_log, timed)
    with tflux.Log.open(read_log.path, readonly=True) as log:

        def read_each() -> int:
            read, n = log.read_batch, 0
            for lsn in lsns:
                n += read(lsn, lsn + 1).nbytes
            return n

        n = run(
            benchmark,
            read_each,
            label="Log.read_batch(lsn, lsn + 1)",
            role="tflux",
            records=len(lsns),
            bytes=len(lsns) * read_log.payload,
        )
    assert n == len(lsns) * read_log.payload


def test_random_pread_pure_python(benchmark, read_log: LogData, timed: bool) -> None:
    """The issue's baseline: every segment open, the record's offset computed (all records have
    one size), one ``os.pread`` of header + data, the marker and the CRC checked."""
    benchmark.group = f"random-{_size(read_log)}"
    lsns = _random_lsns(read_log, timed)
    size = record_size(read_log.payload)
    starts = [s.start_lsn for s in read_log.segments]
    fds = [os.open(s.path, os.O_RDONLY) for s in read_log.segments]
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
            label="pure Python os.pread + struct + zlib.crc32 (offsets known)",
            role="baseline",
            records=len(lsns),
            bytes=len(lsns) * read_log.payload,
        )
    finally:
        for fd in fds:
            os.close(fd)
    assert n == len(lsns) * read_log.payload
