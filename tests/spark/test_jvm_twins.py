"""The Java twins held to the shared vectors of ``tests/data/twins`` (written from the spec by
``make_vectors.py``, never by tflux), from the Python API here and from the JVM reader: its
decoders directly (``io.tflux.spark.Dump``, no Spark) and through Spark (``format("tflux")``,
``format("tflux_snapshot")``, ``tflux.spark.replay``). ``rust/core/tests/shared_vectors.rs``
reads the same files through the core. Which Java class restates which rule of the core is
``python/tflux/spark/jvm/README.md``.

Without pyspark or a JDK the JVM tests skip; where ``TFLUX_REQUIRE_TOOLS=1`` (CI) they fail
instead (``tests/_needs.py``), and the last test here checks that they do.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import _needs
import pytest
import tflux
from conftest import DATA_DIR

TWINS = DATA_DIR / "twins"
MANIFEST = json.loads((TWINS / "manifest.json").read_text())
REPLAY = json.loads((TWINS / "replay.json").read_text())
BAD_DELTAS = {
    k: v for k, v in json.loads((TWINS / "bad_deltas.json").read_text()).items() if k != "what"
}
METHODS = {1: "zstd", 2: "lz4"}


def install(tmp_path: Path, vector: str) -> Path:
    """A base directory laid out as the vector's ``install`` map says."""
    base = tmp_path / vector.replace(".", "_")
    for dest, src in MANIFEST[vector]["install"].items():
        to = base / dest
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(TWINS / src, to)
    return base


def want_records(vector: str) -> list[tuple[int, int, bytes]]:
    return [
        (r["lsn"], r["term"], bytes.fromhex(r["data_hex"])) for r in MANIFEST[vector]["records"]
    ]


def want_snapshot_rows(queues: list[dict]) -> list[tuple]:
    """(queue, implementation, id, key, message) per record, by queue name and ascending id."""
    rows = [
        (q["queue"], q["implementation"], r["id"], r["key"], bytes.fromhex(r["message_hex"]))
        for q in queues
        for r in q["records"]
    ]
    return sorted(rows, key=lambda r: (r[0], r[2]))


def want_live() -> list[tuple[str, int, int, bytes]]:
    """(queue, id, key, message) of every live record, by queue then dequeue order."""
    return [
        (q, r["id"], r["key"], bytes.fromhex(r["message_hex"]))
        for q, info in sorted(REPLAY["live"].items())
        for r in info["records"]
    ]


def want_add_ids(after: int = -1) -> dict[bytes, int]:
    """Each AddRecord's expected record id by its message (unique in the vector)."""
    adds = [e for e in REPLAY["entries"] if e["kind"] == "A" and e["lsn"] > after]
    ids = {bytes.fromhex(e["message_hex"]): e["record_id"] for e in adds}
    assert len(ids) == len(adds)
    return ids


# --- the vectors are their generator's ------------------------------------------------------


