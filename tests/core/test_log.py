"""Behaviour of tflux.Log through its Python API: the Raft operations, roll-over, compaction, read
budget, locking, read-only and closed logs, and the error types.

Expected values come from the spec (section 3 and 3.1), the implementer's documented semantics and
the hand encoder in conftest.py.
"""

from __future__ import annotations

import itertools
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
import tflux
from conftest import (
    END_MARKER,
    RECORD_MARKER,
    encode_segment,
    entry_tuples,
    parse_segment,
    record_offsets,
    record_size,
    segment_files,
    segment_name,
)
from tflux import Entry, Log

D16 = b"0123456789abcdef"  # 16 data bytes: a 32-byte record


def open_log(path, **kwargs) -> Log:
    kwargs.setdefault("preallocate", False)
    kwargs.setdefault("soft_limit", 1 << 20)
    kwargs.setdefault("hard_limit", 1 << 21)
    return Log.open(path, **kwargs)


@pytest.fixture
def log(log_dir):
    log = open_log(log_dir)
    yield log
    if not log.closed:
        log.close()


def seg_layout(log: Log) -> list[tuple[int, int, bool]]:
    return [(s.start_lsn, s.count, s.sealed) for s in log.segments]


# --- a fresh log ---------------------------------------------------------------------------------


def test_a_fresh_log_is_empty_and_creates_the_first_segment_file(log, log_dir):
    assert log.start_index == 0
    assert log.last_index == -1
    assert log.last_entry is None
    assert log.commit_index == -1
    assert len(log) == 0
    assert list(log.entries()) == []
    assert log.read(0) == []
    assert segment_files(log_dir) == ["0000000000000000000.log"]
    (seg,) = log.segments
    assert seg.name == "0000000000000000000.log"
    assert Path(seg.path).resolve() == (log_dir / seg.name).resolve()
    assert (seg.start_lsn, seg.count, seg.last_lsn, seg.size, seg.sealed) == (0, 0, -1, 8, False)
    assert not log.readonly
    assert not log.closed
    assert Path(log.path).resolve() == log_dir.resolve()


def test_a_fresh_segment_holds_the_header_and_an_end_marker(log_dir):
    open_log(log_dir).close()
    buf = (log_dir / segment_name(0)).read_bytes()
    assert buf[:12] == encode_segment([])
    assert buf[12:].count(0) == len(buf) - 12


def test_a_fresh_preallocated_segment_is_soft_limit_sized(log_dir):
    with open_log(log_dir, preallocate=True, soft_limit=4096, hard_limit=8192) as log:
        assert log.segments[0].file_size == 4096
    buf = (log_dir / segment_name(0)).read_bytes()
    assert buf == encode_segment([], file_size=4096)


def test_the_context_manager_closes_the_log(log_dir):
    with open_log(log_dir) as log:
        assert not log.closed
    assert log.closed


# --- append --------------------------------------------------------------------------------------


def test_append_returns_consecutive_lsns_and_entries_read_back(log):
    assert [log.append(1, b"a"), log.append(1, b""), log.append(3, b"ccc")] == [0, 1, 2]
    assert entry_tuples(log.entries()) == [(0, 1, b"a"), (1, 1, b""), (2, 3, b"ccc")]
    assert log.last_index == 2
    assert log.last_entry == (2, 3)
    assert len(log) == 3
    assert [log.term_at(i) for i in range(3)] == [1, 1, 3]


def test_append_many_writes_every_item_with_the_one_term(log):
    log.append(1, b"first")
    ret = log.append_many(2, [b"x", b"yy", b"zzz"])
    assert ret in (1, 3)  # the spec only says "returns the LSN(s)": first or last of the batch
    assert entry_tuples(log.entries()) == [
        (0, 1, b"first"),
        (1, 2, b"x"),
        (2, 2, b"yy"),
        (3, 2, b"zzz"),
    ]


@pytest.mark.parametrize("preallocate", [False, True], ids=["sparse", "preallocated"])
def test_entries_and_segments_survive_close_and_reopen(log_dir, preallocate):
    opts = dict(preallocate=preallocate, soft_limit=128, hard_limit=256)
    expected = []
    with open_log(log_dir, **opts) as log:
        for i in range(60):
            data = bytes([i]) * (i % 23)
            term = 1 + i // 10
            assert log.append(term, data) == i
            expected.append((i, term, data))
        layout = seg_layout(log)
    assert len(layout) > 3
    with open_log(log_dir, **opts) as log:
        assert entry_tuples(log.entries()) == expected
        assert seg_layout(log) == layout
        assert not log.recovery.truncated
    assert segment_files(log_dir) == [segment_name(s) for s, _, _ in layout]


def test_empty_and_large_data_round_trip(log_dir):
    big = os.urandom(3 << 20)
    with open_log(log_dir) as log:
        log.append(1, b"")
        log.append(1, big)
        log.append(1, b"")
    with open_log(log_dir, readonly=True) as log:
        assert entry_tuples(log.entries()) == [(0, 1, b""), (1, 1, big), (2, 1, b"")]


def test_terms_may_stay_equal_or_grow(log):
    log.append(0, b"a")
    log.append(0, b"b")
    log.append(7, b"c")
    log.append(2**31 - 1, b"d")
    assert [e.term for e in log.entries()] == [0, 0, 7, 2**31 - 1]


