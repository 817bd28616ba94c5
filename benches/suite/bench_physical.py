"""The physical limits of this machine, measured in the same run as everything else (group
``physical``): what no storage engine on it can beat.

- ``tflux.crc32`` (crc32fast) over one buffer: the checksum ceiling of any verifying scan,
- a memory copy of the same bytes (``memoryview`` slice assignment: one ``memcpy``; a
  ``bytearray`` slice assignment would first copy a non-bytearray source into a temporary),
- an mmap read of the same bytes from a cached file (fresh map per round, page faults included,
  then one copy out of the mapping),
- sequential writes of 1 MiB followed by one ``os.fdatasync`` (the disk's streaming rate), and
- 4 KiB ``os.pwrite`` + ``os.fdatasync`` in a loop (the disk's sync rate: the ceiling of any
  durable one-record-per-call write).

Data lives under ``TFLUX_BENCH_DIR`` (default: the system temp directory), the file system the
durable benchmarks write to.
"""

from __future__ import annotations

import mmap
import os
import random
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest
import tflux

from benches.suite.bench_log import ROUNDS, run

TIMED_BYTES = 256 << 20
SMOKE_BYTES = 1 << 20
WRITE_CHUNK = 1 << 20
TIMED_WRITE_BYTES = 64 << 20
SYNC_WRITE = 4096
TIMED_SYNCS = 300

pytestmark = pytest.mark.benchmark(group="physical")


@pytest.fixture(scope="module")
def buffer(timed: bool) -> bytes:
    n = int(os.environ.get("TFLUX_BENCH_PHYSICAL_BYTES", TIMED_BYTES if timed else SMOKE_BYTES))
    return os.urandom(n)  # random.randbytes stops at 256 MiB (its bit count is a C int)


@pytest.fixture(scope="module")
def buffer_file(bench_root: Path, buffer: bytes) -> Iterator[Path]:
    path = bench_root / "physical.bin"
    path.write_bytes(buffer)
    yield path
    path.unlink()


def test_crc32fast_over_a_buffer(benchmark, buffer: bytes) -> None:
    crc = run(
        benchmark,
        tflux.crc32,
        buffer,
        label="tflux.crc32 (crc32fast) over one buffer",
        role="limit",
        records=len(buffer) // 4096,
        bytes=len(buffer),
    )
    assert crc == tflux.crc32(buffer)


def test_memcpy_of_the_same_bytes(benchmark, buffer: bytes) -> None:
    dst = bytearray(len(buffer))
    out, src = memoryview(dst), memoryview(buffer)

    def copy() -> int:
        out[:] = src
        return len(dst)

    n = run(
        benchmark,
        copy,
        label="memory copy (memoryview slice assignment, memcpy)",
        role="limit",
        records=len(buffer) // 4096,
        bytes=len(buffer),
    )
    assert n == len(buffer) and dst[-64:] == buffer[-64:]


def test_mmap_read_of_the_same_bytes(benchmark, buffer: bytes, buffer_file: Path) -> None:
    dst = bytearray(len(buffer))
    out = memoryview(dst)

    def read_mapped() -> int:
        with open(buffer_file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            out[:] = view
            view.release()
            return len(m)

    n = run(
        benchmark,
        read_mapped,
        label="mmap of the cached file + one copy out (page faults included)",
        role="limit",
        records=len(buffer) // 4096,
        bytes=len(buffer),
    )
    assert n == len(buffer) and dst[:64] == buffer[:64]


def test_sequential_write_then_fdatasync(benchmark, bench_root: Path, timed: bool) -> None:
    total = int(os.environ.get("TFLUX_BENCH_WRITE_BYTES", TIMED_WRITE_BYTES)) if timed else 4 << 20
    chunk = random.Random(2).randbytes(WRITE_CHUNK)
    fresh = count()

    def setup():
        path = bench_root / f"seq-{next(fresh)}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        return (fd, path), {}

    def write_all(fd: int, path: Path) -> int:
        for _ in range(total // WRITE_CHUNK):
            os.write(fd, chunk)
        os.fdatasync(fd)
        os.close(fd)
        return path.stat().st_size

    def teardown(fd: int, path: Path) -> None:
        path.unlink()

    benchmark.extra_info.update(
        label=f"sequential os.write of 1 MiB x {total >> 20}, then one os.fdatasync (new file)",
        role="limit",
        records=total // WRITE_CHUNK,
        bytes=total,
    )
    size = benchmark.pedantic(
        write_all, setup=setup, teardown=teardown, rounds=ROUNDS, warmup_rounds=1, iterations=1
    )
    assert size == total
    for p in bench_root.glob("seq-*"):  # --benchmark-disable: no teardown
        p.unlink()


def test_small_write_fdatasync_rate(benchmark, bench_root: Path, timed: bool) -> None:
    calls = TIMED_SYNCS if timed else 3
    block = random.Random(3).randbytes(SYNC_WRITE)
    fresh = count()
    fds: set[int] = set()

    def setup():
        # Pre-filled with zeros and synced, so each sync is data-only (as tflux's preallocated
        # segments).
        path = bench_root / f"sync-{next(fresh)}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, bytes(calls * SYNC_WRITE))
        os.fsync(fd)
        fds.add(fd)
        return (fd, path), {}

    def write_sync(fd: int, path: Path) -> int:
        for i in range(calls):
            os.pwrite(fd, block, i * SYNC_WRITE)
            os.fdatasync(fd)
        return calls

    def teardown(fd: int, path: Path) -> None:
        fds.discard(fd)
        os.close(fd)
        path.unlink()

    benchmark.extra_info.update(
        label=f"os.pwrite of {SYNC_WRITE} B + os.fdatasync, per call (pre-zeroed file)",
        role="limit",
        records=calls,
        bytes=calls * SYNC_WRITE,
        calls=calls,
    )
    n = benchmark.pedantic(
        write_sync, setup=setup, teardown=teardown, rounds=ROUNDS, warmup_rounds=1, iterations=1
    )
    assert n == calls
    for fd in fds:  # --benchmark-disable runs the body once without the teardown
        os.close(fd)
    for p in bench_root.glob("sync-*"):
        p.unlink()
