"""Columnar views (Log.read_deltas, read_snapshot_batch): the Arrow path used by Spark and Parquet.

Expected values come from deltas built by hand (spec section 6) and from the golden snapshot's
manifest, never from tflux output.
"""

from __future__ import annotations

import itertools
import json
import struct

import pyarrow as pa
import pytest
import tflux
from _task_vectors import RULES_SET_ALL_TEXT, column_rows
from conftest import DATA_DIR


def name(q: bytes) -> bytes:
    return bytes([len(q)]) + q


def create(q, impl, max_size, max_msg, key_range):
    tail = b"\x00" if key_range is None else b"\x01" + struct.pack(">qq", *key_range)
    return b"C" + name(q) + struct.pack(">iii", impl, max_size, max_msg) + tail


def add(q, key, msg):
    return b"A" + name(q) + struct.pack(">qi", key, len(msg)) + msg


def remove(q, rid):
    return b"R" + name(q) + struct.pack(">Q", rid)


def delete(q):
    return b"D" + name(q)


ROWS = [
    (create(b"jobs", 2, 50, -1, (-3, 9)), dict(kind="create_queue", queue="jobs", implementation=2,
     max_queue_size=50, max_message_size=-1, key_min=-3, key_max=9)),
    (add(b"jobs", -3, b"hello"), dict(kind="add_record", queue="jobs", key=-3, message=b"hello")),
    (add(b"", 7, b""), dict(kind="add_record", queue="", key=7, message=b"")),
    (remove(b"jobs", 1), dict(kind="remove_record", queue="jobs", record_id=1)),
    (delete(b"jobs"), dict(kind="delete_queue", queue="jobs")),
]  # fmt: skip

COLUMNS = ["lsn", "term", "kind", "queue", "key", "record_id", "message", "implementation",
           "max_queue_size", "max_message_size", "key_min", "key_max", "due", "kept_ids",
           "rules"]  # fmt: skip


@pytest.fixture
def log(tmp_path):
    with tflux.Log.open(tmp_path / "log", sync="never") as log:
        log.append_many(3, [data for data, _ in ROWS])
        yield log


def test_every_delta_kind_fills_its_columns_and_leaves_the_others_null(log):
    table = log.read_deltas().to_arrow()
    assert table.schema.names == COLUMNS
    assert table.schema.field("message").type == pa.binary()  # Spark needs int32 offsets
    for lsn, (row, (_, fields)) in enumerate(zip(table.to_pylist(), ROWS, strict=True)):
        expected = dict.fromkeys(COLUMNS)
        expected.update(lsn=lsn, term=3, **fields)
        assert row == expected


def task_row(row: dict) -> dict:
    """``row`` with its ``rules`` JSON parsed (compared as the vectors' fields)."""
    if row["rules"] is not None:
        row = {**row, "rules": json.loads(row["rules"])}
    return row


@pytest.mark.parametrize("part", [1, 3])
def test_every_task_queue_delta_vector_fills_its_columns_and_leaves_the_others_null(tmp_path, part):
    # Spec section 12's deltas between TaskFlux's, in batches that start at every entry.
    pairs = itertools.zip_longest(ROWS, column_rows())
    rows = [r for pair in pairs for r in pair if r is not None]
    with tflux.Log.open(tmp_path / "log", sync="never") as log:
        log.append_many(2, [data for data, _ in rows])
        for start in range(0, len(rows), part):
            table = log.read_deltas(start, start + part).to_arrow()
            assert table.schema.names == COLUMNS
            assert table.schema.field("kept_ids").type == pa.list_(pa.int64())
            table.validate(full=True)
            got = table.to_pylist()
            for lsn, row in enumerate(got, start):
                expected = dict.fromkeys(COLUMNS)
                expected.update(lsn=lsn, term=2, **rows[lsn][1])
                assert task_row(row) == expected
        rules = log.read_deltas(1, 2).to_arrow().column("rules").to_pylist()
        assert rules == [RULES_SET_ALL_TEXT]  # byte for byte what the JVM writes too
    path = next((tmp_path / "log").glob("*.log"))
    whole = tflux.read_segment_deltas(path, last=True).to_arrow().to_pylist()
    assert [task_row(r) for r in whole] == [
        {**dict.fromkeys(COLUMNS), "lsn": i, "term": 2, **f} for i, (_, f) in enumerate(rows)
    ]


def test_a_task_queue_delta_of_an_id_past_int64_is_refused_naming_its_lsn(tmp_path):
    from _task_vectors import data

    with tflux.Log.open(tmp_path / "log", sync="never") as log:
        log.append_many(1, [ROWS[0][0], data("delivered")])
        with pytest.raises(tflux.ArgumentError, match="18446744073709551615 at LSN 1"):
            log.read_deltas()