def test_append_with_a_lower_term_raises_value_error_and_changes_nothing(log_dir):
    with open_log(log_dir) as log:
        log.append(5, b"a")
        with pytest.raises(ValueError):
            log.append(4, b"b")
        with pytest.raises(ValueError):
            log.append_many(4, [b"c", b"d"])
        assert log.last_index == 0
        assert log.append(5, b"e") == 1
    with open_log(log_dir) as log:
        assert entry_tuples(log.entries()) == [(0, 5, b"a"), (1, 5, b"e")]


def test_a_negative_term_raises_value_error(log):
    with pytest.raises(ValueError):
        log.append(-1, b"a")
    with pytest.raises(ValueError):
        log.append_many(-1, [b"a"])
    assert log.last_index == -1


def test_a_term_beyond_int32_is_refused_never_wrapped(log):
    # Spec 4: a term that does not fit Int32 is refused at write time (OverflowError or ValueError).
    with pytest.raises((OverflowError, ValueError)):
        log.append(2**31, b"a")
    with pytest.raises((OverflowError, ValueError)):
        log.append_many(2**32 + 1, [b"a"])
    assert log.last_index == -1
    log.append(1, b"b")
    assert log.term_at(0) == 1


def test_insert_range_refuses_terms_that_decrease_and_changes_nothing(log):
    log.append_many(1, [b"a"])
    log.append_many(2, [b"b"])
    log.append_many(3, [b"c"])
    with pytest.raises(ValueError):
        log.insert_range(2, [(1, b"x")])  # below the term of LSN 1
    with pytest.raises(ValueError):
        log.insert_range(1, [(3, b"x"), (2, b"y")])  # decreasing inside the batch
    assert entry_tuples(log.entries()) == [(0, 1, b"a"), (1, 2, b"b"), (2, 3, b"c")]


def test_entry_objects_compare_and_hash_by_value():
    e = Entry(3, 2, b"ab")
    assert (e.lsn, e.term, e.data) == (3, 2, b"ab")
    assert e == Entry(3, 2, b"ab")
    assert hash(e) == hash(Entry(3, 2, b"ab"))
    assert e != Entry(3, 2, b"ac")
    assert e != Entry(4, 2, b"ab")
    assert e != Entry(3, 1, b"ab")


# --- read ----------------------------------------------------------------------------------------


def lsns(entries) -> list[int]:
    return [e.lsn for e in entries]


def test_read_budget_counts_data_bytes_of_each_entry(log):
    for i in range(5):
        log.append(1, bytes([i]) * 10)
    assert lsns(log.read(0, 0)) == [0]
    assert lsns(log.read(0, 19)) == [0]
    assert lsns(log.read(0, 20)) == [0, 1]
    assert lsns(log.read(0, 49)) == [0, 1, 2, 3]
    assert lsns(log.read(0, 50)) == [0, 1, 2, 3, 4]
    assert lsns(log.read(2, 20)) == [2, 3]
    assert lsns(log.read(0)) == [0, 1, 2, 3, 4]
    assert lsns(log.read(3, None)) == [3, 4]
    assert entry_tuples(log.read(1, 10)) == [(1, 1, b"\x01" * 10)]


def test_read_always_returns_the_first_entry_even_over_budget(log):
    log.append(1, b"x" * 100)
    log.append(1, b"")
    log.append(1, b"y")
    # The first entry's 100 bytes count: the empty entry after it would push the total past 10.
    assert lsns(log.read(0, 10)) == [0]
    assert lsns(log.read(1, 10)) == [1, 2]


def test_read_includes_zero_length_entries_within_a_zero_budget(log):
    log.append_many(1, [b"", b"", b"x", b""])
    assert lsns(log.read(0, 0)) == [0, 1]
    assert lsns(log.read(3, 0)) == [3]
    assert lsns(log.read(0, 1)) == [0, 1, 2, 3]


def test_read_never_skips_an_entry_that_does_not_fit(log):
    log.append_many(1, [b"aaaa", b"bbbbbbbbbb", b"c"])
    assert lsns(log.read(0, 5)) == [0]


def test_read_at_last_plus_one_returns_an_empty_list(log):
    assert log.read(0) == []
    log.append(1, b"a")
    assert log.read(1) == []
    assert log.read(1, 0) == []


def test_read_outside_the_log_raises_index_error(log):
    log.append(1, b"a")
    log.append(1, b"b")
    with pytest.raises(IndexError):
        log.read(-1)
    with pytest.raises(IndexError):
        log.read(3)
    with pytest.raises(IndexError):
        log.read(100, 10)


def test_read_crosses_segment_boundaries(log_dir):
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        for i in range(10):
            log.append(1, bytes([65 + i]) * 16)
        assert len(log.segments) >= 3
        assert lsns(log.read(0)) == list(range(10))
        assert lsns(log.read(1, 16 * 6)) == [1, 2, 3, 4, 5, 6]
        assert [e.data for e in log.read(2, 32)] == [b"C" * 16, b"D" * 16]