def test_the_twin_vectors_are_what_their_spec_generator_writes():
    spec = importlib.util.spec_from_file_location("twin_vectors", TWINS / "make_vectors.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    files, _ = gen.build()
    committed = {p.name for p in TWINS.iterdir() if p.is_file() and p.suffix != ".py"}
    assert committed == set(files)
    for name, data in files.items():
        have = (TWINS / name).read_bytes()
        if name.endswith(".log.z"):
            # A codec library may compress the same bytes differently from one version to the
            # next: the header must be the same, the payload must decode to the same segment.
            method = METHODS[have[24]]
            head = gen.Z_HEADER_LEN
            assert have[:head] == data[:head], name
            assert gen.decompress(method, have[head:]) == gen.decompress(method, data[head:])
        else:
            assert have == data, name


# --- the map of the twins -------------------------------------------------------------------


def test_the_jvm_readme_maps_every_java_class_and_stays_out_of_the_jar_build():
    from tflux.spark import _jvm

    readme = _jvm.SOURCES / "README.md"
    table = [line for line in readme.read_text().splitlines() if line.startswith("| `")]
    named = {c.strip(" `") for line in table for c in line.split("|")[1].split(",")}
    java = {p.stem for p in _jvm.SOURCES.rglob("*.java")}
    assert named == java  # a new class gets its row: which rule of the core it restates
    built = _jvm._source_files()
    assert readme not in built and {p.stem for p in built if p.suffix == ".java"} == java
    assert any(p.parts[-3:-1] == ("META-INF", "services") for p in built)


# --- the Python API -------------------------------------------------------------------------


@pytest.mark.parametrize("vector", ["zstd.log.z", "lz4.log.z"])
def test_python_reads_a_compressed_sealed_segment_vector_record_for_record(tmp_path, vector):
    base = install(tmp_path, vector)
    with tflux.Log.open(base / "data" / "log", readonly=True) as log:
        got = [(e.lsn, e.term, e.data) for e in log.entries()]
        first = log.segments[0]
    assert got == want_records(vector)
    assert first.sealed and first.compression == METHODS[MANIFEST[vector]["method"]]
    assert first.last_lsn == MANIFEST[vector]["last_lsn"]


def test_python_refuses_the_compressed_vector_with_a_wrong_crc_naming_file_and_offset(tmp_path):
    info = MANIFEST["bad_crc.log.z"]
    base = install(tmp_path, "bad_crc.log.z")
    with pytest.raises(tflux.CorruptionError, match="CRC") as e:
        with tflux.Log.open(base / "data" / "log", readonly=True) as log:
            list(log.entries())
    assert Path(e.value.path).name == info["error_file"]
    assert e.value.offset == info["error_offset"]


def test_python_reads_the_wide_snapshot_vector_with_its_64_bit_index_and_term():
    info = MANIFEST["wide.snapshot"]
    snap = tflux.read_snapshot(TWINS / "wide.snapshot")
    assert (snap.last_index, snap.last_term) == (info["last_index"], info["last_term"])
    got = [
        (q.name, q.implementation, q.last_id, q.max_queue_size, q.max_message_size, q.key_range)
        for q in snap.queues
    ]
    none = {-1: None}
    assert got == [
        (
            q["queue"],
            q["implementation"],
            q["last_id"],
            none.get(q["max_queue_size"], q["max_queue_size"]),
            none.get(q["max_message_size"], q["max_message_size"]),
            tuple(q["key_range"]) if q["key_range"] else None,
        )
        for q in info["queues"]
    ]
    rows = [(q.name, q.implementation, *r) for q in snap.queues for r in q.records]
    assert sorted(rows, key=lambda r: (r[0], r[2])) == want_snapshot_rows(info["queues"])


def test_python_refuses_the_wide_snapshot_whose_index_the_checksum_covers():
    path = TWINS / "wide_index_flipped.snapshot"
    with pytest.raises(tflux.CorruptionError, match="checksum mismatch") as e:
        tflux.read_snapshot(path)
    assert Path(e.value.path) == path
    assert e.value.offset == MANIFEST["wide_index_flipped.snapshot"]["error_offset"]


def test_python_resumes_the_cursor_vectors_receiver_at_its_next_lsn(tmp_path):
    info = MANIFEST["reader.cursor"]
    base = install(tmp_path, "reader.cursor")
    with tflux.Channel.open(base, readonly=True) as ch:
        assert ch.receivers() == {info["receiver"]: info["next_lsn"]}
    with tflux.Channel.open(base, share=False) as ch:
        with ch.receiver(info["receiver"]) as r:
            assert r.acked == info["next_lsn"]
            got = [r.recv(timeout=0) for _ in range(len(info["messages_hex"]) - r.acked)]
    assert [(m.lsn, m.data) for m in got] == [
        (lsn, bytes.fromhex(h))
        for lsn, h in enumerate(info["messages_hex"])
        if lsn >= info["next_lsn"]
    ]


def test_python_refuses_the_cursor_vector_whose_lsn_changed_naming_it(tmp_path):
    base = install(tmp_path, "bad_crc.cursor")
    with pytest.raises(tflux.CorruptionError, match="checksum mismatch") as e:
        with tflux.Channel.open(base, readonly=True) as ch:
            ch.receivers()
    assert Path(e.value.path) == base / "data" / "cursors" / "reader.cursor"
    assert e.value.offset == MANIFEST["bad_crc.cursor"]["error_offset"]


def test_python_gives_each_add_of_the_replay_vector_its_record_id():
    state = tflux.QueueState()
    for e in REPLAY["entries"]:
        state.apply(bytes.fromhex(e["hex"]), e["lsn"])
        if e["kind"] == "A":
            last = {q.name: q.last_id for q in state.queues()}[e["queue"]]
            assert last == e["record_id"], e
            assert e["record_id"] in {r.id for r in state.records(e["queue"])}
    got = [(q, r.id, r.key, r.payload) for q in sorted(REPLAY["live"]) for r in state.records(q)]
    assert got == want_live()


@pytest.mark.parametrize("vector", ["replay", "replay_after_snapshot"])
def test_python_restores_the_replay_vectors_live_records(tmp_path, vector):
    base = install(tmp_path, vector)
    with tflux.open(base, readonly=True) as store:
        queues = {q.name: (q.implementation, q.last_id, q.count) for q in store.queues()}
        got = [(q, r.id, r.key, r.payload) for q in sorted(queues) for r in store.records(q)]
    names = {1: "heap", 2: "array"}
    assert queues == {
        q: (names[info["implementation"]], info["last_id"], len(info["records"]))
        for q, info in REPLAY["live"].items()
    }
    assert got == want_live()


def test_python_refuses_the_mixed_dialect_vector_naming_its_last_segment(tmp_path):
    # Issue 43 item 10: the first record of every segment says its dialect.
    base = install(tmp_path, "mixed_spec.log")
    last = base / "data" / "log" / MANIFEST["mixed_spec.log"]["error_file"]
    with pytest.raises(tflux.DialectError, match="two dialects") as e:
        tflux.open(base, readonly=True)
    assert Path(e.value.path) == last


def test_python_refuses_the_snapshot_vector_past_the_largest_lsn_naming_its_last_index():
    # Issue 43 item 1: a last index of 2^63-1 is corruption of that field (valid CRC).
    path = TWINS / "index_max.snapshot"
    with pytest.raises(tflux.CorruptionError, match="last index 9223372036854775807 is past") as e:
        tflux.read_snapshot(path)
    assert Path(e.value.path) == path
    assert e.value.offset == MANIFEST["index_max.snapshot"]["error_offset"]


def test_python_refuses_the_undecided_vector_naming_its_segment(tmp_path):
    # The core's decide_or_refuse: a damaged first record with records after it, nothing else.
    base = install(tmp_path, "undecided.log")
    segment = base / "data" / "log" / MANIFEST["undecided.log"]["error_file"]
    with pytest.raises(tflux.DialectError, match="cannot decide") as e:
        tflux.open(base, readonly=True)
    assert Path(e.value.path) == segment


def test_python_reads_the_dialect_the_second_record_vector_says(tmp_path):
    base = install(tmp_path, "second_says.log")
    with tflux.Log.open(base / "data" / "log", readonly=True) as log:
        assert log.dialect == MANIFEST["second_says.log"]["dialect"]


def test_python_refuses_the_task_snapshot_vector_beside_a_taskflux_segment(tmp_path):
    # The task layout (B6 38 0F CB) says spec, as the wide one does.
    base = install(tmp_path, "task.snapshot")
    segment = base / "data" / "log" / MANIFEST["task.snapshot"]["error_file"]
    with pytest.raises(tflux.DialectError, match="two dialects") as e:
        tflux.open(base, readonly=True)
    assert Path(e.value.path) == segment


@pytest.mark.parametrize("case", sorted(BAD_DELTAS))
def test_python_refuses_each_bad_delta_vector_at_the_offset_of_its_bad_field(case):
    with pytest.raises(tflux.CorruptionError) as e:
        tflux.decode_delta(bytes.fromhex(BAD_DELTAS[case]["hex"]))
    assert e.value.offset == BAD_DELTAS[case]["error_offset"], str(e.value)


# --- the JVM reader: its decoders, without Spark --------------------------------------------


@pytest.fixture(scope="module")
def jvm_dump(spark_jar):
    """``dump(*args)``: the JVM decoders on a file (``tests/test_spark_jvm.py``'s ``Dump``
    runner). Skips without a JDK or pyspark; fails there where tools are required."""
    if spark_jar is None:
        _needs.missing("no JDK (javac and jar): the JVM reader is not built")
    from test_spark_jvm import dump

    return functools.partial(dump, spark_jar)


def dump_records(rows: list[dict]) -> list[tuple[int, int, bytes]]:
    return [(r["lsn"], r["term"], bytes.fromhex(r["data"])) for r in rows]


@pytest.mark.parametrize("vector", ["zstd.log.z", "lz4.log.z"])
def test_the_jvm_decodes_a_compressed_sealed_segment_vector_record_for_record(
    jvm_dump, tmp_path, vector
):
    seg = install(tmp_path, vector) / "data" / "log" / "0000000000000000000.log.z"
    rows, error = jvm_dump("segment", str(seg), "0", "sealed")
    assert error is None
    last = MANIFEST[vector]["last_lsn"]
    assert dump_records(rows) == want_records(vector)[: last + 1]


def test_the_jvm_refuses_the_compressed_vector_with_a_wrong_crc_naming_file_and_offset(
    jvm_dump, tmp_path
):
    info = MANIFEST["bad_crc.log.z"]
    seg = install(tmp_path, "bad_crc.log.z") / "data" / "log" / info["error_file"]
    rows, error = jvm_dump("segment", str(seg), "0", "sealed")
    assert rows == [] and error is not None
    assert f"corrupt {seg} at offset {info['error_offset']}" in error and "CRC" in error


@pytest.mark.parametrize("vector", ["zstd.log.z", "lz4.log.z"])
def test_a_flipped_payload_byte_is_corruption_of_the_file_for_the_jvm(jvm_dump, tmp_path, vector):
    seg = install(tmp_path, vector) / "data" / "log" / "0000000000000000000.log.z"
    good = seg.read_bytes()
    for at in (60, len(good) // 2, len(good) - 20):  # inside the compressed blocks
        bad = bytearray(good)
        bad[at] ^= 0x20
        seg.write_bytes(bytes(bad))
        rows, error = jvm_dump("segment", str(seg), "0", "sealed")
        assert rows == [] and error is not None and f"corrupt {seg} at offset" in error, at


def test_the_jvm_decodes_the_wide_snapshot_vector_with_its_64_bit_index_and_term(jvm_dump):
    info = MANIFEST["wide.snapshot"]
    rows, error = jvm_dump("snapshot", str(TWINS / "wide.snapshot"))
    assert error is None
    assert rows[0] == {"last_index": info["last_index"], "last_term": info["last_term"]}
    got = [
        (
            r["queue"],
            r["implementation"],
            int(r["record_id"]),
            r["key"],
            bytes.fromhex(r["message"]),
        )
        for r in rows[1:]
    ]
    assert got == want_snapshot_rows(info["queues"])


def test_the_jvm_refuses_the_wide_snapshot_whose_index_the_checksum_covers(jvm_dump):
    path = TWINS / "wide_index_flipped.snapshot"
    rows, error = jvm_dump("snapshot", str(path))
    assert rows == [] and error is not None
    offset = MANIFEST["wide_index_flipped.snapshot"]["error_offset"]
    assert f"corrupt {path} at offset {offset}: checksum mismatch" in error


def test_the_jvm_refuses_each_bad_delta_vector_at_the_offset_of_its_bad_field(jvm_dump):
    cases = sorted(BAD_DELTAS)
    rows, error = jvm_dump("delta", *(BAD_DELTAS[c]["hex"] for c in cases))
    assert error is None and len(rows) == len(cases)  # one JVM, one row per delta
    for case, row in zip(cases, rows, strict=True):
        offset = BAD_DELTAS[case]["error_offset"]
        assert f"corrupt <delta> at offset {offset}: " in row.get("error", ""), (case, row)


def test_the_jvm_refuses_the_mixed_dialect_vector_naming_its_last_segment(jvm_dump, tmp_path):
    # Dialect.java reads the first record of every segment, as the core's log_says does.
    base = install(tmp_path, "mixed_spec.log")
    last = base / "data" / "log" / MANIFEST["mixed_spec.log"]["error_file"]
    rows, error = jvm_dump("dialect", str(base))
    assert rows == [] and error is not None
    assert f"corrupt {last}" in error and "two dialects" in error, error


def test_the_jvm_refuses_the_undecided_vector_naming_its_segment(jvm_dump, tmp_path):
    # Dialect.java follows the core's decide_or_refuse (issue 43 item 11).
    base = install(tmp_path, "undecided.log")
    segment = base / "data" / "log" / MANIFEST["undecided.log"]["error_file"]
    rows, error = jvm_dump("dialect", str(base))
    assert rows == [] and error is not None
    assert f"corrupt {segment}" in error and "cannot decide" in error, error


def test_the_jvm_reads_the_dialect_the_second_record_vector_says(jvm_dump, tmp_path):
    rows, error = jvm_dump("dialect", str(install(tmp_path, "second_says.log")))
    assert error is None and rows == [{"dialect": MANIFEST["second_says.log"]["dialect"]}]


def test_the_jvm_refuses_the_task_snapshot_vector_beside_a_taskflux_segment(jvm_dump, tmp_path):
    base = install(tmp_path, "task.snapshot")
    segment = base / "data" / "log" / MANIFEST["task.snapshot"]["error_file"]
    rows, error = jvm_dump("dialect", str(base))
    assert rows == [] and error is not None
    assert f"corrupt {segment}" in error and "two dialects" in error, error


def test_the_jvm_refuses_the_snapshot_vector_past_the_largest_lsn_naming_its_last_index(jvm_dump):
    path = TWINS / "index_max.snapshot"
    rows, error = jvm_dump("snapshot", str(path))
    assert rows == [] and error is not None
    offset = MANIFEST["index_max.snapshot"]["error_offset"]
    assert f"corrupt {path} at offset {offset}: last index 9223372036854775807 is past" in error


# --- the JVM reader through Spark -----------------------------------------------------------


@pytest.fixture(scope="module")
def jvm_spark(spark, spark_jar):
    """The shared session, whose ``tflux`` formats are the JVM reader's (never the Python
    sources quietly standing in)."""
    if spark_jar is None:
        _needs.missing("no JDK (javac and jar): the JVM reader is not built")
    import tflux.spark

    assert tflux.spark.jvm_reader(spark)
    return spark


@pytest.mark.parametrize("vector", ["zstd.log.z", "lz4.log.z"])
def test_spark_reads_a_compressed_vector_log_record_for_record(jvm_spark, tmp_path, vector):
    base = install(tmp_path, vector)
    df = jvm_spark.read.format("tflux").option("rawData", "true").load(str(base))
    got = sorted((r.lsn, r.term, bytes(r.data)) for r in df.select("lsn", "term", "data").collect())
    assert got == want_records(vector)
    segments = {r.segment for r in df.select("segment").distinct().collect()}
    assert "0000000000000000000.log.z" in segments


def test_spark_fails_on_the_compressed_vector_with_a_wrong_crc_naming_the_file(jvm_spark, tmp_path):
    info = MANIFEST["bad_crc.log.z"]
    base = install(tmp_path, "bad_crc.log.z")
    where = f"{base / 'data' / 'log' / info['error_file']} at offset {info['error_offset']}"
    with pytest.raises(Exception, match="CorruptionError: corrupt " + where):
        jvm_spark.read.format("tflux").load(str(base)).select("lsn").collect()


def test_spark_reads_the_wide_snapshot_vectors_index_and_records(jvm_spark):
    info = MANIFEST["wide.snapshot"]
    df = jvm_spark.read.format("tflux_snapshot").load(str(TWINS / "wide.snapshot"))
    rows = df.collect()
    assert {r.last_index for r in rows} == {info["last_index"]}
    got = sorted(
        ((r.queue, r.implementation, r.record_id, r.key, bytes(r.message)) for r in rows),
        key=lambda r: (r[0], r[2]),
    )
    assert got == want_snapshot_rows(info["queues"])


@pytest.mark.parametrize("fmt", ["tflux_snapshot", "tflux_snapshot_python"])
def test_spark_reads_the_wide_snapshot_vectors_64_bit_term(jvm_spark, fmt):
    # A wide snapshot's term past Int32 (spec 4.1): the last_term column is Int64 on both sides.
    df = jvm_spark.read.format(fmt).load(str(TWINS / "wide.snapshot"))
    assert {r.last_term for r in df.select("last_term").collect()} == {
        MANIFEST["wide.snapshot"]["last_term"]
    }


def test_spark_fails_on_the_wide_snapshot_whose_index_the_checksum_covers(jvm_spark):
    path = TWINS / "wide_index_flipped.snapshot"
    offset = MANIFEST["wide_index_flipped.snapshot"]["error_offset"]
    with pytest.raises(Exception, match=f"corrupt {path} at offset {offset}: checksum mismatch"):
        jvm_spark.read.format("tflux_snapshot").load(str(path)).collect()


def test_spark_reads_the_cursor_vectors_channel_as_messages_only(jvm_spark, tmp_path):
    # A directory holding data/cursors is a channel (spec 10): its records are opaque messages.
    info = MANIFEST["reader.cursor"]
    base = install(tmp_path, "reader.cursor")
    with pytest.raises(Exception, match="is a channel directory"):
        jvm_spark.read.format("tflux").load(str(base)).collect()
    df = jvm_spark.read.format("tflux").option("rawData", "true").load(str(base))
    got = sorted((r.lsn, bytes(r.data)) for r in df.select("lsn", "data").collect())
    assert got == [(i, bytes.fromhex(h)) for i, h in enumerate(info["messages_hex"])]


@pytest.fixture
def plans(monkeypatch):
    """The replayPlan options replay hands the JVM reader (the ids then come from
    ReplayIds.java), recorded as they are made."""
    from tflux.spark import rebuild

    made: list[str | None] = []
    real = rebuild.replay_plan

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(rebuild, "replay_plan", spy)
    return made


@pytest.mark.parametrize("in_scan", [True, False], ids=["replay-plan", "broadcast-joins"])
@pytest.mark.parametrize("vector", ["replay", "replay_after_snapshot"])
def test_spark_replay_gives_each_add_its_id_and_leaves_the_live_records(
    jvm_spark, tmp_path, monkeypatch, plans, vector, in_scan
):
    from tflux.spark import rebuild

    if not in_scan:  # the ids from rebuild.py's joins over the JVM reader's queue_adds
        monkeypatch.setattr(rebuild, "REPLAY_PLAN_ROWS", 0)
    base = install(tmp_path, vector)
    # Every add with its id: without removed ranges or bitmaps (which drop removed adds in the
    # scan).
    ranges, bits = rebuild.RANGE_PLAN_RANGES, rebuild.PLAN_BITS
    monkeypatch.setattr(rebuild, "RANGE_PLAN_RANGES", 0)
    monkeypatch.setattr(rebuild, "PLAN_BITS", 0)
    frames = rebuild._Frames(jvm_spark, str(base))
    assert bool(plans) == in_scan and all(plans)
    adds = {bytes(r.message): r.record_id for r in frames.adds.collect()}
    after = MANIFEST[vector].get("snapshot", {}).get("last_index", -1)
    assert adds == want_add_ids(after)
    # The live records: with removed ranges where the plan takes them, then with every
    # incarnation's removes as a bitmap (no range fits: the plan's b lines, issue 45).
    monkeypatch.setattr(rebuild, "PLAN_BITS", bits)
    order = {(q, i): n for n, (q, i, _, _) in enumerate(want_live())}
    for limit in (ranges, 0):
        monkeypatch.setattr(rebuild, "RANGE_PLAN_RANGES", limit)
        plans.clear()
        live = tflux.spark.replay(jvm_spark, str(base)).collect()
        got = sorted(
            ((r.queue, r.record_id, r.key, bytes(r.message)) for r in live),
            key=lambda r: order.get(r[:2], -1),
        )
        assert got == want_live()
        assert not in_scan or ("\nb " in plans[-1]) == (limit == 0)
    summary = tflux.spark.queue_summary(jvm_spark, str(base)).collect()
    assert {r.queue: (r.last_id, r["count"]) for r in summary} == {
        q: (info["last_id"], len(info["records"])) for q, info in REPLAY["live"].items()
    }


# --- CI runs the JVM side -------------------------------------------------------------------


@pytest.mark.parametrize("required", ["1", "0"])
def test_without_a_jdk_the_jvm_twin_tests_fail_where_tools_are_required(tmp_path, required):
    """``.ci/run`` sets TFLUX_REQUIRE_TOOLS=1: there a JVM twin test that cannot build the
    reader fails instead of skipping (elsewhere it skips, saying why)."""
    assert "export TFLUX_REQUIRE_TOOLS=1" in (DATA_DIR.parent.parent / ".ci" / "run").read_text()
    one_jvm_test = test_the_jvm_refuses_the_wide_snapshot_whose_index_the_checksum_covers
    test = f"{Path(__file__).name}::{one_jvm_test.__name__}"
    env = dict(
        os.environ,
        TFLUX_REQUIRE_TOOLS=required,
        TFLUX_JAVAC="no-such-javac",
        TFLUX_CACHE_DIR=str(tmp_path),
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        cwd=Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if required == "1":
        assert out.returncode == 1 and "1 error" in out.stdout, out.stdout[-2000:]
        assert "TFLUX_REQUIRE_TOOLS says this machine has it" in out.stdout
    else:
        assert out.returncode == 0 and "1 skipped" in out.stdout, out.stdout[-2000:]


# --- the task-queue deltas (spec section 12, issue 44) ----------------------------------------


def task_base(tmp_path: Path) -> tuple[Path, int]:
    """A spec base: a queue, one record, then every task-queue vector the columns read (ids
    within Int64); returns it and the LSN of the first task-queue delta."""
    from _task_vectors import column_rows

    base = tmp_path / "task"
    with tflux.open(base) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 1, b"plain")
    with tflux.Log.open(base / "data" / "log") as log:
        first = log.last_index + 1
        log.append_many(1, [data for data, _ in column_rows()])
    return base, first


def test_spark_reads_every_task_queue_vector_and_the_plain_replay_stops_at_the_first(
    spark, tmp_path
):
    # The Python source (the core's columns) against the vectors' fields; the plain replay
    # does not apply these deltas: it stops naming the first, never skipping it (replay then
    # takes the task path, tests/spark/test_spark_task_replay.py).
    import json as json_

    from _task_vectors import column_rows
    from tflux.spark import _tasks, rebuild

    base, first = task_base(tmp_path)
    df = spark.read.format("tflux_python").load(str(base)).where(f"lsn >= {first}")
    rows = sorted(df.collect(), key=lambda r: r.lsn)
    assert dict(df.dtypes)["kept_ids"] == "array<bigint>"
    columns = ["kind", "queue", "key", "record_id", "message", "due", "kept_ids", "rules"]
    for row, (_, want) in zip(rows, column_rows(), strict=True):
        got = {c: row[c] for c in columns}
        got["message"] = None if got["message"] is None else bytes(got["message"])
        got["rules"] = None if got["rules"] is None else json_.loads(got["rules"])
        assert got == {**dict.fromkeys(columns), **want}
    with pytest.raises(_tasks.HasTasks, match=f"queue_rules delta at LSN {first} "):
        rebuild._Frames(spark, str(base), fmt="tflux_python")


def test_the_jvm_decodes_every_task_queue_vector_as_the_core_does(jvm_dump):
    # LogColumns.java against the vectors' fields (the core's columns: tests/core), the rules
    # as the same JSON text; an id past Int64 refused naming the LSN, as the core does.
    import json as json_

    from _task_vectors import RULES_SET_ALL_TEXT, VECTORS, column_rows

    rows, error = jvm_dump("delta", *(data.hex() for data, _ in column_rows()))
    assert error is None
    columns = ["kind", "queue", "key", "record_id", "message", "due", "kept_ids", "rules"]
    for row, (_, want) in zip(rows, column_rows(), strict=True):
        got = {c: row[c] for c in columns}
        got["message"] = None if got["message"] is None else bytes.fromhex(got["message"])
        got["rules"] = None if got["rules"] is None else json_.loads(got["rules"])
        assert got == {**dict.fromkeys(columns), **want}
    (row,), error = jvm_dump("delta", VECTORS["rules_set_all"]["hex"])
    assert row["rules"] == RULES_SET_ALL_TEXT  # the core's text too (tests/core)
    (row,), error = jvm_dump("delta", VECTORS["delivered"]["hex"])
    assert "record id 18446744073709551615 at LSN 0 exceeds Int64" in row["error"]


def test_the_plain_replay_through_the_jvm_reader_stops_at_the_first_task_queue_delta(
    jvm_spark, tmp_path
):
    # The JVM summary scan (the plain path's step 1) stops where it meets it, naming kind and
    # LSN; replay then takes the task path, whose rows say due times and attempts.
    from tflux.spark import _tasks, rebuild

    base, first = task_base(tmp_path)
    with pytest.raises(
        Exception, match=f"cannot replay the queue_rules delta at LSN {first}:"
    ) as e:
        rebuild._Frames(jvm_spark, str(base))
    assert _tasks.met_tasks(e.value)
    df = tflux.spark.replay(jvm_spark, str(base))
    assert df.columns == ["queue", "record_id", "key", "message", "due", "attempts"]
