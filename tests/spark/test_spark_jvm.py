"""The JVM reader (``format("tflux")`` / ``format("tflux_snapshot")`` with the jar on the class
path) against truth: the golden vectors (through ``io.tflux.spark.Dump``, no Spark needed), and
the Rust-backed Python sources over random logs and damaged files (every column of every row,
and the same failures). Also the jar build and the no-JDK path.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import _needs
import pytest
import tflux
from conftest import (
    DATA_DIR,
    encode_segment,
    load_manifest,
    manifest_records,
    record_offsets,
    segment_files,
)

_needs.pyspark()
import tflux.spark  # noqa: E402
from tflux.spark import _jvm  # noqa: E402


def dump(jar: str, *args: str, heap: str | None = None) -> tuple[list[dict], str | None]:
    """Runs the JVM decoders on a file (in a heap of ``heap``, e.g. "256m", when given);
    returns the rows and the error message (or None)."""
    cp = os.pathsep.join([jar, str(_jvm._spark_home() / "jars" / "*")])
    java = shutil.which("java") or str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    opts = [f"-Xmx{heap}"] if heap else []
    out = subprocess.run(
        [java, *opts, "-cp", cp, "io.tflux.spark.Dump", *args], capture_output=True, text=True
    )
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    error = lines.pop()["error"] if out.returncode and lines and "error" in lines[-1] else None
    assert (out.returncode != 0) == (error is not None), out.stderr
    return lines, error


@pytest.fixture(scope="module")
def jar(spark_jar):
    """The jar (``spark_jar`` fails where a JDK cannot build it); skipped only without a JDK."""
    if spark_jar is None:
        _needs.missing("no JDK (javac and jar): the JVM reader is not built")
    return spark_jar


# --- golden vectors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["0000000000000000000.log", "preallocated_4096.log", "torn_tail.log", "bad_crc_tail.log"],
)
def test_segment_vectors_read_as_the_manifest_says(jar, name):
    want = [(r[0], r[1], r[2].hex()) for r in manifest_records(name)]
    rows, error = dump(jar, "segment", str(DATA_DIR / name), "0", "last")
    assert error is None
    assert [(r["lsn"], r["term"], r["data"]) for r in rows] == want
    sealed, error = dump(jar, "segment", str(DATA_DIR / name), "0", "sealed")
    info = load_manifest()[name]
    bad = info.get("cut_at_offset", info.get("bad_record_offset"))
    if bad is None:
        assert error is None and sealed == rows
    else:  # in a sealed segment the torn or bad record is corruption at its offset
        assert f"at offset {bad}" in error and name in error
        assert sealed == rows


def test_every_split_of_a_sealed_segment_reads_the_same_records(jar):
    path = DATA_DIR / "0000000000000000000.log"
    whole, _ = dump(jar, "segment", str(path), "0", "sealed")
    size = path.stat().st_size
    for cuts in ([20], [100, 104], [9, 157, 1196, 1197], list(range(50, size, 97))):
        rows, error = dump(jar, "segment", str(path), "0", "sealed", *map(str, cuts))
        assert error is None and rows == whole, cuts


def test_delta_vectors_decode_to_their_fields(jar):
    deltas = {k: d for k, d in json.loads((DATA_DIR / "deltas.json").read_text()).items()}
    deltas.pop("what", None)
    kinds = {"C": "create_queue", "D": "delete_queue", "A": "add_record", "R": "remove_record"}
    rows, error = dump(jar, "delta", *(d["hex"] for d in deltas.values()))
    assert error is None and len(rows) == len(deltas)  # one JVM for every vector
    for (name, d), row in zip(deltas.items(), rows, strict=True):
        if d["kind"] == "R" and d["record_id"] >= 2**63:
            assert "exceeds Int64" in row["error"]  # Spark has no UInt64 (as the core's columns)
            continue
        assert "error" not in row, name
        assert row["kind"] == kinds[d["kind"]] and row["queue"] == d["queue"]
        assert row["key"] == d.get("key") and row["record_id"] == d.get("record_id")
        assert row["message"] == d.get("message_hex")
        assert row["implementation"] == d.get("implementation")
        rng = d.get("key_range") or [None, None]
        assert [row["key_min"], row["key_max"]] == rng


def test_snapshot_vector_reads_as_the_manifest_says(jar):
    rows, error = dump(jar, "snapshot", str(DATA_DIR / "tflux.snapshot"))
    assert error is None
    assert rows[0] == {"last_index": 41, "last_term": 3}
    got = [
        (r["queue"], r["implementation"], r["record_id"], r["key"], r["message"]) for r in rows[1:]
    ]
    assert got == [
        ("", 1, 2, 10, "62"), ("", 1, 3, 10, "63"),
        ("jobs", 2, 4, 9, ""), ("jobs", 2, 7, 0, "7878787878"),
    ]  # fmt: skip


def test_absurd_lengths_fail_with_the_file_and_offset_without_allocating(jar, tmp_path):
    # A record whose length field claims 2 GiB, and a delta whose message length does.
    seg = tmp_path / "0000000000000000000.log"
    good = b"A\x01q" + struct.pack(">qi", 1, 3) + b"abc"
    liar = b"A\x01q" + struct.pack(">qi", 1, 0x7FFFFFF0) + b"abc"
    seg.write_bytes(encode_segment([(1, good), (1, liar)]))
    rows, error = dump(jar, "segment", str(seg), "0", "sealed")
    assert error is None and len(rows) == 2
    buf = bytearray(seg.read_bytes())
    second = record_offsets([(1, good), (1, liar)])[1]
    buf[second + 12 : second + 16] = struct.pack(">i", 0x7FFFFFF0)
    seg.write_bytes(bytes(buf))
    _, error = dump(jar, "segment", str(seg), "0", "sealed")
    assert str(seg) in error and f"at offset {second}" in error and "runs past end" in error


def test_a_decompression_bomb_fails_the_read_not_the_jvm(jar, tmp_path):
    """Issue 30, item 4: a 60 KB `.log.z` declaring (and decoding to) 1.9 GB was decoded into
    a growing array until OutOfMemoryError killed the Spark driver. Now the header's length is
    checked against the JVM's free memory before decoding (and a failed allocation would be
    the file's error too); one declaring more than the format allows is refused as the core
    refuses it."""
    from test_hostile_input import z_header, zeros_zstd

    seg = tmp_path / "0000000000000000000.log.z"
    total = 1811 << 20  # 1.9 GB of zeros: about 60 KB of zstd
    seg.write_bytes(z_header(total) + zeros_zstd(total))
    assert seg.stat().st_size < 1 << 20
    rows, error = dump(jar, "segment", str(seg), "0", "sealed", heap="256m")
    assert rows == [] and error is not None
    assert str(seg) in error and "at offset 25" in error and "free" in error, error
    seg.write_bytes(z_header(3 << 30) + zeros_zstd(1 << 20))
    rows, error = dump(jar, "segment", str(seg), "0", "sealed", heap="256m")
    assert error is not None and "original length 3221225472" in error, error
    assert "outside [12, 2147483648]" in error, error


# --- the JVM reader against the Python (Rust-backed) source --------------------------------


def random_delta(rng: random.Random) -> bytes:
    name = "".join(rng.choice("abcxyz!~:") for _ in range(rng.choice([0, 1, 3, 12])))
    q = bytes([len(name)]) + name.encode()
    kind = rng.choice("CDAAAAR")
    if kind == "C":
        tail = b"\x00" if rng.random() < 0.5 else b"\x01" + struct.pack(">qq", -(2**63), 2**63 - 1)
        return b"C" + q + struct.pack(">iii", rng.choice([1, 2, 7]), rng.randint(-1, 9), -1) + tail
    if kind == "D":
        return b"D" + q
    if kind == "A":
        msg = rng.randbytes(rng.choice([0, 1, 2, 3, 5, 64, 300, 2000]))
        return b"A" + q + struct.pack(">qi", rng.randint(-(2**63), 2**63 - 1), len(msg)) + msg
    return b"R" + q + struct.pack(">Q", rng.randint(0, 2**63 - 1))


def random_log(base: Path, seed: int, count: int) -> None:
    rng = random.Random(seed)
    log_dir = base / "data" / "log"
    with tflux.Log.open(
        log_dir, soft_limit=rng.choice([4, 16, 64]) << 10, hard_limit=1 << 20
    ) as log:
        term, done = 1, 0
        while done < count:
            n = rng.randint(1, 200)
            term += rng.random() < 0.2
            first = log.append_many(term, [random_delta(rng) for _ in range(n)])
            log.commit(first + n - 1)
            done += n


def rows(df) -> list[tuple]:
    return [tuple(r) for r in df.orderBy("lsn").collect()]


def both(spark, path: str, formats=("tflux", "tflux_python"), **options):
    """The same read through the JVM reader and the Python source."""
    out = []
    for fmt in formats:
        reader = spark.read.format(fmt)
        for k, v in options.items():
            reader = reader.option(k, v)
        out.append(reader.load(path))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_column_of_every_row_equals_the_python_source(spark, jar, tmp_path, seed):
    assert tflux.spark.jvm_reader(spark)
    base = tmp_path / f"random{seed}"
    random_log(base, seed, 2000)
    split = random.Random(seed).choice(["4k", "9000", "64k"])
    jvm, py = both(spark, str(base), rawData="true", splitBytes=split)
    got, want = rows(jvm), rows(py)
    assert len(want) >= 2000 and got == want
    assert jvm.rdd.getNumPartitions() >= 2
    # Pruned and filtered reads (Spark pushes the LSN range into the JVM scan).
    lo, hi = 500, 1500
    for cols in (["message", "kind"], ["segment", "record_id", "key_max"]):
        a = jvm.filter(f"lsn >= {lo} and lsn < {hi}").select("lsn", *cols)
        b = py.filter(f"lsn >= {lo} and lsn < {hi}").select("lsn", *cols)
        assert rows(a) == rows(b) and len(rows(a)) == hi - lo
    jvm, py = both(spark, str(base), fromLsn="123", toLsn="1822", columns="term,lsn,kind")
    assert jvm.columns == py.columns == ["lsn", "term", "kind"]
    assert rows(jvm) == rows(py)
    assert jvm.count() == py.count() == 1700


def counted_adds(data_rows: list[tuple]) -> list[int]:
    """``queue_adds`` computed here from (lsn, segment, data) rows: per segment file, the
    AddRecords of each queue name so far in LSN order (decoded with struct, not by tflux)."""
    counts: dict[tuple[str, bytes], int] = {}
    out = []
    for _, segment, data in sorted(data_rows):
        name = data[2 : 2 + data[1]]
        if data[:1] == b"A":
            counts[(segment, name)] = counts.get((segment, name), 0) + 1
        out.append(counts.get((segment, name), 0))
    return out


@pytest.mark.parametrize(
    ("fmt", "split", "from_lsn"),
    [
        ("tflux", "4k", 0),
        ("tflux", "64k", 700),
        ("tflux_python", None, 0),
        ("tflux_python", None, 700),
    ],
)
def test_add_counts_option_counts_each_queues_adds_within_its_segment(
    spark, jar, tmp_path, fmt, split, from_lsn
):
    base = tmp_path / "counts"
    random_log(base, 5, 3000)
    reader = spark.read.format(fmt).option("addCounts", "true").option("fromLsn", str(from_lsn))
    if split:
        reader = reader.option("splitBytes", split)
    df = reader.option("rawData", "true").load(str(base))
    assert df.columns[-1] == "queue_adds"
    if split == "4k":
        assert df.rdd.getNumPartitions() > len(segment_files(base / "data" / "log"))
    got = df.select("lsn", "segment", "data", "queue_adds").orderBy("lsn").collect()
    assert len(got) >= 2300 and got[0].lsn == from_lsn
    want = counted_adds([(r.lsn, r.segment, bytes(r.data)) for r in got])
    assert [r.queue_adds for r in got] == want
    assert max(want) > 50  # busy queues spread over several splits
    # Pruned to a few columns, the counts do not change.
    pruned = reader.load(str(base)).select("lsn", "queue_adds").orderBy("lsn").collect()
    assert [r.queue_adds for r in pruned] == want


def marker_log(base: Path, count: int) -> Path:
    """One active segment of ``count`` deltas (no sealed one) whose messages are full of the
    record marker at every alignment, over a busy queue and two others."""
    rng = random.Random(count)
    marker = bytes.fromhex("AAF534C4")
    with tflux.Log.open(base / "data" / "log", soft_limit=16 << 20) as log:
        deltas = []
        for _ in range(count):
            name = rng.choice([b"busy"] * 6 + [b"a", b"bc"])
            msg = rng.randbytes(rng.randint(0, 3)) + marker * rng.randint(0, 12)
            deltas.append(b"A" + bytes([len(name)]) + name + struct.pack(">qi", 7, len(msg)) + msg)
        log.append_many(1, deltas)
    (segment,) = segment_files(base / "data" / "log")
    return base / "data" / "log" / segment


def test_the_active_segment_splits_at_checked_record_starts(spark, jar, tmp_path):
    """The active segment is cut into byte ranges (it was one task) at record starts the
    driver's checked walk reached: the rows and queue_adds equal the unsplit read's, whatever
    the split size, although every message holds the record marker."""
    base = tmp_path / "active"
    marker_log(base, 4000)

    def read(split: str):
        return (
            spark.read.format("tflux")
            .option("rawData", "true")
            .option("addCounts", "true")
            .option("splitBytes", split)
            .load(str(base))
        )

    whole = read("1g")
    assert whole.rdd.getNumPartitions() == 1
    want = rows(whole)
    assert len(want) == 4000
    adds = counted_adds([(r.lsn, r.segment, bytes(r.data)) for r in whole.collect()])
    assert [r[-1] for r in want] == adds and max(adds) > 2000
    for split in ("64", "1000", "4k", "50000"):
        df = read(split)
        assert df.rdd.getNumPartitions() > 1, split
        assert rows(df) == want, split


@pytest.mark.parametrize("how", ["crc", "cut", "header"])
def test_a_torn_active_segment_split_ends_where_the_core_says(spark, jar, tmp_path, how):
    """A torn record inside the active segment ends its data for every split (no task past it
    returns the records behind it), as the core's reader says."""
    base = tmp_path / how
    seg = marker_log(base, 3000)
    buf = bytearray(seg.read_bytes())
    offsets = record_offsets_of(buf)
    bad = offsets[len(offsets) * 2 // 3]
    if how == "crc":
        buf[bad + 20] ^= 0x01  # a data byte: the CRC no longer matches
    elif how == "header":
        buf[bad : bad + 4] = b"\x00\x01\x02\x03"  # a bad record marker
    else:
        buf = buf[: bad + 10]  # a write cut inside a header
    seg.write_bytes(bytes(buf))
    want = list(tflux.read_segment_deltas(seg, last=True).to_arrow().column("lsn").to_pylist())
    assert want == list(range(offsets.index(bad)))
    for split in ("64", "2k", "1g"):
        jvm, py = both(spark, str(base), rawData="true", splitBytes=split)
        got = rows(jvm)
        assert [r[jvm.columns.index("lsn")] for r in got] == want, split
        assert got == rows(py), split


def record_offsets_of(buf: bytes) -> list[int]:
    """Record start offsets of a segment's bytes, walking the frames (spec 3) here."""
    out, at = [], 8
    while at + 16 <= len(buf) and buf[at : at + 4] == bytes.fromhex("AAF534C4"):
        out.append(at)
        n = struct.unpack(">i", buf[at + 12 : at + 16])[0]
        at += 16 + n + (-n % 4)
    return out


def test_lsn_filters_are_pushed_into_the_scan(spark, jar, tmp_path):
    base = tmp_path / "pushdown"
    random_log(base, 9, 1000)
    df = spark.read.format("tflux").load(str(base)).filter("lsn > 10 and lsn <= 20").select("lsn")
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "lsn 11..20" in plan
    assert [r.lsn for r in df.collect()] == list(range(11, 21))


def spark_filter(plan: str) -> bool:
    """Whether a physical plan's text has a Filter node (Spark evaluating a filter per row)."""
    return any(" Filter " in line for line in plan.splitlines())


def test_kind_and_inc_filters_are_applied_in_the_scan(spark, jar, tmp_path):
    """``kind = NAME`` (and ``kind IS NOT NULL``) are applied by the reader, not by Spark on
    every row (issue 45): the plan has no Filter, the rows are the Python source's, and a
    count reads the records instead of taking sealed segments from their names."""
    base = tmp_path / "kinds"
    random_log(base, 8, 1500)
    py = spark.read.format("tflux_python").option("rawData", "true").load(str(base))
    jvm = spark.read.format("tflux").option("rawData", "true").option("splitBytes", "4k")
    for kind, shown in [
        ("add_record", "add_record"),
        ("remove_record", "remove_record"),
        ("create_queue", "create_queue"),
        ("no_such_kind", "none"),
    ]:
        df = jvm.load(str(base)).filter(f"kind = '{kind}'")
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert f"filtered: kind {shown}" in plan and not spark_filter(plan), plan
        want = rows(py.filter(f"kind = '{kind}'"))
        assert rows(df) == want, kind
        assert df.count() == len(want) and (kind == "no_such_kind") == (not want), kind
    # Other filters on kind are Spark's, as before.
    df = jvm.load(str(base)).filter("kind != 'add_record'")
    assert spark_filter(df._jdf.queryExecution().executedPlan().toString())
    assert rows(df) == rows(py.filter("kind != 'add_record'"))


def test_a_stream_filtered_on_kind_has_that_kind_only(spark, jar, tmp_path):
    """A stream is the Python source's (``toMicroBatchStream``), which applies no filter of the
    JVM scan's: Spark must still filter ``kind`` there (should a Spark push filters into
    streaming scans, this fails instead of returning every kind)."""
    base = tmp_path / "stream"
    with tflux.open(base) as store:
        store.create_queue("j")
        store.enqueue_many("j", [(1, b"x")] * 5)
        store.ack(store.dequeue("j"))
    query = (
        spark.readStream.format("tflux")
        .load(str(base))
        .filter("kind = 'add_record'")
        .select("lsn", "kind")
        .writeStream.format("memory")
        .queryName("kinds_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    got = sorted(tuple(r) for r in spark.sql("select * from kinds_stream").collect())
    assert got == [(lsn, "add_record") for lsn in range(1, 6)]


def test_replay_filters_its_live_records_in_the_scan(spark, jar, tmp_path):
    """Replay's live records (the adds of the final incarnations) come from the scan with no
    Filter of Spark's: ``kind`` and ``inc IN (...)`` are the reader's."""
    base = tmp_path / "store"
    with tflux.open(base) as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(i % 3, b"m%d" % i) for i in range(30)])
        for _ in range(7):
            store.ack(store.dequeue("jobs"))
        store.delete_queue("jobs")
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(1, b"again")] * 4)
    df = tflux.spark.replay(spark, str(base))
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "filtered: kind add_record, inc in" in plan and not spark_filter(plan), plan
    with tflux.open(base, readonly=True) as store:
        want = {
            (q.name, r.id, r.key, r.payload) for q in store.queues() for r in store.records(q.name)
        }
    got = {(r.queue, r.record_id, r.key, bytes(r.message)) for r in df.collect()}
    assert got == want and len(got) == 4


