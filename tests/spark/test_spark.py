"""tflux on Spark: the log and snapshot sources, distributed replay, the streaming tail, Parquet.

Runs a real ``local[2]`` SparkSession (one per test session). Expected values come from deltas
encoded here by hand (spec section 6), from a Python model of the queues that drove the writes,
and from the single-machine restore (``tflux.open(base, readonly=True)``), never from the code
under test. Skipped when pyspark (or Java) is missing.
"""

from __future__ import annotations

import glob
import random
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import _needs
import pytest
import tflux
from conftest import record_offsets, segment_files

pyspark = _needs.pyspark()
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import tflux.parquet  # noqa: E402
import tflux.spark  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

# Both readers of the log: the JVM one (``tflux`` when the session has its jar) and the Python one.
READERS = ["tflux", "tflux_python"]


@pytest.fixture(params=READERS)
def fmt(request, spark) -> str:
    return request.param


COLUMNS = ["source", "segment", "lsn", "term", "kind", "queue", "key", "record_id", "message"]
COLUMNS += ["implementation", "max_queue_size", "max_message_size", "key_min", "key_max"]
COLUMNS += ["due", "kept_ids", "rules"]  # the task-queue deltas' (spec 12, issue 44)


# --- deltas by hand (spec 6) --------------------------------------------------------------


def qname(q: str) -> bytes:
    raw = q.encode("ascii")
    return bytes([len(raw)]) + raw


def create(q: str, impl: int = 1, max_size: int = -1, max_msg: int = -1, key_range=None) -> bytes:
    tail = b"\x00" if key_range is None else b"\x01" + struct.pack(">qq", *key_range)
    return b"C" + qname(q) + struct.pack(">iii", impl, max_size, max_msg) + tail


def add(q: str, key: int, msg: bytes) -> bytes:
    return b"A" + qname(q) + struct.pack(">qi", key, len(msg)) + msg


def remove(q: str, rid: int) -> bytes:
    return b"R" + qname(q) + struct.pack(">Q", rid)


def delete(q: str) -> bytes:
    return b"D" + qname(q)


def expected_row(lsn: int, term: int, data: bytes) -> dict:
    """The columns of one delta, decoded here with struct (independently of tflux)."""
    row = dict.fromkeys(COLUMNS[6:])
    marker, n = data[0:1], data[1]
    q, rest = data[2 : 2 + n].decode(), data[2 + n :]
    row.update(lsn=lsn, term=term, queue=q)
    if marker == b"C":
        impl, size, msg = struct.unpack_from(">iii", rest)
        row.update(kind="create_queue", implementation=impl, max_queue_size=size)
        row.update(max_message_size=msg)
        if rest[12]:
            row["key_min"], row["key_max"] = struct.unpack_from(">qq", rest, 13)
    elif marker == b"D":
        row.update(kind="delete_queue")
    elif marker == b"A":
        key, length = struct.unpack_from(">qi", rest)
        row.update(kind="add_record", key=key, message=rest[12 : 12 + length])
    else:
        row.update(kind="remove_record", record_id=struct.unpack_from(">Q", rest)[0])
    return row


def hand_log(base: Path, count: int = 3000, seed: int = 1) -> list[tuple[int, int, bytes]]:
    """``count`` hand-encoded deltas in ``base/data/log`` over several small segments, committed;
    returns (lsn, term, data) of each."""
    rng = random.Random(seed)
    deltas = [create("jobs", 2, 100, 4096, (-5, 5)), create("mail")]
    ids = {"jobs": 0, "mail": 0}
    while len(deltas) < count - 1:
        q = rng.choice(["jobs", "mail", ""])
        if q and ids[q] and rng.random() < 0.25:
            deltas.append(remove(q, rng.randint(1, ids[q])))
        else:
            deltas.append(add(q, rng.randint(-5, 5), rng.randbytes(rng.randint(0, 40))))
            if q:
                ids[q] += 1
    deltas += [delete("mail")]
    rows = []
    with tflux.Log.open(base / "data" / "log", soft_limit=8 << 10, hard_limit=16 << 10) as log:
        for i in range(0, len(deltas), 100):
            term = 1 + i // 1000  # terms rise along the log
            first = log.append_many(term, deltas[i : i + 100])
            log.commit(first + len(deltas[i : i + 100]) - 1)
            rows += [(first + j, term, d) for j, d in enumerate(deltas[i : i + 100])]
    return rows


