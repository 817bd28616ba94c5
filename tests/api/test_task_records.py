"""A record's task fields (issue 44): `attempts` and `enqueued_at` survive every copy of the
record (pickle, copy, deepcopy, a multiprocessing queue), and the listings (`records()`,
`peek()`, `iter_records()`) carry them as the store knows them."""

from __future__ import annotations

import copy
import multiprocessing
import pickle

import pytest
import tflux

FAST = {"log_sync_policy": "never"}


def _redelivered(store: tflux.Store) -> tflux.Record:
    """A record of queue "q" on its second delivery, with a known enqueue time."""
    store.create_queue("q", exist_ok=True)
    store.enqueue("q", 1, b"x")
    store.nack(store.dequeue("q", timeout=0), delay=0)
    rec = store.dequeue("q", timeout=0)
    assert rec.attempts == 2
    assert rec.enqueued_at is not None
    return rec


def _through_a_multiprocessing_queue(rec: tflux.Record) -> tflux.Record:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.SimpleQueue()
    q.put(rec)  # pickled by the feeder's connection, as between processes
    return q.get()


COPIERS = {
    "pickle": lambda r: pickle.loads(pickle.dumps(r)),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "multiprocessing": _through_a_multiprocessing_queue,
}


@pytest.mark.parametrize("copy_of", sorted(COPIERS))
def test_a_copied_record_keeps_its_attempts_and_enqueue_time(tmp_path, copy_of):
    with tflux.open(tmp_path, **FAST) as store:
        rec = _redelivered(store)
        twin = COPIERS[copy_of](rec)
        assert twin == rec
        assert (twin.attempts, twin.enqueued_at) == (rec.attempts, rec.enqueued_at)
        store.ack(twin)  # and the receipt still settles the delivery
        assert store.dequeue("q", timeout=0) is None


def test_a_record_pickled_by_an_earlier_build_still_loads(tmp_path):
    # Five arguments: the pickle of builds before the task fields travelled.
    rec = tflux.Record(3, 7, b"p", "q", None)
    assert (rec.attempts, rec.enqueued_at) == (0, None)


def _listings(store: tflux.Store) -> list[tflux.Record]:
    """The same record as each listing shows it."""
    return [store.peek("q"), store.records("q")[0], next(iter(store.iter_records("q")))]


def test_listings_carry_the_attempts_and_enqueue_time_the_owner_knows(tmp_path):
    with tflux.open(tmp_path, **FAST) as store:
        rec = _redelivered(store)
        store.nack(rec, delay=0)
        for listed in _listings(store):
            assert listed == rec
            assert listed.attempts == 2, "two failed deliveries so far"
            assert listed.enqueued_at == rec.enqueued_at
        assert store.dequeue("q", timeout=0).attempts == 3


def test_a_never_delivered_record_is_listed_with_no_attempts_and_its_enqueue_time(tmp_path):
    with tflux.open(tmp_path, **FAST) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
        for listed in _listings(store):
            assert listed.attempts == 0
            assert listed.enqueued_at is not None


def test_a_client_lists_the_owners_attempts_and_enqueue_times(owner_elsewhere):
    base, _ = owner_elsewhere
    with tflux.open(base) as client:
        assert not client.is_owner
        client.enqueue("jobs", 1, b"x")
        client.nack(client.dequeue("jobs", timeout=5), delay=0)
        rec = client.dequeue("jobs", timeout=5)
        assert rec.attempts == 2
        client.nack(rec, delay=0)
        for listed in (
            client.peek("jobs"),
            client.records("jobs")[0],
            next(iter(client.iter_records("jobs"))),
        ):
            assert (listed.attempts, listed.enqueued_at) == (2, rec.enqueued_at)


def test_attempts_counted_under_a_dead_letter_rule_are_listed_after_a_reopen(tmp_path):
    with tflux.open(tmp_path, **FAST) as store:
        store.create_queue("q", dead_letter=("q-dead", 5))
        store.enqueue("q", 1, b"x")
        store.nack(store.dequeue("q", timeout=0), delay=0)
        store.nack(store.dequeue("q", timeout=0), delay=0)
    with tflux.open(tmp_path, **FAST) as store:
        for listed in _listings(store):
            assert listed.attempts == 2, "the logged deliveries"
            assert listed.enqueued_at is None, "enqueued before this owner started"
