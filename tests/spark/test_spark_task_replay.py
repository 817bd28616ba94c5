"""``tflux.spark.replay`` and ``queue_summary`` of bases holding task-queue state (spec section
12, issue 44) against the local restore: the records, their due times and attempts, and the
queues' rules and counts that ``tflux.open`` restores, read back from the snapshot the store
then writes (parsed here with ``struct``, from docs/format.md, not by tflux).

The logs are written delta by delta (``tflux.Log``) so every kind and every order the state
machine accepts can occur, including what the live store never writes but a replay must apply
the same (a Delivered or Failed of a record still delayed: the live store had promoted it,
and with it every record due no later).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import tflux
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_jvm_twins import jvm_spark  # noqa: F401 (fixture)

RULES = ("dead_letter", "retry_delay_ms", "retry_backoff", "retry_max_delay_ms", "lease_ms")
NARROW, WIDE, TASKS = (
    bytes.fromhex("B6380FC9"),
    bytes.fromhex("B6380FCA"),
    bytes.fromhex("B6380FCB"),
)
# Due times after T (2100-01-01 in unix ms): never due while a test runs, so no store promotes
# a record by the clock between the open and the snapshot of the local restore.
T = 4_102_444_800_000


# --- the task-queue deltas, from docs/format.md "Task-queue deltas" --------------------------


def name(q: str) -> bytes:
    return bytes([len(q)]) + q.encode()


def change(v) -> bytes:
    """Change<Int64>: "keep" absent, None cleared, an int set."""
    if v == "keep":
        return b"\x00"
    return b"\x01\x00" if v is None else b"\x01\x01" + struct.pack(">q", v)


def rules_delta(q: str, dead_letter="keep", lease="keep") -> bytes:
    if dead_letter == "keep":
        dead = b"\x00"
    elif dead_letter is None:
        dead = b"\x01\x00"
    else:
        dead = b"\x01\x01" + name(dead_letter[0]) + struct.pack(">i", dead_letter[1])
    return b"Q" + name(q) + dead + change("keep") * 3 + change(lease)


def add_later(q: str, key: int, due: int, message: bytes) -> bytes:
    return b"L" + name(q) + struct.pack(">qqi", key, due, len(message)) + message


def delivered(q: str, rid: int) -> bytes:
    return b"V" + name(q) + struct.pack(">Q", rid)


def failed(q: str, rid: int, due: int) -> bytes:
    return b"F" + name(q) + struct.pack(">Qq", rid, due)


def purge(q: str, kept: list[int]) -> bytes:
    return (
        b"P" + name(q) + struct.pack(">i", len(kept)) + b"".join(struct.pack(">Q", k) for k in kept)
    )


# --- the snapshot a store writes, read back -------------------------------------------------


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        out = struct.unpack(fmt, self.data[self.at : self.at + size])
        self.at += size
        return out if len(out) > 1 else out[0]

    def name(self) -> str:
        n = self.take(">B")
        self.at += n
        return self.data[self.at - n : self.at].decode()

    def buffer(self) -> bytes:
        n = self.take(">i")
        self.at += n
        return self.data[self.at - n : self.at]


def read_snapshot(path: Path) -> tuple[dict, dict]:
    """``{queue: {"last_id", "records": {id: (key, message)}}}`` and ``{queue: {"rules",
    "delayed": {id: due}, "attempts": {id: n}}}`` of a snapshot file (section 4, 4.1, 12)."""
    r = Reader(path.read_bytes())
    marker = r.data[:4]
    r.at = 4
    r.take(">ii" if marker == NARROW else ">qq")
    state = Reader(r.buffer())
    tasks_bytes = r.buffer() if marker == TASKS else None
    queues = {}
    for _ in range(state.take(">i")):
        q = state.name()
        _, last_id, _, _ = state.take(">iQii")
        if state.take(">B"):
            state.take(">qq")
        records = {}
        for _ in range(state.take(">i")):
            rid, key = state.take(">Qq")
            records[rid] = (key, state.buffer())
        queues[q] = {"last_id": last_id, "records": records}
    tasks = {}
    if tasks_bytes is not None:
        t = Reader(tasks_bytes)
        for _ in range(t.take(">i")):
            q = t.name()
            rules = dict.fromkeys(RULES)
            if t.take(">B") and t.take(">B"):
                rules["dead_letter"] = [t.name(), t.take(">i")]
            for k in RULES[1:]:
                if t.take(">B") and t.take(">B"):
                    rules[k] = t.take(">q")
            delayed = dict(t.take(">Qq") for _ in range(t.take(">i")))
            attempts = dict(t.take(">Qi") for _ in range(t.take(">i")))
            tasks[q] = {"rules": rules, "delayed": delayed, "attempts": attempts}
    return queues, tasks


def local_restore(base: Path, tmp: Path) -> tuple[list[tuple], list[tuple]]:
    """What ``tflux.open`` restores from ``base`` (a copy opened, snapshotted, read back):
    the rows ``replay`` gives (queue, id, key, message, due, attempts) and those of
    ``queue_summary`` (queue, count of ready records, last id, rules)."""
    copy = tmp / "local"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(base, copy)
    with tflux.open(copy) as store:
        written = store.snapshot()
    if written or (copy / "data" / "tflux.snapshot").exists():
        queues, tasks = read_snapshot(copy / "data" / "tflux.snapshot")
    else:  # nothing logged, no snapshot (an empty workload): the default queue alone
        queues, tasks = {"": {"last_id": 0, "records": {}}}, {}
    rows, summary = [], []
    for q, info in queues.items():
        t = tasks.get(q, {"rules": dict.fromkeys(RULES), "delayed": {}, "attempts": {}})
        for rid, (key, message) in info["records"].items():
            rows.append((q, rid, key, message, t["delayed"].get(rid), t["attempts"].get(rid, 0)))
        ready = len(info["records"]) - len(t["delayed"])
        summary.append((q, ready, info["last_id"], t["rules"]))
    return sorted(rows), sorted(summary, key=lambda r: r[0])


# The JVM reader, and the Python sources (the core's columns; no jar): both read the task
# state of a snapshot, and replay with either equals the local restore.
SOURCES = ["tflux", "tflux_python"]


def python_replay(spark, base: Path) -> tuple:
    """``tflux.spark.replay`` and ``queue_summary`` with the Python sources: the plain path,
    handing over to the task path where it meets task-queue state (as ``replay`` does)."""
    from tflux.spark import _tasks, rebuild

    path = str(base)
    try:
        frames = rebuild._Frames(spark, path, fmt="tflux_python")
    except Exception as exc:
        if not _tasks.met_tasks(exc):
            raise
        return (
            _tasks.replay(spark, path, fmt="tflux_python"),
            _tasks.queue_summary(spark, path, fmt="tflux_python"),
        )
    return frames.output(frames.live()), frames.output(frames.summary())


def spark_restore(spark, base: Path, fmt: str = "tflux") -> tuple[list[tuple], list[tuple]]:
    """Spark's rows in ``local_restore``'s shape (read with the ``fmt`` sources). A base without
    task-queue state takes the plain path, whose rows have no ``due``, ``attempts`` and
    ``rules``: none, 0 and none."""
    if fmt == "tflux":
        df = tflux.spark.replay(spark, str(base))
        summary_df = tflux.spark.queue_summary(spark, str(base))
    else:
        df, summary_df = python_replay(spark, base)
    plain = ["queue", "record_id", "key", "message"]
    assert df.columns in (plain, [*plain, "due", "attempts"])
    rows = sorted(
        (
            r.queue,
            r.record_id,
            r.key,
            bytes(r.message),
            *((r.due, r.attempts) if len(r) > 4 else (None, 0)),
        )
        for r in df.collect()
    )
    summary = sorted(
        (
            r.queue,
            r["count"],
            r.last_id,
            json.loads(r.rules) if "rules" in r.asDict() else dict.fromkeys(RULES),
        )
        for r in summary_df.collect()
    )
    return rows, summary


def write_base(base: Path, entries: list[bytes]) -> None:
    with tflux.open(base):
        pass
    with tflux.Log.open(base / "data" / "log") as log:
        log.append_many(1, entries)


# --- a workload the state machine accepts ---------------------------------------------------

QUEUES = ["", "jobs", "dead"]


class Model:
    """Which ids are present per queue (enough to write only what a restore accepts)."""

    def __init__(self) -> None:
        self.present: dict[str, set[int]] = {"": set()}
        self.last: dict[str, int] = {"": 0}

    def add(self, q: str) -> None:
        self.last[q] += 1
        self.present[q].add(self.last[q])


@st.composite
def workloads(draw) -> list[bytes]:
    m = Model()
    out: list[bytes] = []
    for _ in range(draw(st.integers(1, 40))):
        q = draw(st.sampled_from(QUEUES))
        if q not in m.present:
            out.append(tflux.Delta.create_queue(q).encode())
            m.present[q], m.last[q] = set(), 0
            continue
        ids = sorted(m.present[q])
        op = draw(
            st.sampled_from(
                ["add", "later", "remove", "delivered", "failed", "purge", "rules", "delete"]
            )
        )
        key = draw(st.integers(-2, 2))
        due = T + draw(st.sampled_from([100, 200, 300, 400]))
        if op == "add":
            out.append(tflux.Delta.add_record(q, key, b"m%d" % len(out)).encode())
            m.add(q)
        elif op == "later":
            out.append(add_later(q, key, due, b"l%d" % len(out)))
            m.add(q)
        elif op in ("remove", "delivered", "failed") and ids:
            rid = draw(st.sampled_from(ids))
            if op == "remove":
                out.append(tflux.Delta.remove_record(q, rid).encode())
                m.present[q].discard(rid)
            elif op == "delivered":
                out.append(delivered(q, rid))
            else:
                out.append(failed(q, rid, due))
        elif op == "purge":
            kept = draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
            out.append(purge(q, sorted(kept)))
            m.present[q] = set(kept)
        elif op == "rules":
            other = "dead" if q != "dead" else "jobs"
            dead = draw(st.sampled_from(["keep", None, (other, 3)]))
            lease = draw(st.sampled_from(["keep", None, 30_000]))
            out.append(rules_delta(q, dead, lease))
        elif op == "delete" and q:
            out.append(tflux.Delta.delete_queue(q).encode())
            del m.present[q], m.last[q]
    return out


# --- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", SOURCES)
def test_a_delivery_of_a_delayed_record_readies_every_record_due_no_later(jvm_spark, tmp_path, fmt):  # noqa: F811
    # AddLater ids 1 (due 200), 2 (due 100), 3 (due 300), a ready 4; Delivered 1 readies 1 and
    # 2 (as the live store had, by the clock), not 3; Failed 2 delays it again until 500; the
    # queue's dead-letter rule starts after one counted delivery, which it forgets.
    entries = [
        tflux.Delta.create_queue("jobs").encode(),
        add_later("jobs", 0, T + 200, b"a"),
        add_later("jobs", 0, T + 100, b"b"),
        add_later("jobs", 0, T + 300, b"c"),
        tflux.Delta.add_record("jobs", 0, b"d").encode(),
        delivered("jobs", 4),
        rules_delta("jobs", ("dead", 2), 60_000),
        delivered("jobs", 1),
        failed("jobs", 2, T + 500),
        delivered("jobs", 1),
    ]
    base = tmp_path / "base"
    write_base(base, entries)
    rows, summary = spark_restore(jvm_spark, base, fmt)
    assert rows == [
        ("jobs", 1, 0, b"a", None, 2),
        ("jobs", 2, 0, b"b", T + 500, 0),
        ("jobs", 3, 0, b"c", T + 300, 0),
        ("jobs", 4, 0, b"d", None, 0),
    ]
    want_rules = {**dict.fromkeys(RULES), "dead_letter": ["dead", 2], "lease_ms": 60_000}
    assert summary == [("", 0, 0, dict.fromkeys(RULES)), ("jobs", 2, 4, want_rules)]
    assert (rows, summary) == local_restore(base, tmp_path)


@pytest.mark.parametrize("fmt", SOURCES)
def test_a_purge_keeps_its_ids_and_the_records_added_after_it(jvm_spark, tmp_path, fmt):  # noqa: F811
    entries = [
        tflux.Delta.add_record("", 1, b"a").encode(),
        add_later("", 1, T + 100, b"b"),
        tflux.Delta.add_record("", 1, b"c").encode(),
        purge("", [2]),
        tflux.Delta.add_record("", 0, b"d").encode(),
    ]
    base = tmp_path / "base"
    write_base(base, entries)
    rows, _ = spark_restore(jvm_spark, base, fmt)
    assert rows == [("", 2, 1, b"b", T + 100, 0), ("", 4, 0, b"d", None, 0)]
    assert spark_restore(jvm_spark, base, fmt) == local_restore(base, tmp_path)


@pytest.mark.parametrize("fmt", SOURCES)
def test_replay_reads_a_task_snapshot_then_the_log_after_it(jvm_spark, tmp_path, fmt):  # noqa: F811
    base = tmp_path / "base"
    write_base(
        base,
        [
            tflux.Delta.create_queue("jobs").encode(),
            rules_delta("jobs", ("dead", 5)),
            add_later("jobs", 3, T + 100, b"a"),
            tflux.Delta.add_record("jobs", 3, b"b").encode(),
            delivered("jobs", 2),
        ],
    )
    with tflux.open(base) as store:
        store.snapshot()
    with tflux.Log.open(base / "data" / "log") as log:
        log.append_many(1, [delivered("jobs", 2), add_later("jobs", 0, T + 50, b"c")])
    rows, summary = spark_restore(jvm_spark, base, fmt)
    assert rows == [
        ("jobs", 1, 3, b"a", T + 100, 0),
        ("jobs", 2, 3, b"b", None, 2),
        ("jobs", 3, 0, b"c", T + 50, 0),
    ]
    assert (rows, summary) == local_restore(base, tmp_path)


def test_a_bad_rule_in_the_log_is_the_cores_replay_error_naming_its_lsn(jvm_spark, tmp_path):  # noqa: F811
    base = tmp_path / "base"
    write_base(base, [tflux.Delta.create_queue("jobs").encode(), rules_delta("jobs", ("jobs", 1))])
    with pytest.raises(tflux.ReplayError, match="dead-letter to itself") as info:
        tflux.spark.replay(jvm_spark, str(base)).collect()
    assert info.value.lsn == 1


def test_validate_on_the_task_path_refuses_a_removal_of_a_missing_record(jvm_spark, tmp_path):  # noqa: F811
    base = tmp_path / "base"
    write_base(base, [add_later("", 0, T, b"a"), tflux.Delta.remove_record("", 5).encode()])
    with pytest.raises(tflux.ReplayError, match="record id 5 is not in queue ''") as info:
        tflux.spark.replay(jvm_spark, str(base), validate=True)
    assert info.value.lsn == 1


@pytest.mark.parametrize("fmt", SOURCES)
def test_a_task_snapshot_alone_hands_the_plain_path_over_to_the_task_path(jvm_spark, tmp_path, fmt):  # noqa: F811
    # The log after the snapshot is empty: the snapshot's task state (rules, a delayed record,
    # counted deliveries) is all the task path has to read, with either snapshot source.
    from tflux.spark import _tasks, rebuild

    base = tmp_path / "base"
    write_base(
        base,
        [
            tflux.Delta.create_queue("dead").encode(),
            tflux.Delta.create_queue("jobs").encode(),
            rules_delta("jobs", ("dead", 3), 45_000),
            add_later("jobs", 2, T + 9, b"a"),
            tflux.Delta.add_record("jobs", 1, b"b").encode(),
            delivered("jobs", 2),
            delivered("jobs", 2),
            tflux.Delta.add_record("", 0, b"c").encode(),
        ],
    )
    with tflux.open(base) as store:
        store.snapshot()
    snap = tflux.read_snapshot(base / "data" / "tflux.snapshot")
    with tflux.Log.open(base / "data" / "log") as log:
        assert log.last_index <= snap.last_index  # nothing logged after the snapshot
    with pytest.raises(_tasks.HasTasks, match="task-queue state of queue 'jobs'"):
        rebuild._Frames(jvm_spark, str(base), fmt=fmt)
    rows, summary = spark_restore(jvm_spark, base, fmt)
    assert rows == [
        ("", 1, 0, b"c", None, 0),
        ("jobs", 1, 2, b"a", T + 9, 0),
        ("jobs", 2, 1, b"b", None, 2),
    ]
    rules = {**dict.fromkeys(RULES), "dead_letter": ["dead", 3], "lease_ms": 45_000}
    assert summary == [
        ("", 1, 1, dict.fromkeys(RULES)),
        ("dead", 0, 0, dict.fromkeys(RULES)),
        ("jobs", 1, 2, rules),
    ]
    assert (rows, summary) == local_restore(base, tmp_path)


def test_the_python_source_takes_the_task_path_too(jvm_spark, tmp_path):  # noqa: F811
    from tflux.spark import _tasks

    base = tmp_path / "base"
    write_base(
        base,
        [
            rules_delta("", ("dead", 2)),
            add_later("", 0, T + 9, b"a"),
            delivered("", 1),
            failed("", 1, T + 20),
        ],
    )
    frames = _tasks.TaskFrames(jvm_spark, str(base), fmt="tflux_python")
    got = [(r.record_id, r.due, r.attempts) for r in frames.live.collect()]
    assert got == [(1, T + 20, 1)]


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(entries=workloads(), snapshot_at=st.integers(0, 40))
@example(entries=[], snapshot_at=0)  # nothing logged: the local side writes no snapshot
@pytest.mark.parametrize("fmt", SOURCES)
def test_replay_equals_the_local_restore_for_random_task_queue_workloads(
    jvm_spark,  # noqa: F811
    tmp_path_factory,
    fmt,
    entries,
    snapshot_at,
):
    tmp = tmp_path_factory.mktemp("work")
    base = tmp / "base"
    head, tail = entries[:snapshot_at], entries[snapshot_at:]
    write_base(base, head)
    if head and tail:  # a snapshot (the task layout when there is task state) in the middle
        with tflux.open(base) as store:
            store.snapshot()
    if tail:
        with tflux.Log.open(base / "data" / "log") as log:
            log.append_many(1, tail)
    assert spark_restore(jvm_spark, base, fmt) == local_restore(base, tmp)