def segment_of(log_dir: Path, lsn: int) -> str:
    names = segment_files(log_dir)
    return [n for n in names if int(n[:19]) <= lsn][-1]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    base = tmp_path_factory.mktemp("hand")
    return base, hand_log(base)


# --- the log source -------------------------------------------------------------------------


def test_log_source_returns_every_record_decoded_with_its_source_and_segment(spark, fmt, written):
    base, rows = written
    log_dir = base / "data" / "log"
    df = spark.read.format(fmt).load(str(base))
    assert df.columns == COLUMNS
    got = [r.asDict() for r in df.orderBy("lsn").collect()]
    want = [
        {"source": str(base), "segment": segment_of(log_dir, lsn), **expected_row(lsn, term, data)}
        for lsn, term, data in rows
    ]
    assert len(segment_files(log_dir)) >= 5
    assert got == want


def test_one_partition_per_segment_file_and_a_log_dir_path_works_too(spark, written):
    base, rows = written
    log_dir = base / "data" / "log"
    df = spark.read.format("tflux_python").load(str(log_dir))
    assert df.rdd.getNumPartitions() == len(segment_files(log_dir))
    assert df.count() == len(rows)
    # A log directory inside a base directory reports the base directory as its source.
    assert {r.source for r in df.select("source").distinct().collect()} == {str(base)}


def test_spark_schema_is_the_arrow_schema_of_the_batches(spark, fmt, written):
    base, _ = written
    df = spark.read.format(fmt).load(str(base))
    fields = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert fields == {
        "source": "string", "segment": "string", "lsn": "bigint", "term": "int",
        "kind": "string", "queue": "string", "key": "bigint", "record_id": "bigint",
        "message": "binary", "implementation": "int", "max_queue_size": "int",
        "max_message_size": "int", "key_min": "bigint", "key_max": "bigint",
        "due": "bigint", "kept_ids": "array<bigint>", "rules": "string",
    }  # fmt: skip
    assert all(f.nullable for f in df.schema.fields)


def test_from_and_to_lsn_select_an_inclusive_range_and_skip_other_segments(spark, fmt, written):
    base, _ = written
    log_dir = base / "data" / "log"
    lo, hi = 1234, 2345
    df = spark.read.format(fmt).option("fromLsn", lo).option("toLsn", hi).load(str(base))
    assert [r.lsn for r in df.select("lsn").orderBy("lsn").collect()] == list(range(lo, hi + 1))
    touched = {segment_of(log_dir, lsn) for lsn in range(lo, hi + 1)}
    if fmt == "tflux_python":  # one partition per segment; the JVM reader packs by bytes
        assert df.rdd.getNumPartitions() == len(touched)


def test_raw_data_adds_the_undecoded_bytes(spark, fmt, written):
    base, rows = written
    df = spark.read.format(fmt).option("rawData", "true").load(str(base))
    assert df.columns[-1] == "data"
    got = {r.lsn: bytes(r.data) for r in df.select("lsn", "data").collect()}
    assert got == {lsn: data for lsn, _, data in rows}


def test_columns_option_returns_only_the_named_columns(spark, fmt, written):
    base, rows = written
    df = spark.read.format(fmt).option("columns", "kind, lsn").load(str(base))
    assert df.columns == ["lsn", "kind"]
    got = [tuple(r) for r in df.orderBy("lsn").collect()]
    assert got == [(lsn, expected_row(lsn, t, d)["kind"]) for lsn, t, d in rows]
    with pytest.raises(Exception, match="unknown column"):
        spark.read.format(fmt).option("columns", "lsn,nope").load(str(base)).collect()


