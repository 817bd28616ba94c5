"""Shared fixtures and an independent encoder/decoder of log segments.

Everything here is written from docs/spec section 3 with ``struct`` and ``zlib.crc32`` only, so the
tests compare tflux against a second implementation of the format instead of against itself.
Nothing in this module calls tflux, except the fixture that switches the disk watermarks off
(``_no_disk_watermarks``), the owner in another process (``owner_elsewhere``) and the shared Spark
session fixtures at the end.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from _owner import owner_process

DATA_DIR = Path(__file__).parent / "data"

FILE_MARKER = bytes.fromhex("1276ad55")
VERSION = 1
HEADER = FILE_MARKER + struct.pack(">i", VERSION)
HEADER_SIZE = 8
RECORD_MARKER = bytes.fromhex("aaf534c4")
END_MARKER = bytes(4)
RECORD_HEADER_SIZE = 16

# Field offsets inside one record (spec 3: marker | term | crc | length | data | pad).
MARKER_AT = 0
TERM_AT = 4
CRC_AT = 8
LENGTH_AT = 12
DATA_AT = 16


def pad_len(n: int) -> int:
    """Zero bytes after N data bytes so that N + padding is a multiple of 4."""
    return -n % 4


def record_size(n: int) -> int:
    return RECORD_HEADER_SIZE + n + pad_len(n)


def encode_record(
    term: int,
    data: bytes,
    *,
    crc: int | None = None,
    length: int | None = None,
    marker: bytes = RECORD_MARKER,
    padding: bytes | None = None,
) -> bytes:
    """One record as the spec lays it out; keyword overrides build deliberately broken records."""
    crc = zlib.crc32(data) if crc is None else crc
    length = len(data) if length is None else length
    padding = bytes(pad_len(len(data))) if padding is None else padding
    return marker + struct.pack(">iIi", term, crc, length) + data + padding


def encode_segment(
    records: Iterable[tuple[int, bytes]],
    *,
    end_marker: bool = True,
    file_size: int | None = None,
) -> bytes:
    """Header, records, end marker, then zeros up to ``file_size`` (a preallocated file)."""
    buf = HEADER + b"".join(encode_record(t, d) for t, d in records)
    if end_marker:
        buf += END_MARKER
    if file_size is not None:
        assert file_size >= len(buf), "file_size too small for the records"
        buf += bytes(file_size - len(buf))
    return buf


def record_offsets(records: Sequence[tuple[int, bytes]]) -> list[int]:
    """Start offset of each record in a segment, plus the offset just past the last one."""
    offsets = [HEADER_SIZE]
    for _, data in records:
        offsets.append(offsets[-1] + record_size(len(data)))
    return offsets


def segment_size(records: Sequence[tuple[int, bytes]]) -> int:
    """The spec's segment *size*: the offset just past the last record."""
    return record_offsets(records)[-1]


def segment_name(lsn: int) -> str:
    return f"{lsn:019d}.log"


def write_segment(
    log_dir: Path,
    start_lsn: int,
    records: Sequence[tuple[int, bytes]],
    **kwargs,
) -> Path:
    path = log_dir / segment_name(start_lsn)
    path.write_bytes(encode_segment(records, **kwargs))
    return path


def segment_files(log_dir: Path) -> list[str]:
    """Names in ``log_dir`` that follow the segment naming rule, sorted."""
    return sorted(
        p.name
        for p in Path(log_dir).iterdir()
        if len(p.name) == 23 and p.name.endswith(".log") and p.name[:19].isdigit()
    )


def last_nonzero_end(buf: bytes, start: int) -> int:
    """Number of bytes from ``start`` up to and including the last non-zero byte of ``buf``."""
    stripped = buf[start:].rstrip(b"\x00")
    return len(stripped)


@dataclass
class ParsedSegment:
    records: list[tuple[int, bytes]]
    end: int  # offset just past the last record
    end_marker: bool  # False when the file ends exactly at ``end``
    tail: bytes  # everything after the end marker


def parse_segment(buf: bytes) -> ParsedSegment:
    """Strict reader for files tflux wrote: any deviation from the spec fails the test."""
    assert buf[:4] == FILE_MARKER, f"bad file marker {buf[:4].hex()}"
    assert buf[4:8] == struct.pack(">i", VERSION), f"bad version {buf[4:8].hex()}"
    pos = HEADER_SIZE
    records = []
    while True:
        if pos == len(buf):
            return ParsedSegment(records, pos, False, b"")
        word = buf[pos : pos + 4]
        if word == END_MARKER:
            return ParsedSegment(records, pos, True, buf[pos + 4 :])
        assert word == RECORD_MARKER, f"neither record nor end marker at {pos}: {word.hex()}"
        assert pos + RECORD_HEADER_SIZE <= len(buf), f"short record header at {pos}"
        term, crc, length = struct.unpack_from(">iIi", buf, pos + 4)
        assert 0 <= length <= len(buf) - pos - RECORD_HEADER_SIZE, f"bad length at {pos}"
        data = buf[pos + DATA_AT : pos + DATA_AT + length]
        assert zlib.crc32(data) == crc, f"bad checksum at {pos}"
        padding = buf[pos + DATA_AT + length : pos + record_size(length)]
        assert padding == bytes(pad_len(length)), f"bad padding at {pos}"
        records.append((term, data))
        pos += record_size(length)


