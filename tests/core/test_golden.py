"""Golden vectors: tflux must read the hand-written files of tests/data and write the same bytes.

The vectors and the encoder in conftest.py come from the spec, not from tflux, so a byte-level
mismatch means tflux (or the spec) is wrong.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
import tflux
from conftest import (
    DATA_DIR,
    END_MARKER,
    HEADER,
    encode_record,
    encode_segment,
    entry_tuples,
    last_nonzero_end,
    manifest_records,
    parse_segment,
    record_offsets,
    segment_name,
    write_segment,
)
from hypothesis import given
from hypothesis import strategies as st

PADDING_LENGTHS = [0, 1, 2, 3, 4, 34, 1024, 2051]


def pattern(n: int, seed: int = 0) -> bytes:
    return bytes((seed + 31 * i + 7) % 256 for i in range(n))


def assert_prefix_then_zeros(actual: bytes, expected: bytes) -> None:
    assert actual[: len(expected)] == expected
    assert actual[len(expected) :].count(0) == len(actual) - len(expected), "stale bytes after data"


# --- the vectors themselves ----------------------------------------------------------------------


def test_the_hand_encoder_reproduces_the_golden_segment_vectors():
    recs = [(t, d) for _, t, d in manifest_records("0000000000000000000.log")]
    assert encode_segment(recs) == (DATA_DIR / "0000000000000000000.log").read_bytes()
    recs = [(t, d) for _, t, d in manifest_records("preallocated_4096.log")]
    assert encode_segment(recs, file_size=4096) == (DATA_DIR / "preallocated_4096.log").read_bytes()


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
def test_the_padding_vector_reads_back_every_record(copy_vector, log_dir, readonly):
    path = copy_vector("0000000000000000000.log")
    original = path.read_bytes()
    expected = manifest_records("0000000000000000000.log")
    with tflux.Log.open(log_dir, readonly=readonly) as log:
        assert entry_tuples(log.entries()) == expected
        assert log.start_index == 0
        assert log.last_index == 7
        assert log.last_entry == (7, 4)
        assert [log.term_at(i) for i in range(8)] == [t for _, t, _ in expected]
        assert not log.recovery.truncated
        (seg,) = log.segments
        assert seg.name == "0000000000000000000.log"
        assert seg.start_lsn == 0
        assert seg.count == 8
        assert seg.last_lsn == 7
        assert seg.size == len(original) - 4
        assert not seg.sealed
    # Opening a clean log must not change a single meaningful byte.
    assert_prefix_then_zeros(path.read_bytes(), original)


def test_the_preallocated_vector_reads_back_both_records(copy_vector, log_dir):
    path = copy_vector("preallocated_4096.log")
    with tflux.Log.open(log_dir, soft_limit=4096, hard_limit=8192) as log:
        assert entry_tuples(log.entries()) == manifest_records("preallocated_4096.log")
        (seg,) = log.segments
        assert seg.size == 8 + 24 + 20
        assert seg.file_size == 4096
        assert not log.recovery.truncated
    assert path.read_bytes() == (DATA_DIR / "preallocated_4096.log").read_bytes()


def test_verify_counts_the_records_and_bytes_of_the_padding_vector(copy_vector, log_dir):
    copy_vector("0000000000000000000.log")
    report = tflux.verify(log_dir)
    assert report.ok
    assert report.records == 8
    assert report.bytes == (DATA_DIR / "0000000000000000000.log").stat().st_size - 4
    assert report.problems == []


# --- writing the same records --------------------------------------------------------------------


@pytest.mark.parametrize("preallocate", [False, True], ids=["sparse", "preallocated"])
def test_appending_the_vector_records_writes_the_vector_bytes(log_dir, preallocate):
    expected = (DATA_DIR / "0000000000000000000.log").read_bytes()
    with tflux.Log.open(
        log_dir, soft_limit=4096, hard_limit=1 << 20, preallocate=preallocate
    ) as log:
        lsns = [log.append(t, d) for _, t, d in manifest_records("0000000000000000000.log")]
        assert lsns == list(range(8))
    actual = (log_dir / segment_name(0)).read_bytes()
    assert_prefix_then_zeros(actual, expected)
    if preallocate:
        assert len(actual) == 4096


@pytest.mark.parametrize("preallocate", [False, True], ids=["sparse", "preallocated"])
def test_append_many_per_term_writes_the_vector_bytes(log_dir, preallocate):
    expected = (DATA_DIR / "0000000000000000000.log").read_bytes()
    by_term: dict[int, list[bytes]] = {}
    for _, t, d in manifest_records("0000000000000000000.log"):
        by_term.setdefault(t, []).append(d)
    with tflux.Log.open(
        log_dir, soft_limit=4096, hard_limit=1 << 20, preallocate=preallocate
    ) as log:
        for term, items in by_term.items():
            log.append_many(term, items)
        assert log.last_index == 7
    assert_prefix_then_zeros((log_dir / segment_name(0)).read_bytes(), expected)


def test_a_preallocated_log_with_two_records_is_exactly_the_4096_byte_vector(log_dir):
    with tflux.Log.open(log_dir, soft_limit=4096, hard_limit=8192, preallocate=True) as log:
        for _, t, d in manifest_records("preallocated_4096.log"):
            log.append(t, d)
    expected = (DATA_DIR / "preallocated_4096.log").read_bytes()
    assert (log_dir / segment_name(0)).read_bytes() == expected


@pytest.mark.parametrize("preallocate", [False, True], ids=["sparse", "preallocated"])
@pytest.mark.parametrize("n", PADDING_LENGTHS)
def test_a_record_of_each_padding_class_is_encoded_as_the_spec_says(log_dir, n, preallocate):
    data = pattern(n, seed=n)
    with tflux.Log.open(
        log_dir, soft_limit=8192, hard_limit=1 << 20, preallocate=preallocate
    ) as log:
        assert log.append(9, data) == 0
        assert log.segments[0].size == 8 + 16 + n + (-n % 4)
    actual = (log_dir / segment_name(0)).read_bytes()
    assert_prefix_then_zeros(actual, HEADER + encode_record(9, data) + END_MARKER)
    with tflux.Log.open(log_dir, readonly=True) as log:
        assert entry_tuples(log.entries()) == [(0, 9, data)]


def test_all_padding_classes_back_to_back_match_the_hand_encoder(log_dir):
    records = [(i // 3, pattern(n, seed=i)) for i, n in enumerate(PADDING_LENGTHS)]
    with tflux.Log.open(log_dir, soft_limit=8192, hard_limit=1 << 20, preallocate=False) as log:
        for term, data in records:
            log.append(term, data)
        assert log.segments[0].size == record_offsets(records)[-1]
    assert_prefix_then_zeros((log_dir / segment_name(0)).read_bytes(), encode_segment(records))


# --- torn and corrupt tails ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vector", "cut"),
    [("torn_tail.log", 72), ("bad_crc_tail.log", 48)],
)
def test_a_damaged_last_segment_vector_is_trimmed_at_the_manifest_offset(
    copy_vector, log_dir, manifest, vector, cut
):
    assert manifest[vector].get("cut_at_offset", manifest[vector].get("bad_record_offset")) == cut
    path = copy_vector(vector)
    original = path.read_bytes()
    expected = manifest_records(vector)
    with tflux.Log.open(log_dir, preallocate=False) as log:
        assert entry_tuples(log.entries()) == expected
        assert log.last_index == len(expected) - 1
        rec = log.recovery
        assert rec.truncated
        assert Path(rec.cut_path).resolve() == path.resolve()
        assert rec.cut_offset == cut
        assert rec.records_kept == len(expected)
        assert rec.bytes_cut == last_nonzero_end(original, cut)
        assert log.segments[0].size == cut
    after = path.read_bytes()
    assert after[:cut] == original[:cut]
    assert after[cut : cut + 4] == END_MARKER


@pytest.mark.parametrize(("vector", "cut"), [("torn_tail.log", 72), ("bad_crc_tail.log", 48)])
def test_appending_after_a_trimmed_vector_overwrites_the_damage(copy_vector, log_dir, vector, cut):
    path = copy_vector(vector)
    original = path.read_bytes()
    expected = manifest_records(vector)
    last_term = expected[-1][1]
    with tflux.Log.open(log_dir, preallocate=False) as log:
        assert log.append(last_term, b"replacement") == len(expected)
    with tflux.Log.open(log_dir, preallocate=False) as log:
        assert not log.recovery.truncated
        assert entry_tuples(log.entries()) == [
            *expected,
            (len(expected), last_term, b"replacement"),
        ]
    after = parse_segment(path.read_bytes())
    assert after.records == [(t, d) for _, t, d in expected] + [(last_term, b"replacement")]
    assert path.read_bytes()[:cut] == original[:cut]


@pytest.mark.parametrize(("vector", "bad"), [("torn_tail.log", 72), ("bad_crc_tail.log", 48)])
def test_a_damaged_vector_as_a_sealed_segment_is_a_corruption_error(
    log_dir, copy_vector, vector, bad
):
    path = copy_vector(vector)
    original = path.read_bytes()
    # The damaged record is LSN 3 (torn) or 2 (bad crc); the next segment continues after it.
    next_lsn = 4 if vector == "torn_tail.log" else 3
    nxt = write_segment(log_dir, next_lsn, [(7, b"next")])
    with pytest.raises(tflux.CorruptionError) as info:
        tflux.Log.open(log_dir)
    assert Path(info.value.path).resolve() == path.resolve()
    assert info.value.offset == bad
    assert path.read_bytes() == original
    assert nxt.exists()


def test_verify_reports_the_torn_vector_as_a_non_fatal_torn_tail(copy_vector, log_dir):
    path = copy_vector("torn_tail.log")
    original = path.read_bytes()
    report = tflux.verify(log_dir)
    assert report.ok
    torn = [p for p in report.problems if p.kind == "torn_tail"]
    assert len(torn) == 1
    assert not torn[0].fatal
    assert torn[0].offset == 72
    assert Path(torn[0].path).resolve() == path.resolve()
    assert path.read_bytes() == original


# --- checksum ------------------------------------------------------------------------------------


def test_crc32_check_value_is_cbf43926():
    assert tflux.crc32(b"123456789") == 0xCBF43926


def test_crc32_matches_the_manifest_check_values(manifest):
    crc = manifest["crc"]
    assert tflux.crc32(b"") == int(crc["empty"], 16)
    assert tflux.crc32(b"hello") == int(crc["hello"], 16)
    assert tflux.crc32(b"123456789") == int(crc["123456789"], 16)


@given(st.binary(max_size=4096))
def test_crc32_agrees_with_zlib_on_any_bytes(data):
    assert tflux.crc32(data) == zlib.crc32(data)