def test_tuple_path_yields_the_same_rows_as_the_arrow_path(spark, written):
    base, _ = written
    arrow = spark.read.format("tflux").load(str(base)).orderBy("lsn").collect()
    tuples = spark.read.format("tflux").option("arrow", "false").load(str(base))
    assert tuples.orderBy("lsn").collect() == arrow


def test_several_sources_by_comma_and_by_glob(spark, fmt, tmp_path):
    nodes = tmp_path / "nodes"
    nodes.mkdir()  # a log is made only inside an existing directory
    counts = {}
    for i, n in enumerate([300, 500, 700]):
        base = nodes / f"node{i}"
        counts[str(base)] = len(hand_log(base, n, seed=i))
    by_glob = spark.read.format(fmt).load(str(nodes / "node*"))
    got = {r.source: r["count"] for r in by_glob.groupBy("source").count().collect()}
    assert got == counts
    two = ",".join(sorted(counts)[:2])
    by_comma = spark.read.format(fmt).load(two)
    assert {r.source for r in by_comma.select("source").distinct().collect()} == set(
        sorted(counts)[:2]
    )


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def segment_records(rows, start: int, end: int):
    return [(t, d) for lsn, t, d in rows if start <= lsn <= end]


def test_corrupt_sealed_segment_fails_with_the_file_and_offset(spark, fmt, tmp_path):
    base = tmp_path / "corrupt"
    rows = hand_log(base, 1500)
    log_dir = base / "data" / "log"
    names = segment_files(log_dir)
    victim = log_dir / names[1]  # sealed
    start, end = int(names[1][:19]), int(names[2][:19]) - 1
    offsets = record_offsets(segment_records(rows, start, end))
    bad = offsets[5]
    flip_byte(victim, bad + 20)  # inside the data of the sixth record: checksum mismatch
    with pytest.raises(Exception) as info:
        # A read of any column (the JVM reader's count() takes sealed segments from their
        # names without reading them: docs/format.md, "A scan without columns").
        spark.read.format(fmt).load(str(base)).select("lsn").collect()
    message = str(info.value)
    assert str(victim) in message
    assert f"offset {bad}" in message
    assert "checksum" in message
    # The other segments stay readable.
    ok = spark.read.format(fmt).option("toLsn", start - 1).load(str(base))
    assert ok.count() == start


def test_verify_option_checks_the_whole_directory_before_planning(spark, fmt, tmp_path):
    base = tmp_path / "corrupt-verify"
    rows = hand_log(base, 1500)
    log_dir = base / "data" / "log"
    names = segment_files(log_dir)
    victim = log_dir / names[0]
    bad = record_offsets(segment_records(rows, 0, int(names[1][:19]) - 1))[3]
    flip_byte(victim, bad)  # the record marker
    with pytest.raises(Exception) as info:
        # Reading only a later segment would not touch the bad one; verify checks everything.
        spark.read.format(fmt).option("verify", "true").option("fromLsn", 1400).load(
            str(base)
        ).count()
    assert str(victim) in str(info.value) and f"offset {bad}" in str(info.value)
    assert spark.read.format(fmt).option("fromLsn", 1400).load(str(base)).count() == 100


def test_a_channels_log_read_with_raw_data_gives_exactly_the_sent_bytes_in_order(
    spark, fmt, tmp_path
):
    """Issue 13: a channel's records are opaque messages (spec 10), not deltas; with rawData
    both readers return them in LSN order (delta columns null), also messages that start like
    a delta, and without rawData they refuse the channel by name."""
    base = tmp_path / "chan"
    rng = random.Random(7)
    sent = [rng.randbytes(rng.randint(1, 300)) for _ in range(2000)]
    sent[:4] = [b"A", add("q", 1, b"x"), b"C\x00", remove("q", 1)]  # not deltas here
    with tflux.Channel.open(base, soft_limit=16 << 10, hard_limit=64 << 10) as ch:
        tx = ch.sender()
        for i in range(0, len(sent), 100):
            tx.send_many(sent[i : i + 100])
        tx.send(b"last")
    sent.append(b"last")
    assert len(segment_files(base / "data" / "log")) >= 3
    df = spark.read.format(fmt).option("rawData", "true").load(str(base / "data" / "log"))
    rows = df.orderBy("lsn").collect()
    assert [bytes(r.data) for r in rows] == sent
    assert [r.lsn for r in rows] == list(range(len(sent)))
    assert {(r.source, r.kind, r.queue, r.message) for r in rows} == {(str(base), None, None, None)}
    with pytest.raises(Exception, match=r"channel directory.*rawData"):
        spark.read.format(fmt).load(str(base)).collect()


