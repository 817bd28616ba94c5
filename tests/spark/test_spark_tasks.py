"""Spark and the JVM reader on what the task queue writes (spec section 12, issue 44).

The task-layout snapshot vectors of ``tests/data/task`` (``make_task_snapshot.py``, ``struct``
and ``zlib.crc32`` alone; ``task_snapshot.json`` says what each holds) are read by the core
(``rust/core/tests/task_snapshot_vectors.rs``), by the Python API here and by the JVM reader
(its decoders through ``io.tflux.spark.Dump``, and ``format("tflux_snapshot")``), so the two
readers are held to the same bytes.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import tflux
from conftest import DATA_DIR
from test_jvm_twins import jvm_dump, jvm_spark  # noqa: F401 (fixtures)

TASK = DATA_DIR / "task"
SNAPSHOTS = json.loads((TASK / "task_snapshot.json").read_text())
GOOD = SNAPSHOTS["tasks.snapshot"]
BAD = sorted(k for k, v in SNAPSHOTS.items() if isinstance(v, dict) and "error" in v)


def want_rows() -> list[tuple]:
    """(queue, implementation, id, key, message) of every record (delayed ones included), by
    queue name and ascending id."""
    rows = [
        (q["queue"], q["implementation"], r["id"], r["key"], bytes.fromhex(r["message_hex"]))
        for q in GOOD["queues"]
        for r in q["records"]
    ]
    return sorted(rows, key=lambda r: (r[0], r[2]))


# --- the vectors are their generator's ----------------------------------------------------


def test_the_task_snapshot_vectors_are_what_their_spec_generator_writes():
    spec = importlib.util.spec_from_file_location("task_snapshot", TASK / "make_task_snapshot.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    files, manifest = gen.build()
    assert {p.name for p in TASK.glob("*.snapshot")} == set(files)
    for name, data in files.items():
        assert (TASK / name).read_bytes() == data, name
    assert json.loads(json.dumps(manifest)) == SNAPSHOTS


# --- the core, through the Python API -----------------------------------------------------


def test_python_reads_the_task_snapshot_vectors_records_and_names_its_task_queues():
    batch = tflux.read_snapshot_batch(TASK / "tasks.snapshot")
    assert (batch.last_index, batch.last_term) == (GOOD["last_index"], GOOD["last_term"])
    table = batch.to_arrow()
    got = sorted(
        zip(
            *(table.column(c).to_pylist() for c in ["queue", "implementation", "record_id"]),
            table.column("key").to_pylist(),
            table.column("message").to_pylist(),
            strict=True,
        ),
        key=lambda r: (r[0], r[2]),
    )
    assert got == want_rows()
    assert batch.task_queues == [t["queue"] for t in GOOD["tasks"]]


@pytest.mark.parametrize("vector", BAD)
def test_python_refuses_each_bad_task_snapshot_vector_at_its_offset(vector):
    want = SNAPSHOTS[vector]
    with pytest.raises(tflux.CorruptionError) as info:
        tflux.read_snapshot_batch(TASK / vector)
    assert info.value.offset == want["error_offset"]
    assert want["error"] in str(info.value)


# --- the JVM reader's decoders, without Spark ---------------------------------------------


def test_the_jvm_decodes_the_task_snapshot_vector_as_the_core_does(jvm_dump):  # noqa: F811
    rows, error = jvm_dump("snapshot", str(TASK / "tasks.snapshot"))
    assert error is None
    assert rows[0] == {"last_index": GOOD["last_index"], "last_term": GOOD["last_term"]}
    records = [r for r in rows[1:] if "record_id" in r]
    got = [
        (
            r["queue"],
            r["implementation"],
            int(r["record_id"]),
            r["key"],
            bytes.fromhex(r["message"]),
        )
        for r in records
    ]
    assert got == want_rows()
    tasks = [
        {
            "queue": r["tasks"],
            "rules": r["rules"],
            "delayed": r["delayed"],
            "attempts": r["attempts"],
        }
        for r in rows[1:]
        if "tasks" in r
    ]
    assert tasks == GOOD["tasks"]


def test_the_jvm_refuses_each_bad_task_snapshot_vector_at_its_offset(jvm_dump):  # noqa: F811
    for vector in BAD:
        want = SNAPSHOTS[vector]
        path = TASK / vector
        rows, error = jvm_dump("snapshot", str(path))
        assert rows == [] and error is not None, vector
        assert f"corrupt {path} at offset {want['error_offset']}: {want['error']}" in error


def test_the_jvm_reads_the_task_state_a_store_writes(jvm_dump, tmp_path):  # noqa: F811
    # A real store's task-layout snapshot (the core's encoder): its rules, delays and counted
    # deliveries as the store holds them.
    base = tmp_path / "base"
    due = 4_102_444_800_000  # 2100-01-01, in unix ms: never due during the test
    with tflux.open(base) as store:
        store.create_queue("jobs-dead")
        store.create_queue("jobs", dead_letter=("jobs-dead", 4), retry_delay=1.5, lease=30)
        store.enqueue("jobs", 3, b"now")
        store.enqueue("jobs", 1, b"later", at=due / 1000)
        taken = store.dequeue("jobs", timeout=0)
        assert taken is not None and taken.attempts == 1
        store.nack(taken, delay=0)
        assert store.snapshot()
    rows, error = jvm_dump("snapshot", str(base / "data" / "tflux.snapshot"))
    assert error is None
    (tasks,) = [r for r in rows if "tasks" in r]
    assert tasks == {
        "tasks": "jobs",
        "rules": {
            "dead_letter": ["jobs-dead", 4],
            "retry_delay_ms": 1500,
            "retry_backoff": None,
            "retry_max_delay_ms": None,
            "lease_ms": 30000,
        },
        "delayed": [[2, due]],
        "attempts": [[1, 1]],
    }


# --- Spark: the snapshot sources ------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["tflux_snapshot", "tflux_snapshot_python"])
def test_spark_reads_the_task_snapshot_vectors_records_in_both_sources(jvm_spark, fmt):  # noqa: F811
    df = jvm_spark.read.format(fmt).load(str(TASK / "tasks.snapshot"))
    rows = df.collect()
    assert {(r.last_index, r.last_term) for r in rows} == {(GOOD["last_index"], GOOD["last_term"])}
    got = sorted(
        ((r.queue, r.implementation, r.record_id, r.key, bytes(r.message)) for r in rows),
        key=lambda r: (r[0], r[2]),
    )
    assert got == want_rows()


@pytest.mark.parametrize("fmt", ["tflux_snapshot", "tflux_snapshot_python"])
def test_spark_fails_on_a_bad_task_snapshot_naming_file_and_offset(jvm_spark, fmt):  # noqa: F811
    path = TASK / "tasks_flipped.snapshot"
    offset = SNAPSHOTS["tasks_flipped.snapshot"]["error_offset"]
    with pytest.raises(Exception, match=f"corrupt {path} at offset {offset}: checksum mismatch"):
        jvm_spark.read.format(fmt).load(str(path)).collect()


def vector_task_rows() -> list[tuple]:
    """(queue, id, due, attempts) of every record of the vector, by queue name and id."""
    rows = []
    for q in GOOD["queues"]:
        tasks = next((t for t in GOOD["tasks"] if t["queue"] == q["queue"]), None)
        delayed = dict(map(tuple, tasks["delayed"])) if tasks else {}
        attempts = dict(map(tuple, tasks["attempts"])) if tasks else {}
        for r in q["records"]:
            rows.append((q["queue"], r["id"], delayed.get(r["id"]), attempts.get(r["id"], 0)))
    return sorted(rows)


@pytest.mark.parametrize("fmt", ["tflux_snapshot", "tflux_snapshot_python"])
def test_spark_reads_the_task_snapshot_vectors_due_and_attempts_in_both_sources(jvm_spark, fmt):  # noqa: F811
    df = jvm_spark.read.format(fmt).option("tasks", "true").load(str(TASK / "tasks.snapshot"))
    got = sorted((r.queue, r.record_id, r.due, r.attempts) for r in df.collect())
    assert got == vector_task_rows()


def test_both_snapshot_sources_have_one_schema_with_and_without_tasks(jvm_spark):  # noqa: F811
    path = str(TASK / "tasks.snapshot")
    for tasks in ("false", "true"):
        jvm, python = (
            jvm_spark.read.format(fmt).option("tasks", tasks).load(path).schema
            for fmt in ("tflux_snapshot", "tflux_snapshot_python")
        )
        assert jvm == python
        assert [f.nullable for f in python] == [True] * len(python)
    assert python.names[-2:] == ["due", "attempts"]
    assert [f.dataType.simpleString() for f in python][-2:] == ["bigint", "int"]


def test_both_snapshot_sources_read_a_store_written_task_snapshot_as_the_store_restores_it(
    jvm_spark,  # noqa: F811
    tmp_path,
):
    base = tmp_path / "base"
    due = 4_102_444_800_000  # 2100-01-01, in unix ms: never due during the test
    with tflux.open(base) as store:
        store.create_queue("jobs-dead")
        store.create_queue("jobs", dead_letter=("jobs-dead", 4), retry_delay=1.5, lease=30)
        store.enqueue("jobs", 3, b"now")
        store.enqueue("jobs", 1, b"later", at=due / 1000)
        store.enqueue("", 0, b"plain")
        taken = store.dequeue("jobs", timeout=0)
        store.nack(taken, delay=0)
        assert store.snapshot()
    with tflux.open(base, readonly=True) as store:
        want = {
            (q, r.id, r.key, r.payload, None, r.attempts)
            for q in ("", "jobs")
            for r in store.records(q)
        }
    want.add(("jobs", 2, 1, b"later", due, 0))
    for fmt in ("tflux_snapshot", "tflux_snapshot_python"):
        df = jvm_spark.read.format(fmt).option("tasks", "true").load(str(base))
        rows = df.collect()
        got = {(r.queue, r.record_id, r.key, bytes(r.message), r.due, r.attempts) for r in rows}
        assert got == want, fmt
