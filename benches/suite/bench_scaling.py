"""How tflux scales: restore time and memory against log size, scan rate against record size.

Group ``scaling-restore``: a log of Add, Add, Remove(front) deltas with 64 B messages (the
restore logs' pattern) at 1M, 4M and 16M deltas (``TFLUX_BENCH_SCALING_DELTAS``, e.g.
``1M,4M``), restored by ``tflux.open`` in a fresh child process per round (``_memchild.py``), which
reports the restore's own time and ``/proc/self/status`` before and after (``VmHWM``: the peak).

Group ``scan-size``: logs of ``TFLUX_BENCH_SCAN_SIZE_BYTES`` (256 MiB) of records of 16 B .. 64 KiB,
each scanned by ``tflux.verify`` and by ``Log.read_batch`` in a loop, beside ``tflux.crc32``
(crc32fast) over the same bytes as one buffer.

Every body asserts what it computed, so the default (``--benchmark-disable``) run is a smoke test.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tflux

from benches.suite._benchdata import LogData, build_log
from benches.suite._queuedata import QueueLog, build_queue_log
from benches.suite.bench_log import read_all, run
from benches.suite.bench_queue import memchild, memory_figures
from benches.suite.conftest import parse_size

SCALING_DELTAS = [1_000_000, 4_000_000, 16_000_000]
SMOKE_SCALING = [3_000, 6_000, 12_000]
SCAN_SIZES = [16, 64, 256, 1024, 4096, 16384, 65536]
TIMED_SCAN_BYTES = 256 << 20
SMOKE_SCAN_BYTES = 256 << 10


def _scaling_deltas(timed: bool) -> list[int]:
    text = os.environ.get("TFLUX_BENCH_SCALING_DELTAS")
    if not text:
        return SCALING_DELTAS if timed else SMOKE_SCALING
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        out.append(int(float(part[:-1]) * 1_000_000) if part.endswith("M") else int(part))
    return out


@pytest.fixture(scope="session", params=range(len(SCALING_DELTAS)), ids=["1M", "4M", "16M"])
def scaling_log(
    request: pytest.FixtureRequest, bench_root: Path, timed: bool
) -> Iterator[QueueLog]:
    sizes = _scaling_deltas(timed)
    if request.param >= len(sizes):
        pytest.skip(f"TFLUX_BENCH_SCALING_DELTAS={os.environ.get('TFLUX_BENCH_SCALING_DELTAS')}")
    deltas = sizes[request.param]
    base = bench_root / f"scaling-{deltas}"
    started = time.perf_counter()
    data = build_queue_log(base, deltas, 64, removes=True, flush=timed)
    print(
        f"\nbuilt {deltas} deltas ({data.bytes / 2**20:.1f} MiB) in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    yield data
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.benchmark(group="scaling-restore")
def test_restore_time_and_memory_against_log_size(benchmark, scaling_log: QueueLog) -> None:
    results: list[dict] = []

    def child() -> dict:
        r = memchild("restore", os.fspath(scaling_log.base))
        results.append(r)
        return r

    rounds = 3 if scaling_log.deltas <= 4_000_000 else 2
    benchmark.extra_info.update(
        label=f"child: tflux.open(base), {scaling_log.deltas:,} deltas",
        role="tflux",
        records=scaling_log.deltas,
        bytes=scaling_log.bytes,
        live=scaling_log.live,
        payload=scaling_log.payload,
        deltas=scaling_log.deltas,
    )
    r = benchmark.pedantic(child, rounds=rounds, iterations=1)
    assert r["replayed"] == scaling_log.deltas
    assert r["queues"][scaling_log.queue] == [scaling_log.live, scaling_log.adds]
    figures = memory_figures(results, scaling_log.live, scaling_log.payload)
    figures["restore_seconds"] = figures.pop("child_fill_seconds")
    figures["hwm_growth_bytes"] = sorted(
        (x["after"]["VmHWM"] - x["before"]["VmHWM"]) * 1024 for x in results
    )[len(results) // 2]
    benchmark.extra_info.update(figures)


# --- scan rate against record size ---------------------------------------------------------------


def _size_id(n: int) -> str:
    return f"{n >> 10}KiB" if n >= 1024 else f"{n}B"


@pytest.fixture(scope="session", params=SCAN_SIZES, ids=[_size_id(n) for n in SCAN_SIZES])
def sized_log(request: pytest.FixtureRequest, bench_root: Path, timed: bool) -> Iterator[LogData]:
    payload = request.param
    override = os.environ.get("TFLUX_BENCH_SCAN_SIZE_BYTES")
    total = parse_size(override) if override else TIMED_SCAN_BYTES if timed else SMOKE_SCAN_BYTES
    path = bench_root / f"sized-{payload}"
    data = build_log(path, payload, total, flush=timed)
    yield data
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def sized_bytes(sized_log: LogData) -> bytes:
    parts = []
    for s in sized_log.segments:
        with open(s.path, "rb") as f:
            parts.append(f.read(s.size))
    return b"".join(parts)


def _info(data: LogData, label: str, role: str) -> dict:
    return {
        "label": label,
        "role": role,
        "payload": data.payload,
        "records": data.records,
        "bytes": data.bytes,
    }


@pytest.mark.benchmark(group="scan-size")
def test_verify_against_record_size(benchmark, sized_log: LogData) -> None:
    report = run(benchmark, tflux.verify, sized_log.path, **_info(sized_log, "verify", "tflux"))
    assert report.ok and report.records == sized_log.records


@pytest.mark.benchmark(group="scan-size")
def test_read_batch_against_record_size(benchmark, sized_log: LogData) -> None:
    with tflux.Log.open(sized_log.path, readonly=True) as log:
        entries, nbytes = run(
            benchmark, read_all, log, None, **_info(sized_log, "read_batch loop", "tflux")
        )
    assert entries == sized_log.records and nbytes == sized_log.records * sized_log.payload


@pytest.mark.benchmark(group="scan-size")
def test_crc32fast_against_record_size(benchmark, sized_log: LogData, sized_bytes) -> None:
    crc = run(
        benchmark, tflux.crc32, sized_bytes, **_info(sized_log, "crc32fast, one buffer", "limit")
    )
    assert len(sized_bytes) == sized_log.bytes and crc == tflux.crc32(sized_bytes)