def test_torn_tail_of_the_active_segment_is_not_returned(spark, fmt, tmp_path):
    base = tmp_path / "torn"
    rows = hand_log(base, 1000)
    log_dir = base / "data" / "log"
    last = log_dir / segment_files(log_dir)[-1]
    start = int(last.name[:19])
    records = segment_records(rows, start, rows[-1][0])
    end = record_offsets(records)[-1]
    with open(last, "r+b") as f:  # half a record after the last one: a write cut by a crash
        f.seek(end)
        f.write(bytes.fromhex("aaf534c4") + struct.pack(">iIi", 9, 0, 100) + b"half")
    df = spark.read.format(fmt).load(str(base))
    assert df.count() == len(rows)


# --- generated stores: replay vs restore vs model -----------------------------------------


@dataclass
class Queue:
    implementation: str
    last_id: int = 0
    records: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    in_flight: set[int] = field(default_factory=set)


@dataclass
class Model:
    queues: dict[str, Queue]
    snapshot: dict[str, Queue] | None = None  # state at the last snapshot
    snapshot_index: int | None = None
    deltas: int = 0


def generate(base: Path, seed: int, deltas: int, snapshots: int = 2) -> Model:
    """Drives a Store with random creates, deletes, re-creates, enqueues, acks, nacks and
    dequeues left in flight (they come back at restore), with ``snapshots`` manual snapshots
    (each compacts the log) spread over the run; returns what a restore must see."""
    rng = random.Random(seed)
    model = Model({"": Queue("heap")})
    names = ["", "jobs", "mail", "grid", "tmp"]
    snap_at = sorted(rng.randrange(deltas // 4, deltas) for _ in range(snapshots))

    def front(q: Queue) -> int | None:
        ready = [(k, i) for i, (k, _) in q.records.items() if i not in q.in_flight]
        return min(ready)[1] if ready else None

    with tflux.open(
        base,
        log_file_soft_limit=96 << 10,
        log_file_hard_limit=192 << 10,
        snapshot_creation_segments_threshold=0,
        log_sync_policy="never",
    ) as store:
        while model.deltas < deltas:
            if snap_at and model.deltas >= snap_at[0]:
                snap_at.pop(0)
                if store.snapshot():
                    model.snapshot = {
                        n: Queue(q.implementation, q.last_id, dict(q.records))
                        for n, q in model.queues.items()
                    }
                    model.snapshot_index = model.deltas - 1
            name = rng.choice(names)
            q = model.queues.get(name)
            r = rng.random()
            if q is None:
                impl = "array" if name == "grid" else "heap"
                store.create_queue(
                    name, implementation=impl, key_range=(0, 9) if impl == "array" else None
                )
                model.queues[name] = Queue(impl)
                model.deltas += 1
            elif name and r < 0.01:
                store.delete_queue(name)
                del model.queues[name]
                model.deltas += 1
            elif r < 0.55:
                items = [
                    (rng.randint(0, 9), rng.randbytes(rng.randint(0, 24)))
                    for _ in range(rng.randint(1, 20))
                ]
                ids = store.enqueue_many(name, items)
                for rid, item in zip(ids, items, strict=True):
                    q.last_id += 1
                    assert rid == q.last_id
                    q.records[rid] = item
                model.deltas += len(items)
            else:
                want = front(q)
                rec = store.dequeue(name, timeout=0)
                assert (rec.id if rec else None) == want
                if rec is None:
                    continue
                if r < 0.85:
                    store.ack(rec)
                    del q.records[rec.id]
                    model.deltas += 1
                elif r < 0.95:
                    store.nack(rec)
                else:
                    q.in_flight.add(rec.id)  # never settled: back after a restore
    return model


def model_records(queues: dict[str, Queue]) -> dict[str, list[tuple[int, int, bytes]]]:
    """Dequeue order: smallest key first, then lowest id."""
    return {
        n: sorted(((i, k, m) for i, (k, m) in q.records.items()), key=lambda r: (r[1], r[0]))
        for n, q in queues.items()
    }


def restored(base: Path):
    with tflux.open(base, readonly=True) as store:
        queues = {q.name: (q.implementation, q.count, q.last_id) for q in store.queues()}
        records = {n: [(r.id, r.key, r.payload) for r in store.records(n)] for n in queues}
    return queues, records


def spark_records(df) -> dict[str, list[tuple[int, int, bytes]]]:
    out: dict[str, list] = {}
    for r in df.collect():
        out.setdefault(r.queue, []).append((r.record_id, r.key, bytes(r.message)))
    return {n: sorted(rs, key=lambda r: (r[1], r[0])) for n, rs in out.items()}


GENERATED = [
    pytest.param(11, 30_000, 2, id="30k-deltas-2-snapshots"),
    pytest.param(12, 20_000, 0, id="20k-deltas-no-snapshot"),
]


@pytest.mark.parametrize(("seed", "deltas", "snapshots"), GENERATED)
def test_replay_equals_the_single_machine_restore(spark, tmp_path, seed, deltas, snapshots):
    base = tmp_path / "store"
    model = generate(base, seed, deltas, snapshots)
    log_dir = base / "data" / "log"
    assert len(segment_files(log_dir)) >= 3  # several segments even after compaction
    if snapshots:
        assert (base / "data" / "tflux.snapshot").exists()
        assert int(segment_files(log_dir)[0][:19]) > 0, "the snapshot compacted the log"
    queues, records = restored(base)
    # The restore agrees with the model that drove the writes...
    want = model_records(model.queues)
    assert records == want
    assert queues == {
        n: (q.implementation, len(q.records), q.last_id) for n, q in model.queues.items()
    }
    # ...and Spark agrees with both.
    got = spark_records(tflux.spark.replay(spark, str(base)))
    assert got == {n: rs for n, rs in want.items() if rs}
    summary = tflux.spark.queue_summary(spark, str(base)).collect()
    assert {r.queue: (r.implementation, r["count"], r.last_id) for r in summary} == queues


@pytest.mark.parametrize("path", ["in-scan", "in-scan-unkeyed", "joins", "tflux_python"])
def test_replay_through_either_reader_and_small_splits_equals_the_restore(
    spark, tmp_path, path, monkeypatch
):
    """Record ids come from per-segment add counts: a segment split into byte ranges read by
    different tasks (JVM reader) and the Python source's per-segment tasks both give the ids
    the restore gives. The JVM reader computes ids and incarnations in the scan
    (``replayPlan``) and the removes are joined by one long key (``replay_key``), or by
    (incarnation, id) when the snapshot records' incarnations need a join, or, when replay's
    tables are too large to ship with every task, ids and incarnations are broadcast joins.
    With the Python source the removes are joined by a shuffle instead of
    a broadcast (as when there are too many to broadcast)."""
    from tflux.spark import rebuild
    from tflux.spark.rebuild import _Frames

    fmt = "tflux_python" if path == "tflux_python" else "tflux"
    if path == "tflux_python":
        monkeypatch.setattr(rebuild, "BROADCAST_REMOVES", 0)
    if path == "joins":  # also the snapshot records' incarnations by a join, not a CASE
        monkeypatch.setattr(rebuild, "REPLAY_PLAN_ROWS", 0)
        monkeypatch.setattr(rebuild, "CASE_NAMES", 0)
    if path == "in-scan-unkeyed":
        monkeypatch.setattr(rebuild, "CASE_NAMES", 0)
    plans = []
    real_plan = rebuild.replay_plan
    monkeypatch.setattr(rebuild, "replay_plan", lambda *a: plans.append(1) or real_plan(*a))

    base = tmp_path / "store"
    generate(base, 13, 12_000, snapshots=1)
    queues, records = restored(base)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "16k")  # several splits per segment
    try:
        frames = _Frames(spark, str(base), fmt)
        got = spark_records(frames.output(frames.live()))
        summary = frames.output(frames.summary()).collect()
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
    assert got == {n: rs for n, rs in records.items() if rs}
    assert {r.queue: (r.implementation, r["count"], r.last_id) for r in summary} == queues
    jvm = tflux.spark.jvm_reader(spark)
    assert bool(plans) == (path.startswith("in-scan") and jvm)
    assert frames.keyed == (path == "in-scan" and jvm)


def test_replay_of_a_log_without_removes_skips_the_removes_and_their_join(
    spark, tmp_path, monkeypatch
):
    base = tmp_path / "adds-only"
    with tflux.open(base) as store:
        store.create_queue("jobs")
        for i in range(3):
            store.enqueue_many("jobs", [(k % 7, b"m%d-%d" % (i, k)) for k in range(500)])
            store.enqueue_many("", [(k, b"d%d-%d" % (i, k)) for k in range(40)])
        store.snapshot()
        store.enqueue_many("jobs", [(1, b"after")] * 30)
    _, records = restored(base)
    live = tflux.spark.replay(spark, str(base))
    plan = live._jdf.queryExecution().executedPlan().toString()
    assert "Join" not in plan, plan
    assert spark_records(live) == {n: rs for n, rs in records.items() if rs}
    # One RemoveRecord brings the join back (without removed ranges in the scan, see
    # test_spark_replay_ranges.py), and it still matches the restore.
    monkeypatch.setattr(tflux.spark.rebuild, "RANGE_PLAN_RANGES", 0)
    monkeypatch.setattr(tflux.spark.rebuild, "PLAN_BITS", 0)  # nor as a bitmap
    with tflux.open(base) as store:
        store.ack(store.dequeue("jobs"))
    _, records = restored(base)
    live = tflux.spark.replay(spark, str(base))
    assert "Join" in live._jdf.queryExecution().executedPlan().toString()
    assert spark_records(live) == {n: rs for n, rs in records.items() if rs}


def test_replay_keys_are_one_range_per_incarnation_or_none_past_62_bits():
    """``replay_key`` = first key of the incarnation's range + id: the ranges of all
    incarnations are disjoint and hold every id each can have; keys that would not fit in
    62 bits turn the one-long join off."""
    from tflux.spark.rebuild import _Frames, _Name

    a = _Name(start_impl=1, start_last_id=5, segments={"s1": 3, "s2": 4})
    a.events = [(20, "delete_queue", None, "s1", 2), (30, "create_queue", 1, "s2", 1)]
    b = _Name(start_impl=1, start_last_id=0, segments={"s1": 2})
    *_, keys = _Frames._plan({("base", "a"): a, ("base", "b"): b})
    # a: incarnation 0 holds ids 1..5 + 4 (the snapshot's, then the 3 adds of s1 and the
    # first of s2, before the recreate), incarnation 1 the other 3 adds of s2; b: 2 ids.
    assert keys == {0: (0, 9), 1: (9, 3), 2: (12, 2)}
    huge = _Name(start_impl=1, start_last_id=2**62, segments={})
    assert _Frames._plan({("base", "huge"): huge})[-1] is None


def test_replay_after_delete_and_recreate_restarts_ids(spark, tmp_path):
    base = tmp_path / "recreate"
    deltas = [create("q"), add("q", 1, b"a"), add("q", 2, b"b"), remove("q", 1), delete("q")]
    deltas += [create("q", 2, key_range=(0, 3)), add("q", 3, b"c"), add("q", 0, b"d")]
    deltas += [create("gone"), add("gone", 5, b"x"), delete("gone"), add("", 4, b"e")]
    with tflux.Log.open(base / "data" / "log") as log:
        log.append_many(1, deltas)
    got = spark_records(tflux.spark.replay(spark, str(base)))
    assert got == {"q": [(2, 0, b"d"), (1, 3, b"c")], "": [(1, 4, b"e")]}
    summary = {r.queue: tuple(r)[1:] for r in tflux.spark.queue_summary(spark, str(base)).collect()}
    assert summary == {"": ("heap", 1, 1), "q": ("array", 2, 2)}
    assert restored(base)[1] == {"": [(1, 4, b"e")], "q": [(2, 0, b"d"), (1, 3, b"c")]}


@pytest.mark.parametrize("plan_rows", [None, 0], ids=["in-scan", "joins"])
@pytest.mark.parametrize(
    "bad", ["missing", "twice"], ids=["remove-of-a-missing-id", "remove-twice"]
)
def test_validated_replay_raises_where_the_local_restore_does(
    spark, tmp_path, bad, plan_rows, monkeypatch
):
    from tflux.spark import rebuild

    if plan_rows is not None:  # the broadcast joins instead of the JVM reader's replayPlan
        monkeypatch.setattr(rebuild, "REPLAY_PLAN_ROWS", plan_rows)
    base = tmp_path / bad
    deltas = [create("q"), add("q", 1, b"a"), add("q", 2, b"b"), remove("q", 1)]
    deltas += [remove("q", 7)] if bad == "missing" else [remove("q", 1)]
    deltas += [add("q", 3, b"c")]
    with tflux.Log.open(base / "data" / "log") as log:
        log.append_many(1, deltas)
    with pytest.raises(tflux.ReplayError) as local:
        tflux.open(base, readonly=True)
    with pytest.raises(tflux.ReplayError) as distributed:
        tflux.spark.replay(spark, str(base), validate=True)
    assert distributed.value.lsn == local.value.lsn == 4


def test_snapshot_source_returns_the_snapshot_records(spark, tmp_path):
    base = tmp_path / "snap"
    model = generate(base, 21, 6000, snapshots=1)
    assert model.snapshot is not None
    df = spark.read.format("tflux_snapshot").load(str(base))
    assert df.columns == [
        "source", "queue", "implementation", "record_id", "key", "message", "last_index",
        "last_term",
    ]  # fmt: skip
    rows = df.collect()
    assert {(r.source, r.last_index, r.last_term) for r in rows} == {
        (str(base), model.snapshot_index, 1)
    }
    impl = {"heap": 1, "array": 2}
    got = {(r.queue, r.implementation, r.record_id, r.key, bytes(r.message)) for r in rows}
    want = {
        (n, impl[q.implementation], i, k, m)
        for n, q in model.snapshot.items()
        for i, (k, m) in q.records.items()
    }
    assert got == want and len(rows) == len(want)


def test_replay_of_several_sources_keeps_them_apart(spark, tmp_path):
    bases = [tmp_path / "n0", tmp_path / "n1"]
    models = [generate(b, 30 + i, 3000, snapshots=1) for i, b in enumerate(bases)]
    df = tflux.spark.replay(spark, ",".join(map(str, bases)))
    assert df.columns == ["source", "queue", "record_id", "key", "message"]
    for base, model in zip(bases, models, strict=True):
        got = spark_records(df.filter(df.source == str(base)))
        assert got == {n: rs for n, rs in model_records(model.queues).items() if rs}


# --- streaming -----------------------------------------------------------------------------


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_stream_sees_every_entry_once_in_order_while_a_writer_appends(spark, tmp_path):
    base = tmp_path / "live"
    settings = dict(
        log_file_soft_limit=16 << 10,
        snapshot_creation_segments_threshold=0,
        log_sync_policy="never",
    )
    store = tflux.open(base, **settings)
    store.create_queue("jobs")
    total = 1 + 40 * 50
    stop = threading.Event()

    def writer() -> None:
        for i in range(40):
            store.enqueue_many("jobs", [(i, b"m%d" % j) for j in range(50)])
            time.sleep(0.05)
            if stop.is_set():
                return

    query = (
        spark.readStream.format("tflux")
        .option("maxRecordsPerTrigger", 300)
        .load(str(base))
        .select("lsn", "kind", "key")
        .writeStream.format("memory")
        .queryName("tflux_live")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        thread.join(timeout=60)
        wait_for(lambda: spark.table("tflux_live").count() >= total, 90, f"{total} rows")
        query.processAllAvailable()
        rows = spark.table("tflux_live").collect()
        progress = query.recentProgress
    finally:
        stop.set()
        query.stop()
        thread.join()
        store.close()
    assert [r.lsn for r in rows] == list(range(total))
    assert rows[0].kind == "create_queue" and {r.kind for r in rows[1:]} == {"add_record"}
    batches = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert max(batches) <= 300 and len(batches) >= total // 300


def test_stream_restarts_from_its_checkpoint_without_gaps_or_repeats(spark, tmp_path):
    base = tmp_path / "restart"
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    rows = hand_log(base, 900)

    def run() -> None:
        query = (
            spark.readStream.format("tflux")
            .option("maxRecordsPerTrigger", 250)
            .load(str(base))
            .select("lsn", "term", "kind")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    first = pq.read_table(out).column("lsn").to_pylist()
    assert sorted(first) == list(range(len(rows)))
    # More entries, then the same query again: it resumes at the checkpointed offset.
    with tflux.Log.open(base / "data" / "log", soft_limit=8 << 10, hard_limit=16 << 10) as log:
        start = log.append_many(5, [add("jobs", 1, b"more %d" % i) for i in range(400)])
        log.commit(start + 399)
    run()
    table = pq.read_table(out)
    lsns = sorted(table.column("lsn").to_pylist())
    assert lsns == list(range(len(rows) + 400))
    batches = len(glob.glob(str(checkpoint / "commits" / "*")))
    assert batches >= (len(rows) + 400) // 250


# --- Parquet export --------------------------------------------------------------------------


def test_export_writes_log_and_snapshot_parquet_without_spark(tmp_path):
    base = tmp_path / "export"
    model = generate(base, 41, 5000, snapshots=1)
    out = tmp_path / "out"
    counts = tflux.parquet.export(base, out)
    log = pq.read_table(out / "log.parquet")
    snap = pq.read_table(out / "snapshot.parquet")
    log_dir = base / "data" / "log"
    first = int(segment_files(log_dir)[0][:19])
    assert counts == {"log": log.num_rows, "snapshot": snap.num_rows}
    assert log.column("lsn").to_pylist() == list(range(first, model.deltas))
    assert log.column_names == COLUMNS
    want = {(n, i) for n, q in model.snapshot.items() for i in q.records}
    pairs = zip(snap.column("queue").to_pylist(), snap.column("record_id").to_pylist(), strict=True)
    assert set(pairs) == want
    # Same rows as Spark reading the directory.
    assert log.schema.field("message").type == pa.binary()


def test_exported_parquet_matches_the_spark_source(spark, written, tmp_path):
    base, _ = written
    tflux.parquet.export(base, tmp_path / "out")
    from_parquet = spark.read.parquet(str(tmp_path / "out" / "log.parquet"))
    from_source = spark.read.format("tflux").load(str(base))
    # The export widens term to int64, snapshot.parquet's last_term type (issue 43, defect 22):
    # otherwise the same columns as the source.
    assert from_source.schema["term"].dataType.simpleString() == "int"
    assert from_parquet.schema["term"].dataType.simpleString() == "bigint"
    from_source = from_source.withColumn("term", from_source["term"].cast("long"))
    assert from_parquet.schema == from_source.schema
    assert from_parquet.exceptAll(from_source).count() == 0
    assert from_source.exceptAll(from_parquet).count() == 0


def test_core_import_does_not_load_pyspark_or_pyarrow():
    code = "import sys, tflux; print('pyspark' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_register_returns_the_session_with_both_formats(spark, tmp_path):
    assert tflux.spark.register(spark) is spark
    schema = spark.read.format("tflux_snapshot").load(str(tmp_path)).schema
    assert isinstance(schema, StructType) and schema.names[0] == "source"
