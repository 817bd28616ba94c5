"""``tflux.read_snapshot_batch`` of a task-layout snapshot (spec section 12, issue 44): each
record's ``due`` and ``attempts`` (``to_arrow(tasks=True)``) and each queue's rules
(``SnapshotBatch.rules``), from the core's one snapshot decoder, against the shared vectors of
``tests/data/task`` and against what a local restore holds. Other snapshots keep their schema.
"""

from __future__ import annotations

import json

import pytest
import tflux
from conftest import DATA_DIR

pa = pytest.importorskip("pyarrow")

TASK = DATA_DIR / "task"
GOOD = json.loads((TASK / "task_snapshot.json").read_text())["tasks.snapshot"]
PLAIN_COLUMNS = ["queue", "implementation", "record_id", "key", "message"]
# 2100-01-01 in unix ms: never due while a test runs.
LATER = 4_102_444_800_000


def task_rows(batch) -> dict[tuple[str, int], tuple[int | None, int]]:
    table = batch.to_arrow(tasks=True)
    assert table.schema.names == [*PLAIN_COLUMNS, "due", "attempts"]
    assert table.schema.field("due").type == pa.int64()
    assert table.schema.field("attempts").type == pa.int32()
    cols = [table.column(c).to_pylist() for c in ["queue", "record_id", "due", "attempts"]]
    return {(q, rid): (due, n) for q, rid, due, n in zip(*cols, strict=True)}


def test_the_task_snapshot_vector_gives_each_records_due_and_attempts_and_each_queues_rules():
    batch = tflux.read_snapshot_batch(TASK / "tasks.snapshot")
    want = {}
    for q in GOOD["queues"]:
        tasks = next((t for t in GOOD["tasks"] if t["queue"] == q["queue"]), None)
        delayed = dict(map(tuple, tasks["delayed"])) if tasks else {}
        attempts = dict(map(tuple, tasks["attempts"])) if tasks else {}
        for r in q["records"]:
            want[(q["queue"], r["id"])] = (delayed.get(r["id"]), attempts.get(r["id"], 0))
    assert task_rows(batch) == want
    assert any(due is not None for due, _ in want.values())
    assert any(n for _, n in want.values())
    assert {q: json.loads(text) for q, text in batch.rules.items()} == {
        t["queue"]: t["rules"] for t in GOOD["tasks"]
    }
    assert list(batch.rules) == batch.task_queues


def test_without_tasks_the_schema_stays_the_plain_one_for_every_layout():
    for path in [DATA_DIR / "tflux.snapshot", TASK / "tasks.snapshot"]:
        assert tflux.read_snapshot_batch(path).to_arrow().schema.names == PLAIN_COLUMNS


def test_a_plain_snapshot_has_every_record_ready_and_uncounted_and_no_rules():
    batch = tflux.read_snapshot_batch(DATA_DIR / "tflux.snapshot")
    rows = task_rows(batch)
    assert len(rows) == len(batch) > 0
    assert set(rows.values()) == {(None, 0)}
    assert batch.rules == {} and batch.task_queues == []


def test_a_store_written_task_snapshot_matches_the_restored_store(tmp_path):
    base = tmp_path / "base"
    with tflux.open(base) as store:
        store.create_queue("jobs-dead")
        store.create_queue("jobs", dead_letter=("jobs-dead", 4), retry_delay=1.5, lease=30)
        store.create_queue("plain")
        store.enqueue("plain", 0, b"p")
        store.enqueue("jobs", 3, b"now")
        store.enqueue("jobs", 1, b"later", at=LATER / 1000)
        store.enqueue("jobs", 5, b"twice")
        for _ in range(2):  # record 3 (key 5) is taken after record 1
            taken = [store.dequeue("jobs", timeout=0) for _ in range(2)]
            for rec in taken:
                store.nack(rec, delay=0)
        assert store.snapshot()
    batch = tflux.read_snapshot_batch(base / "data" / "tflux.snapshot")
    rows = task_rows(batch)
    with tflux.open(base, readonly=True) as store:
        ready = {(q, r.id): (None, r.attempts) for q in ("jobs", "plain") for r in store.records(q)}
        rules = store.queue_rules("jobs")
    assert ready == {("jobs", 1): (None, 2), ("jobs", 3): (None, 2), ("plain", 1): (None, 0)}
    assert rows == {**ready, ("jobs", 2): (LATER, 0)}
    assert rules == (("jobs-dead", 4), 1.5, None, None, 30.0)
    assert batch.task_queues == ["jobs"]
    assert json.loads(batch.rules["jobs"]) == {
        "dead_letter": ["jobs-dead", 4],
        "retry_delay_ms": 1500,
        "retry_backoff": None,
        "retry_max_delay_ms": None,
        "lease_ms": 30000,
    }