def test_term_at_returns_terms_and_raises_index_error_outside_the_log(log):
    with pytest.raises(IndexError):
        log.term_at(0)
    log.append(4, b"a")
    log.append(6, b"b")
    assert (log.term_at(0), log.term_at(1)) == (4, 6)
    with pytest.raises(IndexError):
        log.term_at(2)
    with pytest.raises(IndexError):
        log.term_at(-1)


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


# --- commit --------------------------------------------------------------------------------------


def test_commit_raises_the_commit_index_and_never_lowers_it(log):
    log.append_many(1, [b"a", b"b", b"c", b"d"])
    log.commit(2)
    assert log.commit_index == 2
    log.commit(1)
    assert log.commit_index == 2
    log.commit(3)
    assert log.commit_index == 3


def test_commit_past_the_last_index_raises_value_error(log):
    with pytest.raises(ValueError):
        log.commit(0)
    log.append(1, b"a")
    with pytest.raises(ValueError):
        log.commit(1)
    assert log.commit_index == -1
    log.commit(-1)  # nothing to commit yet: a no-op, not an error
    assert log.commit_index == -1


def test_the_commit_index_is_not_persisted_but_may_be_passed_to_open(log_dir):
    with open_log(log_dir) as log:
        log.append_many(1, [b"a", b"b", b"c", b"d"])
        log.commit(3)
    with open_log(log_dir) as log:
        assert log.commit_index == -1
    with open_log(log_dir, commit_index=2) as log:
        assert log.commit_index == 2
        with pytest.raises(ValueError):
            log.truncate_after(1)


# --- truncate_after ------------------------------------------------------------------------------


@pytest.mark.parametrize("preallocate", [False, True], ids=["sparse", "preallocated"])
def test_truncate_after_drops_later_entries_and_zeroes_the_discarded_bytes(log_dir, preallocate):
    records = [(1, b"A" * 20), (1, b"B" * 21), (2, b"C" * 22)]
    with open_log(log_dir, preallocate=preallocate, soft_limit=4096, hard_limit=8192) as log:
        for t, d in records:
            log.append(t, d)
        log.truncate_after(0)
        assert entry_tuples(log.entries()) == [(0, 1, b"A" * 20)]
        assert log.last_index == 0
        assert log.last_entry == (0, 1)
        assert log.segments[0].size == record_offsets(records)[1]
        log.sync()
        buf = (log_dir / segment_name(0)).read_bytes()
    cut = record_offsets(records)[1]
    parsed = parse_segment(buf)
    assert parsed.records == records[:1]
    assert parsed.end == cut
    assert buf[cut:].count(0) == len(buf) - cut, "discarded records must be overwritten with zeros"


def test_truncated_entries_stay_gone_after_reopen(log_dir):
    with open_log(log_dir) as log:
        log.append_many(1, [b"a", b"b", b"c"])
        log.truncate_after(0)
        log.append(2, b"d")
    with open_log(log_dir) as log:
        assert entry_tuples(log.entries()) == [(0, 1, b"a"), (1, 2, b"d")]
        assert not log.recovery.truncated


def test_truncate_after_below_the_commit_index_raises_value_error(log):
    log.append_many(1, [b"a", b"b", b"c"])
    log.commit(1)
    with pytest.raises(ValueError):
        log.truncate_after(0)
    assert log.last_index == 2
    log.truncate_after(1)  # at the commit index is allowed
    assert log.last_index == 1


def test_truncate_after_at_or_past_the_last_index_does_nothing(log):
    log.append_many(1, [b"a", b"b"])
    log.truncate_after(1)
    log.truncate_after(5)
    assert entry_tuples(log.entries()) == [(0, 1, b"a"), (1, 1, b"b")]


def test_truncate_after_start_minus_one_empties_the_log(log_dir):
    with open_log(log_dir) as log:
        log.append_many(3, [b"a", b"b"])
        log.truncate_after(-1)
        assert (log.start_index, log.last_index, len(log)) == (0, -1, 0)
        assert log.last_entry is None
        assert log.append(3, b"c") == 0
    with open_log(log_dir) as log:
        assert entry_tuples(log.entries()) == [(0, 3, b"c")]


def seven_in_three_segments(log_dir) -> Log:
    """LSNs 0-2 | 3-5 | 6: 32-byte records pass hard_limit=100 at the 3rd record of a segment."""
    log = open_log(log_dir, soft_limit=64, hard_limit=100)
    for i in range(7):
        log.append(1, bytes([65 + i]) * 16)
    assert seg_layout(log) == [(0, 3, True), (3, 3, True), (6, 1, False)]
    return log


def test_truncating_into_a_sealed_segment_deletes_later_segment_files(log_dir):
    with seven_in_three_segments(log_dir) as log:
        log.truncate_after(1)
        assert seg_layout(log) == [(0, 2, False)]
        assert segment_files(log_dir) == [segment_name(0)]
        assert log.append(1, b"x") == 2
        assert seg_layout(log) == [(0, 3, False)]
    buf = (log_dir / segment_name(0)).read_bytes()
    assert parse_segment(buf).records == [(1, b"A" * 16), (1, b"B" * 16), (1, b"x")]


