"""Rewriting a ``tflux.Log``: ``truncate_after`` (a Raft follower dropping an uncommitted tail),
``insert_range`` (entries from a leader) and ``compact`` (a snapshot's prefix dropped).

Expected values come from the spec (section 3 and 3.1), the implementer's documented semantics and
the hand encoder in conftest.py.
"""

from __future__ import annotations

import pytest
from _log_support import D16, lsns, open_log, seg_layout
from conftest import (
    RECORD_MARKER,
    entry_tuples,
    parse_segment,
    record_offsets,
    segment_files,
    segment_name,
)
from tflux import Log


@pytest.fixture
def log(log_dir):
    log = open_log(log_dir)
    yield log
    if not log.closed:
        log.close()


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
