"""Issue 11: restore at the speed of the scan. Rows added to the ``restore-*`` groups (same logs
as ``bench_queue.py``: CreateQueue, then Add, Add, Remove(front), ...), side by side:

- ``tflux.open(base, readonly=True)`` on every core and with ``TFLUX_THREADS=1`` (one core),
- ``tflux.verify`` of the same log directory, every core and one core: the scan restore is
  judged against,
- ``tflux.crc32`` (crc32fast) over the same segment bytes, one stream: the CRC ceiling,
- the plain-Python restore of ``benches/suite/pyfile_replay.py`` (reads the files itself: ``struct``
  + ``zlib.crc32`` + ``heapq``) on the leading deltas, normalised per delta by the report.

Group ``restore-scaling-64B`` restores 1M/4M/16M-delta logs (``TFLUX_BENCH_SCALING``) in a
fresh child process per round (``_memchild.py``) and keeps time and ``/proc/self/status``
memory (peak, anonymous, file-backed) in ``extra_info``, with the anonymous peak sampled during
the open (``_memchild.AnonPeak``).

``python -m benches.report --restore .benchmarks/restore.json`` renders these groups into
docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tflux

from benches.suite import pyfile_replay
from benches.suite._queuedata import QueueLog
from benches.suite.bench_log import run
from benches.suite.bench_queue import check_front, check_queues, restore_rounds
from benches.suite.conftest import _queue_log

PLAIN_DELTAS = int(os.environ.get("TFLUX_BENCH_PLAIN_DELTAS", "300000"))
MEMCHILD = Path(__file__).with_name("_memchild.py")
SCALING = [
    int(n.replace("_", ""))
    for n in os.environ.get("TFLUX_BENCH_SCALING", "1000000,4000000,16000000").split(",")
]


def one_core(f: Callable) -> Callable:
    """``f`` with ``TFLUX_THREADS=1`` set for the call (the core reads it per scan)."""

    def wrapped(*args):
        os.environ["TFLUX_THREADS"] = "1"
        try:
            return f(*args)
        finally:
            del os.environ["TFLUX_THREADS"]

    return wrapped


def info(data: QueueLog, label: str, role: str, **more) -> dict:
    return dict(
        label=label,
        role=role,
        payload=data.payload,
        records=data.deltas,
        bytes=data.bytes,
        live=data.live,
        **more,
    )


def restore(base: Path) -> tuple[list[tflux.QueueInfo], tflux.Record | None, int]:
    with tflux.open(base, readonly=True) as store:
        queues = store.queues()
        return queues, store.peek("bench"), store.replayed  # read-only: peek, not dequeue


@pytest.mark.parametrize("cores", ["all", "one"])
def test_restore_readonly(benchmark, restore_log: QueueLog, cores: str) -> None:
    benchmark.group = restore_log.group
    target = restore if cores == "all" else one_core(restore)
    label = f"tflux.open(base, readonly=True), {cores} core{'s' if cores == 'all' else ''}"
    benchmark.extra_info.update(info(restore_log, label, "tflux", cores=cores))
    queues, front, replayed = benchmark.pedantic(
        target,
        args=(restore_log.base,),
        rounds=restore_rounds(restore_log),
        warmup_rounds=1,
        iterations=1,
    )
    assert replayed == restore_log.deltas
    check_queues(queues, restore_log)
    assert front is not None
    check_front(front, restore_log)


@pytest.mark.parametrize("cores", ["all", "one"])
def test_verify_same_log(benchmark, restore_log: QueueLog, cores: str) -> None:
    benchmark.group = restore_log.group
    target = tflux.verify if cores == "all" else one_core(tflux.verify)
    label = f"tflux.verify(log dir), {cores} core{'s' if cores == 'all' else ''}"
    report = run(
        benchmark,
        target,
        str(restore_log.log_dir),
        rounds=restore_rounds(restore_log),
        **info(restore_log, label, "scan", cores=cores),
    )
    assert report.ok and report.records == restore_log.deltas


@pytest.fixture(scope="module")
def segment_bytes(restore_log: QueueLog) -> Iterator[list[bytes]]:
    """Each segment's bytes up to its end of data (what verify reads), read once."""
    with tflux.Log.open(restore_log.log_dir, readonly=True) as log:
        sizes = [(s.path, s.size) for s in log.segments]
    parts = []
    for path, size in sizes:
        with open(path, "rb") as f:
            parts.append(f.read(size))
    yield parts