def test_a_segment_emptied_by_a_cut_at_its_first_lsn_stays_active_with_its_name(log_dir):
    with seven_in_three_segments(log_dir) as log:
        log.truncate_after(2)
        assert seg_layout(log) == [(0, 3, True), (3, 0, False)]
        assert segment_files(log_dir) == [segment_name(0), segment_name(3)]
        assert log.append(1, b"x") == 3
        assert seg_layout(log) == [(0, 3, True), (3, 1, False)]
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        assert seg_layout(log) == [(0, 3, True), (3, 1, False)]
        assert entry_tuples(log.entries(2)) == [(2, 1, b"C" * 16), (3, 1, b"x")]


# --- insert_range --------------------------------------------------------------------------------


def test_insert_range_replaces_the_tail_and_discards_what_follows(log_dir):
    with open_log(log_dir, preallocate=True, soft_limit=4096, hard_limit=8192) as log:
        log.append_many(1, [b"a" * 9, b"b" * 9, b"c" * 9, b"d" * 9])
        log.commit(0)
        log.insert_range(2, [(2, b"X"), (2, b"Y"), (2, b"Z"), (3, b"W")])
        assert entry_tuples(log.entries()) == [
            (0, 1, b"a" * 9),
            (1, 1, b"b" * 9),
            (2, 2, b"X"),
            (3, 2, b"Y"),
            (4, 2, b"Z"),
            (5, 3, b"W"),
        ]
        log.insert_range(1, [(2, b"short")])
        assert entry_tuples(log.entries()) == [(0, 1, b"a" * 9), (1, 2, b"short")]
        assert log.last_entry == (1, 2)
        log.sync()
    buf = (log_dir / segment_name(0)).read_bytes()
    parsed = parse_segment(buf)
    assert parsed.records == [(1, b"a" * 9), (2, b"short")]
    assert RECORD_MARKER not in parsed.tail, "a stale record survived after the end marker"


def test_insert_range_at_last_plus_one_appends(log):
    log.append(1, b"a")
    log.insert_range(1, [(1, b"b"), (2, b"c")])
    assert entry_tuples(log.entries()) == [(0, 1, b"a"), (1, 1, b"b"), (2, 2, b"c")]


def test_insert_range_at_or_below_the_commit_index_raises_value_error(log):
    log.append_many(1, [b"a", b"b", b"c"])
    log.commit(1)
    for start in (0, 1):
        with pytest.raises(ValueError):
            log.insert_range(start, [(1, b"x")])
    assert entry_tuples(log.entries()) == [(0, 1, b"a"), (1, 1, b"b"), (2, 1, b"c")]


def test_insert_range_with_no_entries_truncates_after_start_minus_one(log):
    log.append_many(1, [b"a", b"b", b"c", b"d"])
    log.commit(1)
    log.insert_range(4, [])
    assert log.last_index == 3
    log.insert_range(3, [])
    assert log.last_index == 2
    log.insert_range(2, [])
    assert entry_tuples(log.entries()) == [(0, 1, b"a"), (1, 1, b"b")]
    with pytest.raises(ValueError):
        log.insert_range(1, [])


def test_insert_range_past_the_end_restarts_the_log_at_start(log_dir):
    opts = dict(soft_limit=64, hard_limit=100)
    with open_log(log_dir, **opts) as log:
        for i in range(5):
            log.append(2, bytes([i]) * 16)
        log.commit(2)
        assert len(log.segments) == 2
        log.insert_range(10, [(3, b"p" * 16), (3, b"q" * 16)])
        assert (log.start_index, log.last_index, log.commit_index) == (10, 11, 9)
        assert log.last_entry == (11, 3)
        assert len(log) == 2
        assert seg_layout(log) == [(10, 2, False)]
        assert segment_files(log_dir) == [segment_name(10)]
        assert entry_tuples(log.entries()) == [(10, 3, b"p" * 16), (11, 3, b"q" * 16)]
        with pytest.raises(IndexError):
            log.term_at(9)
        with pytest.raises(IndexError):
            log.read(9)
        assert log.append(3, b"r") == 12
    with open_log(log_dir, **opts) as log:
        assert (log.start_index, log.last_index, log.commit_index) == (10, 12, 9)
        assert [e.lsn for e in log.entries()] == [10, 11, 12]
    assert parse_segment((log_dir / segment_name(10)).read_bytes()).records == [
        (3, b"p" * 16),
        (3, b"q" * 16),
        (3, b"r"),
    ]


def test_an_insert_range_batch_counts_as_one_append_batch_for_roll_over(log_dir):
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        log.insert_range(0, [(1, D16)] * 6)
        assert seg_layout(log) == [(0, 6, True), (6, 0, False)]


# --- compact -------------------------------------------------------------------------------------


def ten_in_four_segments(log_dir) -> Log:
    """LSNs 0-2 | 3-5 | 6-8 | 9, all committed."""
    log = open_log(log_dir, soft_limit=64, hard_limit=100)
    for i in range(10):
        log.append(1, bytes([65 + i]) * 16)
    log.commit(9)
    assert [s.start_lsn for s in log.segments] == [0, 3, 6, 9]
    return log