def test_queue_adds_after_a_dead_letter_queue_name_counts_that_queue(spark, jar, tmp_path):
    """A QueueRules delta names a second queue (its dead letter queue): the next AddRecord of
    that queue is counted as that queue's (the reader skips comparing a name that repeats the
    one before, but a delta with two names is not one name repeated)."""
    q = lambda name: bytes([len(name)]) + name  # noqa: E731
    rules = b"\x01\x01" + q(b"dl") + struct.pack(">i", 3) + b"\x00" * 4
    deltas = []
    for i in range(40):
        deltas.append(b"A" + q(b"work") + struct.pack(">qi", i, 1) + b"w")
        deltas.append(b"Q" + q(b"work") + rules)
        deltas.append(b"A" + q(b"dl") + struct.pack(">qi", i, 1) + b"d")
        deltas.append(b"R" + q(b"dl") + struct.pack(">Q", i + 1))
    base = tmp_path / "rules"
    with tflux.Log.open(base / "data" / "log") as log:
        log.append_many(1, deltas)
    for fmt in ("tflux", "tflux_python"):
        df = spark.read.format(fmt).option("addCounts", "true").option("rawData", "true")
        got = df.load(str(base)).select("lsn", "segment", "data", "queue_adds").collect()
        want = counted_adds([(r.lsn, r.segment, bytes(r.data)) for r in got])
        assert [r.queue_adds for r in sorted(got)] == want and max(want) == 40, fmt