def test_an_unknown_delta_marker_stops_the_column_reader_with_corruption_naming_the_lsn(tmp_path):
    # What an old reader meets in a newer log (spec section 12): never a silent skip.
    with tflux.Log.open(tmp_path / "log", sync="never") as log:
        log.append_many(1, [ROWS[0][0], ROWS[2][0], b"Z" + name(b"jobs") + b"\x00" * 8])
        with pytest.raises(tflux.CorruptionError, match=r"LSN 2.*unknown delta marker 0x5A"):
            log.read_deltas()
        assert len(log.read_deltas(0, 2)) == 2


def test_null_columns_stay_null_in_batches_of_any_size_kept_alive_together(tmp_path):
    """Columns no entry fills share zeros between batches: a bigger batch after a smaller one,
    and a smaller one after it, each reads as its own rows, whichever batches are still alive."""
    with tflux.Log.open(tmp_path / "log", sync="never") as log:
        log.append_many(1, [add(b"q", k, bytes([k % 251]) * 3) for k in range(3000)])
        batches = [log.read_deltas(start, end) for start, end in [(5, 7), (0, 3000), (9, 10)]]
        tables = [b.to_arrow() for b in batches]
        del batches
        for table, (start, end) in zip(tables, [(5, 7), (0, 3000), (9, 10)], strict=True):
            assert table.column("lsn").to_pylist() == list(range(start, end))
            assert table.column("key").to_pylist() == list(range(start, end))
            for column in COLUMNS[5:]:
                if column != "message":
                    assert table.column(column).null_count == end - start, column
            table.validate(full=True)


