"""Snapshots and restore of ``tflux.Store``: automatic and explicit snapshots, bases restored from
files built by hand (spec sections 4, 5 and 7.1) and bases with damaged snapshot or metadata files.

The files are written by the independent encoders of ``_store_support.py``, never by tflux.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
import tflux
from _store_support import (
    FAST,
    SMALL,
    SnapQueue,
    assert_nothing_lost,
    contents,
    decode_snapshot,
    encode_metadata,
    encode_snapshot,
    encode_state,
    files_of,
    info,
    log_dir_of,
    log_entries,
    names,
    read_snapshot_file,
)
from conftest import (
    DATA_DIR,
    record_offsets,
    segment_files,
    segment_name,
    write_segment,
)
from test_state import ARRAY, HEAP, add, create, delete, remove
from tflux.errors import (
    CorruptionError,
    ReplayError,
)


def test_the_hand_snapshot_codec_agrees_with_the_golden_snapshot():
    golden = (DATA_DIR / "tflux.snapshot").read_bytes()
    last_index, last_term, queues = decode_snapshot(golden)
    assert (last_index, last_term) == (41, 3)
    assert queues[""] == SnapQueue("", HEAP, 3, -1, -1, None, [(2, 10, b"b"), (3, 10, b"c")])
    assert queues["jobs"] == SnapQueue(
        "jobs", ARRAY, 7, 50, 1024, (0, 9), [(7, 0, b"xxxxx"), (4, 9, b"")]
    )
    assert encode_snapshot(41, 3, list(queues.values())) == golden


def test_the_hand_metadata_codec_agrees_with_the_golden_metadata():
    assert encode_metadata(7, 2) == (DATA_DIR / "tflux.metadata").read_bytes()
    assert encode_metadata(1, -1) == (DATA_DIR / "tflux.metadata.novote").read_bytes()


# --- snapshots -----------------------------------------------------------------------------------


def test_snapshot_writes_the_state_with_in_flight_records_in_spec_layout(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue(
            "arr", implementation="array", key_range=(0, 9), max_size=50, max_message_size=1024
        )
        store.enqueue_many("arr", [(9, b"a"), (0, b"b"), (9, b"c")])
        store.enqueue("", -7, b"d")
        store.ack(store.dequeue("", timeout=0))
        flying = store.dequeue("arr", timeout=0)
        assert flying.id == 2
        assert store.snapshot() is True
        last_index, last_term, queues = read_snapshot_file(base_dir)
    assert (last_index, last_term) == (5, 1)  # 6 entries: create, 3 adds, add, remove
    assert set(queues) == {"", "arr"}
    assert queues[""] == SnapQueue("", HEAP, 1, -1, -1, None, [])
    arr = queues["arr"]
    assert (arr.impl, arr.last_id, arr.max_size, arr.max_message_size, arr.key_range) == (
        ARRAY,
        3,
        50,
        1024,
        (0, 9),
    )
    assert sorted(arr.records) == [(1, 9, b"a"), (2, 0, b"b"), (3, 9, b"c")]
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == 5
        assert store.replayed == 0
        assert contents(store, "arr") == [
            (2, 0, b"b", "arr"),
            (1, 9, b"a", "arr"),
            (3, 9, b"c", "arr"),
        ]


def test_snapshot_returns_false_when_nothing_was_logged_since_the_last_one(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        assert store.snapshot() is False  # nothing ever logged
        assert not (base_dir / "data" / "tflux.snapshot").exists()
        store.enqueue("", 1, b"x")
        assert store.snapshot() is True
        first = (base_dir / "data" / "tflux.snapshot").read_bytes()
        assert store.snapshot() is False
        store.dequeue("", timeout=0)  # writes nothing
        assert store.snapshot() is False
        assert (base_dir / "data" / "tflux.snapshot").read_bytes() == first
    with tflux.open(base_dir, **FAST) as store:
        assert store.snapshot() is False
        store.enqueue("", 1, b"y")
        assert store.snapshot() is True
        assert read_snapshot_file(base_dir)[0] == 1


def test_snapshot_compacts_the_log_up_to_its_index(base_dir):
    opts = {**SMALL, "snapshot_creation_segments_threshold": 0}
    with tflux.open(base_dir, **opts) as store:
        for i in range(60):
            store.enqueue("", i % 5, b"payload-%03d" % i)
        assert len(segment_files(log_dir_of(base_dir))) > 4, "segments should roll at 256 bytes"
        assert store.snapshot() is True
        index = read_snapshot_file(base_dir)[0]
        assert index == 59
        starts = [int(n[:19]) for n in segment_files(log_dir_of(base_dir))]
        # no sealed segment whose every LSN is <= the snapshot index survives
        assert all(nxt - 1 > index for nxt in starts[1:]), starts
        assert starts[0] <= index + 1
        store.enqueue("", -1, b"after")
    with tflux.open(base_dir, **opts) as store:
        assert store.restored_snapshot_index == 59
        assert store.replayed == 1
        recs = contents(store, "")
        assert len(recs) == 61
        assert recs[0] == (61, -1, b"after", "")


def test_automatic_snapshots_bound_the_number_of_segments(base_dir):
    with tflux.open(base_dir, **SMALL) as store:
        for i in range(300):
            store.enqueue("", i % 7, b"x" * 20)
        assert (base_dir / "data" / "tflux.snapshot").exists()
        assert (
            len(segment_files(log_dir_of(base_dir)))
            <= SMALL["snapshot_creation_segments_threshold"] + 2
        )
    last_index = read_snapshot_file(base_dir)[0]
    assert 100 < last_index <= 299
    with tflux.open(base_dir, **SMALL) as store:
        assert store.restored_snapshot_index == last_index
        assert store.replayed == 299 - last_index
        assert info(store, "").count == 300
        assert info(store, "").last_id == 300


def test_a_zero_threshold_disables_automatic_snapshots(base_dir):
    with tflux.open(base_dir, **{**SMALL, "snapshot_creation_segments_threshold": 0}) as store:
        for _ in range(150):
            store.enqueue("", 0, b"x" * 20)
    assert not (base_dir / "data" / "tflux.snapshot").exists()
    assert len(segment_files(log_dir_of(base_dir))) > 10
    assert [lsn for lsn, _, _ in log_entries(base_dir)] == list(range(150))


def test_snapshot_leaves_no_temporary_file_behind(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue("", 0, b"x")
        store.snapshot()
        assert list((base_dir / "data" / "temp").iterdir()) == []


# --- restore from hand-built files ---------------------------------------------------------------


def test_the_golden_snapshot_and_metadata_restore_and_the_log_restarts_after_the_snapshot(
    base_dir,
):
    data = base_dir / "data"
    data.mkdir()
    shutil.copyfile(DATA_DIR / "tflux.snapshot", data / "tflux.snapshot")
    shutil.copyfile(DATA_DIR / "tflux.metadata", data / "tflux.metadata")
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == 41
        assert store.term == 7
        assert contents(store, "") == [(2, 10, b"b", ""), (3, 10, b"c", "")]
        assert contents(store, "jobs") == [(7, 0, b"xxxxx", "jobs"), (4, 9, b"", "jobs")]
        jobs = info(store, "jobs")
        assert (
            jobs.implementation,
            jobs.last_id,
            jobs.max_size,
            jobs.max_message_size,
            jobs.key_range,
        ) == ("array", 7, 50, 1024, (0, 9))
        assert store.enqueue("jobs", 5, b"new") == 8
        assert store.enqueue("", 0, b"d") == 4
    assert log_entries(base_dir) == [(42, 7, add("jobs", 5, b"new")), (43, 7, add("", 0, b"d"))]
    with tflux.open(base_dir, **FAST) as store:
        assert store.replayed == 2
        assert [r.id for r in store.records("jobs")] == [7, 8, 4]


def test_snapshot_records_are_reinserted_in_id_order(base_dir):
    data = base_dir / "data"
    data.mkdir()
    queues = [
        SnapQueue("", HEAP, 5, records=[(5, 1, b"e"), (2, 1, b"b"), (4, 0, b"d"), (1, 1, b"a")]),
        SnapQueue("a", ARRAY, 9, key_range=(0, 3), records=[(9, 2, b"i"), (3, 2, b"c")]),
    ]
    (data / "tflux.snapshot").write_bytes(encode_snapshot(0, 1, queues))
    with tflux.open(base_dir, **FAST) as store:
        assert [r.id for r in store.records("")] == [4, 1, 2, 5]
        assert [r.id for r in store.records("a")] == [3, 9]
        assert store.enqueue("a", 2, b"j") == 10


def test_log_entries_up_to_the_snapshot_index_are_skipped_on_replay(base_dir):
    data = base_dir / "data"
    log_dir = data / "log"
    log_dir.mkdir(parents=True)
    deltas = [create("jobs"), add("jobs", 1, b"a"), add("jobs", 0, b"b"), remove("jobs", 1)]
    write_segment(log_dir, 0, [(1, d) for d in deltas])
    snap = [SnapQueue(""), SnapQueue("jobs", last_id=1, records=[(1, 1, b"a")])]
    (data / "tflux.snapshot").write_bytes(encode_snapshot(1, 1, snap))
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == 1
        assert store.replayed == 2
        assert contents(store, "jobs") == [(2, 0, b"b", "jobs")]
        assert store.enqueue("jobs", 0, b"c") == 3
    assert log_entries(base_dir)[-1] == (4, 1, add("jobs", 0, b"c"))


def test_a_snapshot_ahead_of_the_whole_log_restarts_the_log_after_it(base_dir):
    data = base_dir / "data"
    log_dir = data / "log"
    log_dir.mkdir(parents=True)
    write_segment(log_dir, 0, [(1, create("old")), (1, add("old", 0, b"x"))])
    snap = [SnapQueue("", last_id=1, records=[(1, 5, b"s")])]
    (data / "tflux.snapshot").write_bytes(encode_snapshot(10, 1, snap))
    with tflux.open(base_dir, **FAST) as store:
        assert names(store) == [""]
        assert contents(store, "") == [(1, 5, b"s", "")]
        assert store.enqueue("", 0, b"n") == 2
        # The old log is moved aside into data/temp, not deleted.
        moved = [Path(p) for p in store.moved_aside]
        assert len(moved) == 1
        assert moved[0].parent == data / "temp" and moved[0].name.endswith(segment_name(0))
    entries = log_entries(base_dir)
    assert entries[0] == (11, 1, add("", 0, b"n"))
    assert segment_name(11) in segment_files(log_dir)
    with tflux.open(base_dir, **FAST) as store:
        assert contents(store, "") == [(2, 0, b"n", ""), (1, 5, b"s", "")]


def test_a_torn_tail_cut_at_open_keeps_a_copy_of_what_it_removed(base_dir):
    log_dir = base_dir / "data" / "log"
    log_dir.mkdir(parents=True)
    records = [(1, create("q")), (1, add("q", 3, b"kept")), (1, add("q", 4, b"torn" * 50))]
    last = write_segment(log_dir, 0, records)
    buf = bytearray(last.read_bytes())
    buf[-10] ^= 0x01  # inside the last record's data: a bad checksum
    last.write_bytes(bytes(buf))
    cut_at = record_offsets(records)[2]
    with tflux.open(base_dir, **FAST) as store:
        assert contents(store, "q") == [(1, 3, b"kept", "q")]
        (copy,) = [Path(p) for p in store.moved_aside]
    assert copy.parent == base_dir / "data" / "temp"
    # Up to the last non-zero byte: the zeros after it (padding, preallocation) carry nothing.
    assert copy.read_bytes() == bytes(buf[cut_at : record_offsets(records)[3]]).rstrip(b"\0")


def test_a_symlinked_temp_directory_is_refused_by_every_writer_of_temporary_files(tmp_path):
    """Issue 30, item 12: snapshots were written through a symlinked data/temp into a foreign
    directory (compress and repair refused it already): one rule, `fsutil::temp_dir_in`."""
    base = tmp_path / "base"
    with tflux.open(base) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    temp = base / "data" / "temp"
    shutil.rmtree(temp)
    temp.symlink_to(foreign)
    with pytest.raises(tflux.TfluxIOError, match="symlink"):
        tflux.open(base)
    with pytest.raises(tflux.TfluxIOError, match="symlink"):
        tflux.write_metadata(base / "data" / "tflux.metadata", 5, None)
    channel = tmp_path / "channel"
    with tflux.Channel.open(channel) as ch:
        ch.sender().send(b"m")
        rx = ch.receiver("r")
        assert rx.recv(timeout=0) is not None
        cursor_temp = channel / "data" / "cursors" / "temp"
        if cursor_temp.exists():
            shutil.rmtree(cursor_temp)
        cursor_temp.symlink_to(foreign)
        with pytest.raises(tflux.TfluxIOError, match="symlink"):
            rx.ack(1)
    assert list(foreign.iterdir()) == []
    with tflux.open(base, readonly=True) as store:
        assert store.count("q") == 1


def test_metadata_term_is_the_term_of_new_records(base_dir):
    data = base_dir / "data"
    data.mkdir()
    (data / "tflux.metadata").write_bytes(encode_metadata(5, -1))
    with tflux.open(base_dir, **FAST) as store:
        assert store.term == 5
        store.enqueue("", 0, b"x")
    assert log_entries(base_dir) == [(0, 5, add("", 0, b"x"))]


@pytest.mark.parametrize("name", ["tflux.snapshot", "tflux.metadata"])
def test_an_empty_snapshot_or_metadata_file_counts_as_absent(base_dir, name):
    data = base_dir / "data"
    data.mkdir()
    (data / name).write_bytes(b"")
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index is None
        assert store.term == 1
        assert names(store) == [""]
        store.enqueue("", 0, b"x")
    with tflux.open(base_dir, **FAST) as store:
        assert contents(store, "") == [(1, 0, b"x", "")]


# --- corruption ----------------------------------------------------------------------------------


def test_a_bad_delta_in_the_log_is_a_replay_error_naming_its_lsn(base_dir):
    log_dir = log_dir_of(base_dir)
    with tflux.Log.open(log_dir, preallocate=False) as log:
        log.append(1, create("jobs"))
        log.append(1, add("jobs", 1, b"x"))
        log.append(1, b"A\x04jobs\x00")  # cut inside the key
        log.append(1, add("jobs", 2, b"y"))
    before = files_of(base_dir)
    with pytest.raises(ReplayError) as exc:
        tflux.open(base_dir, **FAST)
    assert exc.value.lsn == 2
    assert isinstance(exc.value.__cause__, CorruptionError)
    assert_nothing_lost(base_dir, before)
    # the refused open released the lock and still refuses the next time
    with pytest.raises(ReplayError):
        tflux.open(base_dir, **FAST)


@pytest.mark.parametrize(
    ("deltas", "lsn"),
    [
        ([add("", 1, b"x"), remove("", 2)], 1),
        ([create("a"), create("a")], 1),
        ([delete("")], 0),
        ([create("a", ARRAY, key_range=(0, 1)), add("a", 2, b"")], 1),
        ([add("", 0, b""), create("z", 7)], 1),
    ],
    ids=["remove-missing-id", "create-twice", "delete-default", "key-outside-array", "bad-impl"],
)
def test_a_log_entry_that_breaks_an_apply_rule_stops_the_open(base_dir, deltas, lsn):
    log_dir = log_dir_of(base_dir)
    log_dir.mkdir(parents=True)
    write_segment(log_dir, 0, [(1, d) for d in deltas])
    before = files_of(base_dir)
    with pytest.raises(ReplayError) as exc:
        tflux.open(base_dir, **FAST)
    assert exc.value.lsn == lsn
    assert_nothing_lost(base_dir, before)


def test_a_bad_delta_after_a_snapshot_names_its_lsn(base_dir):
    data = base_dir / "data"
    log_dir = data / "log"
    log_dir.mkdir(parents=True)
    (data / "tflux.snapshot").write_bytes(encode_snapshot(6, 1))
    write_segment(log_dir, 7, [(1, add("", 0, b"")), (1, b"Q")])
    with pytest.raises(ReplayError) as exc:
        tflux.open(base_dir, **FAST)
    assert exc.value.lsn == 8


GOOD_SNAPSHOT_QUEUES = [
    SnapQueue("", HEAP, 2, records=[(1, 0, b"a"), (2, 0, b"b")]),
    SnapQueue("arr", ARRAY, 1, key_range=(0, 9), records=[(1, 3, b"c")]),
]
GOOD_SNAPSHOT = encode_snapshot(0, 1, GOOD_SNAPSHOT_QUEUES)


def snapshot_with(**changes) -> bytes:
    queues = [SnapQueue(**{**q.__dict__}) for q in GOOD_SNAPSHOT_QUEUES]
    for name, value in changes.items():
        idx, attr = name.split("__")
        setattr(queues[int(idx)], attr, value)
    return encode_snapshot(0, 1, queues)


BAD_SNAPSHOTS = {
    "bad marker": b"\x00" + GOOD_SNAPSHOT[1:],
    "bad checksum": GOOD_SNAPSHOT[:-1] + bytes([GOOD_SNAPSHOT[-1] ^ 1]),
    "flipped state byte": GOOD_SNAPSHOT[:20]
    + bytes([GOOD_SNAPSHOT[20] ^ 0x40])
    + GOOD_SNAPSHOT[21:],
    "trailing byte": GOOD_SNAPSHOT + b"\x00",
    "cut in the checksum": GOOD_SNAPSHOT[:-2],
    "cut in the state": GOOD_SNAPSHOT[:30],
    "cut in the header": GOOD_SNAPSHOT[:7],
    "state length past the end": GOOD_SNAPSHOT[:12] + struct.pack(">i", 10**6) + GOOD_SNAPSHOT[16:],
    "negative state length": GOOD_SNAPSHOT[:12] + struct.pack(">i", -1) + GOOD_SNAPSHOT[16:],
    "trailing bytes inside the state": encode_snapshot(
        0, 1, state=encode_state(GOOD_SNAPSHOT_QUEUES) + b"\x00"
    ),
    "duplicate queue names": encode_snapshot(0, 1, [*GOOD_SNAPSHOT_QUEUES, SnapQueue("arr")]),
    "duplicate default queue": encode_snapshot(0, 1, [*GOOD_SNAPSHOT_QUEUES, SnapQueue("")]),
    "duplicate record ids": snapshot_with(**{"0__records": [(1, 0, b"a"), (1, 0, b"b")]}),
    "record id above last id": snapshot_with(**{"1__records": [(2, 3, b"c")]}),
    "missing default queue": encode_snapshot(0, 1, GOOD_SNAPSHOT_QUEUES[1:]),
    "no queues at all": encode_snapshot(0, 1, []),
    "invalid queue name": snapshot_with(**{"1__name": "a b"}),
    "unknown implementation": snapshot_with(**{"1__impl": 3}),
    "array without range": snapshot_with(**{"1__key_range": None}),
    "range min > max": snapshot_with(**{"1__key_range": (9, 0)}),
    "record key outside the array range": snapshot_with(**{"1__records": [(1, 10, b"c")]}),
}


@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOTS))
def test_a_corrupt_snapshot_is_a_corruption_error_and_is_kept(base_dir, case):
    data = base_dir / "data"
    data.mkdir()
    (data / "tflux.snapshot").write_bytes(BAD_SNAPSHOTS[case])
    before = files_of(base_dir)
    with pytest.raises(CorruptionError):
        tflux.open(base_dir, **FAST)
    assert_nothing_lost(base_dir, before)


def test_the_reference_snapshot_for_the_corruption_cases_is_valid(base_dir):
    data = base_dir / "data"
    data.mkdir()
    (data / "tflux.snapshot").write_bytes(GOOD_SNAPSHOT)
    with tflux.open(base_dir, **FAST) as store:
        assert contents(store, "") == [(1, 0, b"a", ""), (2, 0, b"b", "")]
        assert contents(store, "arr") == [(1, 3, b"c", "arr")]


GOOD_METADATA = encode_metadata(3, 1)

BAD_METADATA = {
    "bad marker": b"\x5b" + GOOD_METADATA[1:],
    "bad checksum": GOOD_METADATA[:-1] + bytes([GOOD_METADATA[-1] ^ 0x80]),
    "flipped term": GOOD_METADATA[:11] + bytes([GOOD_METADATA[11] ^ 1]) + GOOD_METADATA[12:],
    "19 bytes": GOOD_METADATA[:19],
    "21 bytes": GOOD_METADATA + b"\x00",
    "4 bytes": GOOD_METADATA[:4],
    "version 2": encode_metadata(3, 1, version=2),
    "version 0": encode_metadata(3, 1, version=0),
    "vote -2": encode_metadata(3, -2),
    "term -1": encode_metadata(-1, -1),
}


@pytest.mark.parametrize("case", sorted(BAD_METADATA))
def test_corrupt_metadata_is_a_corruption_error_and_is_kept(base_dir, case):
    data = base_dir / "data"
    data.mkdir()
    (data / "tflux.metadata").write_bytes(BAD_METADATA[case])
    before = files_of(base_dir)
    with pytest.raises(CorruptionError):
        tflux.open(base_dir, **FAST)
    assert_nothing_lost(base_dir, before)


def test_the_reference_metadata_for_the_corruption_cases_is_valid(base_dir):
    data = base_dir / "data"
    data.mkdir()
    (data / "tflux.metadata").write_bytes(GOOD_METADATA)
    with tflux.open(base_dir, **FAST) as store:
        assert store.term == 3


def test_a_log_that_does_not_start_at_zero_without_a_snapshot_is_corruption(base_dir):
    log_dir = log_dir_of(base_dir)
    log_dir.mkdir(parents=True)
    write_segment(log_dir, 3, [(1, add("", 0, b"x"))])
    before = files_of(base_dir)
    with pytest.raises(CorruptionError):
        tflux.open(base_dir, **FAST)
    assert_nothing_lost(base_dir, before)


def test_a_gap_between_snapshot_and_log_is_corruption(base_dir):
    data = base_dir / "data"
    log_dir = data / "log"
    log_dir.mkdir(parents=True)
    (data / "tflux.snapshot").write_bytes(encode_snapshot(2, 1))
    write_segment(log_dir, 5, [(1, add("", 0, b"x"))])
    before = files_of(base_dir)
    with pytest.raises(CorruptionError):
        tflux.open(base_dir, **FAST)
    assert_nothing_lost(base_dir, before)


def test_a_log_continuing_right_after_the_snapshot_is_fine(base_dir):
    data = base_dir / "data"
    log_dir = data / "log"
    log_dir.mkdir(parents=True)
    (data / "tflux.snapshot").write_bytes(encode_snapshot(2, 1))
    write_segment(log_dir, 3, [(1, add("", 0, b"x"))])
    with tflux.open(base_dir, **FAST) as store:
        assert store.replayed == 1
        assert contents(store, "") == [(1, 0, b"x", "")]


@pytest.mark.parametrize(
    ("terms", "metadata"),
    [([1, 2], None), ([3, 2], encode_metadata(3, -1)), ([1, 4], encode_metadata(3, -1))],
    ids=["above-absent-metadata", "decreasing", "above-metadata"],
)
def test_record_terms_must_not_decrease_nor_pass_the_metadata_term(base_dir, terms, metadata):
    data = base_dir / "data"
    log_dir = data / "log"
    log_dir.mkdir(parents=True)
    if metadata is not None:
        (data / "tflux.metadata").write_bytes(metadata)
    write_segment(log_dir, 0, [(t, add("", 0, b"x")) for t in terms])
    before = files_of(base_dir)
    with pytest.raises(CorruptionError):
        tflux.open(base_dir, **FAST)
    assert_nothing_lost(base_dir, before)  # a complete record is never trimmed