def test_compact_deletes_the_leading_sealed_segments_wholly_at_or_below_the_index(log_dir):
    with ten_in_four_segments(log_dir) as log:
        assert log.compact(4) == 1
        assert log.start_index == 3
        assert segment_files(log_dir) == [segment_name(n) for n in (3, 6, 9)]
        assert log.compact(5) == 1
        assert log.start_index == 6
        assert log.compact(5) == 0
        assert log.compact(8) == 1
        assert log.start_index == 9
        assert segment_files(log_dir) == [segment_name(9)]
        assert entry_tuples(log.entries()) == [(9, 1, b"J" * 16)]
        assert log.last_index == 9


def test_compact_never_deletes_the_active_segment(log_dir):
    with ten_in_four_segments(log_dir) as log:
        assert log.compact(9) == 3
        assert log.start_index == 9
        assert seg_layout(log) == [(9, 1, False)]
        assert log.term_at(9) == 1


def test_compact_above_the_commit_index_raises_value_error(log_dir):
    with ten_in_four_segments(log_dir) as log:
        log.append(1, b"k")
        with pytest.raises(ValueError):
            log.compact(10)
        assert log.start_index == 0


def test_compacted_entries_are_out_of_range(log_dir):
    with ten_in_four_segments(log_dir) as log:
        log.compact(6)
        assert log.start_index == 6
        assert len(log) == 4
        with pytest.raises(IndexError):
            log.term_at(5)
        with pytest.raises(IndexError):
            log.read(5)
        with pytest.raises(ValueError):
            log.insert_range(5, [(1, b"x")])
        assert lsns(log.read(6)) == [6, 7, 8, 9]


def test_start_index_after_compaction_survives_reopen(log_dir):
    with ten_in_four_segments(log_dir) as log:
        log.compact(7)
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        assert (log.start_index, log.last_index, log.commit_index) == (6, 9, 5)
        assert lsns(log.entries()) == [6, 7, 8, 9]


def test_compacting_up_to_an_empty_active_segment_leaves_an_empty_log(log_dir):
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        for i in range(9):
            log.append(1, bytes([i]) * 16)
        log.commit(8)
        assert seg_layout(log) == [(0, 3, True), (3, 3, True), (6, 3, True), (9, 0, False)]
        assert log.compact(8) == 3
        assert (log.start_index, log.last_index, len(log)) == (9, 8, 0)
        assert log.read(9) == []
        assert log.append(1, b"z") == 9
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        assert (log.start_index, log.last_index) == (9, 9)


# --- roll-over -----------------------------------------------------------------------------------


def test_the_soft_limit_rolls_only_once_the_segment_is_fully_committed(log_dir):
    with open_log(log_dir, soft_limit=64, hard_limit=1000) as log:
        log.append(1, D16)
        log.append(1, D16)  # size 72 > 64, but nothing is committed
        assert seg_layout(log) == [(0, 2, False)]
        log.commit(0)
        assert seg_layout(log) == [(0, 2, False)]
        log.commit(1)
        assert seg_layout(log) == [(0, 2, True), (2, 0, False)]
        assert log.segments[0].size == 72
        assert segment_files(log_dir) == [segment_name(0), segment_name(2)]
        assert log.append(1, b"x") == 2
        assert seg_layout(log) == [(0, 2, True), (2, 1, False)]


def test_the_soft_limit_is_a_strict_bound(log_dir):
    with open_log(log_dir, soft_limit=72, hard_limit=1000) as log:
        log.append_many(1, [D16, D16])
        log.commit(1)  # size == 72 is not past the limit
        assert len(log.segments) == 1
        log.append(1, D16)
        log.commit(2)
        assert seg_layout(log) == [(0, 3, True), (3, 0, False)]


def test_the_hard_limit_rolls_an_uncommitted_segment(log_dir):
    with open_log(log_dir, soft_limit=64, hard_limit=136) as log:
        for _ in range(4):
            log.append(1, D16)  # sizes 40, 72, 104, 136
        assert seg_layout(log) == [(0, 4, False)]
        log.append(1, D16)
        assert seg_layout(log) == [(0, 5, True), (5, 0, False)]
        assert log.commit_index == -1


def test_a_batch_is_never_split_across_segments(log_dir):
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        log.append_many(1, [D16] * 6)
        assert seg_layout(log) == [(0, 6, True), (6, 0, False)]
        assert log.segments[0].size == 8 + 6 * 32


def test_a_record_larger_than_the_hard_limit_gets_a_segment_of_its_own(log_dir):
    big = b"z" * 1000
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        log.append(1, big)
        assert seg_layout(log) == [(0, 1, True), (1, 0, False)]
        assert log.segments[0].size == 8 + record_size(1000)
        assert log.read(0)[0].data == big


def test_a_segment_without_records_never_rolls(log_dir):
    with open_log(log_dir, soft_limit=4, hard_limit=4) as log:
        log.commit(-1)
        assert seg_layout(log) == [(0, 0, False)]
        log.append(1, b"a")
        assert seg_layout(log) == [(0, 1, True), (1, 0, False)]
        log.commit(0)
        assert seg_layout(log) == [(0, 1, True), (1, 0, False)]


