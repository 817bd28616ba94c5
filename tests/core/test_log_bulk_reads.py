"""Bulk reads to Python: ``Log.entries``, ``Log.read_batch`` (read budget) and ``Log.read_deltas``,
and the Arrow views; since issue 11 each column is handed over as a tflux-owned buffer
(``tflux.ColumnBuffer``) without copying it.

Every column must equal what the writer wrote and what the per-record reads return, over random
logs that cross segment boundaries, with sealed segments compressed (``.log.z``) or not, opened
read-only or not; empty ranges and out-of-range LSNs raise typed errors; and the buffers stay
valid after the log is closed and its files deleted or compacted away. Expected values come from
the writer's own lists (and the spec's delta encoding in test_columns.py), never from tflux.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
import tflux
from _log_support import open_log
from conftest import (
    entry_tuples,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_columns import add, create, delete, remove
from tflux import Entry


@pytest.fixture
def log(log_dir):
    log = open_log(log_dir)
    yield log
    if not log.closed:
        log.close()


# --- entries, read_batch, arrow ------------------------------------------------------------------


@pytest.fixture
def ten(log_dir):
    """A log of 10 entries spread over several segments."""
    log = open_log(log_dir, soft_limit=64, hard_limit=100)
    expected = []
    for i in range(10):
        data = bytes(range(i * 3, i * 3 + i))
        term = 1 + i // 4
        log.append(term, data)
        expected.append((i, term, data))
    yield log, expected
    log.close()


@pytest.mark.parametrize(
    ("start", "end", "want"),
    [
        (None, None, range(10)),
        (3, None, range(3, 10)),
        (None, 4, range(4)),
        (2, 5, range(2, 5)),
        (4, 4, range(0)),
        (9, 10, range(9, 10)),
        (10, None, range(0)),
        (0, 10, range(10)),
    ],
)
def test_entries_end_is_exclusive_and_none_means_the_whole_log(ten, start, end, want):
    log, expected = ten
    assert entry_tuples(log.entries(start, end)) == [expected[i] for i in want]
    batch = log.read_batch(start, end)
    assert entry_tuples(batch) == [expected[i] for i in want]


def test_read_batch_buffers_agree_with_entries(ten):
    log, expected = ten
    batch = log.read_batch(1, 9)
    want = expected[1:9]
    assert len(batch) == 8
    assert [batch[i] for i in range(8)] == [Entry(*e) for e in want]
    assert list(batch) == [Entry(*e) for e in want]
    with pytest.raises(IndexError):
        batch[8]
    assert batch.lsn.itemsize == 8
    assert batch.term.itemsize == 4
    assert batch.offsets.itemsize == 4
    assert batch.lsn.tolist() == [e[0] for e in want]
    assert batch.term.tolist() == [e[1] for e in want]
    offsets = batch.offsets.tolist()
    assert len(offsets) == 9
    assert offsets[0] == 0
    assert [offsets[i + 1] - offsets[i] for i in range(8)] == [len(e[2]) for e in want]
    assert bytes(batch.data)[offsets[0] : offsets[-1]] == b"".join(e[2] for e in want)


def test_to_arrow_has_lsn_term_and_data_columns_of_the_documented_types(ten):
    log, expected = ten
    rb = log.read_batch().to_arrow()
    assert isinstance(rb, pa.RecordBatch)
    assert rb.schema.names == ["lsn", "term", "data"]
    assert rb.schema.field("lsn").type == pa.int64()
    assert rb.schema.field("term").type == pa.int32()
    assert rb.schema.field("data").type == pa.binary()
    assert rb.num_rows == 10
    assert rb.column("lsn").to_pylist() == [e[0] for e in expected]
    assert rb.column("term").to_pylist() == [e[1] for e in expected]
    assert rb.column("data").to_pylist() == [e[2] for e in expected]


def test_to_arrow_of_a_slice_starts_at_the_slice(ten):
    log, expected = ten
    rb = log.read_batch(6, 8).to_arrow()
    assert rb.to_pydict() == {
        "lsn": [6, 7],
        "term": [expected[6][1], expected[7][1]],
        "data": [expected[6][2], expected[7][2]],
    }


def test_read_batch_with_a_small_budget_returns_a_nonempty_prefix(ten):
    log, expected = ten
    batch = log.read_batch(2, None, max_bytes=1)
    got = entry_tuples(batch)
    assert 1 <= len(got) <= 8
    assert got == expected[2 : 2 + len(got)]


def test_an_empty_read_batch_converts_to_an_empty_record_batch(log):
    batch = log.read_batch()
    assert len(batch) == 0
    assert list(batch) == []
    rb = batch.to_arrow()
    assert rb.num_rows == 0
    assert rb.schema.names == ["lsn", "term", "data"]


SMALL = {"soft_limit": 512, "hard_limit": 1024, "preallocate": False, "sync": "never"}

entries_st = st.lists(
    st.tuples(st.integers(0, 1), st.binary(max_size=200)), min_size=1, max_size=60
)


def write(path: Path, entries, commit_every: int = 3) -> list[tuple[int, int, bytes]]:
    """Appends ``(term step, data)`` items a few at a time (committing, so segments roll at the
    soft limit); returns the expected ``(lsn, term, data)`` of each."""
    expected = []
    term = 1
    with tflux.Log.open(path, **SMALL) as log:
        for i in range(0, len(entries), commit_every):
            chunk = entries[i : i + commit_every]
            term += chunk[0][0]
            first = log.append_many(term, [d for _, d in chunk])
            log.commit(first + len(chunk) - 1)
            expected += [(first + k, term, d) for k, (_, d) in enumerate(chunk)]
    return expected


def budgeted(expected, start: int, end: int, max_bytes: int):
    """What a read of ``start..end`` within ``max_bytes`` of data returns: the first entry, then
    every following one while the running total stays within the budget."""
    out, used = [], 0
    for lsn, term, data in expected[start:end]:
        if out and used + len(data) > max_bytes:
            break
        used += len(data)
        out.append((lsn, term, data))
    return out


def columns_of(batch) -> list[tuple[int, int, bytes]]:
    """The batch's rows rebuilt from its column buffers alone."""
    lsns, terms, offsets = batch.lsn.tolist(), batch.term.tolist(), batch.offsets.tolist()
    data = bytes(batch.data_view)
    assert len(offsets) == len(batch) + 1 and offsets[0] == 0 and offsets[-1] == len(data)
    return [(lsns[i], terms[i], data[offsets[i] : offsets[i + 1]]) for i in range(len(batch))]


