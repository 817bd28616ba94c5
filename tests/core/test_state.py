"""The queue state machine alone (``tflux.QueueState``), driven by delta bytes built by hand.

The tiny encoder below follows spec section 6 with ``struct`` only and is checked against the
golden ``tests/data/deltas.json``; expected states come from spec section 7 (order by key then id,
ids are ``last id + 1``, replay errors naming the LSN) and, in the property tests, from a sorted
Python list.
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
import textwrap

import pytest
import tflux
from conftest import DATA_DIR
from hypothesis import given, settings
from hypothesis import strategies as st
from tflux.errors import CorruptionError, QueueNotFoundError, ReplayError

HEAP = 1
ARRAY = 2
I64_MIN = -(2**63)
I64_MAX = 2**63 - 1

# --- an independent delta encoder (spec section 6) -----------------------------------------------


def qname(name: str | bytes) -> bytes:
    raw = name.encode("ascii") if isinstance(name, str) else name
    return bytes([len(raw)]) + raw


def nullable_range(key_range: tuple[int, int] | None) -> bytes:
    if key_range is None:
        return b"\x00"
    return b"\x01" + struct.pack(">qq", *key_range)


def create(
    name: str,
    impl: int = HEAP,
    max_size: int = -1,
    max_message_size: int = -1,
    key_range: tuple[int, int] | None = None,
) -> bytes:
    """'C' | QueueName | Int32 impl | Int32 max size | Int32 max message size | Nullable<Pair>."""
    return (
        b"C"
        + qname(name)
        + struct.pack(">iii", impl, max_size, max_message_size)
        + nullable_range(key_range)
    )


def delete(name: str) -> bytes:
    """'D' | QueueName."""
    return b"D" + qname(name)


def add(name: str, key: int, message: bytes) -> bytes:
    """'A' | QueueName | Int64 priority | Buffer message."""
    return b"A" + qname(name) + struct.pack(">qi", key, len(message)) + message


def remove(name: str, record_id: int) -> bytes:
    """'R' | QueueName | UInt64 record id."""
    return b"R" + qname(name) + struct.pack(">Q", record_id)


def encode_vector(v: dict) -> bytes:
    kind = v["kind"]
    if kind == "C":
        key_range = tuple(v["key_range"]) if v["key_range"] is not None else None
        return create(
            v["queue"], v["implementation"], v["max_queue_size"], v["max_message_size"], key_range
        )
    if kind == "D":
        return delete(v["queue"])
    if kind == "A":
        return add(v["queue"], v["key"], bytes.fromhex(v["message_hex"]))
    if kind == "R":
        return remove(v["queue"], v["record_id"])
    raise AssertionError(kind)


DELTA_VECTORS = json.loads((DATA_DIR / "deltas.json").read_text())


@pytest.mark.parametrize("name", sorted(DELTA_VECTORS))
def test_the_hand_encoder_reproduces_the_golden_delta_bytes(name):
    vector = DELTA_VECTORS[name]
    assert encode_vector(vector).hex() == vector["hex"]


# --- helpers -------------------------------------------------------------------------------------


def rec(r) -> tuple[int, int, bytes, str]:
    return (r.id, r.key, bytes(r.payload), r.queue)


def contents(state: tflux.QueueState, queue: str) -> list[tuple[int, int, bytes, str]]:
    return [rec(r) for r in state.records(queue)]


def info(state: tflux.QueueState, name: str):
    found = [q for q in state.queues() if q.name == name]
    assert len(found) == 1, f"queue {name!r} listed {len(found)} times"
    return found[0]


def describe(state: tflux.QueueState) -> dict:
    """Everything observable about a state, to check that a refused delta changed nothing."""
    out = {}
    for q in state.queues():
        out[q.name] = (
            q.implementation,
            q.count,
            q.in_flight,
            q.last_id,
            q.max_size,
            q.max_message_size,
            q.key_range,
            contents(state, q.name),
        )
    return out


def state_of(*deltas: bytes) -> tflux.QueueState:
    state = tflux.QueueState()
    for lsn, delta in enumerate(deltas):
        state.apply(delta, lsn)
    return state


# --- a fresh state and queue creation ------------------------------------------------------------


def test_a_fresh_state_holds_exactly_the_default_queue_as_an_empty_unlimited_heap():
    state = tflux.QueueState()
    queues = state.queues()
    assert [q.name for q in queues] == [""]
    q = queues[0]
    assert q.implementation == "heap"
    assert (q.count, q.in_flight, q.last_id) == (0, 0, 0)
    assert (q.max_size, q.max_message_size, q.key_range) == (None, None, None)
    assert state.records("") == []


def test_create_queue_deltas_carry_implementation_limits_and_range():
    state = state_of(
        create("jobs", HEAP, 10, 4096, None),
        create("q:x", ARRAY, 100, 0, (-5, 5)),
        create("ranged-heap", HEAP, 0, -1, (7, 7)),
    )
    assert sorted(q.name for q in state.queues()) == ["", "jobs", "q:x", "ranged-heap"]
    jobs = info(state, "jobs")
    assert (jobs.implementation, jobs.max_size, jobs.max_message_size, jobs.key_range) == (
        "heap",
        10,
        4096,
        None,
    )
    arr = info(state, "q:x")
    assert (arr.implementation, arr.max_size, arr.max_message_size, arr.key_range) == (
        "array",
        100,
        0,
        (-5, 5),
    )
    ranged = info(state, "ranged-heap")
    assert (ranged.implementation, ranged.max_size, ranged.key_range) == ("heap", 0, (7, 7))
    for name in ("jobs", "q:x", "ranged-heap"):
        q = info(state, name)
        assert (q.count, q.in_flight, q.last_id) == (0, 0, 0)


def test_queue_names_of_every_printable_ascii_byte_and_255_bytes_are_accepted():
    every = "".join(chr(c) for c in range(0x21, 0x7F))
    long = "~" * 255
    state = state_of(create(every), create(long), add(long, 1, b"x"))
    assert {q.name for q in state.queues()} == {"", every, long}
    assert contents(state, long) == [(1, 1, b"x", long)]


def test_apply_without_lsn_works_and_apply_accepts_any_bytes_like_sequence_of_calls():
    state = tflux.QueueState()
    state.apply(create("a"))
    state.apply(add("a", 3, b"m"))
    assert contents(state, "a") == [(1, 3, b"m", "a")]


# --- ids and order -------------------------------------------------------------------------------


def test_ids_start_at_one_and_count_up_per_queue_independently():
    state = state_of(
        create("a"),
        create("b"),
        add("a", 0, b"a1"),
        add("b", 0, b"b1"),
        add("a", 0, b"a2"),
        add("", 0, b"d1"),
        add("a", 0, b"a3"),
    )
    assert [r.id for r in state.records("a")] == [1, 2, 3]
    assert [r.id for r in state.records("b")] == [1]
    assert [r.id for r in state.records("")] == [1]
    assert (info(state, "a").last_id, info(state, "b").last_id, info(state, "").last_id) == (
        3,
        1,
        1,
    )
    assert info(state, "a").count == 3


def test_removed_ids_are_never_reused_even_the_last_one():
    state = state_of(create("a"), add("a", 0, b"1"), add("a", 0, b"2"), add("a", 0, b"3"))
    state.apply(remove("a", 3), 4)
    state.apply(remove("a", 1), 5)
    assert info(state, "a").last_id == 3
    state.apply(add("a", 0, b"4"), 6)
    assert contents(state, "a") == [(2, 0, b"2", "a"), (4, 0, b"4", "a")]
    assert info(state, "a").last_id == 4
    assert info(state, "a").count == 2


def test_a_deleted_and_recreated_queue_starts_empty_with_ids_from_one():
    state = state_of(create("a"), add("a", 1, b"old"), add("a", 1, b"old2"), delete("a"))
    assert "a" not in {q.name for q in state.queues()}
    state.apply(create("a", ARRAY, key_range=(0, 3)), 10)
    assert state.records("a") == []
    assert info(state, "a").implementation == "array"
    state.apply(add("a", 2, b"new"), 11)
    assert contents(state, "a") == [(1, 2, b"new", "a")]


KEYS = [5, -1, 5, 3, -1, 0, 3, 5, -1, 4]


def expected_order(queue: str, keys: list[int]) -> list[tuple[int, int, bytes, str]]:
    recs = [(i + 1, k, f"m{i + 1}".encode(), queue) for i, k in enumerate(keys)]
    return sorted(recs, key=lambda r: (r[1], r[0]))


@pytest.mark.parametrize(
    ("impl", "key_range"),
    [(HEAP, None), (ARRAY, (-1, 5)), (ARRAY, (-(2**62), 2**62)), (ARRAY, (I64_MIN, I64_MAX))],
    ids=["heap", "array", "array-sparse", "array-full-i64"],
)
def test_records_come_smallest_key_first_and_fifo_among_equal_keys(impl, key_range):
    state = state_of(create("q", impl, key_range=key_range))
    for i, k in enumerate(KEYS):
        state.apply(add("q", k, f"m{i + 1}".encode()), i + 1)
    assert contents(state, "q") == expected_order("q", KEYS)
    assert info(state, "q").count == len(KEYS)


def test_heap_orders_the_extreme_keys_of_int64():
    keys = [I64_MAX, 0, I64_MIN, -1, I64_MAX, I64_MIN]
    state = state_of(*(add("", k, f"m{i + 1}".encode()) for i, k in enumerate(keys)))
    assert contents(state, "") == expected_order("", keys)


def test_array_queue_accepts_both_ends_of_its_inclusive_range():
    state = state_of(create("a", ARRAY, key_range=(-3, 3)), add("a", 3, b"hi"), add("a", -3, b"lo"))
    assert contents(state, "a") == [(2, -3, b"lo", "a"), (1, 3, b"hi", "a")]


def test_full_int64_array_range_at_its_extremes():
    state = state_of(
        create("a", ARRAY, key_range=(I64_MIN, I64_MAX)),
        add("a", I64_MAX, b"max"),
        add("a", I64_MIN, b"min"),
        add("a", 0, b"zero"),
        add("a", I64_MIN, b"min2"),
    )
    assert contents(state, "a") == [
        (2, I64_MIN, b"min", "a"),
        (4, I64_MIN, b"min2", "a"),
        (3, 0, b"zero", "a"),
        (1, I64_MAX, b"max", "a"),
    ]


def test_remove_takes_out_exactly_the_named_record_anywhere_in_the_order():
    state = state_of(create("a", ARRAY, key_range=(0, 9)))
    for i, k in enumerate([4, 4, 4, 1, 9]):
        state.apply(add("a", k, bytes([i])), i + 1)
    state.apply(remove("a", 2), 10)  # the middle of key 4's FIFO
    state.apply(remove("a", 5), 11)  # the only record of key 9
    assert [(r.id, r.key) for r in state.records("a")] == [(4, 1), (1, 4), (3, 4)]
    assert info(state, "a").count == 3
    assert info(state, "a").last_id == 5


def test_payloads_round_trip_byte_for_byte_including_empty_and_binary():
    payloads = [b"", b"\x00", bytes(range(256)), b"x" * 100_000]
    state = state_of(*(add("", 0, p) for p in payloads))
    assert [bytes(r.payload) for r in state.records("")] == payloads


def test_policies_are_not_checked_on_replay():
    # Limits apply to client enqueues only (spec 7): a log may hold more than they allow.
    state = state_of(
        create("h", HEAP, max_size=1, max_message_size=2, key_range=(0, 0)),
        add("h", 5, b"too long"),
        add("h", -5, b"also too long"),
        create("a", ARRAY, max_size=0, max_message_size=0, key_range=(0, 1)),
        add("a", 1, b"xyz"),
    )
    assert [(r.id, r.key) for r in state.records("h")] == [(2, -5), (1, 5)]
    assert contents(state, "a") == [(1, 1, b"xyz", "a")]


def test_records_of_a_missing_queue_is_a_key_error():
    state = tflux.QueueState()
    with pytest.raises(QueueNotFoundError):
        state.records("nope")
    with pytest.raises(KeyError):
        state.records("nope")


def test_deleting_a_queue_removes_it_and_its_records():
    state = state_of(create("a"), add("a", 1, b"x"), delete("a"))
    assert [q.name for q in state.queues()] == [""]
    with pytest.raises(QueueNotFoundError):
        state.records("a")


# --- replay errors -------------------------------------------------------------------------------

RULE_VIOLATIONS = {
    "create existing queue": ([create("jobs")], create("jobs")),
    "create existing queue with other settings": (
        [create("jobs")],
        create("jobs", ARRAY, 1, 1, (0, 1)),
    ),
    "create the default queue": ([], create("")),
    "add to missing queue": ([], add("jobs", 1, b"x")),
    "add to deleted queue": ([create("jobs"), delete("jobs")], add("jobs", 1, b"x")),
    "remove from missing queue": ([], remove("jobs", 1)),
    "delete missing queue": ([], delete("jobs")),
    "delete deleted queue": ([create("jobs"), delete("jobs")], delete("jobs")),
    "remove id never added": ([create("jobs"), add("jobs", 1, b"x")], remove("jobs", 2)),
    "remove id zero": ([create("jobs"), add("jobs", 1, b"x")], remove("jobs", 0)),
    "remove id already removed": (
        [create("jobs"), add("jobs", 1, b"x"), add("jobs", 1, b"y"), remove("jobs", 1)],
        remove("jobs", 1),
    ),
    "remove from default queue id never added": ([], remove("", 1)),
    "remove huge id": ([add("", 1, b"x")], remove("", 2**64 - 1)),
    "delete default queue": ([], delete("")),
    "implementation code 0": ([], create("jobs", 0)),
    "implementation code 3": ([], create("jobs", 3, key_range=(0, 1))),
    "implementation code -1": ([], create("jobs", -1)),
    "array without range": ([], create("jobs", ARRAY)),
    "array min > max": ([], create("jobs", ARRAY, key_range=(1, 0))),
    "heap min > max": ([], create("jobs", HEAP, key_range=(5, -5))),
    "array min > max at extremes": ([], create("jobs", ARRAY, key_range=(I64_MAX, I64_MIN))),
    "key below array range": ([create("jobs", ARRAY, key_range=(0, 9))], add("jobs", -1, b"x")),
    "key above array range": ([create("jobs", ARRAY, key_range=(0, 9))], add("jobs", 10, b"x")),
    "key far outside array range": (
        [create("jobs", ARRAY, key_range=(-5, 5))],
        add("jobs", I64_MIN, b"x"),
    ),
}


@pytest.mark.parametrize("case", sorted(RULE_VIOLATIONS))
def test_a_delta_that_breaks_an_apply_rule_is_a_replay_error_naming_the_lsn(case):
    setup, bad = RULE_VIOLATIONS[case]
    state = state_of(*setup)
    before = describe(state)
    lsn = 1000 + len(setup)
    with pytest.raises(ReplayError) as exc:
        state.apply(bad, lsn)
    assert exc.value.lsn == lsn
    assert describe(state) == before, "a refused delta must not change the state"


@pytest.mark.parametrize("case", sorted(RULE_VIOLATIONS))
def test_apply_without_lsn_raises_replay_error_with_unknown_lsn(case):
    setup, bad = RULE_VIOLATIONS[case]
    state = state_of(*setup)
    with pytest.raises(ReplayError) as exc:
        state.apply(bad)
    assert exc.value.lsn is None


GOOD_ADD = add("jobs", 7, b"hello")

UNDECODABLE = {
    "empty": b"",
    "unknown marker": b"X" + qname("jobs"),
    "lower-case marker": b"c" + create("jobs")[1:],
    "marker only": b"A",
    "name length past the end": b"D\x05jobs",
    "name with a space": b"D" + qname(b"a b"),
    "name with DEL": b"D" + qname(b"ab\x7f"),
    "name with a non-ascii byte": b"D" + qname(b"jobs\xc3\xa9"),
    "name with a NUL": b"D" + qname(b"\x00"),
    "trailing byte after delete": delete("jobs") + b"\x00",
    "trailing byte after create": create("jobs") + b"\x00",
    "trailing byte after add": GOOD_ADD + b"!",
    "trailing byte after remove": remove("jobs", 1) + b"\x00",
    "create cut inside sizes": create("jobs")[:-5],
    "create cut before nullable": create("jobs")[:-1],
    "create cut inside the range": create("jobs", ARRAY, key_range=(0, 9))[:-3],
    "nullable flag 2": create("jobs")[:-1] + b"\x02",
    "nullable flag 0xff with a range": create("jobs", ARRAY, key_range=(0, 9)).replace(
        b"\x01" + struct.pack(">qq", 0, 9), b"\xff" + struct.pack(">qq", 0, 9)
    ),
    "add cut inside the key": b"A" + qname("jobs") + b"\x00\x00\x00",
    "add buffer longer than the data": b"A" + qname("jobs") + struct.pack(">qi", 7, 6) + b"hello",
    "add buffer length huge": b"A" + qname("jobs") + struct.pack(">qi", 7, 2**31 - 1) + b"hello",
    "add buffer length negative": b"A" + qname("jobs") + struct.pack(">qi", 7, -1),
    "remove id cut short": remove("jobs", 1)[:-1],
}


@pytest.mark.parametrize("case", sorted(UNDECODABLE))
def test_undecodable_bytes_are_a_replay_error_caused_by_corruption(case):
    state = state_of(create("jobs"), add("jobs", 1, b"x"))
    before = describe(state)
    with pytest.raises(ReplayError) as exc:
        state.apply(UNDECODABLE[case], 77)
    assert exc.value.lsn == 77
    assert isinstance(exc.value.__cause__, CorruptionError)
    assert describe(state) == before


def test_replay_errors_are_tflux_errors_but_not_corruption_errors():
    state = tflux.QueueState()
    with pytest.raises(tflux.TfluxError) as exc:
        state.apply(delete(""), 3)
    assert isinstance(exc.value, ReplayError)


def test_the_state_keeps_working_after_a_refused_delta():
    state = state_of(create("jobs"), add("jobs", 1, b"x"))
    with pytest.raises(ReplayError):
        state.apply(remove("jobs", 9), 2)
    with pytest.raises(ReplayError):
        state.apply(b"garbage", 2)
    state.apply(add("jobs", 0, b"y"), 2)
    assert contents(state, "jobs") == [(2, 0, b"y", "jobs"), (1, 1, b"x", "jobs")]


# --- replay of a log -----------------------------------------------------------------------------


def write_log(log_dir, deltas: list[bytes], term: int = 1) -> None:
    with tflux.Log.open(log_dir, preallocate=False, soft_limit=128, hard_limit=256) as log:
        for d in deltas:
            log.append(term, d)


LOG_DELTAS = [
    create("jobs", ARRAY, 5, 64, (0, 9)),
    add("jobs", 9, b"a"),
    add("jobs", 0, b"b"),
    add("", -4, b"c"),
    add("jobs", 9, b"d"),
    remove("jobs", 1),
    create("tmp"),
    add("tmp", 1, b"t"),
    delete("tmp"),
    add("jobs", 0, b"e"),
]


def test_replay_of_a_log_equals_applying_its_deltas_in_lsn_order(log_dir):
    write_log(log_dir, LOG_DELTAS)
    with tflux.Log.open(log_dir, readonly=True) as log:
        assert len(log.segments) > 1, "the test wants entries spread over several segments"
        state = tflux.QueueState()
        state.replay(log)
    assert describe(state) == describe(state_of(*LOG_DELTAS))
    assert contents(state, "jobs") == [
        (2, 0, b"b", "jobs"),
        (4, 0, b"e", "jobs"),
        (3, 9, b"d", "jobs"),
    ]
    assert contents(state, "") == [(1, -4, b"c", "")]
    assert info(state, "jobs").last_id == 4


def test_replay_from_a_start_lsn_skips_the_entries_before_it(log_dir):
    write_log(log_dir, LOG_DELTAS)
    state = state_of(create("jobs", ARRAY, 5, 64, (0, 9)), add("jobs", 9, b"a"))
    with tflux.Log.open(log_dir, readonly=True) as log:
        state.replay(log, start=2)
    assert describe(state) == describe(state_of(*LOG_DELTAS))


def test_replay_error_names_the_lsn_of_the_bad_entry(log_dir):
    deltas = [create("jobs"), add("jobs", 1, b"x"), add("jobs", 2, b"y"), remove("jobs", 3)]
    write_log(log_dir, deltas)
    state = tflux.QueueState()
    with tflux.Log.open(log_dir, readonly=True) as log, pytest.raises(ReplayError) as exc:
        state.replay(log)
    assert exc.value.lsn == 3


def test_replay_error_for_undecodable_entry_names_its_lsn_and_chains_corruption(log_dir):
    deltas = [create("jobs"), add("jobs", 1, b"x"), b"Z", add("jobs", 2, b"y")]
    write_log(log_dir, deltas)
    state = tflux.QueueState()
    with tflux.Log.open(log_dir, readonly=True) as log, pytest.raises(ReplayError) as exc:
        state.replay(log)
    assert exc.value.lsn == 2
    assert isinstance(exc.value.__cause__, CorruptionError)


def test_replay_of_an_empty_log_leaves_the_default_state(log_dir):
    with tflux.Log.open(log_dir, preallocate=False):
        pass
    state = tflux.QueueState()
    with tflux.Log.open(log_dir, readonly=True) as log:
        state.replay(log)
    assert describe(state) == describe(tflux.QueueState())


# --- property tests against a sorted list --------------------------------------------------------

# A queue's key range and keys drawn from it: small dense ranges, huge sparse ones, the full Int64.
RANGES = st.sampled_from(
    [(0, 0), (-3, 3), (-(2**62), 2**62), (I64_MIN, I64_MAX), (2**40, 2**40 + 5), (-100, 10**15)]
)


@st.composite
def queue_and_ops(draw):
    impl = draw(st.sampled_from([HEAP, ARRAY]))
    key_range = draw(RANGES)
    lo, hi = key_range
    # A few hot keys (FIFO ties) plus the range ends and anything in between.
    hot = draw(st.lists(st.integers(lo, hi), min_size=1, max_size=4))
    keys = st.one_of(st.sampled_from([*hot, lo, hi]), st.integers(lo, hi))
    op = st.one_of(
        st.tuples(st.just("add"), keys, st.binary(max_size=8)),
        st.tuples(st.just("remove"), st.integers(0, 40)),
        st.tuples(st.just("remove_missing"), st.integers(0, 2**64 - 1)),
    )
    ops = draw(st.lists(op, max_size=60))
    return impl, key_range if impl == ARRAY or draw(st.booleans()) else None, ops


@settings(max_examples=150, deadline=None)
@given(queue_and_ops())
def test_random_adds_and_removes_match_a_sorted_list_model(case):
    impl, key_range, ops = case
    state = state_of(create("q", impl, key_range=key_range))
    model: list[tuple[int, int, bytes]] = []  # (key, id, payload), kept sorted
    last_id = 0
    lsn = 1
    for op in ops:
        lsn += 1
        if op[0] == "add":
            _, key, payload = op
            state.apply(add("q", key, payload), lsn)
            last_id += 1
            model.append((key, last_id, payload))
            model.sort()
        elif op[0] == "remove" and model:
            key, rid, _ = model.pop(op[1] % len(model))
            state.apply(remove("q", rid), lsn)
        else:
            rid = op[1] if op[0] == "remove_missing" else last_id + 1 + op[1]
            if any(r[1] == rid for r in model):
                continue
            with pytest.raises(ReplayError) as exc:
                state.apply(remove("q", rid), lsn)
            assert exc.value.lsn == lsn
        q = info(state, "q")
        assert (q.count, q.last_id) == (len(model), last_id)
    assert contents(state, "q") == [(i, k, p, "q") for k, i, p in model]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["", "a", "b"]), st.integers(-3, 3), st.binary(max_size=3)),
        max_size=40,
    )
)
def test_queues_keep_separate_orders_and_ids(adds):
    state = state_of(create("a", ARRAY, key_range=(-3, 3)), create("b"))
    model: dict[str, list[tuple[int, int, bytes]]] = {"": [], "a": [], "b": []}
    for lsn, (name, key, payload) in enumerate(adds, start=10):
        state.apply(add(name, key, payload), lsn)
        model[name].append((key, len(model[name]) + 1, payload))
    for name, recs in model.items():
        assert contents(state, name) == [(i, k, p, name) for k, i, p in sorted(recs)]
        assert info(state, name).last_id == len(recs)


@pytest.mark.parametrize(
    ("impl", "key_range", "seed"),
    [(HEAP, None, 1), (HEAP, None, 2), (ARRAY, (-50, 50), 3), (ARRAY, (I64_MIN, I64_MAX), 4)],
)
def test_thousands_of_random_adds_and_removes_match_a_sorted_list(impl, key_range, seed):
    # Deep heaps and long FIFOs: removals anywhere, many equal keys, a few far-apart keys.
    rng = random.Random(seed)
    state = state_of(create("q", impl, key_range=key_range))
    lo, hi = key_range if key_range else (I64_MIN, I64_MAX)
    hot = [rng.randint(lo, hi) for _ in range(3)] + [lo, hi]
    model: dict[int, tuple[int, bytes]] = {}
    last_id = 0
    for lsn in range(1, 20_001):
        if model and rng.random() < 0.45:
            rid = (
                rng.choice(list(model))
                if rng.random() < 0.5
                else min(model, key=lambda i: (model[i][0], i))
            )
            del model[rid]
            state.apply(remove("q", rid), lsn)
        else:
            key = rng.choice(hot) if rng.random() < 0.7 else rng.randint(-50, 50)
            payload = lsn.to_bytes(4, "big")
            state.apply(add("q", key, payload), lsn)
            last_id += 1
            model[last_id] = (key, payload)
        if lsn % 2500 == 0:
            expected = sorted((k, i, p) for i, (k, p) in model.items())
            assert contents(state, "q") == [(i, k, p, "q") for k, i, p in expected]
    assert info(state, "q").last_id == last_id
    assert info(state, "q").count == len(model)


# --- memory of a huge sparse array range ---------------------------------------------------------

SPARSE_SCRIPT = textwrap.dedent(
    """
    import resource, struct, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    import tflux

    def qn(n):
        return bytes([len(n)]) + n.encode()

    lo, hi = -(2**63), 2**63 - 1
    s = tflux.QueueState()
    s.apply(b"C" + qn("a") + struct.pack(">iii", 2, -1, -1) + b"\\x01" + struct.pack(">qq", lo, hi))
    keys = [hi - i * (2**50) for i in range(2000)] + [lo + i * 7919 for i in range(2000)]
    t = time.monotonic()
    for k in keys:
        s.apply(b"A" + qn("a") + struct.pack(">qi", k, 0))
    got = [r.key for r in s.records("a")]
    assert got == sorted(keys), "order"
    for i in range(1, len(keys) + 1):
        s.apply(b"R" + qn("a") + struct.pack(">Q", i))
    assert s.records("a") == []
    with open("/proc/self/status") as f:
        hwm = [line for line in f if line.startswith("VmHWM")][0].split()[1]
    print(int(hwm), time.monotonic() - t)
    """
)


def test_a_full_int64_array_range_does_not_allocate_in_proportion_to_the_range():
    # In a child with a 2 GiB address-space cap: an allocation sized by the range fails there,
    # not in the test process.
    out = subprocess.run(
        [sys.executable, "-c", SPARSE_SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    hwm_kib, seconds = out.stdout.split()
    assert int(hwm_kib) < 300 * 1024, f"peak RSS {hwm_kib} KiB for 4000 records"
    assert float(seconds) < 10
