"""Queues of ``tflux.open`` / ``tflux.Store``: opening a base directory, creating and deleting
queues, enqueue ids and order, the queue policies, count, peek and iteration.

Expected values come from the spec (sections 1, 6 and 7) and the bytes the store wrote, read back
with the strict segment parser of ``conftest.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tflux
from _store_support import FAST, contents, info, log_datas, log_entries, names, rec, run_thread
from test_state import ARRAY, HEAP, I64_MAX, I64_MIN, add, create, delete
from tflux.errors import (
    PolicyViolation,
    QueueExistsError,
    QueueNotFoundError,
    TfluxError,
)


@pytest.fixture
def store(base_dir):
    s = tflux.open(base_dir, log_sync_policy="always", log_preallocate_segments=False)
    yield s
    s.close()


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


# --- count, peek, iteration -------------------------------------------------------------------


def test_count_peek_and_iteration_follow_dequeue_order(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("q")
        assert store.count("q") == 0 and store.peek("q") is None
        assert list(store.iter_records("q")) == []
        store.enqueue_many("q", [(5, b"a"), (1, b"b"), (5, b"c"), (1, b"d")])
        assert store.count("q") == 4
        assert store.peek("q") == tflux.Record(2, 1, b"b", "q")
        assert store.peek("q") == store.peek("q")  # peeking takes nothing
        it = store.iter_records("q")
        assert it.__length_hint__() == 4
        assert [(r.id, r.key) for r in it] == [(2, 1), (4, 1), (1, 5), (3, 5)]
        first = store.dequeue("q", timeout=0)
        assert first.id == 2 and store.count("q") == 3
        # A record removed behind the front (ack of an in-flight record) is not peeked.
        second = store.dequeue("q", timeout=0)
        store.nack(first)
        assert store.peek("q").id == 2
        store.ack(second)
        assert [r.id for r in store.iter_records("q")] == [2, 1, 3]
        with pytest.raises(tflux.QueueNotFoundError):
            store.count("nope")
        with pytest.raises(tflux.QueueNotFoundError):
            store.peek("nope")