def entry_tuples(entries) -> list[tuple[int, int, bytes]]:
    return [(e.lsn, e.term, e.data) for e in entries]


def load_manifest() -> dict:
    return json.loads((DATA_DIR / "manifest.json").read_text())


def manifest_records(name: str) -> list[tuple[int, int, bytes]]:
    return [
        (r["lsn"], r["term"], bytes.fromhex(r["data_hex"]))
        for r in load_manifest()[name]["records"]
    ]


@pytest.fixture
def base_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def log_dir(base_dir: Path) -> Path:
    """``<base>/data/log``, created and empty."""
    path = base_dir / "data" / "log"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def manifest() -> dict:
    return load_manifest()


@pytest.fixture
def copy_vector(log_dir: Path):
    """Copy a golden vector into the log directory under a segment name."""

    def copy(vector: str, start_lsn: int = 0) -> Path:
        dest = log_dir / segment_name(start_lsn)
        shutil.copyfile(DATA_DIR / vector, dest)
        return dest

    return copy


@pytest.fixture
def owner_elsewhere(tmp_path: Path):
    """A base whose owner is another process, with the queue "jobs" (its rule: to "jobs-dead"
    after 3 deliveries); yields ``(base, owner process)``."""
    base = tmp_path / "b"
    setup = 'store.create_queue("jobs", exist_ok=True, dead_letter=("jobs-dead", 3))'
    with owner_process(base, setup) as proc:
        yield base, proc


# The default disk watermarks (DiskFullRatio 0.95; a channel's clean 0.85, high 0.95) would apply
# to the tests' own stores and channels under the temp directory: on a host disk that full, writes
# are refused or collections start by themselves. `_no_disk_watermarks` switches them off for every
# test but those marked `disk_watermarks` (the tests of the watermarks and defaults), which the
# header below still warns about.
WATERMARK_CLEAN = 0.85


def host_disk_used_ratio(path: str) -> float:
    """The used ratio tflux measures (``df``'s Use%: used / (used + available))."""
    import os

    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = used + st.f_bavail * st.f_frsize
    return used / usable if usable > 0 else 0.0


@pytest.fixture(autouse=True)
def _no_disk_watermarks(request, monkeypatch):
    """The disk watermarks off for the test's stores and channels, and for those of the child
    processes it starts, unless it is marked ``disk_watermarks`` (tests/_watermarks.py)."""
    if request.node.get_closest_marker("disk_watermarks"):
        return
    import os

    import _watermarks

    try:
        _watermarks.switch_off(monkeypatch.setattr)
    except ImportError:
        return
    path = os.environ.get("PYTHONPATH")
    site = str(_watermarks.CHILD_SITE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([site, path]) if path else site)


def pytest_report_header(config):
    import tempfile

    where = tempfile.gettempdir()
    ratio = host_disk_used_ratio(where)
    if ratio >= WATERMARK_CLEAN:
        return (
            f"WARNING: the disk holding {where} is {ratio:.0%} full, at or above tflux's default "
            f"disk watermarks ({WATERMARK_CLEAN:.0%} clean, 95% refuse): the tests marked "
            "disk_watermarks (which keep them) will fail or behave differently; free space first"
        )
    return None


def pytest_collection_modifyitems(config, items):
    """Skip ``@pytest.mark.slow`` tests unless the run selects them (``-m slow``, as
    ``make reliability`` does) or ``TFLUX_SLOW=1`` is set: the default run stays short."""
    import os

    if "slow" in (config.getoption("markexpr") or "") or os.environ.get("TFLUX_SLOW"):
        return
    skip = pytest.mark.skip(reason="slow variant: run with -m slow or make reliability")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# --- Spark (one session and one jar build per test session, shared by the test_spark* files) -


@pytest.fixture(scope="session")
def spark_jar():
    """The JVM reader's jar, compiled once per test session; None without a JDK (a failure
    where ``TFLUX_REQUIRE_TOOLS`` says there is one). Where a JDK is found the jar must build:
    a javac error fails the tests instead of quietly handing them the Python sources."""
    import _needs

    _needs.pyspark()
    from tflux.spark import _jvm

    if _jvm._tool("javac") is None or _jvm._tool("jar") is None:
        if _needs.required():
            _needs.missing("no JDK (javac and jar): the JVM reader is not built")
        return None
    return _jvm.build_jar()


@pytest.fixture(scope="session")
def spark(spark_jar):
    """A ``local[2]`` session with the JVM reader's jar on its class path (when a JDK built it)
    and both tflux formats registered. Skipped where pyspark or Java is missing."""
    import os
    import sys

    import _needs

    _needs.pyspark()
    import tflux.spark
    from pyspark.sql import SparkSession

    # Workers import tflux.spark by module name: they must run this interpreter.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("tflux-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        # A Python worker that starts slowly on a loaded 2-core machine (imports pyspark and
        # tflux) must not fail the query: Spark's default wait for it to connect back is 15 s.
        .config("spark.python.authenticate.socketTimeout", "120s")
    )
    if spark_jar:
        builder = builder.config("spark.jars", spark_jar)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    tflux.spark.register(session)
    # The jar was given: a session that cannot load it would test the Python sources instead.
    assert spark_jar is None or tflux.spark.jvm_reader(session), f"{spark_jar} did not load"
    yield session
    session.stop()
