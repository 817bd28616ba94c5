"""Deliveries of ``tflux.Store``: dequeue, ack and nack, leases (visibility timeout) and
dead-lettering, stale records that cannot settle a new delivery, and dequeue timeouts.

Expected values come from the spec (sections 6 and 7) and docs/format.md ("Deliveries: leases and
dead-letter"), never from the code's own output.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import tflux
from _store_support import FAST, contents, info, log_datas, log_entries, rec
from test_state import add, create, remove
from tflux import ArgumentError
from tflux.errors import (
    NotInFlightError,
    QueueNotFoundError,
    TfluxError,
)


@pytest.fixture
def store(base_dir):
    s = tflux.open(base_dir, log_sync_policy="always", log_preallocate_segments=False)
    yield s
    s.close()


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


# --- leases (visibility timeout) --------------------------------------------------------------


def test_a_leased_record_that_is_never_settled_comes_back_by_itself(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"a")
        hung = store.dequeue("q", timeout=0, lease=0.05)
        assert hung.payload == b"a"
        assert store.count("q") == 0
        # A waiting dequeue wakes when the lease runs out: the record is ready again.
        again = store.dequeue("q", timeout=60)
        assert (again.id, again.payload) == (hung.id, b"a")
        store.ack(again)
        with pytest.raises(tflux.NotInFlightError):
            store.ack(hung)  # the first delivery ended with its lease
        # An expired lease puts the record back where it was: before later records.
        store.enqueue_many("q", [(0, b"c"), (0, b"d")])
        first = store.dequeue("q", timeout=0, lease=0.01)
        second = store.dequeue("q", timeout=0, lease=3600)
        assert (first.payload, second.payload) == (b"c", b"d")
        store.nack(store.dequeue("q", timeout=60))  # waits for c's lease to run out
        store.nack(second)
        assert [r.payload for r in store.iter_records("q")] == [b"c", b"d"]


def test_a_late_ack_or_nack_never_settles_a_later_delivery_of_the_record(base_dir):
    """Issue 30, item 14: A's lease ran out, B got the record, A's late nack put B's delivery
    back, C got it while B worked, and B's ack acked C's delivery. Each delivery has its own
    receipt now, and a settlement with another's is refused."""
    import pickle

    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"job")
        a = store.dequeue("q", timeout=0, lease=0.05)
        b = store.dequeue("q", timeout=60)  # after A's lease ran out
        assert (b.id, b.payload) == (a.id, b"job")
        for late in (store.nack, store.ack):
            with pytest.raises(tflux.NotInFlightError):
                late(a)
        assert store.dequeue("q", timeout=0) is None  # B's delivery was not put back
        copy_of_b = pickle.loads(pickle.dumps(b))  # a copy settles the same delivery
        store.nack(copy_of_b)
        with pytest.raises(tflux.NotInFlightError):
            store.ack(b)  # that delivery ended with the nack
        c = store.dequeue("q", timeout=0)
        store.ack_many([c])
        assert store.count("q") == 0