def test_a_count_takes_sealed_segments_from_their_names_and_reads_only_the_active_one(
    spark, jar, tmp_path
):
    base = tmp_path / "counted"
    random_log(base, 21, 3000)
    log_dir = base / "data" / "log"
    names = segment_files(log_dir)
    assert len(names) >= 3
    total = len(rows(spark.read.format("tflux_python").load(str(base)).select("lsn")))
    df = spark.read.format("tflux").load(str(base))
    assert df.count() == total
    # One record's data flipped in a sealed segment: the count does not read it (as Parquet
    # counts from footers), every query that reads records fails, and verify=true checks first.
    first = log_dir / names[0]
    buf = bytearray(first.read_bytes())
    buf[8 + 16] ^= 0x40
    first.write_bytes(bytes(buf))
    assert spark.read.format("tflux").load(str(base)).count() == total
    with pytest.raises(Exception, match="checksum mismatch"):
        spark.read.format("tflux").load(str(base)).select("lsn").collect()
    with pytest.raises(Exception, match="checksum mismatch"):
        spark.read.format("tflux").option("verify", "true").load(str(base)).count()
    # The LSN range narrows the names' counts as it narrows a read.
    lo, hi = 7, total - 5
    ranged = spark.read.format("tflux").option("fromLsn", lo).option("toLsn", hi)
    assert ranged.load(str(base)).count() == hi - lo + 1