def check_batch(log, expected, start, end, max_bytes):
    batch = log.read_batch(start, end, max_bytes)
    want = budgeted(expected, start, end, max_bytes)
    assert columns_of(batch) == want
    # The per-record read returns the same entries.
    assert [(e.lsn, e.term, e.data) for e in (log.read(lsn, 0)[0] for lsn, _, _ in want)] == want
    # A read within the same budget (no end) takes the same entries and those after them.
    rest = budgeted(expected, start, len(expected), max_bytes)
    assert [(e.lsn, e.term, e.data) for e in log.read(start, max_bytes)] == rest
    assert [(e.lsn, e.term, e.data) for e in batch] == want
    assert batch.data == b"".join(d for _, _, d in want)
    assert batch.nbytes == len(batch.data)
    table = batch.to_arrow()
    assert table.num_rows == len(want)
    rows = zip(*(table.column(c).to_pylist() for c in ("lsn", "term", "data")), strict=True)
    assert list(rows) == want
    # The entries, the bytes and the size read the same before any buffer is asked for (the
    # columns move into their buffers then) as after.
    again = log.read_batch(start, end, max_bytes)
    assert [(e.lsn, e.term, e.data) for e in again] == want
    assert again.nbytes == len(again.data) == sum(len(d) for _, _, d in want)
    assert columns_of(again) == want
    assert [(e.lsn, e.term, e.data) for e in again] == want
    assert [again[i].data for i in range(len(again))] == [d for _, _, d in want]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=entries_st,
    compressed=st.sampled_from([None, "zstd", "lz4"]),
    readonly=st.booleans(),
    data=st.data(),
)
def test_read_batch_columns_equal_the_entries_written_and_read_one_by_one(
    entries, compressed, readonly, data
):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        expected = write(path, entries)
        if compressed:
            with tflux.Log.open(path, **SMALL) as log:
                log.compress(compressed)
        with tflux.Log.open(path, readonly=readonly, **SMALL) as log:
            n = len(expected)
            for _ in range(4):
                start = data.draw(st.integers(0, n), label="start")
                end = data.draw(st.integers(start, n + 3), label="end")
                max_bytes = data.draw(st.integers(0, 1200), label="max_bytes")
                check_batch(log, expected, start, end, max_bytes)
            check_batch(log, expected, 0, n, 1 << 30)


def test_read_batch_crosses_every_segment_boundary(tmp_path):
    expected = write(tmp_path / "log", [(0, bytes([i]) * (i % 90)) for i in range(200)])
    with tflux.Log.open(tmp_path / "log", readonly=True, **SMALL) as log:
        firsts = [s.start_lsn for s in log.segments]
        assert len(firsts) > 10
        for first in firsts[1:]:
            # A few entries either side of the boundary, and everything from there on.
            check_batch(log, expected, first - 2, first + 2, 1 << 20)
            check_batch(log, expected, first - 1, len(expected), 1 << 20)


