"""Roll-over of ``tflux.Log``'s segments: the soft and hard limits, batches never split, segment
names and preallocated sizes, files that do not follow the naming rule.

Expected values come from the spec (section 3 and 3.1), the implementer's documented semantics and
the hand encoder in conftest.py.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
import tflux
from _log_support import D16, open_log, seg_layout
from conftest import (
    encode_segment,
    entry_tuples,
    parse_segment,
    record_size,
    segment_files,
    segment_name,
)
from tflux import Log

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
