"""Recovery at open (spec section 3, "Recovery at open", and 3.1).

Segment files are built by the hand encoder in conftest.py, then cut or damaged byte by byte. The
last segment's torn or corrupt tail must be trimmed exactly where the first incomplete record
starts; any damage in a sealed segment must be a CorruptionError naming the file and the record's
offset, and nothing may be deleted silently.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
import tflux
from conftest import (
    CRC_AT,
    DATA_AT,
    END_MARKER,
    HEADER,
    HEADER_SIZE,
    LENGTH_AT,
    MARKER_AT,
    RECORD_MARKER,
    TERM_AT,
    encode_record,
    encode_segment,
    entry_tuples,
    last_nonzero_end,
    parse_segment,
    record_offsets,
    segment_files,
    segment_name,
    segment_size,
    write_segment,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tflux import Log

# Sealed segment 0 holds LSNs 0-2, the last segment 3 holds LSNs 3-5. Data lengths cover padding
# 1, 2 and 3; the last record ends in zero data bytes, so "bytes cut up to the last non-zero byte"
# differs from "bytes up to the end of the record".
SEALED = [(1, b"alpha"), (1, b"bravo!"), (2, b"charlie")]
LAST = [(3, b"delta-1"), (3, b"echo!!"), (4, b"fox\x00trot\x01\x00")]
SEALED_AT = record_offsets(SEALED)
LAST_AT = record_offsets(LAST)
ALL = [(lsn, t, d) for lsn, (t, d) in enumerate(SEALED + LAST)]

REOPEN = dict(preallocate=False, soft_limit=1 << 20, hard_limit=1 << 21)


def build_log(log_dir: Path, *, last_file_size: int | None = None) -> tuple[Path, Path]:
    sealed = write_segment(log_dir, 0, SEALED)
    last = write_segment(log_dir, 3, LAST, file_size=last_file_size)
    return sealed, last


def same_file(a, b) -> bool:
    return a is not None and Path(a).resolve() == Path(b).resolve()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    buf = bytearray(path.read_bytes())
    buf[offset] ^= mask
    path.write_bytes(bytes(buf))


# --- a last segment cut at every byte ------------------------------------------------------------

# From the start of the second-to-last record to past the end marker.
CUTS = list(range(LAST_AT[1], LAST_AT[3] + 5))


def kept_after_cut(cut: int) -> int:
    """Records of LAST that are complete, padding included, in the first ``cut`` bytes."""
    return sum(1 for end in LAST_AT[1:] if end <= cut)


@pytest.mark.parametrize("cut", CUTS)
def test_a_last_segment_cut_at_any_byte_keeps_exactly_the_whole_records(log_dir, cut):
    _, last = build_log(log_dir)
    full = last.read_bytes()
    last.write_bytes(full[:cut])
    kept = kept_after_cut(cut)
    boundary = LAST_AT[kept]
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL[: 3 + kept]
        assert log.last_index == 2 + kept
        rec = log.recovery
        assert rec.bytes_cut == last_nonzero_end(full[:cut], boundary)
        if cut in LAST_AT:
            assert not rec.truncated  # the file ends exactly at a record boundary: a clean end
        elif cut < LAST_AT[3]:
            assert rec.truncated
            assert same_file(rec.cut_path, last)
            assert rec.cut_offset == boundary
            assert rec.records_kept == kept
        assert log.segments[-1].size == boundary
    after = last.read_bytes()
    assert after[:boundary] == full[:boundary]
    if last_nonzero_end(full[:cut], boundary):
        assert after[boundary : boundary + 4] == END_MARKER
    else:
        # Nothing but (part of) a zero end marker after the last record: a clean end either way.
        assert after[boundary : boundary + 4].count(0) == len(after[boundary : boundary + 4])


@pytest.mark.parametrize("cut", CUTS)
def test_appends_after_a_cut_tail_land_at_the_cut_and_survive_reopen(log_dir, cut):
    _, last = build_log(log_dir)
    full = last.read_bytes()
    last.write_bytes(full[:cut])
    kept = kept_after_cut(cut)
    boundary = LAST_AT[kept]
    with Log.open(log_dir, **REOPEN) as log:
        assert log.append(4, b"new-1") == 3 + kept
        assert log.append(5, b"new-22") == 4 + kept
    with Log.open(log_dir, **REOPEN) as log:
        assert not log.recovery.truncated
        assert entry_tuples(log.entries()) == [
            *ALL[: 3 + kept],
            (3 + kept, 4, b"new-1"),
            (4 + kept, 5, b"new-22"),
        ]
    expected = full[:boundary] + encode_record(4, b"new-1") + encode_record(5, b"new-22")
    after = last.read_bytes()
    assert after[: len(expected)] == expected
    assert parse_segment(after).records == [*LAST[:kept], (4, b"new-1"), (5, b"new-22")]


def zero_fill_case(cut: int):
    """A preallocated last segment whose bytes from ``cut`` on never reached the disk (zeros).

    Returns (records kept, boundary), or None for cuts that leave a marker and zeros (spec gap).
    """
    full = encode_segment(LAST, file_size=512)
    zeroed = full[:cut] + bytes(len(full) - cut)
    for k in range(len(LAST)):
        start, end = LAST_AT[k], LAST_AT[k + 1]
        if zeroed[start:end] != full[start:end]:
            # An intact marker followed by a zeroed crc and length decodes as a valid empty record
            # (crc32(b"") == 0): whether that is a phantom entry, a term violation or a torn record
            # is not settled by the spec, so these cuts are left out here.
            crc_and_length = zeroed[start + CRC_AT : start + DATA_AT]
            if cut >= start + 4 and crc_and_length == bytes(8):
                return None
            return k, start
    return len(LAST), LAST_AT[-1]


ZERO_CUTS = [c for c in range(LAST_AT[1], LAST_AT[3] + 5) if zero_fill_case(c) is not None]


@pytest.mark.parametrize("cut", ZERO_CUTS)
def test_a_preallocated_last_segment_zeroed_from_any_byte_keeps_the_intact_records(log_dir, cut):
    _, last = build_log(log_dir, last_file_size=512)
    full = last.read_bytes()
    zeroed = full[:cut] + bytes(len(full) - cut)
    last.write_bytes(zeroed)
    kept, boundary = zero_fill_case(cut)
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL[: 3 + kept]
        rec = log.recovery
        damaged = last_nonzero_end(zeroed, boundary)
        assert rec.truncated == (damaged > 0)
        assert rec.bytes_cut == damaged
        if damaged:
            assert same_file(rec.cut_path, last)
            assert rec.cut_offset == boundary
            assert rec.records_kept == kept
        assert log.append(5, b"after") == 3 + kept
    with Log.open(log_dir, **REOPEN) as log:
        assert not log.recovery.truncated
        assert entry_tuples(log.entries())[-1] == (3 + kept, 5, b"after")
    after = last.read_bytes()
    assert after[:boundary] == full[:boundary]
    assert after[boundary:].startswith(encode_record(5, b"after") + END_MARKER)
    assert len(after) == 512


# Cuts that leave an intact record marker followed by zeros: a header torn after (part of) its term.
PHANTOM_CUTS = [
    (k, c) for k in (1, 2) for c in range(LAST_AT[k] + TERM_AT, LAST_AT[k] + CRC_AT + 1)
]


@pytest.mark.parametrize(("k", "cut"), PHANTOM_CUTS)
def test_without_empty_entries_a_marker_followed_by_zeros_is_a_torn_header(log_dir, k, cut):
    # docs/format.md decision 2: with empty_entries=False the log never holds empty entries, so a
    # trailing "empty record" followed only by zeros can only be a torn header.
    _, last = build_log(log_dir, last_file_size=512)
    full = last.read_bytes()
    zeroed = full[:cut] + bytes(len(full) - cut)
    last.write_bytes(zeroed)
    with Log.open(log_dir, empty_entries=False, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL[: 3 + k]
        assert log.recovery.truncated
        assert log.recovery.cut_offset == LAST_AT[k]
        assert log.recovery.records_kept == k
        assert log.recovery.bytes_cut == last_nonzero_end(zeroed, LAST_AT[k])
    assert last.read_bytes()[LAST_AT[k] :] == bytes(512 - LAST_AT[k])


TERM_TORN_CUTS = [(k, c) for k, c in PHANTOM_CUTS if c < LAST_AT[k] + CRC_AT]


@pytest.mark.parametrize(("k", "cut"), TERM_TORN_CUTS)
def test_a_marker_followed_only_by_zeros_is_a_torn_header_not_a_term_error(log_dir, k, cut):
    # docs/format.md decision 2: term 0 after a higher term, then only zeros, is cut as a torn
    # header even where empty entries are allowed (a term error would make the log unopenable).
    _, last = build_log(log_dir, last_file_size=512)
    full = last.read_bytes()
    last.write_bytes(full[:cut] + bytes(len(full) - cut))
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL[: 3 + k]
        assert log.recovery.truncated
        assert log.recovery.cut_offset == LAST_AT[k]


@pytest.mark.parametrize("k", [1, 2])
def test_with_empty_entries_a_header_torn_after_its_term_reads_as_an_empty_entry(log_dir, k):
    # Documented consequence of allowing empty entries: the bytes are those of a valid empty record.
    _, last = build_log(log_dir, last_file_size=512)
    full = last.read_bytes()
    cut = LAST_AT[k] + CRC_AT
    last.write_bytes(full[:cut] + bytes(len(full) - cut))
    term = LAST[k][0]
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries()) == [*ALL[: 3 + k], (3 + k, term, b"")]
        assert not log.recovery.truncated


def test_without_empty_entries_empty_data_is_refused(log_dir):
    with Log.open(log_dir, empty_entries=False, **REOPEN) as log:
        log.append(1, b"a")
        with pytest.raises(ValueError):
            log.append(1, b"")
        with pytest.raises(ValueError):
            log.append_many(1, [b"b", b""])
        with pytest.raises(ValueError):
            log.insert_range(1, [(1, b"c"), (1, b"")])
        assert entry_tuples(log.entries()) == [(0, 1, b"a")]
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries()) == [(0, 1, b"a")]


def test_stale_bytes_after_the_end_marker_are_never_read(log_dir):
    stale = encode_record(9, b"stale but valid") + encode_record(9, b"another")
    sealed = log_dir / segment_name(0)
    sealed.write_bytes(encode_segment(SEALED) + stale)
    last = log_dir / segment_name(3)
    last.write_bytes(encode_segment(LAST) + stale + b"\xff" * 7)
    before = snapshot(log_dir)
    report = tflux.verify(log_dir)
    assert report.ok
    assert report.problems == []
    assert report.records == 6
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL
        assert not log.recovery.truncated
        assert log.append(5, b"next") == 6
    assert snapshot(log_dir)[sealed.name] == before[sealed.name]
    assert parse_segment(last.read_bytes()).records == [*LAST, (5, b"next")]


def test_a_sealed_segment_ending_at_a_record_boundary_without_end_marker_is_clean(log_dir):
    (log_dir / segment_name(0)).write_bytes(encode_segment(SEALED, end_marker=False))
    write_segment(log_dir, 3, LAST)
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL
        assert not log.recovery.truncated


def test_a_clean_open_reports_no_recovery(log_dir):
    build_log(log_dir)
    with Log.open(log_dir, **REOPEN) as log:
        rec = log.recovery
        assert not rec.truncated
        assert rec.cut_path is None
        assert rec.cut_offset is None
        assert rec.bytes_cut == 0
        assert rec.moved == []


def test_after_a_trimmed_tail_verify_finds_nothing(log_dir):
    _, last = build_log(log_dir)
    last.write_bytes(last.read_bytes()[: LAST_AT[2] + 11])
    assert [p.kind for p in tflux.verify(log_dir).problems] == ["torn_tail"]
    Log.open(log_dir, **REOPEN).close()
    report = tflux.verify(log_dir)
    assert report.ok
    assert report.problems == []
    assert report.records == 5


def test_opening_a_torn_tail_readonly_reads_the_whole_records_and_writes_nothing(log_dir):
    _, last = build_log(log_dir)
    last.write_bytes(last.read_bytes()[: LAST_AT[2] + 5])
    before = snapshot(log_dir)
    with Log.open(log_dir, readonly=True) as log:
        assert entry_tuples(log.entries()) == ALL[:5]
        assert log.last_index == 4
        with pytest.raises(tflux.ReadOnlyError):
            log.append(4, b"x")
    assert snapshot(log_dir) == before


# --- damage in a sealed segment ------------------------------------------------------------------

R1 = SEALED_AT[1]  # the second record of the sealed segment: "bravo!", term 1, 6 data bytes
R2 = SEALED_AT[2]

SEALED_DAMAGE = {
    # name: (offset to flip, xor mask, offset the error must name)
    "file marker": (1, 0xFF, 0),
    "version": (7, 0x02, 0),
    "record marker first byte": (R1 + MARKER_AT, 0xFF, R1),
    "record marker last byte": (R1 + MARKER_AT + 3, 0x01, R1),
    "crc first byte": (R1 + CRC_AT, 0x80, R1),
    "crc last byte": (R1 + CRC_AT + 3, 0x01, R1),
    "length sign bit": (R1 + LENGTH_AT, 0x80, R1),
    "length high byte": (R1 + LENGTH_AT + 1, 0x01, R1),
    "length low byte up": (R1 + LENGTH_AT + 3, 0x01, R1),
    "length low byte down": (R1 + LENGTH_AT + 3, 0x04, R1),
    "data first byte": (R1 + DATA_AT, 0x01, R1),
    "data last byte": (R1 + DATA_AT + 5, 0x80, R1),
    "first padding byte": (R1 + DATA_AT + 6, 0x01, R1),
    "last padding byte": (R1 + DATA_AT + 7, 0x80, R1),
    "term below the previous term": (R1 + TERM_AT + 3, 0x01, R1),  # 1 -> 0 after a term-1 record
    "term sign bit": (R1 + TERM_AT, 0x80, R1),
}


@pytest.mark.parametrize("damage", SEALED_DAMAGE)
def test_a_damaged_byte_in_a_sealed_segment_raises_corruption_error_at_its_record(log_dir, damage):
    offset, mask, where = SEALED_DAMAGE[damage]
    sealed, _ = build_log(log_dir)
    flip(sealed, offset, mask)
    before = snapshot(log_dir)
    for readonly in (False, True):
        with pytest.raises(tflux.CorruptionError) as info:
            Log.open(log_dir, readonly=readonly)
        err = info.value
        assert isinstance(err, ValueError)
        assert err.path is not None and os.path.isabs(err.path)
        assert same_file(err.path, sealed)
        assert err.offset == where
    assert snapshot(log_dir) == before, "nothing may be changed or deleted silently"


@pytest.mark.parametrize("damage", SEALED_DAMAGE)
def test_verify_reports_a_damaged_sealed_segment_as_fatal_at_the_same_place(log_dir, damage):
    offset, mask, where = SEALED_DAMAGE[damage]
    sealed, _ = build_log(log_dir)
    flip(sealed, offset, mask)
    before = snapshot(log_dir)
    report = tflux.verify(log_dir)
    assert not report.ok
    fatal = [p for p in report.problems if p.fatal]
    assert fatal
    expected = "term_order" if damage.startswith("term") else "corruption"
    assert fatal[0].kind == expected
    assert same_file(fatal[0].path, sealed)
    assert fatal[0].offset == where
    assert snapshot(log_dir) == before


def test_a_raised_term_in_a_sealed_segment_is_caught_where_terms_decrease(log_dir):
    sealed, _ = build_log(log_dir)
    flip(sealed, R1 + TERM_AT + 2, 0x01)  # term 1 -> 257, above the next record's term 2
    with pytest.raises(tflux.CorruptionError) as info:
        Log.open(log_dir)
    assert same_file(info.value.path, sealed)
    assert info.value.offset in (R1, R2)


def test_a_term_flip_that_keeps_terms_non_decreasing_is_not_detectable(log_dir):
    # Terms are outside the checksum (spec 3.1): only the ordering check guards them.
    sealed, _ = build_log(log_dir)
    flip(sealed, R2 + TERM_AT + 3, 0x01)  # term 2 -> 3, still <= the next segment's term 3
    with Log.open(log_dir, **REOPEN) as log:
        assert log.term_at(2) == 3
        assert log.last_index == 5


def test_an_absurd_length_in_a_sealed_segment_raises_corruption_error(log_dir):
    recs = [(1, b"ok")]
    buf = (
        HEADER + encode_record(1, b"ok") + encode_record(1, b"xyz", length=0x7FFFFFFF) + END_MARKER
    )
    (log_dir / segment_name(0)).write_bytes(buf)
    write_segment(log_dir, 2, [(1, b"next")])
    with pytest.raises(tflux.CorruptionError) as info:
        Log.open(log_dir)
    assert info.value.offset == record_offsets(recs)[1]


def test_a_gap_between_segments_raises_corruption_error(log_dir):
    sealed = write_segment(log_dir, 0, SEALED)
    later = write_segment(log_dir, 5, LAST)
    before = snapshot(log_dir)
    with pytest.raises(tflux.CorruptionError) as info:
        Log.open(log_dir)
    assert same_file(info.value.path, later) or same_file(info.value.path, sealed)
    assert snapshot(log_dir) == before
    report = tflux.verify(log_dir)
    assert not report.ok
    assert any(p.kind == "gap" and p.fatal for p in report.problems)


def test_overlapping_segments_raise_corruption_error(log_dir):
    write_segment(log_dir, 0, SEALED)
    write_segment(log_dir, 2, LAST)
    with pytest.raises(tflux.CorruptionError):
        Log.open(log_dir)
    assert not tflux.verify(log_dir).ok


def test_a_sealed_segment_that_ends_early_leaves_a_gap(log_dir):
    # A sealed segment cut at a record boundary is clean by itself; the next name exposes the loss.
    sealed = write_segment(log_dir, 0, SEALED[:2])
    write_segment(log_dir, 3, LAST)
    with pytest.raises(tflux.CorruptionError):
        Log.open(log_dir)
    assert sealed.exists()


# --- damage in the last segment ------------------------------------------------------------------

L1 = LAST_AT[1]  # second record of the last segment: "echo!!", term 3, 6 data bytes
L2 = LAST_AT[2]

TAIL_DAMAGE = {
    "record marker": (L1 + MARKER_AT + 1, 0xFF),
    "crc": (L1 + CRC_AT + 2, 0x10),
    "length sign bit": (L1 + LENGTH_AT, 0x80),
    "length high byte": (L1 + LENGTH_AT + 1, 0x01),
    "length low byte": (L1 + LENGTH_AT + 3, 0x01),
    "data": (L1 + DATA_AT + 2, 0x40),
    "padding": (L1 + DATA_AT + 7, 0x01),
}


@pytest.mark.parametrize("damage", TAIL_DAMAGE)
def test_a_damaged_record_in_the_last_segment_is_trimmed_and_reported(log_dir, damage):
    offset, mask = TAIL_DAMAGE[damage]
    _, last = build_log(log_dir)
    flip(last, offset, mask)
    damaged = last.read_bytes()
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL[:4]
        rec = log.recovery
        assert rec.truncated
        assert same_file(rec.cut_path, last)
        assert rec.cut_offset == L1
        assert rec.records_kept == 1
        assert rec.bytes_cut == last_nonzero_end(damaged, L1)
        # What the cut removes is copied aside first (spec 3: never destroyed silently).
        (copy,) = rec.moved
        assert Path(copy).parent == log_dir.parent / "temp"
        assert Path(copy).name.endswith(f"{last.name}.at-{L1}")
        assert Path(copy).read_bytes() == damaged[L1 : L1 + rec.bytes_cut]
        assert log.append(9, b"fresh") == 4
    after = last.read_bytes()
    assert after[:L1] == damaged[:L1]
    assert parse_segment(after).records == [LAST[0], (9, b"fresh")]
    with Log.open(log_dir, **REOPEN) as log:
        assert not log.recovery.truncated
        assert entry_tuples(log.entries())[-2:] == [(3, 3, b"delta-1"), (4, 9, b"fresh")]


@pytest.mark.parametrize("damage", TAIL_DAMAGE)
def test_verify_reports_a_damaged_tail_as_a_torn_tail_and_writes_nothing(log_dir, damage):
    offset, mask = TAIL_DAMAGE[damage]
    _, last = build_log(log_dir)
    flip(last, offset, mask)
    before = snapshot(log_dir)
    report = tflux.verify(log_dir)
    assert report.ok
    torn = [p for p in report.problems if p.kind == "torn_tail"]
    assert len(torn) == 1
    assert not torn[0].fatal
    assert same_file(torn[0].path, last)
    assert torn[0].offset == L1
    assert snapshot(log_dir) == before


@pytest.mark.parametrize(
    ("where", "mask", "bad"),
    [
        (L1 + TERM_AT + 3, 0x01, L1),  # term 3 -> 2, below the previous record's 3
        (L1 + TERM_AT, 0x80, L1),  # negative term
    ],
    ids=["decreasing term", "negative term"],
)
def test_a_bad_term_in_the_last_segment_is_an_error_never_a_trim(log_dir, where, mask, bad):
    _, last = build_log(log_dir)
    flip(last, where, mask)
    before = snapshot(log_dir)
    with pytest.raises(tflux.CorruptionError) as info:
        Log.open(log_dir)
    assert same_file(info.value.path, last)
    assert info.value.offset == bad
    assert snapshot(log_dir) == before
    assert not tflux.verify(log_dir).ok


def test_a_last_segment_starting_below_the_previous_term_is_an_error(log_dir):
    write_segment(log_dir, 0, SEALED)  # ends with term 2
    last = write_segment(log_dir, 3, [(1, b"older term")])
    with pytest.raises(tflux.CorruptionError) as info:
        Log.open(log_dir)
    assert same_file(info.value.path, last)
    assert info.value.offset == 8


@pytest.mark.parametrize("length", [0x7FFFFFFF, 0x7FFFFFF0, 0x80000000, 0xFFFFFFFF])
@pytest.mark.parametrize("file_size", [None, 1 << 16], ids=["sparse", "preallocated"])
def test_an_absurd_length_in_the_last_segment_is_trimmed_without_allocating(
    log_dir, length, file_size
):
    write_segment(log_dir, 0, SEALED)
    head = HEADER + encode_record(3, b"kept")
    bogus = RECORD_MARKER + struct.pack(">iII", 3, 0x12345678, length) + b"abcd"
    buf = head + bogus
    if file_size:
        buf += bytes(file_size - len(buf))
    last = log_dir / segment_name(3)
    last.write_bytes(buf)
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries())[3:] == [(3, 3, b"kept")]
        assert log.recovery.truncated
        assert log.recovery.cut_offset == len(head)
        assert log.recovery.bytes_cut == len(bogus)
    assert last.read_bytes()[len(head) : len(head) + 4] == END_MARKER


# --- headers and empty files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"", HEADER[:5], HEADER, bytes(8), bytes(4096)],
    ids=["zero bytes", "short header", "header only", "zero header", "zero preallocated"],
)
def test_a_last_segment_left_by_a_crash_during_creation_is_an_empty_segment(log_dir, content):
    write_segment(log_dir, 0, SEALED)
    last = log_dir / segment_name(3)
    last.write_bytes(content)
    with Log.open(log_dir, **REOPEN) as log:
        assert (log.start_index, log.last_index) == (0, 2)
        assert [(s.start_lsn, s.count) for s in log.segments] == [(0, 3), (3, 0)]
        assert log.append(3, b"first") == 3
    assert parse_segment(last.read_bytes()).records == [(3, b"first")]
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries())[-1] == (3, 3, b"first")


def test_an_empty_first_segment_file_is_a_fresh_log(log_dir):
    (log_dir / segment_name(0)).write_bytes(b"")
    with Log.open(log_dir, **REOPEN) as log:
        assert (log.start_index, log.last_index) == (0, -1)
        log.append(1, b"a")
    assert parse_segment((log_dir / segment_name(0)).read_bytes()).records == [(1, b"a")]


@pytest.mark.parametrize(
    ("offset", "mask"),
    [(0, 0x01), (3, 0x80), (7, 0x03)],
    ids=["file marker", "file marker last byte", "version"],
)
def test_a_bad_header_in_the_last_segment_is_an_error_not_a_trim(log_dir, offset, mask):
    write_segment(log_dir, 0, SEALED)
    last = write_segment(log_dir, 3, LAST)
    flip(last, offset, mask)
    before = snapshot(log_dir)
    with pytest.raises(tflux.CorruptionError) as info:
        Log.open(log_dir)
    assert same_file(info.value.path, last)
    assert info.value.offset == 0
    assert snapshot(log_dir) == before


def assert_moved_to_temp(base_dir: Path, moved: list[str], originals: dict[str, bytes]) -> None:
    """Every file of ``originals`` now lives, byte for byte, under ``<base>/data/temp`` at a path
    listed in ``moved``; the spec leaves the new names open, so only the old name must be kept in
    them."""
    temp = (base_dir / "data" / "temp").resolve()
    for p in moved:
        assert Path(p).resolve().parent == temp
        assert Path(p).exists()
    for name, content in originals.items():
        matches = [p for p in moved if Path(p).name.endswith(name)]
        assert len(matches) == 1, f"{name} not listed in recovery.moved: {moved}"
        assert Path(matches[0]).read_bytes() == content


# --- repair --------------------------------------------------------------------------------------


def test_repair_cuts_at_the_first_bad_record_and_moves_later_segments_to_temp(base_dir, log_dir):
    sealed, last = build_log(log_dir)
    third = write_segment(log_dir, 6, [(5, b"golf")])
    flip(sealed, R1 + DATA_AT, 0x01)
    originals = {p.name: p.read_bytes() for p in (last, third)}
    with Log.open(log_dir, repair=True, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL[:1]
        rec = log.recovery
        assert rec.truncated
        assert same_file(rec.cut_path, sealed)
        assert rec.cut_offset == R1
        assert rec.records_kept == 1
        moved = list(rec.moved)
        assert [(s.start_lsn, s.sealed) for s in log.segments] == [(0, False)]
        assert log.append(1, b"again") == 1
    assert segment_files(log_dir) == [segment_name(0)]
    assert_moved_to_temp(base_dir, moved, originals)
    assert parse_segment(sealed.read_bytes()).records == [SEALED[0], (1, b"again")]
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries()) == [ALL[0], (1, 1, b"again")]


def test_repair_of_a_gap_moves_the_segments_after_it(base_dir, log_dir):
    write_segment(log_dir, 0, SEALED)
    later = write_segment(log_dir, 5, LAST)
    originals = {later.name: later.read_bytes()}
    with Log.open(log_dir, repair=True, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL[:3]
        moved = list(log.recovery.moved)
    assert not later.exists()
    assert segment_files(log_dir) == [segment_name(0)]
    assert_moved_to_temp(base_dir, moved, originals)


def test_repair_of_a_clean_log_changes_nothing(log_dir):
    build_log(log_dir)
    before = snapshot(log_dir)
    with Log.open(log_dir, repair=True, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL
        assert not log.recovery.truncated
        assert log.recovery.moved == []
    after = snapshot(log_dir)
    assert {k: v for k, v in after.items() if k.endswith(".log")} == before


def test_repair_of_a_torn_last_segment_trims_it_and_keeps_a_copy(log_dir):
    _, last = build_log(log_dir)
    last.write_bytes(last.read_bytes()[: L1 + 9])
    torn = last.read_bytes()
    with Log.open(log_dir, repair=True, **REOPEN) as log:
        assert entry_tuples(log.entries()) == ALL[:4]
        assert log.recovery.truncated
        assert log.recovery.cut_offset == L1
        (copy,) = log.recovery.moved
    assert copy.endswith(last.name + ".orig")
    assert Path(copy).read_bytes() == torn


def test_a_damaged_first_record_before_kilobytes_of_records_keeps_a_copy_of_them(log_dir):
    """A cut at the first record of the last segment removes every record after it (they were
    never acknowledged if the damage is a torn write, but nobody can tell that from the bytes):
    the open copies them into data/temp before it zeroes them, and reports the copy."""
    records = [(1, bytes([i]) * 100) for i in range(60)]
    last = write_segment(log_dir, 0, records)
    flip(last, HEADER_SIZE + DATA_AT + 5, 0x01)
    damaged = last.read_bytes()
    end = segment_size(records)
    with Log.open(log_dir, **REOPEN) as log:
        assert list(log.entries()) == []
        assert log.recovery.cut_offset == HEADER_SIZE
        (copy,) = log.recovery.moved
    assert Path(copy).read_bytes() == damaged[HEADER_SIZE:end]
    assert len(Path(copy).read_bytes()) > 6000
    assert parse_segment(last.read_bytes()).records == []
    # A second open finds nothing to cut and copies nothing more.
    with Log.open(log_dir, **REOPEN) as log:
        assert not log.recovery.truncated and log.recovery.moved == []
    assert os.listdir(log_dir.parent / "temp") == [Path(copy).name]


def test_a_readonly_open_of_a_torn_tail_copies_nothing(log_dir):
    _, last = build_log(log_dir)
    flip(last, L1 + DATA_AT + 2, 0x40)
    with Log.open(log_dir, readonly=True) as log:
        assert log.recovery.truncated and log.recovery.moved == []
    assert not (log_dir.parent / "temp").exists()


# --- random damage never crashes -----------------------------------------------------------------


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    position=st.integers(0, LAST_AT[3] + 3),
    mask=st.integers(1, 255),
    cut=st.one_of(st.none(), st.integers(0, LAST_AT[3] + 4)),
    junk=st.binary(max_size=24),
)
def test_random_damage_to_the_last_segment_yields_an_error_or_a_prefix(
    tmp_path_factory, position, mask, cut, junk
):
    log_dir = tmp_path_factory.mktemp("fuzz") / "data" / "log"
    log_dir.mkdir(parents=True)
    _, last = build_log(log_dir)
    buf = bytearray(last.read_bytes())
    buf[position] ^= mask
    if cut is not None:
        buf = buf[:cut] + junk
    last.write_bytes(bytes(buf))
    try:
        log = Log.open(log_dir, **REOPEN)
    except tflux.CorruptionError as err:
        assert err.offset is not None
        assert same_file(err.path, last)
        return
    with log:
        got = entry_tuples(log.entries())
        assert [(lsn, d) for lsn, _, d in got] == [(lsn, d) for lsn, _, d in ALL[: len(got)]]
        assert len(got) >= 3
        log.append(2**31 - 1, b"end")
    with Log.open(log_dir, **REOPEN) as log:
        assert entry_tuples(log.entries())[-1] == (len(got), 2**31 - 1, b"end")


# --- damage deep in the active segment, read through the scan's window, on one core and all -----

# About 2.2 MB of records in the last segment: the scan reads it through a window of 256 KiB
# (`ActiveRead::CHUNK`), so the damage lies several windows in. A sealed segment before it gives
# the pool a second file, and the last segment is preallocated (zeros after its end marker).
DEEP_SEALED = [(1, bytes([k % 251]) * (20 + k % 50)) for k in range(3000)]
DEEP_LAST = [(2, bytes([(k * 7) % 251]) * (40 + k % 57)) for k in range(24_000)]
DEEP_AT = record_offsets(DEEP_LAST)
DEEP_K = len(DEEP_LAST) * 3 // 4
DEEP_DAMAGE = {
    "data byte": (DATA_AT + 3, 0x10),
    "crc byte": (CRC_AT + 1, 0x01),
    "record marker": (MARKER_AT, 0xFF),
    "length high byte": (LENGTH_AT + 1, 0x01),
}


@pytest.mark.parametrize("damage", DEEP_DAMAGE)
def test_damage_deep_in_the_active_segment_is_found_at_its_record_on_one_core_and_all(
    log_dir, monkeypatch, damage
):
    write_segment(log_dir, 0, DEEP_SEALED)
    size = DEEP_AT[-1]
    last = write_segment(log_dir, len(DEEP_SEALED), DEEP_LAST, file_size=size + (1 << 20))
    assert DEEP_AT[DEEP_K] > 5 * (256 << 10)
    at, mask = DEEP_DAMAGE[damage]
    flip(last, DEEP_AT[DEEP_K] + at, mask)
    before = snapshot(log_dir)
    found = {}
    for threads in ("1", None):
        if threads is None:
            monkeypatch.delenv("TFLUX_THREADS", raising=False)
        else:
            monkeypatch.setenv("TFLUX_THREADS", threads)
        report = tflux.verify(log_dir)
        problems = [(p.kind, Path(p.path).name, p.offset) for p in report.problems]
        with Log.open(log_dir, readonly=True) as log:
            cut = (log.recovery.cut_offset, log.recovery.records_kept, log.last_index)
        found[threads] = (problems, report.records, cut)
    assert found["1"] == found[None]
    problems, records, cut = found[None]
    assert problems == [("torn_tail", last.name, DEEP_AT[DEEP_K])]
    assert records == len(DEEP_SEALED) + DEEP_K
    assert cut == (DEEP_AT[DEEP_K], DEEP_K, len(DEEP_SEALED) + DEEP_K - 1)
    assert snapshot(log_dir) == before