def test_partitions_come_in_whole_waves_of_the_cores(spark, jar, tmp_path):
    """8 small segments, each costing ~4 MiB to open (Spark's openCostInBytes): a 9m split
    packs 3 + 3 + 2, which on local[2] leaves one core idle in the last wave; the reader packs
    2 + 2 + 2 + 2 instead. Every split reads the same rows."""
    base = tmp_path / "waves"
    random_log(base, 5, 3000)
    assert len(segment_files(base / "data" / "log")) == 8
    assert spark.sparkContext.defaultParallelism == 2

    def read(split: str):
        return spark.read.format("tflux").option("rawData", "true").option("splitBytes", split)

    want = rows(read("1g").load(str(base)))
    for split, parts in (("5m", 4), ("9m", 4), ("13m", 2), ("1g", 1)):
        df = read(split).load(str(base))
        assert df.rdd.getNumPartitions() == parts, split
        assert rows(df) == want, split


def test_replay_scans_take_two_partitions_per_core_unless_the_session_caps_them(
    spark, jar, tmp_path
):
    """Issue 45: replay's scans (option ``summary`` or ``replayPlan``) are cut into two
    partitions per core, not by Spark's 128 MB cap (each task costs a plan to deserialize and a
    bitmap row to fold; the reader streams whatever a partition's size). A session that sets
    ``spark.sql.files.maxPartitionBytes`` gets Spark's rule, as every other scan does."""
    base = tmp_path / "replay-split"
    random_log(base, 5, 3000)
    log_dir = str(base / "data" / "log")
    assert len(segment_files(log_dir)) == 8
    cores = spark.sparkContext.defaultParallelism
    assert cores == 2

    def parts(summary: bool) -> int:
        reader = spark.read.format("tflux").option("rawData", "true")
        if summary:
            reader = spark.read.format("tflux").option("summary", "true")
        return reader.load(log_dir).rdd.getNumPartitions()

    assert parts(summary=True) == 2 * cores
    assert parts(summary=False) == cores  # Spark's rule: (data + 8 x 4 MB to open) / 2 cores
    spark.conf.set("spark.sql.files.maxPartitionBytes", "1k")
    try:
        assert parts(summary=True) >= 8  # Spark's rule: at least a partition per segment
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