def test_segments_are_named_by_their_first_lsn_in_nineteen_digits(log_dir):
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        for i in range(20):
            log.append(1, bytes([i]) * 16)
        segs = log.segments
        assert [s.sealed for s in segs] == [True] * (len(segs) - 1) + [False]
        for prev, seg in itertools.pairwise(segs):
            assert seg.start_lsn == prev.last_lsn + 1
            assert prev.last_lsn == prev.start_lsn + prev.count - 1
        for seg in segs:
            assert seg.name == f"{seg.start_lsn:019d}.log"
            assert len(seg.name) == 23
            assert Path(seg.path).resolve() == (log_dir / seg.name).resolve()
        assert segment_files(log_dir) == [s.name for s in segs]
        assert segment_files(log_dir)[1] == "0000000000000000003.log"


def test_a_rolled_preallocated_segment_is_soft_limit_sized(log_dir):
    with open_log(log_dir, preallocate=True, soft_limit=256, hard_limit=512) as log:
        log.append_many(1, [D16] * 20)  # 648 bytes: grows past the preallocation, then rolls
        first, second = log.segments
        assert first.size == 8 + 20 * 32
        assert first.file_size >= first.size
        assert second.file_size == 256
        assert os.path.getsize(second.path) == 256
        assert os.path.getsize(first.path) == first.file_size
        log.sync()
    assert parse_segment((log_dir / segment_name(0)).read_bytes()).records == [(1, D16)] * 20


@pytest.mark.parametrize(("soft", "hard"), [(0, 100), (200, 100), (0, 0)])
def test_invalid_limits_raise_value_error(log_dir, soft, hard):
    with pytest.raises(ValueError):
        Log.open(log_dir, soft_limit=soft, hard_limit=hard)


def test_files_that_do_not_follow_the_naming_rule_are_ignored(log_dir):
    strays = {
        "foo.log": b"junk",
        "123.log": b"\x12\x76\xad\x55junk",
        "00000000000000000001.log": encode_segment([(1, b"20 digits")]),
        "0000000000000000000.log.bak": b"old",
        "000000000000000000a.log": b"x",
        "0000000000000000005.LOG": encode_segment([(1, b"upper case")]),
    }
    for name, content in strays.items():
        (log_dir / name).write_bytes(content)
    with open_log(log_dir) as log:
        assert log.append(1, b"a") == 0
        assert [s.name for s in log.segments] == [segment_name(0)]
    with open_log(log_dir) as log:
        assert entry_tuples(log.entries()) == [(0, 1, b"a")]
    for name, content in strays.items():
        assert (log_dir / name).read_bytes() == content
    report = tflux.verify(log_dir)
    assert report.ok
    ignored = {Path(p.path).name for p in report.problems if p.kind == "ignored_file"}
    assert set(strays) <= ignored
    assert not any(p.fatal for p in report.problems if p.kind == "ignored_file")


# --- threads ---


@pytest.mark.parametrize("sync", ["always", "never"])
def test_appends_from_several_threads_get_distinct_consecutive_lsns(log_dir, sync):
    # Spec 7.1: with "always", concurrent writers share one fsync, so concurrent calls are expected.
    def worker(k: int) -> list[tuple[int, list[bytes]]]:
        calls = []
        for i in range(80):
            data = f"{k}-{i}".encode()
            if i % 10 == 0:
                batch = [data + b"a", data + b"b"]
                calls.append((log.append_many(1, batch), batch))
            else:
                calls.append((log.append(1, data), [data]))
        return calls

    opts = dict(soft_limit=256, hard_limit=512, sync=sync)
    with open_log(log_dir, **opts) as log:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(worker, range(4)))
        got = {e.data: e.lsn for e in log.entries()}
        written = [d for calls in results for _, batch in calls for d in batch]
        assert sorted(got.values()) == list(range(len(written)))
        assert sorted(got) == sorted(written)
        for calls in results:
            previous = -1
            for ret, batch in calls:
                where = [got[d] for d in batch]
                assert where == list(range(where[0], where[0] + len(batch))), "batch split"
                assert ret in (where[0], where[-1])
                assert where[0] > previous, "one thread's appends must get increasing LSNs"
                previous = where[-1]
        layout = seg_layout(log)
    with open_log(log_dir, **opts) as log:
        assert {e.data: e.lsn for e in log.entries()} == got
        assert seg_layout(log) == layout


def test_reads_run_while_another_thread_appends(log_dir):
    with open_log(log_dir, soft_limit=256, hard_limit=512, sync="never") as log:
        log.append(1, b"seed")
        stop = threading.Event()
        errors: list[BaseException] = []

        def reader() -> None:
            try:
                while not stop.is_set():
                    last = log.last_index
                    seen = lsns(log.read(0))
                    assert seen[: last + 1] == list(range(last + 1))
                    # Small budget (keeps the GIL): at least one entry, then more only while the
                    # data bytes stay within the budget (an empty entry lets the next one in).
                    small = log.read(last, 1)
                    assert lsns(small) == list(range(last, last + len(small)))
                    assert len(small) == 1 or sum(len(e.data) for e in small) <= 1
                    assert lsns(log.entries(0, last + 1)) == list(range(last + 1))
            except BaseException as err:  # reported in the main thread
                errors.append(err)

        t = threading.Thread(target=reader)
        t.start()
        try:
            for i in range(300):
                log.append(1, bytes([i % 256]) * (i % 37))
        finally:
            stop.set()
            t.join()
        assert errors == []
        assert log.last_index == 300