def test_a_record_settled_within_its_lease_stays_settled(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue("", 0, b"x")
        rec = store.dequeue("", timeout=0, lease=3600)
        store.ack(rec)
        assert store.count("") == 0 and store.dequeue("", timeout=0) is None
        store.enqueue("", 0, b"y")
        rec = store.dequeue("", timeout=0, lease=3600)
        store.nack(rec)  # back at once, lease or not
        assert store.peek("") == rec


@pytest.mark.parametrize("lease", [-1, float("nan")])
def test_a_bad_lease_is_an_argument_error(base_dir, lease):
    with tflux.open(base_dir, **FAST) as store, pytest.raises(ArgumentError, match="lease") as e:
        store.dequeue("", timeout=0, lease=lease)
    # The message alone (issue 30 item 23: it read "ArgumentError: lease must be ...").
    assert str(e.value).startswith("lease must be"), str(e.value)


LEASE_AND_DIE = textwrap.dedent(
    """
    import os, sys, tflux
    store = tflux.open(sys.argv[1], log_sync_policy="always")
    store.create_queue("q")
    store.enqueue("q", 0, b"job")
    rec = store.dequeue("q", timeout=0, lease=3600)
    print(rec.payload.decode(), flush=True)
    os._exit(0)  # neither ack nor nack nor close
    """
)


def test_an_unsettled_leased_record_is_ready_after_a_restart(base_dir):
    out = subprocess.run(
        [sys.executable, "-c", LEASE_AND_DIE, str(base_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "job"
    with tflux.open(base_dir, **FAST) as store:
        assert store.count("q") == 1  # long lease or not: leases are not logged
        assert store.dequeue("q", timeout=0).payload == b"job"


# --- dead-letter ------------------------------------------------------------------------------


def test_the_nth_failed_delivery_moves_the_record_to_the_dead_letter_queue(base_dir):
    rules = {"dead_letter": {"jobs": ("jobs-dead", 3)}}
    with tflux.open(base_dir, **FAST, **rules) as store:
        store.create_queue("jobs")
        store.create_queue("jobs-dead")
        store.enqueue("jobs", 5, b"poison")
        store.nack(store.dequeue("jobs", timeout=0))
        store.dequeue("jobs", timeout=0, lease=0.01)  # an expired lease counts too
        rec = store.dequeue("jobs", timeout=60)
        assert rec.payload == b"poison"
        assert store.count("jobs-dead") == 0
        store.enqueue("jobs", 9, b"fine")
        store.nack(rec)  # the third failure
        assert [r.payload for r in store.records("jobs")] == [b"fine"]
        assert [(r.key, r.payload) for r in store.records("jobs-dead")] == [(5, b"poison")]
        with pytest.raises(tflux.NotInFlightError):
            store.ack(rec)
    # The move was logged (AddRecord there, RemoveRecord here): it survives a restart without
    # the rule.
    with tflux.open(base_dir, **FAST) as store:
        assert [r.payload for r in store.records("jobs")] == [b"fine"]
        assert [r.payload for r in store.records("jobs-dead")] == [b"poison"]


def test_a_missing_dead_letter_queue_is_created_by_the_first_move(base_dir):
    """Issue 30, item 15: a rule naming a missing queue was silently ignored, so a poison
    record went back to its queue after every failure, forever. The move creates the queue (a
    heap without limits) in the same logged batch."""
    with tflux.open(base_dir, dead_letter={"jobs": ("jobs-dead", 2)}, **FAST) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 4, b"poison")
        store.nack(store.dequeue("jobs", timeout=0))
        assert store.count("jobs") == 1 and "jobs-dead" not in [q.name for q in store.queues()]
        store.nack(store.dequeue("jobs", timeout=0))  # the second failure: moved
        assert store.count("jobs") == 0
        assert [(r.key, r.payload) for r in store.records("jobs-dead")] == [(4, b"poison")]
        dead = next(q for q in store.queues() if q.name == "jobs-dead")
        assert dead.implementation == "heap"
    with tflux.open(base_dir, **FAST) as store:  # logged: it survives a restart without the rule
        assert [r.payload for r in store.records("jobs-dead")] == [b"poison"]


def test_a_dead_letter_queue_that_refuses_the_record_leaves_it_in_its_queue(base_dir):
    with tflux.open(base_dir, dead_letter={"jobs": ("small", 1)}, **FAST) as store:
        store.create_queue("jobs")
        store.create_queue("small", max_message_size=1)
        store.enqueue("jobs", 0, b"too long for small")
        store.nack(store.dequeue("jobs", timeout=0))
        assert [r.payload for r in store.records("jobs")] == [b"too long for small"]
        assert store.count("small") == 0


def test_the_dead_letter_rule_comes_from_the_settings_file(base_dir):
    (base_dir / "taskflux.settings.json").write_text(
        '{"DeadLetter": {"jobs": {"Queue": "dlq", "MaxNacks": 1}}}'
    )
    with tflux.open(base_dir, **FAST) as store:
        assert store.settings["DeadLetter"] == {"jobs": {"Queue": "dlq", "MaxNacks": 1}}
        store.create_queue("jobs")
        store.create_queue("dlq")
        store.enqueue("jobs", 0, b"x")
    with tflux.open(base_dir, **FAST) as store:  # the rule holds after a restart
        store.nack(store.dequeue("jobs", timeout=0))
        assert store.count("jobs") == 0 and store.count("dlq") == 1


@pytest.mark.parametrize(
    "rules", [{"jobs": ("dlq", 0)}, {"jobs": ("jobs", 2)}, {"jobs": "dlq"}, ["jobs"]]
)
def test_bad_dead_letter_rules_are_settings_errors(base_dir, rules):
    with pytest.raises(tflux.SettingsError, match="DeadLetter"):
        tflux.open(base_dir, dead_letter=rules, **FAST)