@pytest.mark.parametrize("split", ["2k", "64k"])
def test_the_summary_option_gives_the_rows_replay_aggregates_from_every_entry(
    spark, jar, tmp_path, split
):
    """Replay's first step through the JVM reader (a few rows per segment and split) equals
    the same step aggregated from every entry by Spark, here on random logs of every delta kind
    (creates and deletes are events), read from an LSN past the start."""
    from tflux.spark import rebuild

    base = tmp_path / f"summary-{split}"
    random_log(base, 31, 3000)
    log_dir = str(base / "data" / "log")
    cols = ["source", "segment", "queue", "lsn", "kind", "implementation", "queue_adds"]
    spark.conf.set("spark.sql.files.maxPartitionBytes", split)
    try:
        for first in (0, 777):
            logs = [(log_dir, first)]
            entries = rebuild.union(spark, logs, {}, cols, "tflux_python")
            # Less the Python step's ``task`` column (the first task-queue delta, which it
            # refuses): the JVM summary scan refuses such a delta where it meets it.
            want = rebuild._Frames._summarize(entries).drop("task").collect()
            got = rebuild.summaries(spark, logs).collect()
            assert sorted(map(tuple, got), key=repr) == sorted(map(tuple, want), key=repr)
            assert any(r.ev_kind == "delete_queue" for r in got)
            assert sum(r.removes for r in got) > 0
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")