# --- lock ----------------------------------------------------------------------------------------


def test_a_second_writer_in_the_same_process_raises_locked_error(log_dir):
    with open_log(log_dir):
        with pytest.raises(tflux.LockedError) as info:
            open_log(log_dir)
        assert isinstance(info.value, tflux.TfluxIOError)
        assert isinstance(info.value, OSError)


def test_close_releases_the_lock(log_dir):
    first = open_log(log_dir)
    first.append(1, b"a")
    first.close()
    with open_log(log_dir) as second:
        assert second.last_index == 0


def test_a_readonly_log_opens_while_a_writer_holds_the_lock(log_dir):
    with open_log(log_dir) as writer:
        writer.append(1, b"a")
        with open_log(log_dir, readonly=True) as reader:
            assert reader.readonly
            assert entry_tuples(reader.entries()) == [(0, 1, b"a")]
        writer.append(1, b"b")


TRY_OPEN = textwrap.dedent(
    """
    import sys, tflux
    try:
        log = tflux.Log.open(sys.argv[1], preallocate=False)
    except tflux.LockedError:
        print("locked")
    else:
        print("opened", log.last_index)
        log.close()
    """
)

HOLD_OPEN = textwrap.dedent(
    """
    import sys, tflux
    log = tflux.Log.open(sys.argv[1], preallocate=False)
    log.append(1, b"child")
    print("ready", flush=True)
    sys.stdin.readline()
    log.close()
    print("closed", flush=True)
    """
)


