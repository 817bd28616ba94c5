"""The embedded durable queue (``tflux.open`` / ``tflux.Store``) through its Python API.

Expected values come from the spec (sections 1, 4-8 and 7.1), from independent encoders and
decoders of deltas, snapshots and metadata written here with ``struct`` and ``zlib`` (checked
against the golden files in ``tests/data``), and from a plain Python model of the queues in the
stateful test. The log files a store writes are read back with the strict segment parser of
``conftest.py``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tflux
from conftest import (
    DATA_DIR,
    parse_segment,
    record_offsets,
    segment_files,
    segment_name,
    write_segment,
)
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)
from test_state import ARRAY, HEAP, I64_MAX, I64_MIN, add, create, delete, qname, remove
from tflux.errors import (
    CorruptionError,
    LockedError,
    NotInFlightError,
    PolicyViolation,
    QueueExistsError,
    QueueNotFoundError,
    ReadOnlyError,
    ReplayError,
    TfluxError,
)

IMPL_NAMES = {HEAP: "heap", ARRAY: "array"}
IMPL_CODES = {v: k for k, v in IMPL_NAMES.items()}

# Settings that make segments roll and snapshots happen after a handful of records.
SMALL = {
    "log_file_soft_limit": 256,
    "log_file_hard_limit": 1024,
    "log_preallocate_segments": False,
    "snapshot_creation_segments_threshold": 2,
    "log_sync_policy": "never",
}
FAST = {"log_preallocate_segments": False, "log_sync_policy": "never"}


# --- independent codecs of the snapshot (spec 4) and metadata (spec 5) ---------------------------

SNAPSHOT_MARKER = bytes.fromhex("b6380fc9")
WIDE_SNAPSHOT_MARKER = bytes.fromhex("b6380fca")  # spec 4.1: Int64 index and term
METADATA_MARKER = bytes.fromhex("5a6ea012")


@dataclass
class SnapQueue:
    name: str
    impl: int = HEAP
    last_id: int = 0
    max_size: int = -1
    max_message_size: int = -1
    key_range: tuple[int, int] | None = None
    records: list[tuple[int, int, bytes]] = field(default_factory=list)  # (id, key, data)


def encode_state(queues: list[SnapQueue]) -> bytes:
    out = struct.pack(">i", len(queues))
    for q in queues:
        out += qname(q.name) + struct.pack(
            ">iQii", q.impl, q.last_id, q.max_size, q.max_message_size
        )
        out += b"\x00" if q.key_range is None else b"\x01" + struct.pack(">qq", *q.key_range)
        out += struct.pack(">i", len(q.records))
        for rid, key, data in q.records:
            out += struct.pack(">Qqi", rid, key, len(data)) + data
    return out


def encode_snapshot(
    last_index: int,
    last_term: int,
    queues: list[SnapQueue] | None = None,
    state: bytes | None = None,
) -> bytes:
    """Marker | Int32 last index | Int32 last term | Buffer state | UInt32 CRC of the state."""
    if state is None:
        state = encode_state(queues if queues is not None else [SnapQueue("")])
    return (
        SNAPSHOT_MARKER
        + struct.pack(">iii", last_index, last_term, len(state))
        + state
        + struct.pack(">I", zlib.crc32(state))
    )


class Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        assert 0 <= n <= len(self.buf) - self.pos, f"short read of {n} at {self.pos}"
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))

    def name(self) -> str:
        (n,) = self.unpack(">B")
        raw = self.take(n)
        assert all(0x21 <= c <= 0x7E for c in raw), raw
        return raw.decode("ascii")


def decode_snapshot(buf: bytes) -> tuple[int, int, dict[str, SnapQueue]]:
    """Strict reader for snapshots tflux wrote: any deviation from spec 4 fails the test."""
    r = Reader(buf)
    marker = r.take(4)
    assert marker in (SNAPSHOT_MARKER, WIDE_SNAPSHOT_MARKER)
    wide = marker == WIDE_SNAPSHOT_MARKER
    last_index, last_term, length = r.unpack(">qqi" if wide else ">iii")
    # Spec 4.1: written wide only when index or term does not fit Int32.
    assert wide == (max(last_index, last_term) > 2**31 - 1)
    state = r.take(length)
    (crc,) = r.unpack(">I")
    covered = buf[4:20] + state if wide else state
    assert crc == zlib.crc32(covered), "snapshot checksum"
    assert r.pos == len(buf), "trailing bytes after the snapshot checksum"
    s = Reader(state)
    queues: dict[str, SnapQueue] = {}
    (count,) = s.unpack(">i")
    for _ in range(count):
        name = s.name()
        impl, last_id, max_size, max_msg = s.unpack(">iQii")
        (flag,) = s.unpack(">B")
        assert flag in (0, 1)
        key_range = s.unpack(">qq") if flag else None
        (n,) = s.unpack(">i")
        records = []
        for _ in range(n):
            rid, key, dlen = s.unpack(">Qqi")
            records.append((rid, key, s.take(dlen)))
        assert name not in queues, f"duplicate queue {name!r}"
        queues[name] = SnapQueue(name, impl, last_id, max_size, max_msg, key_range, records)
    assert s.pos == len(state), "trailing bytes in the snapshot state"
    return last_index, last_term, queues


def encode_metadata(term: int, vote: int, version: int = 1) -> bytes:
    body = struct.pack(">iii", version, term, vote)
    return METADATA_MARKER + body + struct.pack(">I", zlib.crc32(body))


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


# --- helpers -------------------------------------------------------------------------------------


def rec(r) -> tuple[int, int, bytes, str]:
    return (r.id, r.key, bytes(r.payload), r.queue)


def contents(store, queue: str) -> list[tuple[int, int, bytes, str]]:
    return [rec(r) for r in store.records(queue)]


def info(store, name: str):
    found = [q for q in store.queues() if q.name == name]
    assert len(found) == 1, f"queue {name!r} listed {len(found)} times"
    return found[0]


def names(store) -> list[str]:
    return sorted(q.name for q in store.queues())


def log_dir_of(base: Path) -> Path:
    return base / "data" / "log"


def log_entries(base: Path) -> list[tuple[int, int, bytes]]:
    """(lsn, term, data) of every record in every segment file, read with the strict parser."""
    out = []
    for name in segment_files(log_dir_of(base)):
        start = int(name[:19])
        parsed = parse_segment((log_dir_of(base) / name).read_bytes())
        if out:
            assert out[-1][0] + 1 == start, f"segment {name} does not continue the log"
        out.extend((start + i, t, d) for i, (t, d) in enumerate(parsed.records))
    return out


def log_datas(base: Path) -> list[bytes]:
    return [d for _, _, d in log_entries(base)]


def read_snapshot_file(base: Path):
    return decode_snapshot((base / "data" / "tflux.snapshot").read_bytes())


def files_of(base: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(base)): p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and "temp" not in p.parts
    }


def assert_nothing_lost(base: Path, before: dict[str, bytes]) -> None:
    after = files_of(base)
    for path, data in before.items():
        assert path in after, f"{path} was deleted"
        assert after[path] == data, f"{path} was modified"


def setting(store, pascal: str) -> str:
    values = store.settings
    snake = "".join("_" + c.lower() if c.isupper() else c for c in pascal).lstrip("_")
    key = pascal if pascal in values else snake
    return str(values[key]).lower()


@pytest.fixture
def store(base_dir):
    s = tflux.open(base_dir, log_sync_policy="always", log_preallocate_segments=False)
    yield s
    s.close()


def reopen(store, base: Path, **kwargs):
    store.close()
    return tflux.open(base, **kwargs)


# --- opening a base directory --------------------------------------------------------------------


def test_open_creates_the_data_directories_and_only_the_default_queue(base_dir):
    with tflux.open(base_dir) as store:
        assert (base_dir / "data" / "log").is_dir()
        assert (base_dir / "data" / "temp").is_dir()
        queues = store.queues()
        assert [q.name for q in queues] == [""]
        q = queues[0]
        assert q.implementation == "heap"
        assert (q.count, q.in_flight, q.last_id) == (0, 0, 0)
        assert (q.max_size, q.max_message_size, q.key_range) == (None, None, None)
        assert store.records("") == []
        assert store.restored_snapshot_index is None
        assert store.replayed == 0
        assert store.term == 1  # absent metadata means term 1
    assert not (base_dir / "data" / "tflux.log").exists()


def test_open_accepts_a_path_object_and_a_string(base_dir):
    with tflux.open(str(base_dir), **FAST) as store:
        store.enqueue("", 1, b"x")
    with tflux.open(base_dir, **FAST) as store:
        assert contents(store, "") == [(1, 1, b"x", "")]


# --- creating and deleting queues ----------------------------------------------------------------


def test_create_queue_records_implementation_limits_and_range(store):
    store.create_queue("jobs")
    store.create_queue("arr", implementation="array", key_range=(-5, 5), max_size=3)
    store.create_queue("lim", max_size=0, max_message_size=10, key_range=(1, 1))
    store.create_queue("big", implementation="array", key_range=(I64_MIN, I64_MAX))
    assert names(store) == ["", "arr", "big", "jobs", "lim"]
    got = {
        q.name: (q.implementation, q.max_size, q.max_message_size, q.key_range, q.count, q.last_id)
        for q in store.queues()
    }
    assert got == {
        "": ("heap", None, None, None, 0, 0),
        "jobs": ("heap", None, None, None, 0, 0),
        "arr": ("array", 3, None, (-5, 5), 0, 0),
        "lim": ("heap", 0, 10, (1, 1), 0, 0),
        "big": ("array", None, None, (I64_MIN, I64_MAX), 0, 0),
    }


def test_create_queue_logs_one_create_delta_in_spec_layout(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("jobs")
        store.create_queue(
            "q:x", implementation="array", max_size=100, max_message_size=4096, key_range=(-5, 5)
        )
        store.delete_queue("jobs")
    assert log_entries(base_dir) == [
        (0, 1, create("jobs", HEAP, -1, -1, None)),
        (1, 1, create("q:x", ARRAY, 100, 4096, (-5, 5))),
        (2, 1, delete("jobs")),
    ]


@pytest.mark.parametrize(
    "name",
    ["a b", "tab\t", "caf\u00e9", "x" * 256, "new\nline", "\x7f", "nul\x00"],
    ids=["space", "tab", "non-ascii", "256 chars", "newline", "DEL", "NUL"],
)
def test_invalid_queue_names_are_value_errors_and_write_nothing(store, base_dir, name):
    bounds = store.log_bounds
    with pytest.raises(ValueError):
        store.create_queue(name)
    assert store.log_bounds == bounds
    assert names(store) == [""]
    assert log_entries(base_dir) == []


def test_names_of_255_printable_characters_and_the_ascii_edges_are_valid(store):
    store.create_queue("~" * 255)
    store.create_queue("!")
    store.create_queue("".join(chr(c) for c in range(0x21, 0x7F)))
    assert len(store.queues()) == 4


@pytest.mark.parametrize(
    "kwargs",
    [
        {"implementation": "array"},
        {"implementation": "array", "key_range": (2, 1)},
        {"key_range": (0, -1)},
        {"implementation": "linked-list"},
        {"implementation": "array", "key_range": (I64_MAX, I64_MIN)},
        {"max_size": -1},
        {"max_message_size": -2},
    ],
    ids=[
        "array-no-range",
        "array-min>max",
        "heap-min>max",
        "unknown-impl",
        "extremes",
        "neg-size",
        "neg-msg",
    ],
)
def test_invalid_queue_settings_are_value_errors_and_write_nothing(store, base_dir, kwargs):
    with pytest.raises(ValueError):
        store.create_queue("q", **kwargs)
    assert names(store) == [""]
    assert log_entries(base_dir) == []


def test_sizes_beyond_int32_are_refused(store, base_dir):
    with pytest.raises((ValueError, OverflowError)):
        store.create_queue("q", max_size=2**31)
    with pytest.raises((ValueError, OverflowError)):
        store.create_queue("q", max_message_size=2**31)
    store.create_queue("q", max_size=2**31 - 1, max_message_size=2**31 - 1)
    assert (info(store, "q").max_size, info(store, "q").max_message_size) == (2**31 - 1,) * 2


def test_creating_an_existing_queue_is_queue_exists_error_and_writes_nothing(store, base_dir):
    store.create_queue("jobs")
    with pytest.raises(QueueExistsError):
        store.create_queue("jobs", implementation="array", key_range=(0, 1))
    with pytest.raises(QueueExistsError):
        store.create_queue("")
    assert info(store, "jobs").implementation == "heap"
    assert log_datas(base_dir) == [create("jobs")]


def test_the_default_queue_cannot_be_deleted(store, base_dir):
    store.enqueue("", 1, b"x")
    with pytest.raises(ValueError):
        store.delete_queue("")
    assert contents(store, "") == [(1, 1, b"x", "")]
    assert log_datas(base_dir) == [add("", 1, b"x")]


def test_missing_queues_are_queue_not_found_errors_that_are_key_errors(store, base_dir):
    for call in (
        lambda: store.enqueue("nope", 1, b"x"),
        lambda: store.enqueue_many("nope", [(1, b"x")]),
        lambda: store.dequeue("nope", timeout=0),
        lambda: store.dequeue("nope", timeout=1.0),
        lambda: store.delete_queue("nope"),
        lambda: store.records("nope"),
    ):
        with pytest.raises(QueueNotFoundError) as exc:
            call()
        assert isinstance(exc.value, KeyError)
    assert log_entries(base_dir) == []


def test_dequeue_without_timeout_on_a_missing_queue_raises_instead_of_waiting(store):
    t, result = run_thread(lambda: store.dequeue("nope"))
    t.join(5)
    assert not t.is_alive(), "dequeue of a missing queue is waiting"
    assert isinstance(result[0], QueueNotFoundError)


def test_a_deleted_queue_is_gone_and_a_recreated_one_starts_from_id_one(store):
    store.create_queue("jobs")
    assert store.enqueue("jobs", 1, b"a") == 1
    assert store.enqueue("jobs", 1, b"b") == 2
    store.delete_queue("jobs")
    assert names(store) == [""]
    with pytest.raises(QueueNotFoundError):
        store.enqueue("jobs", 1, b"c")
    store.create_queue("jobs", implementation="array", key_range=(0, 3))
    assert store.records("jobs") == []
    assert store.enqueue("jobs", 2, b"new") == 1
    assert info(store, "jobs").implementation == "array"


# --- enqueue, ids and order ----------------------------------------------------------------------


def test_ids_start_at_one_and_are_per_queue(store):
    store.create_queue("a")
    assert [store.enqueue("a", 0, b"") for _ in range(3)] == [1, 2, 3]
    assert store.enqueue("", 0, b"") == 1
    assert store.enqueue_many("a", [(0, b"x"), (0, b"y")]) == [4, 5]
    assert store.enqueue_many("", [(9, b"z")]) == [2]
    assert (info(store, "a").last_id, info(store, "").last_id) == (5, 2)


def test_enqueue_logs_one_add_delta_per_record(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue("", -3, b"hello")
        store.enqueue_many("", [(I64_MIN, b""), (I64_MAX, b"\x00" * 5)])
    assert log_entries(base_dir) == [
        (0, 1, add("", -3, b"hello")),
        (1, 1, add("", I64_MIN, b"")),
        (2, 1, add("", I64_MAX, b"\x00" * 5)),
    ]


def test_enqueue_many_of_nothing_returns_no_ids_and_writes_nothing(store, base_dir):
    assert store.enqueue_many("", []) == []
    assert log_entries(base_dir) == []
    assert store.enqueue("", 0, b"") == 1


def test_enqueue_many_of_nothing_on_a_missing_queue_is_still_queue_not_found(store, base_dir):
    with pytest.raises(QueueNotFoundError):
        store.enqueue_many("nope", [])
    assert log_entries(base_dir) == []


KEYS = [5, -1, 5, 3, -1, 0, 3, 5, -1, 4]


@pytest.mark.parametrize(
    ("impl", "key_range"),
    [("heap", None), ("array", (-1, 5)), ("array", (-(2**62), 2**62)), ("heap", (-1, 5))],
)
def test_dequeue_takes_the_smallest_key_first_and_fifo_among_equal_keys(store, impl, key_range):
    store.create_queue("q", implementation=impl, key_range=key_range)
    ids = [store.enqueue("q", k, f"m{i}".encode()) for i, k in enumerate(KEYS)]
    expected = sorted(
        ((rid, k, f"m{i}".encode(), "q") for i, (rid, k) in enumerate(zip(ids, KEYS, strict=True))),
        key=lambda r: (r[1], r[0]),
    )
    assert contents(store, "q") == expected
    got = [rec(store.dequeue("q", timeout=0)) for _ in KEYS]
    assert got == expected
    assert store.dequeue("q", timeout=0) is None


def test_records_returns_ready_records_without_dequeuing(store):
    store.enqueue("", 2, b"b")
    store.enqueue("", 1, b"a")
    assert contents(store, "") == [(2, 1, b"a", ""), (1, 2, b"b", "")]
    assert contents(store, "") == [(2, 1, b"a", ""), (1, 2, b"b", "")]
    assert rec(store.dequeue("", timeout=0)) == (2, 1, b"a", "")
    assert contents(store, "") == [(1, 2, b"b", "")]


def test_payloads_round_trip_byte_for_byte(store):
    payloads = [b"", b"\x00", bytes(range(256)), os.urandom(200_000)]
    for p in payloads:
        store.enqueue("", 0, p)
    assert [bytes(store.dequeue("", timeout=0).payload) for _ in payloads] == payloads


# --- policies ------------------------------------------------------------------------------------


def refused(store, base: Path, policy: str, call, queue: str) -> None:
    bounds = store.log_bounds
    logged = log_entries(base)
    last_id = info(store, queue).last_id
    with pytest.raises(PolicyViolation) as exc:
        call()
    assert exc.value.policy == policy
    assert exc.value.queue == queue
    assert store.log_bounds == bounds
    assert log_entries(base) == logged
    assert info(store, queue).last_id == last_id


def test_max_size_limits_the_ready_count_and_in_flight_records_do_not_count(store, base_dir):
    store.create_queue("q", max_size=2)
    store.enqueue("q", 0, b"1")
    store.enqueue("q", 0, b"2")
    refused(store, base_dir, "max_queue_size", lambda: store.enqueue("q", 0, b"3"), "q")
    first = store.dequeue("q", timeout=0)
    assert (info(store, "q").count, info(store, "q").in_flight) == (1, 1)
    assert store.enqueue("q", 0, b"3") == 3  # ready count 1 < 2
    refused(store, base_dir, "max_queue_size", lambda: store.enqueue("q", 0, b"4"), "q")
    # A nack may put the ready count above the limit: the policy is for client enqueues only.
    store.nack(first)
    assert info(store, "q").count == 3
    refused(store, base_dir, "max_queue_size", lambda: store.enqueue("q", 0, b"4"), "q")


def test_max_size_zero_refuses_every_enqueue(store, base_dir):
    store.create_queue("q", max_size=0)
    refused(store, base_dir, "max_queue_size", lambda: store.enqueue("q", 0, b""), "q")
    refused(store, base_dir, "max_queue_size", lambda: store.enqueue_many("q", [(0, b"")]), "q")


@pytest.mark.parametrize("impl", ["heap", "array"])
def test_key_range_is_inclusive(store, base_dir, impl):
    store.create_queue("q", implementation=impl, key_range=(-2, 7))
    assert store.enqueue("q", -2, b"") == 1
    assert store.enqueue("q", 7, b"") == 2
    for key in (-3, 8, I64_MIN, I64_MAX):
        refused(store, base_dir, "key_range", lambda key=key: store.enqueue("q", key, b""), "q")
    assert [r.key for r in store.records("q")] == [-2, 7]


def test_max_message_size_allows_exactly_the_limit(store, base_dir):
    store.create_queue("q", max_message_size=4)
    store.create_queue("z", max_message_size=0)
    assert store.enqueue("q", 0, b"1234") == 1
    assert store.enqueue("z", 0, b"") == 1
    refused(store, base_dir, "max_message_size", lambda: store.enqueue("q", 0, b"12345"), "q")
    refused(store, base_dir, "max_message_size", lambda: store.enqueue("z", 0, b"x"), "z")


def test_policies_apply_to_the_default_queue_never_since_it_has_none(store):
    store.enqueue("", I64_MIN, b"x" * 100_000)
    store.enqueue("", I64_MAX, b"")
    assert info(store, "").count == 2


@pytest.mark.parametrize(
    ("items", "policy"),
    [
        ([(0, b"a"), (0, b"b"), (0, b"c")], "max_queue_size"),  # 1 + 3 > 3
        ([(0, b"a"), (9, b"b")], "key_range"),
        ([(0, b"a"), (1, b"too long")], "max_message_size"),
    ],
)
def test_enqueue_many_is_all_or_nothing(store, base_dir, items, policy):
    store.create_queue("q", max_size=3, max_message_size=4, key_range=(0, 5))
    store.enqueue("q", 0, b"0")
    refused(store, base_dir, policy, lambda: store.enqueue_many("q", items), "q")
    assert [r.id for r in store.records("q")] == [1]
    assert store.enqueue_many("q", [(1, b"x"), (0, b"y")]) == [2, 3]
    assert [r.id for r in store.records("q")] == [1, 3, 2]


def test_policy_violation_is_a_value_error_and_a_tflux_error(store):
    store.create_queue("q", max_size=0)
    with pytest.raises(ValueError) as exc:
        store.enqueue("q", 0, b"")
    assert isinstance(exc.value, TfluxError)


# --- dequeue, ack, nack --------------------------------------------------------------------------


def test_dequeue_writes_nothing_and_ack_logs_a_remove(store, base_dir):
    store.create_queue("q")
    store.enqueue("q", 3, b"x")
    bounds = store.log_bounds
    r = store.dequeue("q", timeout=0)
    assert rec(r) == (1, 3, b"x", "q")
    assert store.log_bounds == bounds
    assert log_datas(base_dir) == [create("q"), add("q", 3, b"x")]
    q = info(store, "q")
    assert (q.count, q.in_flight) == (0, 1)
    store.ack(r)
    assert log_datas(base_dir) == [create("q"), add("q", 3, b"x"), remove("q", 1)]
    q = info(store, "q")
    assert (q.count, q.in_flight, q.last_id) == (0, 0, 1)


def test_nack_puts_the_same_record_back_ahead_of_later_records_of_its_key(store, base_dir):
    for impl, rng in (("heap", None), ("array", (0, 9))):
        name = f"q-{impl}"
        store.create_queue(name, implementation=impl, key_range=rng)
        store.enqueue_many(name, [(5, b"a"), (5, b"b"), (5, b"c"), (7, b"d")])
        first = store.dequeue(name, timeout=0)
        second = store.dequeue(name, timeout=0)
        assert (first.id, second.id) == (1, 2)
        logged = log_entries(base_dir)
        store.nack(second)
        store.nack(first)
        assert log_entries(base_dir) == logged, "nack writes nothing"
        assert info(store, name).in_flight == 0
        assert [rec(r) for r in store.records(name)] == [
            (1, 5, b"a", name),
            (2, 5, b"b", name),
            (3, 5, b"c", name),
            (4, 7, b"d", name),
        ]
        # a smaller key enqueued later still goes first
        store.enqueue(name, 4, b"e")
        assert [store.dequeue(name, timeout=0).id for _ in range(5)] == [5, 1, 2, 3, 4]


@pytest.mark.parametrize("how", ["ack", "nack"])
def test_ack_or_nack_of_a_record_not_in_flight_raises_and_writes_nothing(store, base_dir, how):
    store.create_queue("q")
    store.enqueue_many("q", [(1, b"a"), (2, b"b")])
    r = store.dequeue("q", timeout=0)
    getattr(store, how)(r)
    logged = log_entries(base_dir)
    snapshot_of_state = (contents(store, "q"), info(store, "q").in_flight)
    for again in (store.ack, store.nack):
        with pytest.raises(NotInFlightError):
            again(r)
    never_dequeued = tflux.Record(2, 2, b"b", "q")
    for call in (store.ack, store.nack):
        with pytest.raises(NotInFlightError):
            call(never_dequeued)
        with pytest.raises(NotInFlightError):
            call(tflux.Record(99, 0, b"", "q"))
    assert log_entries(base_dir) == logged
    assert (contents(store, "q"), info(store, "q").in_flight) == snapshot_of_state


def test_not_in_flight_error_is_a_tflux_error():
    assert issubclass(NotInFlightError, TfluxError)


@pytest.mark.parametrize("how", ["ack", "nack"])
def test_ack_or_nack_after_the_queue_was_deleted_raises_and_writes_nothing(store, base_dir, how):
    store.create_queue("q")
    store.enqueue("q", 1, b"a")
    r = store.dequeue("q", timeout=0)
    store.delete_queue("q")
    logged = log_entries(base_dir)
    with pytest.raises((NotInFlightError, QueueNotFoundError)):
        getattr(store, how)(r)
    # and not resurrected by a new queue of the same name with nothing in flight
    store.create_queue("q")
    store.enqueue("q", 1, b"new")
    logged = log_entries(base_dir)
    with pytest.raises((NotInFlightError, QueueNotFoundError)):
        getattr(store, how)(r)
    assert log_entries(base_dir) == logged
    assert contents(store, "q") == [(1, 1, b"new", "q")]


def test_a_record_of_a_missing_queue_cannot_be_acked(store):
    with pytest.raises((NotInFlightError, QueueNotFoundError)):
        store.ack(tflux.Record(1, 0, b"", "nope"))


def test_dequeue_with_zero_timeout_never_waits(store):
    t = time.monotonic()
    assert store.dequeue("", timeout=0) is None
    assert time.monotonic() - t < 1.0


def test_dequeue_with_a_timeout_returns_none_after_waiting_it(store):
    t = time.monotonic()
    assert store.dequeue("", timeout=0.3) is None
    elapsed = time.monotonic() - t
    assert 0.25 <= elapsed < 5


def test_records_come_back_after_a_reopen_when_they_were_not_acked(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("q")
        store.enqueue_many("q", [(2, b"a"), (1, b"b"), (2, b"c"), (3, b"d")])
        acked = store.dequeue("q", timeout=0)
        store.ack(acked)
        store.dequeue("q", timeout=0)  # in flight, never acked
        nacked = store.dequeue("q", timeout=0)
        store.nack(nacked)
        assert (info(store, "q").count, info(store, "q").in_flight) == (2, 1)
    with tflux.open(base_dir, **FAST) as store:
        assert acked.id == 2
        assert contents(store, "q") == [(1, 2, b"a", "q"), (3, 2, b"c", "q"), (4, 3, b"d", "q")]
        q = info(store, "q")
        assert (q.count, q.in_flight, q.last_id) == (3, 0, 4)
        assert store.replayed == 6  # create, four adds, one remove
        # the acked id stays used and a record from before the restart is not in flight
        assert store.enqueue("q", 0, b"e") == 5
        with pytest.raises(NotInFlightError):
            store.ack(nacked)


def test_last_id_survives_a_restart_after_every_record_was_acked(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        for _ in range(3):
            store.enqueue("", 0, b"x")
        for _ in range(3):
            store.ack(store.dequeue("", timeout=0))
    with tflux.open(base_dir, **FAST) as store:
        assert info(store, "").last_id == 3
        assert store.enqueue("", 0, b"y") == 4


def test_queue_settings_survive_a_restart(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue(
            "a", implementation="array", key_range=(-4, 4), max_size=9, max_message_size=3
        )
        store.create_queue("h", key_range=(0, 10))
    for _ in range(2):  # once from the log, once from a snapshot
        with tflux.open(base_dir, **FAST) as store:
            a, h = info(store, "a"), info(store, "h")
            assert (a.implementation, a.key_range, a.max_size, a.max_message_size) == (
                "array",
                (-4, 4),
                9,
                3,
            )
            assert (h.implementation, h.key_range, h.max_size, h.max_message_size) == (
                "heap",
                (0, 10),
                None,
                None,
            )
            store.snapshot()


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


# --- settings ------------------------------------------------------------------------------------


def test_default_settings(base_dir):
    with tflux.open(base_dir) as store:
        assert setting(store, "LogFileSoftLimit") == str(16 << 20)
        assert setting(store, "LogFileHardLimit") == str(32 << 20)
        assert setting(store, "LogPreallocateSegments") == "true"
        assert setting(store, "SnapshotCreationSegmentsThreshold") == "5"
        assert setting(store, "LogSyncPolicy") == "always"


def test_settings_come_from_the_json_file_and_keywords_override_it(base_dir):
    (base_dir / "taskflux.settings.json").write_text(
        json.dumps(
            {
                "LogFileSoftLimit": 1000,
                "LogFileHardLimit": 5000,
                "LogPreallocateSegments": False,
                "SnapshotCreationSegmentsThreshold": 0,
                "LogSyncPolicy": "never",
            }
        )
    )
    with tflux.open(base_dir) as store:
        assert setting(store, "LogFileSoftLimit") == "1000"
        assert setting(store, "LogFileHardLimit") == "5000"
        assert setting(store, "LogPreallocateSegments") == "false"
        assert setting(store, "SnapshotCreationSegmentsThreshold") == "0"
        assert setting(store, "LogSyncPolicy") == "never"
    with tflux.open(base_dir, log_file_soft_limit=2000, log_sync_policy="always") as store:
        assert setting(store, "LogFileSoftLimit") == "2000"
        assert setting(store, "LogFileHardLimit") == "5000"
        assert setting(store, "LogSyncPolicy") == "always"


def test_segment_limits_from_the_settings_file_take_effect(base_dir):
    (base_dir / "taskflux.settings.json").write_text(
        json.dumps(
            {
                "LogFileSoftLimit": 100,
                "LogFileHardLimit": 200,
                "LogPreallocateSegments": False,
                "SnapshotCreationSegmentsThreshold": 0,
            }
        )
    )
    with tflux.open(base_dir) as store:
        for _ in range(10):
            store.enqueue("", 0, b"x" * 40)  # 16 + 54 + 2 = 72-byte records
    # soft 100: a segment rolls once it holds two records (8 + 144 > 100)
    assert segment_files(log_dir_of(base_dir)) == [segment_name(i) for i in range(0, 11, 2)]
    assert all(
        (log_dir_of(base_dir) / n).stat().st_size < 100 * 2
        for n in segment_files(log_dir_of(base_dir))
    )


def test_preallocated_segments_have_the_soft_limit_size(base_dir):
    with tflux.open(base_dir, log_file_soft_limit=4096, log_file_hard_limit=8192) as store:
        store.enqueue("", 0, b"x")
        assert setting(store, "LogPreallocateSegments") == "true"
    (seg,) = segment_files(log_dir_of(base_dir))
    assert (log_dir_of(base_dir) / seg).stat().st_size == 4096


def test_an_unknown_keyword_setting_is_a_type_error(base_dir):
    with pytest.raises(TypeError):
        tflux.open(base_dir, log_file_limit=10)


@pytest.mark.parametrize(
    ("content", "key"),
    [
        ({"LogFileSoftLimitt": 10}, "LogFileSoftLimitt"),
        ({"logFileSoftLimit": 10}, "logFileSoftLimit"),
        ({"LogFileSoftLimit": "big"}, "LogFileSoftLimit"),
        ({"LogFileSoftLimit": -1}, "LogFileSoftLimit"),
        ({"LogFileSoftLimit": 1.5}, "LogFileSoftLimit"),
        ({"LogPreallocateSegments": "yes"}, "LogPreallocateSegments"),
        ({"SnapshotCreationSegmentsThreshold": -1}, "SnapshotCreationSegmentsThreshold"),
        ({"LogSyncPolicy": "sometimes"}, "LogSyncPolicy"),
        ({"LogSyncPolicy": 1}, "LogSyncPolicy"),
    ],
)
def test_bad_settings_file_entries_are_value_errors_naming_the_key(base_dir, content, key):
    (base_dir / "taskflux.settings.json").write_text(json.dumps(content))
    with pytest.raises(ValueError) as exc:
        tflux.open(base_dir)
    assert key in str(exc.value)


@pytest.mark.parametrize(
    "content", ["not json", "[1, 2]", '{"LogFileSoftLimit": 1', "null"], ids=str
)
def test_a_settings_file_that_is_not_a_json_object_is_a_value_error(base_dir, content):
    (base_dir / "taskflux.settings.json").write_text(content)
    with pytest.raises(ValueError):
        tflux.open(base_dir)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"log_file_soft_limit": 0},
        {"log_file_soft_limit": 2000, "log_file_hard_limit": 1000},
        {"log_sync_policy": "sometimes"},
        {"snapshot_creation_segments_threshold": -1},
    ],
    ids=str,
)
def test_invalid_setting_values_are_value_errors(base_dir, kwargs):
    with pytest.raises(ValueError):
        tflux.open(base_dir, **kwargs)


def test_an_empty_settings_file_means_defaults(base_dir):
    (base_dir / "taskflux.settings.json").write_text("")
    with tflux.open(base_dir) as store:
        assert setting(store, "LogFileSoftLimit") == str(16 << 20)


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_every_sync_policy_keeps_the_data_across_a_reopen(base_dir, policy):
    opts = {"log_sync_policy": policy, "log_preallocate_segments": False}
    if policy == "interval":
        opts["log_sync_interval_ms"] = 5
    with tflux.open(base_dir, **opts) as store:
        assert setting(store, "LogSyncPolicy") == policy
        store.enqueue_many("", [(i % 3, b"%d" % i) for i in range(50)])
        store.ack(store.dequeue("", timeout=0))
    with tflux.open(base_dir, **opts) as store:
        assert info(store, "").count == 49
        assert info(store, "").last_id == 50


# --- crashes ------------------------------------------------------------------------------------

CRASHER = textwrap.dedent(
    """
    import sys, tflux
    policy = sys.argv[2]
    store = tflux.open(
        sys.argv[1], log_sync_policy=policy, log_sync_interval_ms=5, log_file_soft_limit=256,
        log_file_hard_limit=1024, log_preallocate_segments=True,
        snapshot_creation_segments_threshold=2,
    )
    if "q" not in [q.name for q in store.queues()]:
        store.create_queue("q", implementation="array", key_range=(0, 3))
    i = 0
    while True:
        i += 1
        rid = store.enqueue("q", i % 4, b"%d" % i)
        print("E", rid, i, flush=True)
        if i % 3 == 0:
            r = store.dequeue("q", timeout=0)
            store.ack(r)
            print("A", r.id, flush=True)
        if i % 17 == 0:
            store.snapshot()
    """
)


@pytest.mark.parametrize("policy", ["always", "interval"])
def test_acknowledged_writes_survive_kill_9_at_any_moment(base_dir, policy):
    # Each round kills the writer after a different number of acknowledged calls; the survivor
    # state must hold every acknowledged enqueue and ack, with ids continuing without reuse.
    enqueued: dict[int, int] = {}  # id -> key
    acked: set[int] = set()
    for stop_after in (5, 40, 23, 90, 61):
        child = subprocess.Popen(
            [sys.executable, "-c", CRASHER, str(base_dir), policy],
            stdout=subprocess.PIPE,
            text=True,
        )
        lines = []
        try:
            while len(lines) < stop_after:
                line = child.stdout.readline()
                assert line, "the writer died on its own"
                lines.append(line.split())
        finally:
            child.kill()
            child.wait(timeout=10)
        # whatever the child printed before it died was acknowledged too; a line the kill cut
        # short (no newline yet) names nothing for certain and is left out
        complete = child.stdout.read().split("\n")[:-1]
        lines.extend(line.split() for line in complete if line.strip())
        child.stdout.close()
        for kind, *rest in lines:
            if kind == "E":
                rid, i = int(rest[0]), int(rest[1])
                assert rid not in enqueued, f"id {rid} handed out twice"
                enqueued[rid] = i % 4
            else:
                acked.add(int(rest[0]))
        with tflux.open(base_dir, **FAST) as store:
            recs = store.records("q")
            ids = {r.id for r in recs}
            assert not ids & acked, "an acknowledged ack was lost"
            missing = set(enqueued) - acked - ids
            # Only the record being acked when the kill came may be gone unseen: it is the
            # one the child dequeued right after printing an enqueue of a multiple of 3.
            if missing:
                kind, *rest = lines[-1]
                assert kind == "E" and int(rest[1]) % 3 == 0, f"lost enqueues {missing}"
                assert len(missing) == 1, f"lost enqueues {missing}"
                acked |= missing
            assert info(store, "q").last_id >= max(enqueued)
            assert all(r.key == enqueued.get(r.id, r.key) for r in recs)
            assert [(r.key, r.id) for r in recs] == sorted((r.key, r.id) for r in recs)
            # enqueued after the last line but before the kill: new ids, now part of the state
            for r in recs:
                if r.id not in enqueued:
                    assert r.id > max(enqueued)
                    enqueued[r.id] = r.key


def test_a_torn_last_record_is_cut_and_its_id_is_handed_out_again(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue_many("", [(0, b"first"), (0, b"second"), (0, b"third")])
    (seg,) = segment_files(log_dir_of(base_dir))
    path = log_dir_of(base_dir) / seg
    buf = path.read_bytes()
    parsed = parse_segment(buf)
    assert [d for _, d in parsed.records] == [
        add("", 0, p) for p in (b"first", b"second", b"third")
    ]
    path.write_bytes(buf[: parsed.end - 3])  # cut inside the third record's data
    with tflux.open(base_dir, **FAST) as store:
        assert [r.payload for r in store.records("")] == [b"first", b"second"]
        assert info(store, "").last_id == 2
        # the torn record was never acknowledged: its id is free
        assert store.enqueue("", 0, b"again") == 3
    with tflux.open(base_dir, **FAST) as store:
        assert contents(store, "") == [
            (1, 0, b"first", ""),
            (2, 0, b"second", ""),
            (3, 0, b"again", ""),
        ]


def test_a_closed_store_refuses_every_call(base_dir):
    store = tflux.open(base_dir, **FAST)
    store.close()
    for call in (
        lambda: store.enqueue("", 0, b""),
        lambda: store.dequeue("", timeout=0),
        lambda: store.create_queue("q"),
        lambda: store.queues(),
        lambda: store.snapshot(),
    ):
        with pytest.raises(tflux.ClosedError):
            call()
    store.close()  # closing twice is harmless


def test_a_read_only_open_never_cuts_a_torn_tail(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue_many("", [(0, b"first"), (0, b"second")])
    (seg,) = segment_files(log_dir_of(base_dir))
    path = log_dir_of(base_dir) / seg
    buf = path.read_bytes()
    torn = buf[: parse_segment(buf).end - 2]
    path.write_bytes(torn)
    before = files_of(base_dir)
    with tflux.open(base_dir, readonly=True) as reader:
        assert [r.payload for r in reader.records("")] == [b"first"]
    assert files_of(base_dir) == before


def test_leftovers_in_the_temp_directory_do_not_disturb_an_open(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue("", 0, b"x")
        store.snapshot()
        store.enqueue("", 0, b"y")
    (base_dir / "data" / "temp" / "tflux.snapshot").write_bytes(b"half a snapshot")
    (base_dir / "data" / "temp" / "tflux.snapshot.tmp").write_bytes(SNAPSHOT_MARKER)
    with tflux.open(base_dir, **FAST) as store:
        assert [r.payload for r in store.records("")] == [b"x", b"y"]
        assert store.restored_snapshot_index == 0
        store.enqueue("", 0, b"z")
        assert store.snapshot() is True
    assert read_snapshot_file(base_dir)[0] == 2


def test_a_store_keeps_snapshotting_past_lsn_int32_max(base_dir):
    """Issue 10, defect 9: past LSN 2**31-1 snapshots are written wide (spec 4.1), not refused."""
    data = base_dir / "data"
    data.mkdir()
    old = encode_snapshot(2**31 - 1, 1, [SnapQueue("", last_id=1, records=[(1, 0, b"s")])])
    (data / "tflux.snapshot").write_bytes(old)
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == 2**31 - 1
        assert store.enqueue("", 0, b"n") == 2  # record id; its LSN is 2**31
        assert store.snapshot() is True
        assert store.enqueue("", 0, b"m") == 3
    assert read_snapshot_file(base_dir)[:2] == (2**31, 1)
    assert read_snapshot_file(base_dir)[2][""].records == [(1, 0, b"s"), (2, 0, b"n")]
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == 2**31
        assert [r.payload for r in store.records("")] == [b"s", b"n", b"m"]
        assert store.snapshot() is True
    assert read_snapshot_file(base_dir)[:2] == (2**31 + 1, 1)


def test_a_log_continued_far_past_int32_snapshots_reopens_and_restores(base_dir):
    """The log continues at a high LSN (a follower's insert_range); the store snapshots."""
    high = 2**40
    (base_dir / "data").mkdir()
    tflux.write_snapshot(
        base_dir / "data" / "tflux.snapshot", high - 1, 1, [tflux.SnapshotQueue("")]
    )
    assert read_snapshot_file(base_dir)[:2] == (high - 1, 1)
    log_dir_of(base_dir).mkdir()
    with tflux.Log.open(log_dir_of(base_dir), preallocate=False) as log:
        log.insert_range(high, [(1, add("", 3, b"a")), (1, add("", 1, b"b"))])
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == high - 1
        assert [r.payload for r in store.records("")] == [b"b", b"a"]
        store.enqueue("", 2, b"c")  # at LSN high + 2
        assert store.snapshot() is True
    assert read_snapshot_file(base_dir)[:2] == (high + 2, 1)
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == high + 2
        assert [store.dequeue("", 0).payload for _ in range(3)] == [b"b", b"c", b"a"]


# --- one writer, read-only ------------------------------------------------------------------------


def test_a_second_writer_in_the_same_process_is_refused_until_the_first_closes(base_dir):
    """One writer per directory when the first does not share (``share=False``); shared
    stores are tests/api/test_share.py's."""
    first = tflux.open(base_dir, share=False, **FAST)
    first.enqueue("", 0, b"x")
    with pytest.raises(LockedError) as exc:
        tflux.open(base_dir, **FAST)
    assert isinstance(exc.value, OSError)
    first.enqueue("", 0, b"y")  # the refused open did not disturb the holder
    first.close()
    with tflux.open(base_dir, **FAST) as second:
        assert [r.payload for r in second.records("")] == [b"x", b"y"]


def test_a_read_only_store_opens_beside_the_writer_and_refuses_writes(base_dir):
    with tflux.open(base_dir, **FAST) as writer:
        writer.create_queue("q")
        writer.enqueue("q", 1, b"x")
        writer.snapshot()
        writer.enqueue("q", 0, b"y")
        with tflux.open(base_dir, readonly=True) as reader:
            assert contents(reader, "q") == [(2, 0, b"y", "q"), (1, 1, b"x", "q")]
            for call in (
                lambda: reader.create_queue("r"),
                lambda: reader.delete_queue("q"),
                lambda: reader.enqueue("q", 0, b"z"),
                lambda: reader.enqueue_many("q", [(0, b"z")]),
                lambda: reader.snapshot(),
            ):
                with pytest.raises(ReadOnlyError):
                    call()
        writer.enqueue("q", 0, b"z")  # the reader never took the lock
    with tflux.open(base_dir, **FAST) as store:
        assert [r.id for r in store.records("q")] == [2, 3, 1]


def test_a_writer_can_open_while_a_read_only_store_is_open(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue("", 0, b"x")
    with tflux.open(base_dir, readonly=True) as reader, tflux.open(base_dir, **FAST) as writer:
        writer.enqueue("", 0, b"y")
        assert [r.id for r in reader.records("")] == [1]


HOLD_LOCK = textwrap.dedent(
    """
    import sys, tflux
    store = tflux.open(sys.argv[1], log_sync_policy="always", share=False)
    store.enqueue("", 0, b"child")
    print("ready", flush=True)
    sys.stdin.readline()
    store.close()
    """
)

TRY_OPEN = textwrap.dedent(
    """
    import sys, tflux
    try:
        tflux.open(sys.argv[1])
    except Exception as e:
        print(type(e).__name__)
    else:
        print("opened")
    """
)


def test_a_second_writer_process_is_refused_while_the_first_holds_the_lock(base_dir):
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(base_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(LockedError):
            tflux.open(base_dir, **FAST)
        with tflux.open(base_dir, readonly=True) as reader:
            assert [r.payload for r in reader.records("")] == [b"child"]
    finally:
        child.kill()  # the lock dies with the process, even on SIGKILL
        child.wait(timeout=10)
    with tflux.open(base_dir, **FAST) as store:
        assert [r.payload for r in store.records("")] == [b"child"]


def test_a_child_process_cannot_open_a_directory_this_process_holds(base_dir):
    with tflux.open(base_dir, share=False, **FAST):
        out = subprocess.run(
            [sys.executable, "-c", TRY_OPEN, str(base_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.stdout.strip() == "LockedError", out.stderr
    out = subprocess.run(
        [sys.executable, "-c", TRY_OPEN, str(base_dir)], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "opened", out.stderr


# --- threads -------------------------------------------------------------------------------------


def run_thread(target) -> tuple[threading.Thread, list]:
    result: list = []

    def body():
        try:
            result.append(target())
        except BaseException as e:  # pragma: no cover - reported by the assertion below
            result.append(e)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, result


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_blocked_dequeue_wakes_when_another_thread_enqueues(store, timeout):
    store.create_queue("q")
    t, result = run_thread(lambda: store.dequeue("q", timeout=timeout))
    time.sleep(0.2)
    assert t.is_alive(), "dequeue returned before anything was enqueued"
    start = time.monotonic()
    store.enqueue("q", 4, b"wake")
    t.join(10)
    assert not t.is_alive()
    assert time.monotonic() - start < 5
    assert rec(result[0]) == (1, 4, b"wake", "q")
    assert info(store, "q").in_flight == 1


def test_an_enqueue_on_another_queue_does_not_wake_a_dequeue(store):
    store.create_queue("a")
    store.create_queue("b")
    t, result = run_thread(lambda: store.dequeue("a", timeout=0.5))
    time.sleep(0.1)
    store.enqueue("b", 0, b"x")
    t.join(10)
    assert result == [None]
    assert info(store, "b").count == 1


def test_eight_threads_enqueue_concurrently_with_distinct_ids_that_survive_a_reopen(base_dir):
    per_thread = 60
    got: dict[int, bytes] = {}
    lock = threading.Lock()
    with tflux.open(
        base_dir,
        log_sync_policy="always",
        log_preallocate_segments=False,
        log_file_soft_limit=4096,
        log_file_hard_limit=8192,
    ) as store:

        def producer(n: int) -> None:
            for i in range(per_thread):
                payload = b"%d-%d" % (n, i)
                if i % 3 == 0:
                    ids = store.enqueue_many("", [(i % 4, payload), (i % 4, payload + b"+")])
                    pairs = [(ids[0], payload), (ids[1], payload + b"+")]
                else:
                    pairs = [(store.enqueue("", i % 4, payload), payload)]
                with lock:
                    for rid, p in pairs:
                        assert rid not in got
                        got[rid] = p

        threads = [threading.Thread(target=producer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        total = 8 * (per_thread + per_thread // 3)
        assert sorted(got) == list(range(1, total + 1))
    with tflux.open(base_dir, **FAST) as store:
        recs = store.records("")
        assert {r.id: bytes(r.payload) for r in recs} == got
        assert info(store, "").last_id == total
        # each enqueue_many pair landed on consecutive ids (all-or-nothing batch)
        for rid, p in got.items():
            if p.endswith(b"+"):
                assert got[rid - 1] == p[:-1]


def test_concurrent_consumers_receive_every_record_exactly_once(base_dir):
    n = 400
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("q")
        acked: list[int] = []
        nacked: set[int] = set()
        lock = threading.Lock()
        done = threading.Event()

        def consumer() -> None:
            while not done.is_set():
                r = store.dequeue("q", timeout=0.05)
                if r is None:
                    continue
                with lock:
                    again = r.id % 5 == 0 and r.id not in nacked
                    if again:
                        nacked.add(r.id)
                if again:
                    store.nack(r)  # delivered once more, then acked
                    continue
                store.ack(r)
                with lock:
                    acked.append(r.id)

        threads = [threading.Thread(target=consumer) for _ in range(4)]
        for t in threads:
            t.start()
        for i in range(1, n + 1):
            store.enqueue("q", i % 3, b"%d" % i)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(acked) >= n:
                    break
            time.sleep(0.01)
        done.set()
        for t in threads:
            t.join(30)
        assert sorted(acked) == list(range(1, n + 1))
        assert nacked == set(range(5, n + 1, 5))
        q = info(store, "q")
        assert (q.count, q.in_flight, q.last_id) == (0, 0, n)
    with tflux.open(base_dir, **FAST) as store:
        assert store.records("q") == []
        assert info(store, "q").last_id == n


def test_one_enqueue_wakes_exactly_one_of_several_waiting_dequeues(store):
    store.create_queue("q")
    waiters = [run_thread(lambda: store.dequeue("q", timeout=1.5)) for _ in range(3)]
    time.sleep(0.2)
    store.enqueue("q", 0, b"only")
    for t, _ in waiters:
        t.join(10)
    results = [r[0] for _, r in waiters]
    got = [rec(r) for r in results if r is not None]
    assert got == [(1, 0, b"only", "q")]
    assert results.count(None) == 2


def test_snapshots_taken_while_threads_enqueue_lose_nothing(base_dir):
    with tflux.open(base_dir, **SMALL) as store:
        stop = threading.Event()
        errors: list[BaseException] = []

        def snapshotter() -> None:
            try:
                while not stop.is_set():
                    store.snapshot()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        def producer(n: int) -> None:
            for i in range(150):
                store.enqueue("", i % 5, b"%d-%d" % (n, i))
                if i % 4 == 0:
                    r = store.dequeue("", timeout=0)
                    if r is not None and r.id % 2:
                        store.ack(r)
                    elif r is not None:
                        store.nack(r)

        snap = threading.Thread(target=snapshotter)
        snap.start()
        producers = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
        for t in producers:
            t.start()
        for t in producers:
            t.join(60)
        stop.set()
        snap.join(60)
        assert errors == []
        expected = contents(store, "")
        last_id = info(store, "").last_id
        assert last_id == 600
    with tflux.open(base_dir, **SMALL) as store:
        assert contents(store, "") == expected
        assert info(store, "").last_id == 600


def test_a_long_random_run_matches_the_model_and_survives_a_reopen(base_dir):
    rng = random.Random(7)
    model: dict[str, dict[int, tuple[int, bytes]]] = {"": {}, "arr": {}}
    flying: list = []
    with tflux.open(base_dir, **SMALL) as store:
        store.create_queue("arr", implementation="array", key_range=(-(2**40), 2**40))
        last = {"": 0, "arr": 0}
        for step in range(3000):
            name = rng.choice(["", "arr"])
            roll = rng.random()
            if roll < 0.45:
                key = rng.choice([-(2**40), 0, 1, 2**40, rng.randint(-9, 9)])
                payload = step.to_bytes(3, "big")
                last[name] += 1
                assert store.enqueue(name, key, payload) == last[name]
                model[name][last[name]] = (key, payload)
            elif roll < 0.75:
                r = store.dequeue(name, timeout=0)
                ready = model[name]
                if not ready:
                    assert r is None
                    continue
                rid = min(ready, key=lambda i: (ready[i][0], i))
                assert rec(r) == (rid, *ready.pop(rid), name)
                flying.append(r)
            elif flying:
                r = flying.pop(rng.randrange(len(flying)))
                if rng.random() < 0.5:
                    store.ack(r)
                else:
                    store.nack(r)
                    model[r.queue][r.id] = (r.key, bytes(r.payload))
        for q in ("", "arr"):
            ready = sorted((k, i, p) for i, (k, p) in model[q].items())
            assert contents(store, q) == [(i, k, p, q) for k, i, p in ready]
    for r in flying:
        model[r.queue][r.id] = (r.key, bytes(r.payload))
    with tflux.open(base_dir, **SMALL) as store:
        for q in ("", "arr"):
            ready = sorted((k, i, p) for i, (k, p) in model[q].items())
            assert contents(store, q) == [(i, k, p, q) for k, i, p in ready]
            assert info(store, q).last_id == last[q]


# --- stateful model ------------------------------------------------------------------------------


@dataclass
class QModel:
    impl: str
    max_size: int | None
    max_message_size: int | None
    key_range: tuple[int, int] | None
    last_id: int = 0
    ready: list[tuple[int, int, bytes]] = field(default_factory=list)  # (key, id, payload) sorted
    in_flight: dict[int, tuple[int, bytes]] = field(default_factory=dict)

    def violations(self, items: list[tuple[int, bytes]]) -> set[str]:
        found = set()
        for i, (key, payload) in enumerate(items):
            if self.max_size is not None and len(self.ready) + i >= self.max_size:
                found.add("max_queue_size")
            if self.key_range is not None and not self.key_range[0] <= key <= self.key_range[1]:
                found.add("key_range")
            if self.max_message_size is not None and len(payload) > self.max_message_size:
                found.add("max_message_size")
        return found


QUEUE_NAMES = st.sampled_from(["", "a", "b", "c"])
KEYS_ST = st.one_of(st.integers(-4, 4), st.sampled_from([I64_MIN, I64_MAX, -(2**62), 2**62]))
PAYLOADS = st.binary(max_size=6)
QUEUE_SPECS = st.one_of(
    st.tuples(
        st.just("heap"),
        st.sampled_from([None, 0, 2, 5]),
        st.sampled_from([None, 0, 3]),
        st.sampled_from([None, (-2, 2), (0, 0)]),
    ),
    st.tuples(
        st.just("array"),
        st.sampled_from([None, 3]),
        st.sampled_from([None, 4]),
        st.sampled_from([(-3, 3), (-(2**62), 2**62), (I64_MIN, I64_MAX), (1, 1)]),
    ),
)


class StoreMachine(RuleBasedStateMachine):
    """Every rule runs against the store and against ``self.queues``; after each step the store's
    queues, their contents and ids must equal the model's. ``reopen`` closes and reopens the base
    directory: in-flight records come back as ready, nothing else changes."""

    held = Bundle("held")

    @initialize()
    def start(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="tflux-store-model-"))
        self.store = tflux.open(self.base, **SMALL)
        self.queues: dict[str, QModel] = {"": QModel("heap", None, None, None)}
        self.logged = 0  # number of log entries written so far (LSNs 0..logged-1)
        # A Record is only meaningful to the incarnation of its queue that handed it out: a
        # delete or a reopen starts a new one (in-flight records are gone or ready again).
        self.counter = 0
        self.incarnation: dict[str, int] = {"": 0}
        # Start with queues in place so that most steps touch records, not missing queues.
        self.create_queue("a", ("array", None, None, (-4, 4)))
        self.create_queue("b", ("heap", 6, 4, None))

    def new_incarnation(self, name: str) -> None:
        self.counter += 1
        self.incarnation[name] = self.counter

    def teardown(self) -> None:
        store = getattr(self, "store", None)
        if store is not None:
            store.close()
        if hasattr(self, "base"):
            shutil.rmtree(self.base, ignore_errors=True)

    # -- queues --

    @rule(name=st.sampled_from(["a", "b", "c", ""]), spec=QUEUE_SPECS)
    def create_queue(self, name, spec) -> None:
        impl, max_size, max_msg, key_range = spec
        if name in self.queues:
            with pytest.raises(QueueExistsError):
                self.store.create_queue(name, impl, max_size, max_msg, key_range)
            return
        self.store.create_queue(
            name,
            implementation=impl,
            max_size=max_size,
            max_message_size=max_msg,
            key_range=key_range,
        )
        self.queues[name] = QModel(impl, max_size, max_msg, key_range)
        self.new_incarnation(name)
        self.logged += 1

    @rule(name=QUEUE_NAMES)
    def delete_queue(self, name) -> None:
        if name == "":
            with pytest.raises(ValueError):
                self.store.delete_queue(name)
        elif name not in self.queues:
            with pytest.raises(QueueNotFoundError):
                self.store.delete_queue(name)
        else:
            self.store.delete_queue(name)
            del self.queues[name]
            del self.incarnation[name]
            self.logged += 1

    # -- records --

    @rule(name=QUEUE_NAMES, key=KEYS_ST, payload=PAYLOADS)
    def enqueue(self, name, key, payload) -> None:
        self.enqueue_items(name, [(key, payload)], single=True)

    @rule(name=QUEUE_NAMES, items=st.lists(st.tuples(KEYS_ST, PAYLOADS), max_size=6))
    def enqueue_many(self, name, items) -> None:
        self.enqueue_items(name, items, single=False)

    def enqueue_items(self, name, items, single: bool) -> None:
        def call():
            if single:
                return [self.store.enqueue(name, *items[0])]
            return self.store.enqueue_many(name, items)

        q = self.queues.get(name)
        if q is None:
            if not items:
                return  # covered by its own test; keep the model run on other paths
            with pytest.raises(QueueNotFoundError):
                call()
            return
        bad = q.violations(items)
        if bad:
            with pytest.raises(PolicyViolation) as exc:
                call()
            assert exc.value.policy in bad
            event(f"refused: {exc.value.policy}")
            return
        ids = call()
        assert ids == list(range(q.last_id + 1, q.last_id + 1 + len(items)))
        for rid, (key, payload) in zip(ids, items, strict=True):
            q.ready.append((key, rid, payload))
        q.ready.sort()
        q.last_id += len(items)
        self.logged += len(items)

    @rule(target=held, name=QUEUE_NAMES)
    def dequeue(self, name):
        q = self.queues.get(name)
        if q is None:
            with pytest.raises(QueueNotFoundError):
                self.store.dequeue(name, timeout=0)
            return None
        r = self.store.dequeue(name, timeout=0)
        if not q.ready:
            assert r is None
            return None
        key, rid, payload = q.ready.pop(0)
        assert rec(r) == (rid, key, payload, name)
        q.in_flight[rid] = (key, payload)
        return (self.incarnation[name], r)

    def settle(self, held, how: str) -> None:
        if held is None:
            return
        incarnation, r = held
        q = self.queues.get(r.queue)
        call = getattr(self.store, how)
        if q is None or r.id not in q.in_flight:
            with pytest.raises((NotInFlightError, QueueNotFoundError)):
                call(r)
            return
        if incarnation != self.incarnation[r.queue]:
            # An old Record whose (queue, id) is in flight again in a new incarnation: the
            # two are indistinguishable, so the store may settle the new one or refuse.
            try:
                call(r)
            except (NotInFlightError, QueueNotFoundError):
                return
        else:
            call(r)
        key, payload = q.in_flight.pop(r.id)
        if how == "ack":
            self.logged += 1
        else:
            q.ready.append((key, r.id, payload))
            q.ready.sort()

    @rule(held=consumes(held))
    def ack(self, held) -> None:
        self.settle(held, "ack")

    @rule(held=consumes(held))
    def nack(self, held) -> None:
        self.settle(held, "nack")

    @rule(held=held)
    def ack_keeping_the_record(self, held) -> None:
        # The Record stays in the bundle, so a later ack/nack of it must be refused.
        self.settle(held, "ack")

    # -- durability --

    def snapshot_on_disk(self):
        path = self.base / "data" / "tflux.snapshot"
        return decode_snapshot(path.read_bytes()) if path.exists() else None

    @rule()
    def snapshot(self) -> None:
        before = self.snapshot_on_disk()
        prev_index = before[0] if before else -1
        taken = self.store.snapshot()
        event(f"snapshot() returned {taken}")
        assert taken == (self.logged - 1 > prev_index)
        after = self.snapshot_on_disk()
        if self.logged == 0:
            assert after is None
            return
        last_index, last_term, queues = after
        assert (last_index, last_term) == (self.logged - 1, 1)
        assert set(queues) == set(self.queues)
        for name, q in self.queues.items():
            s = queues[name]
            assert s.impl == IMPL_CODES[q.impl]
            assert s.last_id == q.last_id
            assert s.max_size == (-1 if q.max_size is None else q.max_size)
            assert s.max_message_size == (-1 if q.max_message_size is None else q.max_message_size)
            assert s.key_range == q.key_range
            everything = [(rid, k, p) for k, rid, p in q.ready]
            everything += [(rid, k, p) for rid, (k, p) in q.in_flight.items()]
            assert sorted(s.records) == sorted(everything)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = tflux.open(self.base, **SMALL)
        if any(q.in_flight for q in self.queues.values()):
            event("reopen with records in flight")
        for q in self.queues.values():
            q.ready.extend((k, rid, p) for rid, (k, p) in q.in_flight.items())
            q.ready.sort()
            q.in_flight.clear()
        for name in self.queues:
            self.new_incarnation(name)
        snap = self.snapshot_on_disk()
        index = snap[0] if snap else -1
        event(f"reopen {'with' if snap else 'without'} a snapshot")
        assert self.store.restored_snapshot_index == (snap[0] if snap else None)
        assert self.store.replayed == self.logged - 1 - index

    @invariant()
    def store_matches_model(self) -> None:
        if not hasattr(self, "store"):
            return
        got = {q.name: q for q in self.store.queues()}
        assert set(got) == set(self.queues)
        for name, q in self.queues.items():
            i = got[name]
            assert (i.implementation, i.max_size, i.max_message_size, i.key_range) == (
                q.impl,
                q.max_size,
                q.max_message_size,
                q.key_range,
            )
            assert (i.count, i.in_flight, i.last_id) == (len(q.ready), len(q.in_flight), q.last_id)
            assert contents(self.store, name) == [(rid, k, p, name) for k, rid, p in q.ready]


StoreMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_store_against_a_model = StoreMachine.TestCase


# --- stale records cannot settle a new delivery ----------------------------------------------


def test_a_record_from_a_deleted_and_recreated_queue_cannot_be_acked(tmp_path):
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"old")
        stale = store.dequeue("q", timeout=0)
        store.delete_queue("q")
        store.create_queue("q")
        store.enqueue("q", 1, b"new")  # gets id 1 again: a new life of the queue
        fresh = store.dequeue("q", timeout=0)
        assert (fresh.id, stale.id) == (1, 1)
        before = store.log_bounds
        with pytest.raises(tflux.NotInFlightError):
            store.ack(stale)
        with pytest.raises(tflux.NotInFlightError):
            store.nack(stale)
        assert store.log_bounds == before, "a refused ack writes nothing"
        store.ack(fresh)
        assert store.queues()[-1].in_flight == 0


def test_a_record_dequeued_before_a_reopen_cannot_settle_the_redelivery(tmp_path):
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
        stale = store.dequeue("q", timeout=0)
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        again = store.dequeue("q", timeout=0)
        assert again == stale, "equal by content: same id, key, payload, queue"
        with pytest.raises(tflux.NotInFlightError):
            store.ack(stale)
        store.ack(again)


def test_a_pickled_record_still_settles_its_own_delivery(tmp_path):
    import pickle

    with tflux.open(tmp_path, log_sync_policy="never") as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
        rec = pickle.loads(pickle.dumps(store.dequeue("q", timeout=0)))
        store.ack(rec)
        assert store.dequeue("q", timeout=0) is None


def test_ack_many_acknowledges_all_with_one_write_or_none(tmp_path):
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        store.create_queue("a")
        store.enqueue_many("a", [(1, b"x"), (2, b"y"), (3, b"z")])
        store.enqueue("", 0, b"d")
        recs = [store.dequeue("a", timeout=0) for _ in range(3)]
        other = store.dequeue("", timeout=0)
        before = store.log_bounds
        # One record not in flight (acked twice in the list): nothing is written.
        with pytest.raises(tflux.NotInFlightError):
            store.ack_many([recs[0], recs[0]])
        assert store.log_bounds == before
        store.ack_many([recs[0], recs[2], other])
        _, last, _ = store.log_bounds
        assert last == before[1] + 3, "three RemoveRecord deltas in one append"
        assert {q.name: (q.count, q.in_flight) for q in store.queues()} == {
            "": (0, 0),
            "a": (0, 1),
        }
    with tflux.open(tmp_path) as store:
        # The unacknowledged one comes back; the acked ones are gone for good.
        assert [(r.id, r.payload) for r in store.records("a")] == [(2, b"y")]
        assert store.records("") == []


# Issue 10, defect 2: writers waiting for their fsync while another thread closed the store got
# TfluxIOError("... opened read-only") although close had synced their records (ghost writes).
def test_close_while_threads_enqueue_gives_success_or_closed_error_and_no_ghost(base_dir):
    for attempt in range(3):
        close_during_enqueues(base_dir / f"round-{attempt}")


def close_during_enqueues(base: Path) -> None:
    store = tflux.open(base, log_sync_policy="always", log_preallocate_segments=False)
    acked: list[bytes] = []
    refused: list[bytes] = []
    others: list[BaseException] = []
    lock = threading.Lock()
    started = threading.Barrier(5)

    def producer(n: int) -> None:
        started.wait()
        i = 0
        while True:
            i += 1
            payload = b"%d-%d" % (n, i)
            try:
                store.enqueue("", 0, payload)
            except tflux.ClosedError:
                with lock:
                    refused.append(payload)
                return
            except BaseException as e:  # any other error is the defect
                with lock:
                    others.append(e)
                return
            with lock:
                acked.append(payload)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    started.wait()
    time.sleep(0.05)
    store.close()
    for t in threads:
        t.join(30)
    assert others == [], others[:3]
    assert len(refused) == 4
    with tflux.open(base, **FAST) as again:
        present = {bytes(r.payload) for r in again.records("")}
    assert present == set(acked)


@pytest.mark.parametrize("copy_of", ["pickle", "deepcopy", "copy"])
def test_a_copied_record_from_before_a_reopen_cannot_settle_the_redelivery(tmp_path, copy_of):
    import copy
    import pickle

    copiers = {
        "pickle": lambda r: pickle.loads(pickle.dumps(r)),
        "deepcopy": copy.deepcopy,
        "copy": copy.copy,
    }
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
        stale = copiers[copy_of](store.dequeue("q", timeout=0))
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        again = store.dequeue("q", timeout=0)
        assert again == stale, "the copy is equal by content"
        before = store.log_bounds
        with pytest.raises(tflux.NotInFlightError):
            store.ack(stale)
        with pytest.raises(tflux.NotInFlightError):
            store.nack(stale)
        with pytest.raises(tflux.NotInFlightError):
            store.ack_many([stale])
        assert store.log_bounds == before, "a refused ack writes nothing"
        store.ack(again)
        assert store.dequeue("q", timeout=0) is None


# --- dequeue timeouts: no panic reaches Python -------------------------------------------------

HUGE_TIMEOUTS = [float("inf"), 1e19, 2.0**64, 2**64, 10**400, 1e308]


@pytest.mark.parametrize("timeout", HUGE_TIMEOUTS, ids=repr)
def test_dequeue_with_an_infinite_or_huge_timeout_returns_a_ready_record(tmp_path, timeout):
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        store.enqueue("", 1, b"x")
        record = store.dequeue("", timeout=timeout)
        assert record is not None and record.payload == b"x"


@pytest.mark.parametrize("timeout", [float("inf"), 2**64, 10**400], ids=repr)
def test_dequeue_with_an_infinite_or_huge_timeout_waits_for_a_record(tmp_path, timeout):
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        got: list[object] = []
        waiter = threading.Thread(target=lambda: got.append(store.dequeue("", timeout=timeout)))
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive(), "an infinite timeout waits"
        store.enqueue("", 1, b"late")
        waiter.join(10)
        assert not waiter.is_alive()
        assert [r.payload for r in got] == [b"late"]


@pytest.mark.parametrize("timeout", [float("nan"), -1, -0.5, float("-inf"), -(10**400)], ids=repr)
def test_dequeue_refuses_a_nan_or_negative_timeout(tmp_path, timeout):
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        store.enqueue("", 1, b"x")
        with pytest.raises(ValueError, match="timeout"):
            store.dequeue("", timeout=timeout)
        assert store.queues()[0].in_flight == 0, "a refused call dequeues nothing"


def test_the_implementation_table_names_every_queue_kind_the_store_makes(tmp_path):
    """tflux.IMPLEMENTATIONS is the core's one code <-> name table (CLI and Spark read it)."""
    assert set(tflux.IMPLEMENTATIONS.values()) == {"heap", "array"}
    with pytest.raises(TypeError):
        tflux.IMPLEMENTATIONS[9] = "other"  # read-only
    with tflux.open(tmp_path, log_sync_policy="never") as store:
        for code, name in tflux.IMPLEMENTATIONS.items():
            store.create_queue(f"q{code}", name, key_range=(0, 9))
        store.snapshot()
        made = {q.name: q.implementation for q in store.queues()}
    snap = tflux.read_snapshot(tmp_path / "data" / "tflux.snapshot")
    for q in snap.queues:
        assert tflux.IMPLEMENTATIONS[q.implementation] == made[q.name]
    with tflux.open(tmp_path, log_sync_policy="never") as store, pytest.raises(ValueError) as info:
        store.create_queue("bad", "list")
    assert all(f'"{name}"' in str(info.value) for name in tflux.IMPLEMENTATIONS.values())


def test_a_dropped_store_hands_its_restored_memory_back(tmp_path):
    """A store restored from a long log, closed and let go, returns the memory of its queues to
    the system: the allocator keeps freed pages for reuse, and nothing after the drop would
    make it purge them (a 10M-delta store left 131 MiB resident for the life of the process).
    In a child, so that the measure is of this store alone."""
    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("q")
        for start in range(0, 1_200_000, 100_000):
            store.enqueue_many("q", [(k % 1024, b"m" * 64) for k in range(start, start + 100_000)])
    child = textwrap.dedent(
        """
        import gc, sys, tflux

        def anon():
            with open("/proc/self/statm") as f:
                pages = f.read().split()
            return (int(pages[1]) - int(pages[2])) * 4096

        before = anon()
        store = tflux.open(sys.argv[1], readonly=True)
        opened = anon() - before
        store.close()
        del store
        gc.collect()
        print(opened, anon() - before)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", child, str(base)], capture_output=True, text=True, check=True
    )
    opened, dropped = map(int, out.stdout.split())
    # 1,200,000 queued records: at least 32 B each while open; a few MiB of the allocator's
    # own stay after the drop (13 of 33 MB with half as many records), all of it before.
    assert opened > 1_200_000 * 32, (opened, dropped)
    assert dropped < opened / 2, (opened, dropped)