def damage(base: Path, rng: random.Random) -> str:
    """One random byte flip or cut in a random segment; returns what was done."""
    log_dir = base / "data" / "log"
    names = segment_files(log_dir)
    name = rng.choice(names)
    path = log_dir / name
    buf = bytearray(path.read_bytes())
    end = len(buf.rstrip(b"\x00")) or 8
    if rng.random() < 0.2:
        at = rng.randrange(0, end)
        path.write_bytes(bytes(buf[:at]))
        return f"cut {name} at {at}"
    at = rng.randrange(0, end)
    buf[at] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(buf))
    return f"flip {name} at {at}"


def outcome(df):
    try:
        return (rows(df) if "lsn" in df.columns else df.collect()), None
    except Exception as e:  # both readers fail through Spark's own exception types
        return None, str(e)


@pytest.mark.parametrize("seed", range(6))
def test_damaged_logs_fail_or_read_exactly_as_the_python_source(spark, jar, tmp_path, seed):
    base = tmp_path / f"damaged{seed}"
    random_log(base, 100 + seed, 800)
    what = damage(base, random.Random(seed))
    jvm, py = both(spark, str(base), rawData="true", splitBytes="2k")
    (got, jerr), (want, perr) = outcome(jvm), outcome(py)
    assert (jerr is None) == (perr is None), (what, jerr, perr)
    assert got == want, what
    if jerr is not None:
        assert "tflux" in jerr and "corrupt" in jerr.lower(), what
        where = [w for w in perr.split() if w.endswith(".log")]
        assert any(w.rstrip(":") in jerr for w in where), (what, jerr, perr)