def run_child(code: str, log_dir: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, str(log_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_writer_in_another_process_is_locked_out(log_dir):
    with open_log(log_dir) as log:
        log.append(1, b"a")
        assert run_child(TRY_OPEN, log_dir) == "locked"
    assert run_child(TRY_OPEN, log_dir) == "opened 0"


def test_a_lock_held_by_another_process_blocks_until_that_process_closes(log_dir):
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_OPEN, str(log_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(tflux.LockedError):
            open_log(log_dir)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
        with open_log(log_dir) as log:
            assert entry_tuples(log.entries()) == [(0, 1, b"child")]
    finally:
        child.kill()
        child.wait()


def test_the_lock_of_a_killed_process_does_not_outlive_it(log_dir):
    # Recovery at open presumes a crashed writer can be replaced: its lock must die with it.
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_OPEN, str(log_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
    finally:
        child.kill()
        child.wait()
    with open_log(log_dir) as log:
        assert entry_tuples(log.entries()) == [(0, 1, b"child")]


# --- read-only and closed ------------------------------------------------------------------------

WRITES = {
    "append": lambda log: log.append(1, b"x"),
    "append_many": lambda log: log.append_many(1, [b"x"]),
    "insert_range": lambda log: log.insert_range(1, [(1, b"x")]),
    "truncate_after": lambda log: log.truncate_after(0),
    "compact": lambda log: log.compact(-1),
}


@pytest.mark.parametrize("method", WRITES)
def test_every_write_method_of_a_readonly_log_raises_read_only_error(log_dir, method):
    with open_log(log_dir) as log:
        log.append_many(1, [b"a", b"b"])
    before = {p.name: p.read_bytes() for p in log_dir.iterdir()}
    with open_log(log_dir, readonly=True) as log:
        assert log.readonly
        with pytest.raises(tflux.ReadOnlyError) as info:
            WRITES[method](log)
        assert isinstance(info.value, PermissionError)
        assert entry_tuples(log.entries()) == [(0, 1, b"a"), (1, 1, b"b")]
    assert {p.name: p.read_bytes() for p in log_dir.iterdir()} == before


CALLS = {
    **WRITES,
    "commit": lambda log: log.commit(0),
    "read": lambda log: log.read(0),
    "read_small": lambda log: log.read(0, 1),  # the path that keeps the GIL
    "read_batch": lambda log: log.read_batch(),
    "entries": lambda log: list(log.entries()),
    "term_at": lambda log: log.term_at(0),
    "sync": lambda log: log.sync(),
}


@pytest.mark.parametrize("method", CALLS)
def test_methods_of_a_closed_log_raise_closed_error(log_dir, method):
    log = open_log(log_dir)
    log.append(1, b"a")
    log.close()
    assert log.closed
    with pytest.raises(tflux.ClosedError):
        CALLS[method](log)


def test_a_closed_log_keeps_its_data_for_the_next_open(log_dir):
    log = open_log(log_dir)
    log.append(1, b"a")
    log.close()
    with pytest.raises(tflux.ClosedError):
        log.append(1, b"b")
    with open_log(log_dir) as again:
        assert entry_tuples(again.entries()) == [(0, 1, b"a")]


# --- errors --------------------------------------------------------------------------------------


def test_error_classes_refine_the_builtin_exceptions():
    assert issubclass(tflux.CorruptionError, tflux.TfluxError)
    assert issubclass(tflux.CorruptionError, ValueError)
    assert issubclass(tflux.TfluxIOError, OSError)
    assert issubclass(tflux.LockedError, tflux.TfluxIOError)
    assert issubclass(tflux.ReadOnlyError, PermissionError)
    assert issubclass(tflux.ReadOnlyError, tflux.TfluxError)
    assert issubclass(tflux.ClosedError, ValueError)
    assert issubclass(tflux.ClosedError, tflux.TfluxError)


def test_a_corruption_error_pickles_with_its_path_and_offset():
    err = tflux.CorruptionError("bad checksum", "/x/data/log/0000000000000000000.log", 48)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is tflux.CorruptionError
    assert (str(back), back.path, back.offset) == (str(err), err.path, 48)


def test_a_raised_corruption_error_pickles_with_its_location(log_dir):
    records = [(1, b"one"), (1, b"two"), (1, b"three")]
    buf = bytearray(encode_segment(records))
    bad = record_offsets(records)[1]
    buf[bad + 16] ^= 0xFF  # data byte of the second record
    (log_dir / segment_name(0)).write_bytes(bytes(buf))
    (log_dir / segment_name(3)).write_bytes(encode_segment([(1, b"four")]))
    with pytest.raises(tflux.CorruptionError) as info:
        open_log(log_dir)
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is tflux.CorruptionError
    assert back.offset == info.value.offset == bad
    assert back.path == info.value.path
    assert Path(back.path).resolve() == (log_dir / segment_name(0)).resolve()
    assert str(back) == str(info.value)


def test_a_raised_locked_error_pickles(log_dir):
    with open_log(log_dir):
        with pytest.raises(tflux.LockedError) as info:
            open_log(log_dir)
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is tflux.LockedError
    assert back.path == info.value.path
    assert str(back) == str(info.value)


# --- verify --------------------------------------------------------------------------------------


def test_verify_accepts_the_base_directory_or_the_log_directory(base_dir, log_dir):
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        for i in range(7):
            log.append(1, bytes([i]) * 16)
        sizes = sum(s.size for s in log.segments)
    for path in (base_dir, log_dir, str(log_dir)):
        report = tflux.verify(path)
        assert report.ok
        assert Path(report.path).resolve() == log_dir.resolve()
        assert report.records == 7
        assert report.bytes == sizes
        assert [s.start_lsn for s in report.segments] == [0, 3, 6]
        assert [s.count for s in report.segments] == [3, 3, 1]
        assert not [p for p in report.problems if p.fatal]


def test_verify_of_a_freshly_closed_log_finds_nothing_and_writes_nothing(log_dir):
    with open_log(log_dir, preallocate=True, soft_limit=4096, hard_limit=8192) as log:
        log.append(1, b"a")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in log_dir.iterdir()}
    report = tflux.verify(log_dir)
    assert report.ok
    assert report.problems == []
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in log_dir.iterdir()}
    assert after == before
    assert END_MARKER == (log_dir / segment_name(0)).read_bytes()[28:32]


# --- the LSN limit -------------------------------------------------------------------------------

# Issue 10, defect 8: LSN arithmetic wrapped at 2**63-1: after insert_range(2**63-1, ...)
# append returned -2**63 and wrote "-9223372036854775808.log".
MAX_ENTRY_LSN = 2**63 - 2  # 2**63-1 stays the exclusive end past the last entry


def test_no_operation_places_an_entry_past_the_largest_lsn(log, log_dir):
    with pytest.raises(ValueError, match="largest LSN"):
        log.insert_range(2**63 - 1, [(1, b"x")])
    with pytest.raises(ValueError, match="largest LSN"):
        log.insert_range(MAX_ENTRY_LSN, [(1, b"x"), (1, b"y")])
    log.insert_range(MAX_ENTRY_LSN - 1, [(1, b"x")])
    assert log.append(1, b"last") == MAX_ENTRY_LSN
    with pytest.raises(ValueError, match="largest LSN"):
        log.append(1, b"past")
    with pytest.raises(ValueError, match="largest LSN"):
        log.append_many(1, [b"past"])
    with pytest.raises(ValueError):
        log.commit(2**63 - 1)
    log.commit(MAX_ENTRY_LSN)
    assert [e.lsn for e in log.read(MAX_ENTRY_LSN - 1)] == [MAX_ENTRY_LSN - 1, MAX_ENTRY_LSN]
    assert log.read(2**63 - 1) == []
    assert (log.start_index, log.last_index) == (MAX_ENTRY_LSN - 1, MAX_ENTRY_LSN)
    assert not any(p.name.startswith("-") for p in log_dir.iterdir())
    log.close()
    reopened = open_log(log_dir)
    assert reopened.last_index == MAX_ENTRY_LSN
    reopened.close()


def test_a_segment_named_near_the_largest_lsn_is_corruption_not_a_wrap(log_dir):
    log = open_log(log_dir)
    log.append_many(1, [b"a", b"b", b"c"])
    log.close()
    first = log_dir / "0000000000000000000.log"
    first.rename(log_dir / f"{MAX_ENTRY_LSN}.log")  # 3 records would end at 2**63
    with pytest.raises(tflux.CorruptionError, match="largest LSN") as e:
        open_log(log_dir, readonly=True)
    assert e.value.path.endswith(f"{MAX_ENTRY_LSN}.log")
    assert not tflux.verify(log_dir).ok
