"""Session fixtures of the benchmarks: the data directories, built once through tflux itself.

The size depends on whether the run is timed. The default ``pytest`` run has ``--benchmark-disable``
(pyproject addopts): every benchmark body then runs once as a smoke test, on a few MB of data.
With ``--benchmark-enable`` each payload size gets 1 GiB of segments (``TFLUX_BENCH_BYTES``
overrides both, e.g. ``TFLUX_BENCH_BYTES=256MiB``). Data lives under ``TFLUX_BENCH_DIR`` (default
the system temp directory) and is deleted at the end of the session.

The queue benchmarks (``bench_queue.py``) restore logs of 1M and ``TFLUX_BENCH_DELTAS`` deltas
(10M) with 64 B and 1 KiB messages (30,000 deltas each when not timed) and measure memory over
``TFLUX_BENCH_MEMORY_RECORDS`` queued records (10M when timed, 20,000 otherwise).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tflux

from benches.suite._benchdata import LogData, build_log
from benches.suite._queuedata import QueueLog, build_queue_log

FULL_BYTES = 1 << 30
SMOKE_BYTES = 2 << 20
FULL_DELTAS = 10_000_000
SMOKE_DELTAS = 30_000
FULL_MEMORY_RECORDS = 10_000_000
SMOKE_MEMORY_RECORDS = 20_000
QUEUE_PAYLOAD = 64


def parse_size(text: str) -> int:
    """``"1073741824"``, ``"256MiB"``, ``"1GiB"``, ``"2MB"`` -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*(|k|kb|kib|m|mb|mib|g|gb|gib)\s*", text.lower())
    if not m:
        raise pytest.UsageError(f"TFLUX_BENCH_BYTES: cannot parse {text!r} (try 256MiB)")
    unit = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m[2][:1]]
    if m[2] in ("kb", "mb", "gb"):
        unit = {"kb": 10**3, "mb": 10**6, "gb": 10**9}[m[2]]
    return int(m[1]) * unit


def is_timed(config: pytest.Config) -> bool:
    """True when pytest-benchmark will time the benchmarks (``--benchmark-enable`` wins)."""
    session = getattr(config, "_benchmarksession", None)
    if session is not None:
        return not session.disabled
    return not (config.getoption("benchmark_disable") and not config.getoption("benchmark_enable"))


@pytest.fixture(scope="session")
def timed(request: pytest.FixtureRequest) -> bool:
    return is_timed(request.config)


@pytest.fixture(scope="session")
def bench_bytes(timed: bool) -> int:
    """Bytes of segments per payload size."""
    override = os.environ.get("TFLUX_BENCH_BYTES")
    if override:
        return parse_size(override)
    return FULL_BYTES if timed else SMOKE_BYTES


@pytest.fixture(scope="session")
def bench_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="tflux-bench-", dir=os.environ.get("TFLUX_BENCH_DIR")))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


SCAN_PAYLOADS = [
    pytest.param(64, id="64B", marks=pytest.mark.benchmark(group="scan-64B")),
    pytest.param(1024, id="1KiB", marks=pytest.mark.benchmark(group="scan-1KiB")),
]


@pytest.fixture(scope="session", params=SCAN_PAYLOADS)
def scan_log(
    request: pytest.FixtureRequest, bench_root: Path, bench_bytes: int, timed: bool
) -> Iterator[LogData]:
    """A log of ``bench_bytes`` of one payload size; session-scoped and parametrized, so pytest
    runs every scan benchmark of one size before building the next (one data set at a time)."""
    payload = request.param
    path = bench_root / f"log-{payload}"
    started = time.perf_counter()
    data = build_log(path, payload, bench_bytes, flush=timed)
    built = time.perf_counter() - started
    print(
        f"\nbuilt {data.records} records of {payload} B in {len(data.segments)} segments "
        f"({data.bytes / 2**20:.1f} MiB) in {built:.1f} s",
        file=sys.stderr,
    )
    yield data
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def scan_bytes(scan_log: LogData) -> bytes:
    """The scanned bytes of every segment (header and records, no preallocated tail), concatenated:
    the input of the raw-CRC baselines."""
    parts = []
    for s in scan_log.segments:
        with open(s.path, "rb") as f:
            parts.append(f.read(s.size))
    return b"".join(parts)


def _count(name: str, timed: bool, full: int, smoke: int) -> int:
    text = os.environ.get(name)
    return int(text.replace("_", "")) if text else (full if timed else smoke)


# (deltas when timed: None = TFLUX_BENCH_DELTAS, payload); one data set at a time, like scan_log.
RESTORES = [
    pytest.param((1_000_000, 64), id="64B-1M"),
    pytest.param((None, 64), id="64B-10M"),
    pytest.param((1_000_000, 1024), id="1KiB-1M"),
    pytest.param((None, 1024), id="1KiB-10M"),
]