def test_snapshot_source_equals_the_python_source(spark, jar, tmp_path):
    base = tmp_path / "snap"
    rng = random.Random(5)
    with tflux.open(base) as store:
        store.create_queue("jobs", implementation="array", key_range=(-3, 3))
        for i in range(3000):
            q = rng.choice(["", "jobs"])
            store.enqueue(q, rng.randint(-3, 3), rng.randbytes(rng.randint(0, 50)))
            if i % 7 == 0:
                rec = store.dequeue(q, timeout=0)
                if rec is not None and i % 2:
                    store.ack(rec)
        store.snapshot()
    snap = base / "data" / "tflux.snapshot"
    formats = ("tflux_snapshot", "tflux_snapshot_python")
    jvm, py = both(spark, str(snap), formats)
    key = ["queue", "record_id"]
    got, want = jvm.orderBy(key).collect(), py.orderBy(key).collect()
    assert jvm.columns == py.columns and len(want) > 1000 and got == want
    assert jvm.select("key").orderBy("key").collect() == py.select("key").orderBy("key").collect()
    buf = bytearray(snap.read_bytes())
    for at in (0, 5, 20, len(buf) - 2, len(buf) // 2):
        bad = bytearray(buf)
        bad[at] ^= 0x40
        snap.write_bytes(bytes(bad))
        jvm, py = both(spark, str(snap), formats)
        (got, jerr), (want, perr) = outcome(jvm.orderBy(key)), outcome(py.orderBy(key))
        assert (jerr is None) == (perr is None) and got == want, at
        # The narrow header's index and term are not covered by the CRC (spec 4).
        assert jerr is not None or at == 5
        assert jerr is None or str(snap) in jerr, jerr
    snap.write_bytes(bytes(buf))


def snapshot_store(base, seed: int, n: int = 3000):
    rng = random.Random(seed)
    with tflux.open(base) as store:
        store.create_queue("jobs", implementation="array", key_range=(-3, 3))
        for i in range(n):
            q = rng.choice(["", "jobs", "more"]) if i > n // 3 else rng.choice(["", "jobs"])
            if i == n // 3:
                store.create_queue("more")
            store.enqueue(q, rng.randint(-3, 3), rng.randbytes(rng.randint(0, 50)))
            if i % 7 == 0:
                rec = store.dequeue(q, timeout=0)
                if rec is not None and i % 2:
                    store.ack(rec)
        store.snapshot()
    return base / "data" / "tflux.snapshot"


def test_a_snapshot_split_by_bytes_reads_every_record_once_in_several_tasks(spark, jar, tmp_path):
    """A big snapshot is several partitions (one task used to read it all): every record
    once, the same rows in the same order as unsplit, whatever the split size."""
    snap = snapshot_store(tmp_path / "snap", 8)
    whole = spark.read.format("tflux_snapshot").option("splitBytes", "1g").load(str(snap))
    assert whole.rdd.getNumPartitions() == 1
    want = whole.collect()
    assert len(want) > 1000
    size = snap.stat().st_size
    for split in (64, 1000, 4096, size // 3):
        df = spark.read.format("tflux_snapshot").option("splitBytes", str(split)).load(str(snap))
        assert df.rdd.getNumPartitions() > 1
        assert df.collect() == want, split
        pruned = df.select("queue", "record_id").collect()
        assert pruned == [(r.queue, r.record_id) for r in want], split


def hand_snapshot(queues: list[tuple[str, list[tuple[int, int, bytes]]]]) -> bytes:
    """A narrow snapshot (spec 4) of heap queues holding (id, key, data) records in the order
    given, written here with struct."""
    state = struct.pack(">i", len(queues))
    for name, records in queues:
        last = max((i for i, _, _ in records), default=0)
        state += bytes([len(name)]) + name.encode() + struct.pack(">iqiib", 1, last, -1, -1, 0)
        state += struct.pack(">i", len(records))
        for rid, key, data in records:
            state += struct.pack(">qqi", rid, key, len(data)) + data
    body = struct.pack(">ii", 7, 1) + struct.pack(">i", len(state)) + state
    return bytes.fromhex("B6380FC9") + body + struct.pack(">I", zlib.crc32(state))


def test_split_snapshot_reads_records_stored_in_or_out_of_id_order(spark, jar, tmp_path):
    """A split task finds its records by binary search over a queue stored in id order (as
    stores write it) and by a walk over one stored out of order (sorted when decoded): every
    record once, as the core reads it, for every split size (in id order when unsplit)."""
    rng = random.Random(3)
    ordered = [(i, rng.randint(0, 9), rng.randbytes(rng.randint(0, 40))) for i in range(1, 400)]
    shuffled = [(i, rng.randint(0, 9), rng.randbytes(rng.randint(0, 40))) for i in range(1, 300)]
    rng.shuffle(shuffled)
    snap = tmp_path / "hand.snapshot"
    snap.write_bytes(hand_snapshot([("", ordered), ("mix", shuffled), ("none", [])]))
    want = sorted(
        [("", i, k, m) for i, k, m in ordered] + [("mix", i, k, m) for i, k, m in shuffled]
    )
    py = spark.read.format("tflux_snapshot_python").load(str(snap))
    assert sorted((r.queue, r.record_id, r.key, bytes(r.message)) for r in py.collect()) == want
    for split in (64, 500, 3000, 1 << 30):
        df = spark.read.format("tflux_snapshot").option("splitBytes", str(split)).load(str(snap))
        got = [(r.queue, r.record_id, r.key, bytes(r.message)) for r in df.collect()]
        # One task lists a queue in id order; the tasks of a split split it by data offset.
        assert (got if split == 1 << 30 else sorted(got)) == want, split
        assert df.filter(df.queue == "mix").count() == len(shuffled), split


def test_a_snapshot_replaced_between_reads_is_read_again(spark, jar, tmp_path):
    """The decoded snapshot a JVM keeps for its tasks is the file's: a snapshot replaced (by
    a rename, as a store writes it) or damaged is decoded again."""
    snap = snapshot_store(tmp_path / "a", 1)
    other = snapshot_store(tmp_path / "b", 2)
    reader = spark.read.format("tflux_snapshot").option("splitBytes", "2k")

    def read(path):
        return reader.load(str(path)).drop("source").orderBy("queue", "record_id").collect()

    before = read(snap)
    assert before == read(snap)
    want = read(other)
    assert want != before
    moved = tmp_path / "a" / "data" / "temp" / "next.snapshot"
    shutil.copyfile(other, moved)
    os.replace(moved, snap)
    assert read(snap) == want
    buf = bytearray(snap.read_bytes())
    buf[len(buf) // 2] ^= 0x40
    snap.write_bytes(bytes(buf))
    with pytest.raises(Exception, match="checksum mismatch"):
        reader.load(str(snap)).collect()


# --- build and fallbacks -------------------------------------------------------------------


def test_jar_is_cached_by_source_hash(jar):
    assert Path(jar).is_file() and _jvm.cache_key() in Path(jar).name
    assert tflux.spark.build_jar() == jar  # no rebuild


def test_the_jar_sources_are_package_data_that_build_jar_compiles():
    """A pip install must carry the Java sources (``build_jar`` compiles them from the
    package): they are found through importlib.resources, every class the service file
    registers and every class the sources name is among them, and the wheel's build takes the
    package directory whole (no maturin ``exclude``, no ignore rule for them)."""
    import importlib.resources
    import tomllib

    root = importlib.resources.files("tflux.spark").joinpath("jvm")
    java = {
        p.name
        for p in Path(str(root)).rglob("*.java")
        if p.relative_to(Path(str(root))).parts[:3] == ("io", "tflux", "spark")
    }
    assert {p.name for p in _jvm._source_files() if p.suffix == ".java"} == java
    service = root.joinpath("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister")
    registered = [line.strip() for line in service.read_text().splitlines() if line.strip()]
    assert registered and all(c.rsplit(".", 1)[1] + ".java" in java for c in registered)
    assert _jvm.PROVIDER.rsplit(".", 1)[1] + ".java" in java
    repo = Path(__file__).resolve().parents[2]
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    maturin = pyproject["tool"]["maturin"]
    assert maturin["python-source"] == "python" and "exclude" not in maturin
    ignored = (repo / ".gitignore").read_text().split()
    assert not any(p in ignored for p in ("*.java", "jvm", "jvm/", "META-INF", "META-INF/"))


def test_without_a_jdk_tflux_installs_and_the_python_sources_serve(tmp_path):
    code = textwrap.dedent(
        """
        import tflux.spark, tflux.spark._jvm as j
        j.SHIPPED = j.SHIPPED.with_name("absent.jar")  # as a source checkout: no jar shipped
        print(tflux.spark.jar_path())
        try:
            j.build_jar()
        except j.JarBuildError as e:
            print("refused", "JDK" in str(e))
        class DS:
            names = []
            def register(self, cls):
                self.names.append(cls.name())
        class FakeSession:  # no JVM gateway: the JVM reader cannot be loaded
            dataSource = DS()
            sparkContext = None
        tflux.spark.register(FakeSession())
        print(",".join(DS.names))
        """
    )
    env = dict(os.environ, TFLUX_JAVAC="no-such-javac", TFLUX_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "None",
        "refused",
        "True",
        "tflux_python,tflux_snapshot_python,tflux,tflux_snapshot",
    ]
    assert not list(tmp_path.rglob("*.jar"))


def preferred_hosts(spark, df) -> list[set[str]]:
    """Per partition of ``df``'s scan, the hosts the scheduler prefers."""
    jvm = spark.sparkContext._jvm
    rdd = df._jdf.queryExecution().toRdd()
    sc = spark.sparkContext._jsc.sc()
    conv = jvm.scala.jdk.javaapi.CollectionConverters
    return [
        {str(loc.host()) for loc in conv.asJava(sc.getPreferredLocs(rdd, i))}
        for i in range(len(rdd.partitions()))
    ]


def test_locations_make_each_sources_partitions_prefer_its_host(spark, jar, tmp_path):
    nodes = [tmp_path / "n0", tmp_path / "n1"]
    for i, base in enumerate(nodes):
        random_log(base, 20 + i, 600)
    locations = f"{nodes[0]}=hostA,{nodes[1]}=hostB"
    paths = ",".join(map(str, nodes))
    df = spark.read.format("tflux").option("locations", locations).load(paths)
    hosts = preferred_hosts(spark, df)
    assert {"hostA"} in hosts and {"hostB"} in hosts and all(len(h) == 1 for h in hosts)
    plain = spark.read.format("tflux").load(paths)
    assert all(h == set() for h in preferred_hosts(spark, plain))
    assert rows(df.select("source", "lsn", "message")) == rows(
        plain.select("source", "lsn", "message")
    )


def test_a_base_the_driver_cannot_see_is_read_by_a_task_on_its_host(spark, jar, tmp_path):
    # Local mode has one host, so "elsewhere" is simulated with a path that exists nowhere:
    # planning accepts it (one partition for the base, preferring its host) and the task that
    # runs where it is missing fails instead of returning nothing.
    missing = tmp_path / "on-another-node"
    df = spark.read.format("tflux").option("locations", f"{missing}=hostC").load(str(missing))
    assert preferred_hosts(spark, df) == [{"hostC"}]
    with pytest.raises(Exception, match="does not exist on"):
        df.count()
    snap = spark.read.format("tflux_snapshot").option("locations", f"{missing}=hostC")
    with pytest.raises(Exception, match="does not exist on"):
        snap.load(str(missing)).count()


@pytest.mark.parametrize("method", ["zstd", "lz4"])
def test_compressed_segments_read_as_the_python_source_reads_them(spark, jar, tmp_path, method):
    pytest.importorskip("zstandard")
    pytest.importorskip("lz4.frame")
    from test_compressed import compress_by_hand, encode_z

    base = tmp_path / f"z-{method}"
    random_log(base, 40, 1500)
    log_dir = base / "data" / "log"
    made = compress_by_hand(log_dir, method, keep_plain=method == "lz4")  # both files: .z wins
    assert len(made) >= 2
    jvm, py = both(spark, str(base), rawData="true", splitBytes="4k")
    assert rows(jvm) == rows(py) and len(rows(jvm)) >= 1500
    assert {r.segment for r in jvm.select("segment").collect()} >= {z.name for z in made}
    # A damaged payload or a header that lies: corruption naming the .log.z file.
    victim = made[0]
    good = victim.read_bytes()
    first = int(victim.name[:19])
    for bad in (
        good[:40] + bytes([good[40] ^ 0xFF]) + good[41:],
        encode_z(method, first, first, b""),
    ):
        victim.write_bytes(bad)
        with pytest.raises(Exception, match=victim.name):
            spark.read.format("tflux").load(str(base)).select("lsn").collect()
        # A count takes sealed segments from their names (docs/format.md); verify reads them.
        with pytest.raises(Exception, match=victim.name):
            spark.read.format("tflux").option("verify", "true").load(str(base)).count()
    victim.write_bytes(good)