def test_crc32fast_single_stream(
    benchmark, restore_log: QueueLog, segment_bytes: list[bytes]
) -> None:
    benchmark.group = restore_log.group
    crc = tflux.crc32

    def all_segments() -> int:
        return sum(crc(b) for b in segment_bytes)

    run(
        benchmark,
        all_segments,
        rounds=restore_rounds(restore_log),
        **info(restore_log, "tflux.crc32 (crc32fast) over the same bytes, one stream", "crc"),
    )
    assert sum(len(b) for b in segment_bytes) == restore_log.bytes


def test_plain_python_restore(benchmark, restore_log: QueueLog) -> None:
    benchmark.group = restore_log.group
    end = min(PLAIN_DELTAS, restore_log.deltas)
    more = {"subset": end} if end < restore_log.deltas else {}
    label = "plain Python restore (reads the files: struct + zlib.crc32 + heapq)"
    queues, done = run(
        benchmark,
        pyfile_replay.replay,
        restore_log.log_dir,
        end,
        rounds=3,
        **{**info(restore_log, label, "plain"), "records": end, **more},
    )
    assert done == end
    q = queues[restore_log.queue.encode()]
    adds = (end - 1) - (end - 1) // 3
    assert q.last_id == adds and len(q.alive) == adds - (end - 1) // 3


# --- scaling: time and memory against the log's length ---------------------------------------


@pytest.fixture(scope="module", params=SCALING, ids=lambda n: f"{n // 1_000_000}M")
def scaling_log(request, bench_root: Path, timed: bool) -> Iterator[QueueLog]:
    n = request.param if timed else 30_001
    yield from _queue_log(bench_root / f"scaling-{n}", n, removes=True, flush=timed)


def test_restore_scaling(benchmark, scaling_log: QueueLog) -> None:
    benchmark.group = "restore-scaling-64B"
    seen: list[dict] = []

    def child() -> None:
        out = subprocess.run(
            [sys.executable, str(MEMCHILD), "restore", str(scaling_log.base)],
            check=True,
            capture_output=True,
            text=True,
        )
        seen.append(json.loads(out.stdout))

    benchmark.extra_info.update(info(scaling_log, "tflux.open(base) in a child", "tflux"))
    benchmark.pedantic(child, rounds=3, warmup_rounds=0, iterations=1)
    best = min(seen, key=lambda r: r["seconds"])
    kib = 1024
    benchmark.extra_info.update(
        seconds=best["seconds"],
        hwm_growth_bytes=(best["after"]["VmHWM"] - best["before"]["VmRSS"]) * kib,
        anon_growth_bytes=(best["after"]["RssAnon"] - best["before"]["RssAnon"]) * kib,
        file_after_bytes=best["after"]["RssFile"] * kib,
        # Sampled while the open ran (``_memchild.AnonPeak``): a lower bound of the peak, so
        # the largest of the rounds, not the fastest round's.
        anon_peak_growth_bytes=max(r["anon_peak_kb"] - r["anon_start_kb"] for r in seen) * kib,
        anon_samples=min(r["anon_samples"] for r in seen),
        anon_sample_seconds=best["anon_sample_seconds"],
    )
    if scaling_log.deltas >= 1_000_000:  # a smoke run's restore may end before one sample
        assert all(r["anon_samples"] > 0 for r in seen), "the sampler never ran: GIL held?"
    counts = best["queues"][scaling_log.queue]
    assert counts == [scaling_log.live, scaling_log.adds]