DELTAS = st.one_of(
    st.builds(
        lambda q, impl, mq, mm, r: (
            create(q, impl, mq, mm, r),
            dict(kind="create_queue", queue=q.decode(), implementation=impl,
                 max_queue_size=mq, max_message_size=mm,
                 key_min=r[0] if r else None, key_max=r[1] if r else None),
        ),
        st.sampled_from([b"", b"a", b"jobs"]),
        st.sampled_from([1, 2]),
        st.integers(-1, 100),
        st.integers(-1, 1000),
        st.none() | st.tuples(st.integers(-(2**63), 0), st.integers(0, 2**63 - 1)),
    ),
    st.builds(
        lambda q, key, msg: (add(q, key, msg),
                             dict(kind="add_record", queue=q.decode(), key=key, message=msg)),
        st.sampled_from([b"", b"a", b"jobs"]),
        st.integers(-(2**63), 2**63 - 1),
        st.binary(max_size=100),
    ),
    st.builds(
        lambda q, rid: (remove(q, rid),
                        dict(kind="remove_record", queue=q.decode(), record_id=rid)),
        st.sampled_from([b"", b"a", b"jobs"]),
        st.integers(0, 2**63 - 1),
    ),
    st.builds(
        lambda q: (delete(q), dict(kind="delete_queue", queue=q.decode())),
        st.sampled_from([b"", b"a", b"jobs"]),
    ),
)  # fmt: skip

