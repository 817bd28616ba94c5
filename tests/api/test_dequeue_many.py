"""``Store.dequeue_many`` (issue 44): waits like ``dequeue`` for the first record, then takes up
to ``n - 1`` more ready ones without waiting, in one call (one round trip for a client). Each
record is its own delivery (lease, attempts, receipt). On a queue with a dead-letter rule the
batch's deliveries are counted with one logged write, durable before the reply: exact across
``kill -9`` of the owner right after it answered."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
import tflux
import tflux.aio

FAST = {"log_sync_policy": "never"}


def test_it_takes_what_is_ready_up_to_n_in_order_each_its_own_delivery(tmp_path):
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.create_queue("q")
        store.enqueue_many("q", [(3, b"c"), (1, b"a"), (2, b"b"), (1, b"a2")])
        got = store.dequeue_many("q", 3, timeout=0)
        assert [r.payload for r in got] == [b"a", b"a2", b"b"]
        assert [r.attempts for r in got] == [1, 1, 1]
        assert all(r.queue == "q" for r in got)
        assert [r.payload for r in store.dequeue_many("q", 10, timeout=0)] == [b"c"], (
            "n larger than what is ready: what is ready"
        )
        assert store.dequeue_many("q", 10, timeout=0) == []
        store.ack(got[0])
        store.nack(got[1])
        store.ack_many([got[2]])
        again = store.dequeue_many("q", 5, timeout=0)
        assert [(r.payload, r.attempts) for r in again] == [(b"a2", 2)]


def test_it_waits_for_the_first_record_then_takes_without_waiting(tmp_path):
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.create_queue("q")
        t0 = time.monotonic()
        assert store.dequeue_many("q", 4, timeout=0.2) == []
        assert time.monotonic() - t0 >= 0.19
        timer = threading.Timer(0.2, lambda: store.enqueue_many("q", [(1, b"x"), (1, b"y")]))
        timer.start()
        try:
            got = store.dequeue_many("q", 4, timeout=10)
        finally:
            timer.join()
        assert [r.payload for r in got] == [b"x", b"y"]


def test_a_waiting_dequeue_many_wakes_when_a_delayed_record_comes_due(tmp_path):
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"later", delay=0.3)
        t0 = time.monotonic()
        got = store.dequeue_many("q", 4, timeout=10)
        assert [r.payload for r in got] == [b"later"]
        assert 0.25 <= time.monotonic() - t0 < 5


def test_every_record_of_a_batch_has_its_own_lease(tmp_path):
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.create_queue("q")
        store.enqueue_many("q", [(1, b"a"), (1, b"b")])
        a, b = store.dequeue_many("q", 2, timeout=0, lease=0.2)
        store.extend(a, 30)
        time.sleep(0.4)
        store.ack(a)
        with pytest.raises(tflux.NotInFlightError):
            store.ack(b)
        again = store.dequeue_many("q", 2, timeout=0)
        assert [(r.payload, r.attempts) for r in again] == [(b"b", 2)]


def test_the_queues_lease_rule_applies_to_every_record(tmp_path):
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.create_queue("q", lease=0.2)
        store.enqueue_many("q", [(1, b"a"), (1, b"b")])
        assert len(store.dequeue_many("q", 2, timeout=0)) == 2
        time.sleep(0.4)
        assert [r.payload for r in store.dequeue_many("q", 2, timeout=0)] == [b"a", b"b"]


def test_n_below_one_is_refused_and_a_huge_n_is_capped(tmp_path):
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.create_queue("q")
        store.enqueue_many("q", [(1, b"%d" % i) for i in range(1500)])
        for n in (0, -1, -(10**30)):
            with pytest.raises(tflux.ArgumentError, match="n must be >= 1"):
                store.dequeue_many("q", n, timeout=0)
        with pytest.raises(TypeError, match="n must be an int"):
            store.dequeue_many("q", 2.0, timeout=0)
        assert store.count("q") == 1500, "a refused call takes nothing"
        # At most 1024 records a call (Store::deliver_many), whatever n says.
        assert len(store.dequeue_many("q", 10**40, timeout=0)) == 1024
        assert len(store.dequeue_many("q", 2**64, timeout=0)) == 1500 - 1024


def test_a_batch_stops_once_its_payloads_reach_16_mib(tmp_path):
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.create_queue("q")
        mib = b"x" * (1 << 20)
        store.enqueue_many("q", [(1, mib)] * 20)
        assert len(store.dequeue_many("q", 20, timeout=0)) == 16
        assert len(store.dequeue_many("q", 20, timeout=0)) == 4


def test_a_record_already_delivered_n_times_goes_to_the_dead_letter_queue_on_the_way(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base, **FAST) as store:
        store.create_queue("jobs", dead_letter=("dead", 2))
        store.enqueue_many("jobs", [(1, b"poison"), (2, b"b"), (3, b"c")])
    # Two deliveries of "poison" that nothing settled (their takers died: here, closes).
    for attempts in (1, 2):
        with tflux.open(base, **FAST) as store:
            (rec,) = store.dequeue_many("jobs", 1, timeout=0)
            assert (rec.payload, rec.attempts) == (b"poison", attempts)
    with tflux.open(base, **FAST) as store:
        got = store.dequeue_many("jobs", 3, timeout=0)
        assert [(r.payload, r.attempts) for r in got] == [(b"b", 1), (b"c", 1)]
        assert [r.payload for r in store.records("dead")] == [b"poison"]
        assert store.stats("jobs").dead_lettered == 1


def test_attempts_of_a_batch_are_exact_across_reopens(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base, **FAST) as store:
        store.create_queue("jobs", dead_letter=("dead", 9))
        store.enqueue_many("jobs", [(1, b"a"), (1, b"b"), (1, b"c")])
    for n in (1, 2, 3):
        with tflux.open(base, **FAST) as store:
            got = store.dequeue_many("jobs", 5, timeout=0)
            assert [r.attempts for r in got] == [n, n, n]


def test_a_client_takes_a_batch_and_its_counts_survive_kill_9_of_the_owner(owner_elsewhere):
    base, owner = owner_elsewhere
    with tflux.open(base) as client:
        assert not client.is_owner
        client.enqueue_many("jobs", [(1, b"%d" % i) for i in range(6)])
        got = client.dequeue_many("jobs", 4, timeout=5)
        assert [r.payload for r in got] == [b"0", b"1", b"2", b"3"]
        assert [r.attempts for r in got] == [1, 1, 1, 1]
        assert all(r.enqueued_at is not None for r in got), "the owner's times"
        # The batch's Delivered deltas were durable before this reply: killed right now, the
        # owner still counted the four deliveries.
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(timeout=30)
    with tflux.open(base) as store:
        assert store.is_owner
        got = store.dequeue_many("jobs", 10, timeout=0)
        assert [(r.payload, r.attempts) for r in got] == [
            (b"0", 2),
            (b"1", 2),
            (b"2", 2),
            (b"3", 2),
            (b"4", 1),
            (b"5", 1),
        ]


def test_a_client_that_closes_gives_its_batch_back(owner_elsewhere):
    base, _ = owner_elsewhere
    with tflux.open(base) as client:
        client.enqueue_many("jobs", [(1, b"a"), (1, b"b"), (1, b"c")])
        got = client.dequeue_many("jobs", 2, timeout=5)
        assert [r.payload for r in got] == [b"a", b"b"]
        client.ack(got[0])
    with tflux.open(base) as other:
        deadline = time.monotonic() + 10
        back = []
        while len(back) < 2 and time.monotonic() < deadline:
            back += other.dequeue_many("jobs", 5, timeout=0.2)
        assert sorted((r.payload, r.attempts) for r in back) == [(b"b", 2), (b"c", 1)]
        other.ack_many(back)


def test_a_client_waits_for_the_first_record_and_gets_an_empty_list_on_timeout(owner_elsewhere):
    base, _ = owner_elsewhere
    with tflux.open(base) as client:
        t0 = time.monotonic()
        assert client.dequeue_many("jobs", 8, timeout=0.3) == []
        assert time.monotonic() - t0 >= 0.29
        client.enqueue("jobs", 1, b"soon", delay=0.2)
        got = client.dequeue_many("jobs", 8, timeout=10)
        assert [r.payload for r in got] == [b"soon"]
        with pytest.raises(tflux.ArgumentError, match="n must be >= 1"):
            client.dequeue_many("jobs", 0, timeout=0)
        client.ack_many(got)


def test_a_read_only_store_refuses_it(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base, **FAST) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
    with tflux.open(base, readonly=True) as reader:
        with pytest.raises(tflux.ReadOnlyError):
            reader.dequeue_many("q", 2, timeout=0)


def test_the_taskflux_dialect_takes_batches_and_logs_nothing_for_them(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base, dialect="taskflux", **FAST) as store:
        store.create_queue("q")
        store.enqueue_many("q", [(1, b"a"), (1, b"b"), (1, b"c")])
        before = store.log_bounds
        got = store.dequeue_many("q", 2, timeout=0)
        assert [r.payload for r in got] == [b"a", b"b"]
        assert store.log_bounds == before, "a delivery writes nothing in the taskflux dialect"
        store.ack_many(got)
        assert store.count("q") == 1


def test_the_asyncio_face_takes_a_batch_and_waits_for_the_first(tmp_path):
    async def main():
        async with tflux.aio.open(tmp_path / "b", **FAST) as astore:
            await astore.create_queue("q")
            assert await astore.dequeue_many("q", 3, timeout=0.1) == []
            waiter = asyncio.ensure_future(astore.dequeue_many("q", 3, timeout=10))
            await asyncio.sleep(0.1)
            await astore.enqueue_many("q", [(1, b"a"), (1, b"b")])
            got = await waiter
            assert [r.payload for r in got] == [b"a", b"b"]
            await astore.ack_many(got)

    asyncio.run(main())
