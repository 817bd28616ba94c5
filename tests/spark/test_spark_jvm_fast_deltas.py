"""The JVM reader's short path for the common deltas (issue 45: ``Cursor.fastDelta``, taken
when a scan fills no column but ``queue_adds``, as replay's two scans): an AddRecord or
RemoveRecord of the queue named as the delta before. It must take only what the field-by-field
decoder reads without error, to the same values, and leave every other delta to it, so that a
pruned scan counts and fails exactly as a full one and as the Python source.
"""

from __future__ import annotations

import re
import struct

import _needs
import pytest
import tflux

_needs.pyspark()
import tflux.spark  # noqa: E402


@pytest.fixture(scope="module")
def jar(spark_jar):
    if spark_jar is None:
        _needs.missing("no JDK (javac and jar): the JVM reader is not built")
    return spark_jar


def q(name: bytes) -> bytes:
    return bytes([len(name)]) + name


def add(name: bytes, key: int, message: bytes) -> bytes:
    return b"A" + q(name) + struct.pack(">qi", key, len(message)) + message


def remove(name: bytes, record_id: int) -> bytes:
    return b"R" + q(name) + struct.pack(">Q", record_id)


def write(base, deltas: list[bytes]) -> str:
    with tflux.Log.open(base / "data" / "log") as log:
        log.append_many(1, deltas)
    return str(base)


def read(spark, fmt: str, path: str, *cols: str):
    """``cols`` of every entry in LSN order, or the failure's message."""
    df = spark.read.format(fmt).option("addCounts", "true").load(path)
    try:
        return [tuple(r) for r in df.select("lsn", *cols).orderBy("lsn").collect()], None
    except Exception as e:  # both readers fail through Spark's own exception types
        return None, str(e)


# Names of 0, 5, 8 (one long) and 9 bytes (longs and a tail), each followed by a delta that
# looks like the short path's but is not one it may take.
NAMES = [b"", b"bench", b"eightchr", b"ninechars"]
BAD = {
    "add, one trailing byte": lambda n: add(n, 1, b"m") + b"\x00",
    "add, message past the end": lambda n: add(n, 1, b"m")[:-1],
    "add, negative message length": lambda n: b"A" + q(n) + struct.pack(">qi", 1, -1),
    "add, no message length": lambda n: b"A" + q(n) + struct.pack(">q", 1),
    "remove, one trailing byte": lambda n: remove(n, 1) + b"\x00",
    "remove, short id": lambda n: remove(n, 1)[:-1],
    "name length past the end": lambda n: b"A" + bytes([len(n) + 30]) + n + b"\x00" * 12,
    "name byte outside '!'..'~'": lambda n: add(n + b" ", 1, b"m"),
}


@pytest.mark.parametrize("name", NAMES, ids=lambda n: f"name{len(n)}")
@pytest.mark.parametrize("what", sorted(BAD))
def test_a_bad_delta_after_one_of_its_queue_fails_as_the_full_scan_and_python(
    spark, jar, tmp_path, name, what
):
    good = [add(name, i, b"m%d" % i) for i in range(3)] + [remove(name, 1)]
    path = write(tmp_path / "b", [*good, BAD[what](name), add(name, 9, b"x")])
    lean = read(spark, "tflux", path, "queue_adds")  # the short path's scan
    full = read(spark, "tflux", path, "queue_adds", "kind", "queue", "key", "message")
    py = read(spark, "tflux_python", path, "queue_adds")
    assert lean[0] is None and full[0] is None and py[0] is None, (lean, full, py)
    # The JVM reader's message names the file offset of the bad field, the reason and its
    # offset in the delta; the Python source's names the delta and the same reason.
    said = re.search(r"corrupt (\S+) at offset (\d+): (undecodable delta at LSN 4: .*)", lean[1])
    assert said, lean[1]
    assert said[0] in full[1], (said[0], full[1])
    reason = re.sub(r" \(at offset \d+\)$", "", said[3])
    assert reason in py[1], (reason, py[1])


def test_a_record_id_past_int64_is_refused_as_by_the_full_scan(spark, jar, tmp_path):
    path = write(tmp_path / "big", [add(b"w", 1, b"m"), remove(b"w", 1 << 63)])
    lean = read(spark, "tflux", path, "queue_adds")
    full = read(spark, "tflux", path, "queue_adds", "record_id")
    assert lean[0] is None and full[0] is None
    said = "record id 9223372036854775808 at LSN 1 exceeds Int64"
    assert said in lean[1] and said in full[1], (lean[1], full[1])


def test_names_that_differ_from_the_one_before_are_counted_as_their_own(spark, jar, tmp_path):
    """Names of one length differing in one byte (first, last, past the eighth), a prefix of
    the name before, and runs of one name: each AddRecord counted in its own queue."""
    names = [b"aaaa", b"aaab", b"baaa", b"aaa", b"aaaa", b"aaaaaaaaa", b"aaaaaaaab", b"", b"a"]
    deltas = []
    for i in range(60):
        n = names[(i * 7) % len(names)] if i % 3 else names[i % len(names)]
        deltas.append(add(n, i, b"m") if i % 4 else remove(n, i))
        deltas.append(add(n, i, b"mm"))
    path = write(tmp_path / "names", deltas)
    lean, err = read(spark, "tflux", path, "queue_adds")
    full, ferr = read(spark, "tflux", path, "queue_adds", "queue", "kind")
    py, perr = read(spark, "tflux_python", path, "queue_adds", "queue", "kind")
    assert err is None and ferr is None and perr is None, (err, ferr, perr)
    assert full == py
    assert lean == [(lsn, adds) for lsn, adds, _, _ in full]
    assert max(adds for _, adds in lean) > 5
