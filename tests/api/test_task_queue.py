"""The task-queue layer (issue 44) from Python: rules logged with the queue, so a client whose
owner is another process obeys them; a poison record reaches its dead-letter queue after N
deliveries, also when its taker is killed with SIGKILL mid-record; attempts are exact across a
reopen; delays, nack delays, purge, extend and stats."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
import tflux

FAST = {"log_sync_policy": "never"}

TAKER = textwrap.dedent(
    """
    import os, signal, sys, tflux
    store = tflux.open(sys.argv[1])
    rec = store.dequeue("jobs", timeout=10)
    print(rec.attempts if rec else 0, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # dies mid-record: nothing settles the delivery
    """
)


def test_a_poison_record_under_a_client_reaches_the_dead_letter_queue_after_n_deliveries(
    owner_elsewhere,
):
    base, _ = owner_elsewhere
    with tflux.open(base) as client:
        assert not client.is_owner
        assert client.queue_rules("jobs").dead_letter == ("jobs-dead", 3)
        client.enqueue("jobs", 1, b"poison")
        attempts = []
        for _ in range(3):
            rec = client.dequeue("jobs", timeout=5)
            attempts.append(rec.attempts)
            client.nack(rec)
        assert attempts == [1, 2, 3]
        assert rec.enqueued_at is not None, "the owner's time, carried to its client"
        assert client.dequeue("jobs", timeout=0) is None
        assert [r.payload for r in client.records("jobs-dead")] == [b"poison"]
        assert client.stats("jobs").dead_lettered == 1


def _ready(store, name):
    """Ready records of queue ``name``, 0 while it does not exist."""
    return next((q.count for q in store.queues() if q.name == name), 0)


def test_a_taker_killed_mid_record_still_dead_letters_it_after_n_deliveries(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base) as owner:
        owner.create_queue("jobs", dead_letter=("jobs-dead", 3))
        owner.enqueue("jobs", 1, b"kills its taker")
        seen = []
        for _ in range(3):
            out = subprocess.run(
                [sys.executable, "-c", TAKER, str(base)], capture_output=True, text=True
            )
            assert out.returncode == -9, out.stderr
            seen.append(int(out.stdout.strip()))
        assert seen == [1, 2, 3]
        deadline = time.monotonic() + 10
        # The owner notices the third taker's death on its own time: until then the dead-letter
        # queue may not exist yet (count would raise QueueNotFoundError).
        while not _ready(owner, "jobs-dead") and time.monotonic() < deadline:
            assert owner.dequeue("jobs", timeout=0.1) is None
        assert [r.payload for r in owner.records("jobs-dead")] == [b"kills its taker"]


def test_attempts_are_exact_across_a_reopen(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base, **FAST) as store:
        store.create_queue("jobs", dead_letter=("dead", 5))
        store.enqueue("jobs", 1, b"x")
        assert store.dequeue("jobs", timeout=0).attempts == 1
    for n in (2, 3):
        with tflux.open(base, **FAST) as store:
            assert store.dequeue("jobs", timeout=0).attempts == n


def test_delays_nack_delays_purge_extend_and_stats(tmp_path):
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.create_queue("jobs", retry_delay=0.2, lease=30)
        assert store.queue_rules("jobs") == tflux.QueueRules(None, 0.2, None, None, 30.0)
        store.enqueue("jobs", 1, b"later", delay=0.2)
        assert store.dequeue("jobs", timeout=0) is None
        rec = store.dequeue("jobs", timeout=5)
        assert rec.payload == b"later"
        store.extend(rec, 60)
        store.nack(rec)  # the retry rule: ready again in 0.2 s
        assert store.stats("jobs").delayed == 1
        rec = store.dequeue("jobs", timeout=5)
        assert rec.attempts == 2
        store.nack(rec, delay=0)
        store.enqueue("jobs", 2, b"y")
        assert store.purge("jobs") == 2
        stats = store.stats("jobs")
        assert (stats.ready, stats.delayed, stats.in_flight, stats.enqueued) == (0, 0, 0, 2)
        store.set_queue_rules("jobs", lease=None)
        assert store.queue_rules("jobs").lease is None
        assert store.queue_rules("jobs").retry_delay == 0.2
        with pytest.raises(tflux.ArgumentError):
            store.enqueue("jobs", 1, b"x", delay=-1)
        with pytest.raises(tflux.ArgumentError):
            store.create_queue("bad", dead_letter=("bad", 2))


def test_the_taskflux_dialect_refuses_task_queue_arguments(tmp_path):
    with tflux.open(tmp_path / "b", dialect="taskflux", **FAST) as store:
        with pytest.raises(tflux.ArgumentError, match="taskflux"):
            store.create_queue("jobs", dead_letter=("dead", 2))
        with pytest.raises(tflux.ArgumentError, match="taskflux"):
            store.enqueue("", 1, b"x", delay=10)
        assert store.queues()[0].name == "" and len(store.queues()) == 1


def test_a_clients_dead_letter_setting_becomes_the_queues_logged_rule(owner_elsewhere):
    base, _ = owner_elsewhere
    with tflux.open(base) as client:
        client.create_queue("other")
    with tflux.open(base, dead_letter={"other": ("other-dead", 2)}) as client:
        assert not client.is_owner
        assert client.queue_rules("other").dead_letter == ("other-dead", 2)


def test_len_of_a_queue_counts_ready_and_delayed_records(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base, **FAST) as store:
        store.enqueue("", 1, b"now")
        store.enqueue("", 1, b"later", delay=60)
    q = tflux.Queue(base, "")
    try:
        assert len(q) == 2 and q.qsize() == 1
    finally:
        q.close()


def test_enqueue_many_delays_every_record_of_the_batch(tmp_path):
    with tflux.open(tmp_path / "b", **FAST) as store:
        ids = store.enqueue_many("", [(1, b"a"), (2, b"b")], delay=0.2)
        assert len(ids) == 2 and store.count("") == 0
        assert store.stats("").delayed == 2
        assert store.dequeue("", timeout=0) is None
        assert [store.dequeue("", timeout=5).payload for _ in ids] == [b"a", b"b"]
        store.enqueue_many("", [(1, b"c")], at=time.time() + 60)
        assert store.stats("").delayed == 1 and store.count("") == 0
        with pytest.raises(tflux.ArgumentError, match="not both"):
            store.enqueue_many("", [(1, b"x")], delay=1, at=time.time())
        with pytest.raises(tflux.ArgumentError):
            store.enqueue_many("", [(1, b"x")], delay=-1)
        assert store.stats("").enqueued == 3


def test_reads_show_a_delayed_record_that_came_due_as_the_next_dequeue_would(tmp_path):
    # Regression: count, peek and the listings showed a due record as still delayed until a
    # dequeue (or stats) made it ready, so peek named a record dequeue would not take.
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.enqueue("", 5, b"plain")
        store.enqueue("", 1, b"due soon", delay=0.1)
        assert store.peek("").payload == b"plain" and store.count("") == 1
        time.sleep(0.2)
        assert store.count("") == 2
        assert store.peek("").payload == b"due soon"
        assert [r.payload for r in store.records("")] == [b"due soon", b"plain"]
        assert store.dequeue("", timeout=0).payload == b"due soon"


def test_the_list_of_queues_counts_a_delayed_record_that_came_due_as_ready(tmp_path):
    # Regression: queues() left a due record out of the ready count (count, peek, the listings
    # and stats already showed it ready) until a read of that one queue made it ready.
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.create_queue("q")
        store.enqueue("q", 5, b"plain")
        store.enqueue("q", 1, b"due soon", delay=0.1)
        assert _ready(store, "q") == 1
        time.sleep(0.2)
        assert _ready(store, "q") == 2
        assert store.dequeue("q", timeout=0).payload == b"due soon"


def test_the_taskflux_dialect_refuses_a_delayed_enqueue_many(tmp_path):
    with tflux.open(tmp_path / "b", dialect="taskflux", **FAST) as store:
        with pytest.raises(tflux.ArgumentError, match="taskflux"):
            store.enqueue_many("", [(1, b"x")], delay=10)
        assert store.count("") == 0


def test_wait_wakes_when_a_delayed_record_comes_due(tmp_path):
    # tflux.aio's waiting dequeue waits this way: a wait that never saw a delayed record come
    # due left an asyncio consumer asleep until its timeout.
    with tflux.open(tmp_path / "b", **FAST) as store:
        store.enqueue("", 1, b"later", delay=0.3)
        assert not store.wait("", timeout=0)
        started = time.monotonic()
        assert store.wait("", timeout=10)
        assert 0.25 <= time.monotonic() - started < 5
        assert store.dequeue("", timeout=0).payload == b"later"


# time.time() against the core's whole milliseconds (and a little clock skew).
SLACK = 0.005


def test_enqueued_at_is_when_the_owner_took_the_record_and_none_after_a_restart(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base, **FAST) as store:
        store.create_queue("jobs")
        before = time.time()
        store.enqueue("jobs", 1, b"now")
        store.enqueue("jobs", 2, b"later", delay=0.05)
        after = time.time()
        now = store.dequeue("jobs", timeout=0)
        later = store.dequeue("jobs", timeout=5)
        for rec in (now, later):  # a delayed record's time is its enqueue, not its due time
            assert before - SLACK <= rec.enqueued_at <= after + SLACK, (rec, before, after)
        store.nack(later)
        assert store.dequeue("jobs", timeout=0).enqueued_at == later.enqueued_at
        store.enqueue("jobs", 3, b"left")
    with tflux.open(base, **FAST) as store:  # a new owner: enqueue times are not logged
        assert [store.dequeue("jobs", timeout=0).enqueued_at for _ in range(3)] == [None] * 3
        store.enqueue("jobs", 1, b"new")
        assert store.dequeue("jobs", timeout=0).enqueued_at is not None
    assert tflux.Record(1, 1, b"x", "jobs").enqueued_at is None


def test_oldest_ready_age_is_how_long_the_oldest_ready_record_has_waited(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base, **FAST) as store:
        store.create_queue("jobs")
        assert store.stats("jobs").oldest_ready_age is None  # nothing ready
        store.enqueue("jobs", 5, b"old")
        store.enqueue("jobs", 0, b"delayed", delay=60)  # not ready: not counted
        time.sleep(0.3)
        store.enqueue("jobs", 1, b"new")  # dequeued first (smaller key), but younger
        age = store.stats("jobs").oldest_ready_age
        assert 0.3 - SLACK <= age < 30
        first, second = store.dequeue("jobs", timeout=0), store.dequeue("jobs", timeout=0)
        assert (first.payload, second.payload) == (b"new", b"old")
        assert store.stats("jobs").oldest_ready_age is None  # both in flight
        store.nack(second)
        assert store.stats("jobs").oldest_ready_age >= age
    with tflux.open(base, **FAST) as store:  # enqueued before this owner started: unknown
        assert store.stats("jobs").ready == 2
        assert store.stats("jobs").oldest_ready_age is None


def test_a_client_gets_the_owners_enqueue_times_and_ages(owner_elsewhere):
    base, _ = owner_elsewhere
    with tflux.open(base) as client:
        assert not client.is_owner
        before = time.time()
        client.enqueue("jobs", 1, b"x")
        time.sleep(0.1)
        age = client.stats("jobs").oldest_ready_age
        assert 0.1 - SLACK <= age < 30
        rec = client.dequeue("jobs", timeout=5)
        assert before - SLACK <= rec.enqueued_at <= time.time() + SLACK
        client.ack(rec)