def test_one_kind_and_one_queue_read_right_in_batches_of_any_size_kept_alive_together(tmp_path):
    """A batch of one kind and one queue hands Arrow buffers kept for the next batches (longer
    than the batch): batches of each queue, bigger after smaller and smaller after bigger, each
    reads as its own rows whichever batches are alive, also through Arrow IPC."""
    queues = [b"jobs", b"", b"q"]
    with tflux.Log.open(tmp_path / "log", sync="never") as log:
        for q in queues:
            log.append_many(1, [add(q, k, b"m") for k in range(2000)])
        log.append_many(1, [remove(b"q", k) for k in range(1, 2000)])
        ranges = [(5, 7), (0, 2000), (9, 10), (2000, 2400), (2100, 4000), (4000, 4001),
                  (4001, 6000), (6000, 7999), (6001, 6003), (1990, 2010)]  # fmt: skip
        batches = [log.read_deltas(start, end) for start, end in ranges]
        tables = [b.to_arrow() for b in batches]
        del batches
        for table, (start, end) in zip(tables, ranges, strict=True):
            lsns = range(start, end)
            kinds = ["add_record" if lsn < 6000 else "remove_record" for lsn in lsns]
            names = [queues[lsn // 2000].decode() if lsn < 6000 else "q" for lsn in lsns]
            assert table.column("kind").to_pylist() == kinds
            assert table.column("queue").to_pylist() == names
            table.validate(full=True)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_batch(table)
            again = pa.ipc.open_stream(sink.getvalue()).read_next_batch()
            assert again.equals(table)
            assert again.column("queue").to_pylist() == names


def queue_buffer(batch: pa.RecordBatch) -> int:
    """Where the queue column's string data lies (the same address: the same kept buffer)."""
    return batch.column("queue").buffers()[2].address


def test_kept_name_buffers_are_bounded_in_bytes_not_only_in_count(tmp_path):
    """Buffers of a repeated queue name are kept for the next batches, but a process keeps at
    most 16 MiB of them, the oldest going first: after batches of five other long names the
    first name's buffer is made again. (They were kept by count only: 8 names of up to 16 MiB
    each, 128 MiB for the life of the process.)"""
    n = 14_000  # a 250-byte name x 15,750 entries (the kept room): about 4 MB a name
    names = [bytes([65 + i]) * 250 for i in range(6)]
    with tflux.Log.open(tmp_path / "log", sync="never") as log:
        for q in names:
            log.append_many(1, [add(q, k, b"") for k in range(n)])

        def read(i: int) -> pa.RecordBatch:
            table = log.read_deltas(i * n, (i + 1) * n).to_arrow()
            assert table.column("queue").to_pylist() == [names[i].decode()] * n
            return table

        first = read(0)  # alive to the end: a buffer made again cannot take its address
        assert queue_buffer(read(0)) == queue_buffer(first)  # kept for the next batch
        others = [read(i) for i in range(1, len(names))]
        assert queue_buffer(read(len(names) - 1)) == queue_buffer(others[-1])
        # Five names of 4 MB pushed the first one out: its buffer is made again.
        assert queue_buffer(read(0)) != queue_buffer(first)


def test_raw_adds_the_undecoded_bytes(log):
    table = log.read_deltas(raw=True).to_arrow()
    assert table.column("data").to_pylist() == [data for data, _ in ROWS]


def test_ranges_and_the_byte_budget(log):
    assert log.read_deltas(1, 3).to_arrow().column("lsn").to_pylist() == [1, 2]
    # The budget counts data bytes; the first entry is always returned.
    assert len(log.read_deltas(0, max_bytes=1)) == 1
    first_two = len(ROWS[0][0]) + len(ROWS[1][0])
    assert len(log.read_deltas(0, max_bytes=first_two)) == 2
    assert len(log.read_deltas(len(ROWS))) == 0


def test_undecodable_data_is_a_corruption_error_naming_the_lsn(tmp_path):
    with tflux.Log.open(tmp_path / "log", sync="never") as log:
        log.append_many(1, [add(b"q", 1, b"x"), b"A\x01q\x00"])
        with pytest.raises(tflux.CorruptionError) as exc:
            log.read_deltas()
        assert "LSN 1" in str(exc.value)


def test_snapshot_batch_matches_the_golden_snapshot():
    manifest = json.loads((DATA_DIR / "manifest.json").read_text())
    assert "tflux.snapshot" in manifest
    batch = tflux.read_snapshot_batch(DATA_DIR / "tflux.snapshot")
    assert (batch.last_index, batch.last_term) == (41, 3)
    rows = batch.to_arrow().to_pylist()
    # Manifest: default queue (heap) records ids 2, 3 key 10; 'jobs' (array) id 7 key 0
    # 'xxxxx' and id 4 key 9 empty. Rows come by queue name, then id.
    assert [(r["queue"], r["implementation"], r["record_id"], r["key"]) for r in rows] == [
        ("", 1, 2, 10),
        ("", 1, 3, 10),
        ("jobs", 2, 4, 9),
        ("jobs", 2, 7, 0),
    ]
    assert rows[2]["message"] == b"" and rows[3]["message"] == b"xxxxx"


def test_snapshot_batch_of_an_absent_file_is_none(tmp_path):
    assert tflux.read_snapshot_batch(tmp_path / "tflux.snapshot") is None


def test_one_segment_decodes_alone_with_its_lsns(tmp_path):
    with tflux.Log.open(tmp_path / "log", sync="never", soft_limit=64, hard_limit=128) as log:
        for data, _ in ROWS:
            log.append(1, data)
            log.commit(log.last_index)
        segments = [(s.path, s.start_lsn, s.count, s.sealed) for s in log.segments]
    assert len(segments) > 1
    seen = []
    for path, start, count, sealed in segments:
        batch = tflux.read_segment_deltas(path, last=not sealed).to_arrow()
        assert batch.column("lsn").to_pylist() == list(range(start, start + count))
        seen += batch.column("kind").to_pylist()
    assert seen == [fields["kind"] for _, fields in ROWS]
    first = segments[0][0]
    assert tflux.read_segment_deltas(first, from_lsn=1, to_lsn=1).to_arrow().num_rows == (
        1 if segments[0][2] > 1 else 0
    )


def test_a_damaged_sealed_segment_read_alone_names_file_and_offset(tmp_path):
    with tflux.Log.open(tmp_path / "log", sync="never") as log:
        log.append_many(1, [data for data, _ in ROWS])
        path = log.segments[0].path
    raw = bytearray(open(path, "rb").read())
    raw[8 + 16] ^= 0xFF  # first data byte of the first record
    with open(path, "wb") as f:
        f.write(raw)
    with pytest.raises(tflux.CorruptionError) as exc:
        tflux.read_segment_deltas(path)
    assert exc.value.offset == 8 and exc.value.path == str(path)
    # As the active segment, the damage is a torn tail: no records, no error.
    assert len(tflux.read_segment_deltas(path, last=True)) == 0


def test_snapshot_batch_lists_every_queue_with_its_last_id():
    batch = tflux.read_snapshot_batch(DATA_DIR / "tflux.snapshot")
    queues = {q["name"]: q for q in batch.queues}
    # Manifest: default queue (heap, last id 3); 'jobs' (array, last id 7, max size 50, max
    # message 1024, range 0..9).
    assert queues[""]["implementation"] == 1 and queues[""]["last_id"] == 3
    assert queues[""]["max_queue_size"] is None
    jobs = queues["jobs"]
    assert (jobs["implementation"], jobs["last_id"], jobs["max_queue_size"]) == (2, 7, 50)
    assert (jobs["max_message_size"], jobs["key_range"]) == (1024, (0, 9))


def test_a_task_layout_snapshot_names_the_queues_whose_task_state_it_holds(tmp_path):
    # Spec section 12: the batch says which queues have rules, delays or counts (their
    # columns and rules: tests/api/test_snapshot_batch_tasks.py); Spark's plain replay hands
    # such a snapshot over to its task path (tests/spark).
    from _task_vectors import task_layout_snapshot
    from tflux.spark._tasks import HasTasks
    from tflux.spark.rebuild import _snapshot_describer

    base = tmp_path / "base"
    with tflux.open(base) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 1, b"plain")
        store.snapshot()
    path = base / "data" / "tflux.snapshot"
    assert tflux.read_snapshot_batch(path).task_queues == []
    task_layout_snapshot(path)
    batch = tflux.read_snapshot_batch(path)
    assert batch.task_queues == ["jobs"] and len(batch) == 1
    with pytest.raises(HasTasks, match="task-queue state of queue 'jobs'"):
        _snapshot_describer(None, "tflux_python")(str(path))