@pytest.fixture(scope="session", params=RESTORES)
def restore_log(
    request: pytest.FixtureRequest, bench_root: Path, timed: bool
) -> Iterator[QueueLog]:
    """A store's base directory whose log holds a CreateQueue, then Add, Add, Remove(front), ...
    of 64 B or 1 KiB messages: 1M or ``TFLUX_BENCH_DELTAS`` (10M) deltas in all."""
    deltas, payload = request.param
    if deltas is None:
        deltas = _count("TFLUX_BENCH_DELTAS", timed, FULL_DELTAS, SMOKE_DELTAS)
    elif not timed:
        deltas = SMOKE_DELTAS
    else:
        deltas = _count("TFLUX_BENCH_SMALL_DELTAS", True, deltas, deltas)
    size = "1KiB" if payload == 1024 else f"{payload}B"
    # Smoke runs keep the nominal names, so the groups are the same in both modes.
    nominal = _millions(deltas) if timed else ("1M" if request.param[0] else "10M")
    group = f"restore-{size}-{nominal}"
    base = bench_root / f"restore-{payload}-{deltas}"
    yield from _queue_log(base, deltas, removes=True, flush=timed, payload=payload, group=group)


def _millions(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n:,}"


@pytest.fixture(scope="session")
def memory_records(timed: bool) -> int:
    """Records queued by the memory benchmarks (``TFLUX_BENCH_MEMORY_RECORDS``)."""
    return _count("TFLUX_BENCH_MEMORY_RECORDS", timed, FULL_MEMORY_RECORDS, SMOKE_MEMORY_RECORDS)


@pytest.fixture(scope="session")
def memory_log(bench_root: Path, timed: bool, memory_records: int) -> Iterator[QueueLog]:
    """A store's base directory whose log holds a CreateQueue and then only Adds of 64 B
    messages: ``memory_records`` records queued after a restore."""
    yield from _queue_log(bench_root / "memory", memory_records + 1, removes=False, flush=timed)


def _queue_log(
    base: Path,
    deltas: int,
    removes: bool,
    flush: bool,
    payload: int = QUEUE_PAYLOAD,
    group: str = "",
) -> Iterator[QueueLog]:
    started = time.perf_counter()
    data = build_queue_log(base, deltas, payload, removes=removes, flush=flush)
    data = dataclasses.replace(data, group=group)
    print(
        f"\nbuilt {data.deltas} deltas ({data.adds} adds, {data.removes} removes) of "
        f"{payload} B messages ({data.bytes / 2**20:.1f} MiB) in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    yield data
    shutil.rmtree(base, ignore_errors=True)


# --- machine facts for the report ---------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return sorted(flags & {"pclmulqdq", "sse4_2", "avx2", "avx512f", "vpclmulqdq"})
    except OSError:
        pass
    return []


def _rustc() -> str:
    try:
        out = subprocess.run(["rustc", "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    override = os.environ.get("TFLUX_BENCH_BYTES")
    machine_info["tflux"] = {
        "version": tflux.__version__,
        "module": tflux._tflux.__file__,
        "sha256": hashlib.sha256(Path(tflux._tflux.__file__).read_bytes()).hexdigest()[:16],
        "bench_bytes": parse_size(override) if override else FULL_BYTES,
        "bench_deltas": _count("TFLUX_BENCH_DELTAS", True, FULL_DELTAS, SMOKE_DELTAS),
        "bench_memory_records": _count(
            "TFLUX_BENCH_MEMORY_RECORDS", True, FULL_MEMORY_RECORDS, SMOKE_MEMORY_RECORDS
        ),
        "disk": _disk(config),
        "mount_options": _mount_options(),
        "peers": _peer_versions(),
        "command": "python -m pytest " + shlex.join(config.invocation_params.args),
        "env": {k: v for k, v in os.environ.items() if k.startswith("TFLUX_BENCH")},
        "cpu_model": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "cpu_count": os.cpu_count(),
        "rustc": _rustc(),
        "loadavg_start": _LOAD_AT_START,
        "memory_total_kib": _meminfo_total(),
    }


def pytest_benchmark_update_json(
    config: pytest.Config, benchmarks: list, output_json: dict
) -> None:
    output_json["machine_info"].setdefault("tflux", {})["loadavg_end"] = _loadavg()


def _disk(config: pytest.Config) -> str:
    """The file system the data lives on (``df`` of the benchmark directory)."""
    where = os.environ.get("TFLUX_BENCH_DIR") or tempfile.gettempdir()
    try:
        out = subprocess.run(
            ["df", "--output=source,fstype", where], capture_output=True, text=True, timeout=10
        ).stdout.split()
        return f"{where} on {out[-2]} ({out[-1]})"
    except (OSError, subprocess.SubprocessError, IndexError):
        return where


def _mount_options() -> str:
    """The /proc/mounts line of the file system holding the benchmark directory."""
    where = Path(os.environ.get("TFLUX_BENCH_DIR") or tempfile.gettempdir()).resolve()
    best = ("", "")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, point, fstype, options, *_ = line.split()
            if (where == Path(point) or Path(point) in where.parents) and len(point) >= len(
                best[0]
            ):
                best = (point, f"{device} on {point} type {fstype} ({options})")
    except (OSError, ValueError):
        return "?"
    return best[1] or "?"


def _peer_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("persist-queue", "queuelib", "diskcache", "matplotlib"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def _meminfo_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


_LOAD_AT_START = _loadavg()
