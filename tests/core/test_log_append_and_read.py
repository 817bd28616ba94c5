"""``tflux.Log``'s Raft operations on one log: a fresh log, append, read, commit, and the LSN
limit (2^63 - 2, the last entry).

Expected values come from the spec (section 3 and 3.1), the implementer's documented semantics and
the hand encoder in conftest.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tflux
from _log_support import lsns, open_log, seg_layout
from conftest import (
    encode_segment,
    entry_tuples,
    segment_files,
    segment_name,
)
from tflux import Entry


@pytest.fixture
def log(log_dir):
    log = open_log(log_dir)
    yield log
    if not log.closed:
        log.close()


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
