"""The taskflux dialect (spec section 11) through Spark: the JVM reader (its own framing and
CRC-32/MPEG-2, held to the shared vectors of ``tests/data/taskflux`` through
``io.tflux.spark.Dump``) and both Spark readers (JVM and Rust-backed Python) over TaskFlux's own
directories, held to their JSON, and over what tflux writes in the taskflux dialect.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import _needs
import pytest
import tflux
from test_spark_jvm import dump
from test_taskflux_dialect import FIXTURES, entries_expected, expected, queues_of, real_dir

_needs.pyspark()
import tflux.spark  # noqa: E402

VECTORS = Path(__file__).resolve().parents[1] / "data" / "taskflux"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())


@pytest.fixture(scope="module")
def jar(spark_jar):
    if spark_jar is None:
        _needs.missing("no JDK (javac and jar): the JVM reader is not built")
    return spark_jar


def vector_records(name: str) -> list[tuple[int, int, str]]:
    return [(r["lsn"], r["term"], r["data_hex"]) for r in MANIFEST[name]["records"]]


@pytest.mark.parametrize(
    "name",
    [
        "0000000000000000000.log",
        "large_term.log",
        "torn_tail.log",
        "bad_crc_tail.log",
        "after_taskflux_repair.log",
    ],
)
def test_the_jvm_reader_reads_each_taskflux_vector_as_the_manifest_says(jar, name):
    rows, error = dump(jar, "segment", str(VECTORS / name), "0", "last")
    assert error is None
    assert [(r["lsn"], r["term"], r["data"]) for r in rows] == vector_records(name)
    sealed, error = dump(jar, "segment", str(VECTORS / name), "0", "sealed")
    info = MANIFEST[name]
    bad = info.get("cut_at_offset", info.get("bad_record_offset"))
    if bad is None:
        assert error is None and sealed == rows
    else:
        assert f"at offset {bad}" in error, error
        assert sealed == rows


def test_every_split_of_a_taskflux_segment_reads_the_same_records(jar):
    path = VECTORS / "0000000000000000000.log"
    whole, _ = dump(jar, "segment", str(path), "0", "sealed")
    size = path.stat().st_size
    for cuts in ([20], [9, 57, 1100], list(range(30, size, 91))):
        rows, error = dump(jar, "segment", str(path), "0", "sealed", *map(str, cuts))
        assert error is None and rows == whole, cuts


def test_the_jvm_crc32_mpeg2_equals_the_cores(jar):
    rng = random.Random(11)
    inputs = [b"123456789", b"", b"hello"] + [rng.randbytes(n) for n in range(0, 70, 3)]
    rows, error = dump(jar, "crc32-mpeg2", *(x.hex() or "" for x in inputs[:2]), "68656c6c6f")
    assert error is None
    crc = MANIFEST["crc"]
    assert [r["crc"] for r in rows] == [crc["123456789"], crc["empty"], crc["hello"]]
    rows, error = dump(jar, "crc32-mpeg2", *(x.hex() for x in inputs[3:]))
    assert [r["crc"] for r in rows] == [f"{tflux.crc32_mpeg2(x):08x}" for x in inputs[3:]]


def test_the_jvm_reader_reads_the_taskflux_snapshot_vector(jar):
    rows, error = dump(jar, "snapshot", str(VECTORS / "tflux.snapshot"))
    spec_rows, _ = dump(jar, "snapshot", str(VECTORS.parent / "tflux.snapshot"))
    assert error is None and rows == spec_rows and rows[0] == {"last_index": 41, "last_term": 3}


def read_log(spark, fmt: str, path: Path, **options):
    reader = spark.read.format(fmt).option("rawData", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    rows = reader.load(str(path)).select("lsn", "term", "data").orderBy("lsn").collect()
    return [(r.lsn, r.term, bytes(r.data).hex()) for r in rows]


@pytest.mark.parametrize("fmt", ["tflux", "tflux_python"])
@pytest.mark.parametrize("name", FIXTURES)
def test_both_spark_readers_read_every_real_directory_as_its_json_says(spark, fmt, name, tmp_path):
    base = real_dir(name, tmp_path)
    doc = expected(name)
    assert read_log(spark, fmt, base) == entries_expected(doc)
    snap_fmt = "tflux_snapshot" if fmt == "tflux" else "tflux_snapshot_python"
    snap = spark.read.format(snap_fmt).load(str(base)).collect()
    want = sorted(
        (q["name"], r["id"], r["key"], r["payload_hex"])
        for q in doc["queues"]
        for r in q["records"]
    )
    if doc["snapshot"] is None:
        assert snap == []
    else:
        assert {r.last_index for r in snap} <= {doc["snapshot"]["last_index"]}
        if name == "snapshot-ahead-of-log":  # the snapshot is the whole state
            got = sorted((r.queue, r.record_id, r.key, bytes(r.message).hex()) for r in snap)
            assert got == want


@pytest.mark.parametrize("name", ["follower-segmented", "snapshot-compacted"])
def test_spark_replay_of_a_real_directory_equals_its_restore(spark, name, tmp_path):
    base = real_dir(name, tmp_path)
    with tflux.open(base, readonly=True) as store:
        local = queues_of(store)
    for dialect in (None, "taskflux"):
        df = tflux.spark.replay(spark, str(base), dialect=dialect)
        got: dict[str, list] = {}
        for r in df.collect():
            got.setdefault(r.queue, []).append((r.record_id, r.key, bytes(r.message).hex()))
        for queue, q in local.items():
            assert sorted(got.get(queue, [])) == sorted(q["records"]), queue
    # A dialect the files contradict is refused before any job, naming the conflict.
    with pytest.raises(tflux.DialectError, match="spec"):
        tflux.spark.replay(spark, str(base), dialect="spec")
    with pytest.raises(tflux.DialectError):
        tflux.spark.queue_summary(spark, str(base), dialect="spec")


@pytest.mark.parametrize("fmt", ["tflux", "tflux_python"])
def test_a_dialect_option_the_files_contradict_fails(spark, fmt, tmp_path):
    base = real_dir("follower-segmented", tmp_path)
    with pytest.raises(Exception, match="dialect"):
        read_log(spark, fmt, base, dialect="spec")
    assert read_log(spark, fmt, base, dialect="taskflux") == entries_expected(
        expected("follower-segmented")
    )


@pytest.mark.parametrize("fmt", ["tflux", "tflux_python"])
def test_spark_reads_what_tflux_writes_in_taskflux_split_into_small_ranges(spark, fmt, tmp_path):
    base = tmp_path / "written"
    with tflux.open(base, dialect="taskflux", log_file_soft_limit=4096) as store:
        store.create_queue("jobs")
        rng = random.Random(5)
        store.enqueue_many(
            "jobs", [(rng.randint(-9, 9), os.urandom(rng.randint(0, 300))) for _ in range(400)]
        )
    with tflux.Log.open(base / "data" / "log", readonly=True) as log:
        want = [(e.lsn, e.term, bytes(e.data).hex()) for e in log.entries()]
    assert read_log(spark, fmt, base) == want
    if fmt == "tflux":
        assert read_log(spark, fmt, base, splitBytes="700") == want


def test_a_stream_reads_a_real_taskflux_log_and_what_tflux_appends_to_it(spark, tmp_path):
    """``readStream.format("tflux")`` over TaskFlux's own segmented log, then over what a
    taskflux store appended to it: every entry once, in LSN order, with its term."""
    base = real_dir("follower-segmented", tmp_path)
    doc = expected("follower-segmented")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> list[tuple[int, int]]:
        query = (
            spark.readStream.format("tflux")
            .option("maxRecordsPerTrigger", 7)
            .load(str(base))
            .select("lsn", "term")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        import pyarrow.parquet as pq

        table = pq.read_table(out)
        lsns, terms = table.column("lsn").to_pylist(), table.column("term").to_pylist()
        return sorted(zip(lsns, terms, strict=True))

    assert run() == [(i, t) for i, t, _ in entries_expected(doc)]
    with tflux.open(base) as store:
        assert store.dialect == "taskflux"
        store.enqueue("jobs:high", 3, b"appended by tflux")
        last = store.log_bounds[1]
    got = run()
    assert [lsn for lsn, _ in got] == list(range(last + 1))
    assert got[-1] == (last, 3)