DELTA_FIELDS = ["kind", "queue", "key", "record_id", "message", "implementation",
                "max_queue_size", "max_message_size", "key_min", "key_max",
                "due", "kept_ids", "rules"]  # fmt: skip


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    deltas=st.lists(DELTAS, min_size=1, max_size=50),
    compressed=st.sampled_from([None, "zstd"]),
    readonly=st.booleans(),
    data=st.data(),
)
def test_read_deltas_columns_equal_the_deltas_written(deltas, compressed, readonly, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        expected = write(path, [(0, raw) for raw, _ in deltas])
        if compressed:
            with tflux.Log.open(path, **SMALL) as log:
                log.compress(compressed)
        rows = []
        for (lsn, term, _), (_, fields) in zip(expected, deltas, strict=True):
            row = dict.fromkeys(DELTA_FIELDS) | fields | {"lsn": lsn, "term": term}
            rows.append(row)
        with tflux.Log.open(path, readonly=readonly, **SMALL) as log:
            n = len(rows)
            start = data.draw(st.integers(0, n), label="start")
            end = data.draw(st.integers(start, n + 2), label="end")
            raw = data.draw(st.booleans(), label="raw")
            batch = log.read_deltas(start, end, raw=raw)
            got = batch.to_arrow().to_pylist()
            want = rows[start:end]
            if raw:
                want = [r | {"data": deltas[r["lsn"]][0]} for r in want]
            assert got == want
            assert len(batch) == len(want)
            # The per-record path decodes each entry to the same fields.
            for row in got:
                d = tflux.decode_delta(log.read(row["lsn"], 0)[0].data)
                assert (d.kind, d.queue, d.key, d.message) == (
                    row["kind"], row["queue"], row["key"], row["message"],
                )  # fmt: skip


@pytest.fixture
def twenty(tmp_path):
    # AddRecord deltas, so that read_deltas reads them too.
    expected = write(tmp_path / "log", [(0, add(b"q", i, bytes([65 + i]) * 40)) for i in range(40)])
    return tmp_path / "log", expected


@pytest.mark.parametrize("readonly", [False, True])
def test_empty_ranges_give_empty_columns(twenty, readonly):
    path, expected = twenty
    with tflux.Log.open(path, readonly=readonly, **SMALL) as log:
        for start in (0, 7, len(expected)):
            batch = log.read_batch(start, start)
            assert len(batch) == 0 and batch.nbytes == 0 and batch.offsets.tolist() == [0]
            assert batch.to_arrow().num_rows == 0
            deltas = log.read_deltas(start, start)
            assert len(deltas) == 0 and deltas.to_arrow().num_rows == 0
        # An end before the start is an empty range too.
        assert len(log.read_batch(5, 2)) == 0
        assert len(log.read_deltas(5, 2)) == 0


@pytest.mark.parametrize("readonly", [False, True])
def test_out_of_range_starts_raise_out_of_range_error(twenty, readonly):
    path, expected = twenty
    with tflux.Log.open(path, readonly=readonly, **SMALL) as log:
        past = len(expected) + 1
        for read in (log.read_batch, log.read_deltas):
            with pytest.raises(tflux.OutOfRangeError, match=f"LSN {past}"):
                read(past)
            with pytest.raises(IndexError):
                read(-1)
        with pytest.raises(tflux.OutOfRangeError):
            log.read(past, 1)


def test_compacted_starts_raise_out_of_range_error(twenty):
    path, _ = twenty
    with tflux.Log.open(path, **SMALL) as log:
        log.commit(log.last_index)
        second = log.segments[1].start_lsn
        log.compact(second - 1)
        assert log.start_index == second
        for read in (log.read_batch, log.read_deltas):
            with pytest.raises(tflux.OutOfRangeError, match="compacted"):
                read(second - 1)


def _hold(batch):
    """Every Python-side view of a batch's columns: memoryviews, Buffers and Arrow arrays."""
    return {
        "lsn": batch.lsn,
        "term": batch.term,
        "offsets": batch.offsets,
        "data": batch.data_view,
        "buffers": [memoryview(b) for b in batch._buffers()],
        "arrow": batch.to_arrow(),
    }


def _check_held(held, want):
    assert held["lsn"].tolist() == [e[0] for e in want]
    assert held["term"].tolist() == [e[1] for e in want]
    data = b"".join(e[2] for e in want)
    assert bytes(held["data"]) == data
    assert bytes(held["buffers"][3]) == data
    table = held["arrow"]
    assert table.column("data").to_pylist() == [e[2] for e in want]
    assert table.column("lsn").to_pylist() == [e[0] for e in want]


@pytest.mark.parametrize("readonly", [False, True])
def test_buffers_outlive_the_closed_log_and_its_deleted_files(twenty, readonly):
    path, expected = twenty
    log = tflux.Log.open(path, readonly=readonly, **SMALL)
    batch = log.read_batch(0, len(expected), 1 << 20)
    deltas = log.read_deltas(0, len(expected), raw=True)
    held = _hold(batch)
    arrow_deltas = deltas.to_arrow()
    del batch, deltas
    log.close()
    shutil.rmtree(path)
    gc.collect()
    # Fresh allocations that would reuse freed memory.
    junk = [bytes([i % 256]) * 4096 for i in range(2000)]
    _check_held(held, expected)
    assert arrow_deltas.column("data").to_pylist() == [e[2] for e in expected]
    assert arrow_deltas.column("key").to_pylist() == list(range(40))
    assert arrow_deltas.column("message").to_pylist() == [bytes([65 + i]) * 40 for i in range(40)]
    del junk


def test_buffers_outlive_the_compaction_of_their_segments(twenty):
    path, expected = twenty
    with tflux.Log.open(path, **SMALL) as log:
        log.commit(log.last_index)
        for method in (None, "zstd"):
            if method:
                log.compress(method)
            first, second = log.segments[0], log.segments[1]
            assert first.sealed and second.sealed
            want = expected[first.start_lsn : second.start_lsn + second.count]
            held = _hold(log.read_batch(first.start_lsn, want[-1][0] + 1, 1 << 20))
            log.compact(second.start_lsn + second.count - 1)
            assert not Path(first.path).exists() and not Path(second.path).exists()
            gc.collect()
            _check_held(held, want)
            expected_left = expected[log.start_index :]
            assert columns_of(log.read_batch(log.start_index, None, 1 << 20)) == expected_left


def test_a_buffer_is_read_only_and_typed():
    with tempfile.TemporaryDirectory() as tmp:
        expected = write(Path(tmp) / "log", [(0, b"abc"), (1, b"de")])
        with tflux.Log.open(Path(tmp) / "log") as log:
            batch = log.read_batch()
    lsn, term, offsets, data = batch._buffers()
    assert isinstance(lsn, tflux.ColumnBuffer)
    assert (lsn.format, term.format, offsets.format, data.format) == ("q", "i", "i", "B")
    assert (len(lsn), len(offsets), len(data)) == (2, 3, 5)
    assert memoryview(lsn).tolist() == [e[0] for e in expected]
    assert data.tobytes() == b"abcde"
    view = memoryview(data)
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1
    assert pa.py_buffer(data).to_pybytes() == b"abcde"


def test_a_record_changed_under_a_read_only_reader_is_never_returned(tmp_path):
    """Read-only reads check each record's checksum on the very bytes they hand over.
    (``read_deltas`` does not check again what the scan at open checked in the same file:
    docs/format.md, log decision 16; only another program can change those bytes.)"""
    expected = write(tmp_path / "log", [(0, b"x" * 40) for _ in range(30)])
    with tflux.Log.open(tmp_path / "log", readonly=True, **SMALL) as log:
        first = log.segments[0]
        assert first.sealed
        with open(first.path, "r+b") as f:
            f.seek(8 + 16 + 3)  # inside the first record's data
            f.write(b"Y")
        for read in (
            lambda: log.read_batch(0, 5),
            lambda: log.read(0, 1),
            lambda: log.read_batch(2, 5) and log.read_batch(0, 1),
        ):
            with pytest.raises(tflux.CorruptionError, match="checksum"):
                read()
        # Later records of the same segment still read.
        assert columns_of(log.read_batch(1, 3)) == expected[1:3]


@pytest.mark.parametrize("readonly", [False, True])
@pytest.mark.parametrize("where", ["sealed", "active"])
def test_a_small_read_stops_at_the_record_it_returns(tmp_path, readonly, where):
    """A read whose first entry fills its budget returns that entry even when the framing of
    the record after it is damaged: it never reads on (before, the walk framed the next record
    and raised). Reading the damaged record itself raises, naming its file."""
    expected = write(tmp_path / "log", [(0, b"x" * 40) for _ in range(30)])
    with tflux.Log.open(tmp_path / "log", readonly=readonly, **SMALL) as log:
        seg = log.segments[0] if where == "sealed" else log.segments[-1]
        assert seg.sealed == (where == "sealed") and seg.count >= 2
        lsn = seg.start_lsn
        with open(seg.path, "r+b") as f:
            f.seek(8 + 16 + 40)  # the marker of the segment's second record
            f.write(b"ZZZZ")
        for max_bytes in (1, 39):
            got = [(e.lsn, e.term, e.data) for e in log.read(lsn, max_bytes)]
            assert got == expected[lsn : lsn + 1]
        assert columns_of(log.read_batch(lsn, lsn + 1)) == expected[lsn : lsn + 1]
        with pytest.raises(tflux.CorruptionError, match=seg.name):
            log.read(lsn + 1, 1)
        with pytest.raises(tflux.CorruptionError, match=seg.name):
            log.read(lsn, 41)


def test_reads_of_a_closed_log_raise_closed_error(twenty):
    path, _ = twenty
    log = tflux.Log.open(path, **SMALL)
    log.close()
    for read in (
        lambda: log.read_batch(0, 1),
        lambda: log.read_batch(),
        lambda: log.read_deltas(0, 1),
        lambda: log.read(0, 1),
    ):
        with pytest.raises(tflux.ClosedError):
            read()


# Runs of equal deltas, long enough that a batch crosses the column decoder's rounds (4096
# entries): columns that no entry fills before a round boundary and some entry fills after it,
# kinds that change within a round, batches of one kind (the repeated kind column).
RUNS = st.lists(st.tuples(DELTAS, st.integers(1, 5000)), min_size=1, max_size=5)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=RUNS, readonly=st.booleans(), data=st.data())
def test_read_deltas_of_long_runs_equal_the_deltas_written(runs, readonly, data):
    deltas = [d for d, count in runs for _ in range(count)]
    rows = [
        dict.fromkeys(DELTA_FIELDS) | fields | {"lsn": lsn, "term": 1}
        for lsn, (_, fields) in enumerate(deltas)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log"
        with tflux.Log.open(path, sync="never", soft_limit=64 << 10) as log:
            log.append_many(1, [raw for raw, _ in deltas])
            log.commit(log.last_index)
        with tflux.Log.open(path, readonly=readonly, sync="never") as log:
            n = len(rows)
            start = data.draw(st.integers(0, n - 1), label="start")
            raw = data.draw(st.booleans(), label="raw")
            max_bytes = data.draw(st.sampled_from([1, 1000, 100_000, 4 << 20]), label="max")
            got = []
            while start < n:
                table = log.read_deltas(start, max_bytes=max_bytes, raw=raw).to_arrow()
                assert table.num_rows >= 1
                got += table.to_pylist()
                start += table.num_rows
            first = n - len(got)
            want = rows[first:]
            if raw:
                want = [r | {"data": deltas[r["lsn"]][0]} for r in want]
            assert got == want
            # The Spark path decodes each segment file alone, into the same rows.
            segments = [(s.path, s.start_lsn) for s in log.segments]
        by_segment = []
        for k, (seg, _) in enumerate(segments):
            by_segment += (
                tflux.read_segment_deltas(seg, last=k == len(segments) - 1).to_arrow().to_pylist()
            )
        assert by_segment == rows
