"""``tflux.Queue`` (queue.Queue-shaped, serializers, threads) and ``tflux.aio`` (coroutines,
cancellation). Expectations come from the ``queue.Queue`` contract and issue 15."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time

import pytest
import tflux

FAST = {"log_preallocate_segments": False, "log_sync_policy": "never"}


# --- tflux.Queue ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("serializer", "item"),
    [
        ("bytes", b"raw"),
        ("pickle", {"x": [1, 2.5, None], "t": (1, "a")}),
        ("json", {"x": [1, 2.5, None], "s": "text"}),
    ],
)
def test_items_round_trip_through_each_serializer(base_dir, serializer, item):
    with tflux.Queue(base_dir, "jobs", serializer=serializer, **FAST) as q:
        q.put(item)
        assert q.qsize() == 1 and not q.empty()
        assert q.get(timeout=5) == item
        q.task_done()
        assert q.empty()


def test_any_object_with_dumps_and_loads_is_a_serializer(base_dir):
    class Upper:
        def dumps(self, obj):
            return json.dumps(obj).upper().encode()

        def loads(self, data):
            return json.loads(data.decode().lower())

    with tflux.Queue(base_dir, "jobs", serializer=Upper(), **FAST) as q:
        q.put("hello")
        assert [r.payload for r in q.store.records("jobs")] == [b'"HELLO"']
        assert q.get_nowait() == "hello"
    with pytest.raises(tflux.ArgumentError):
        tflux.Queue(base_dir, "jobs", serializer="yaml", **FAST)


def test_get_follows_priority_then_fifo_and_raises_empty(base_dir):
    with tflux.Queue(base_dir, "jobs", serializer="json", **FAST) as q:
        for item, prio in [("c", 5), ("a", 1), ("b", 1)]:
            q.put(item, priority=prio)
        assert [q.get(), q.get(), q.get()] == ["a", "b", "c"]
        with pytest.raises(queue.Empty):
            q.get(block=False)
        with pytest.raises(queue.Empty):
            q.get(timeout=0.01)
        with pytest.raises(queue.Empty):
            q.get_nowait()


def test_task_done_acks_the_oldest_unfinished_get_and_the_rest_come_back(base_dir):
    with tflux.Queue(base_dir, "jobs", serializer="json", **FAST) as q:
        for i in range(3):
            q.put(i)
        assert [q.get(), q.get()] == [0, 1]
        assert q.unfinished_tasks == 2
        q.task_done()  # acks 0
        assert q.unfinished_tasks == 1
    # 1 was handed out but never done, 2 never handed out: both are delivered again.
    with tflux.Queue(base_dir, "jobs", serializer="json", **FAST) as q:
        assert sorted([q.get(), q.get()]) == [1, 2]
        q.task_done()
        q.task_done()
        with pytest.raises(ValueError, match="too many"):
            q.task_done()
        assert q.join(timeout=5)


def test_put_on_a_full_queue_raises_full(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("small", max_size=1)
        q = tflux.Queue(store, "small", create=False)
        q.put(b"a")
        assert q.full()
        with pytest.raises(queue.Full):
            q.put(b"b", block=False)
        with pytest.raises(queue.Full):
            q.put(b"b", timeout=0.01)
        q.close()  # a shared store stays open
        assert store.count("small") == 1
        with pytest.raises(tflux.QueueNotFoundError):
            tflux.Queue(store, "missing", create=False)


@pytest.mark.parametrize("arg", ["maxsize", "max_size"])
@pytest.mark.parametrize("shared", [False, True])
def test_a_maxsize_argument_names_create_queue_max_size(base_dir, arg, shared):
    """queue.Queue's ``maxsize=`` is no Queue argument: the error says how the queue's bound is
    set, whether the Queue opens the store or shares one (issue 43 item 20)."""
    with tflux.open(base_dir, **FAST) as store:
        base = store if shared else base_dir / "own"
        with pytest.raises(TypeError) as caught:
            tflux.Queue(base, "q", **{arg: 10})
        assert "create_queue('q', max_size=10)" in str(caught.value)
        assert f"takes no {arg}" in str(caught.value)
        assert all(q.name != "q" for q in store.queues())


def test_threads_share_one_queue_and_every_item_is_processed_once(base_dir):
    n, workers = 400, 4
    seen: list[int] = []
    lock = threading.Lock()
    with tflux.Queue(base_dir, "jobs", serializer="pickle", **FAST) as q:

        def consume() -> None:
            while True:
                try:
                    item = q.get(timeout=5)
                except queue.Empty:
                    return
                if item is None:
                    q.task_done()
                    return
                with lock:
                    seen.append(item)
                q.task_done()

        threads = [threading.Thread(target=consume) for _ in range(workers)]
        for t in threads:
            t.start()
        for i in range(n):
            q.put(i, priority=1)
        for _ in range(workers):
            q.put(None, priority=2)  # after every item
        for t in threads:
            t.join(timeout=60)
        assert sorted(seen) == list(range(n))
        assert q.qsize() == 0 and q.unfinished_tasks == 0
    with tflux.open(base_dir, **FAST) as store:
        assert store.count("jobs") == 0  # all acked, durably


def test_a_second_queue_on_an_open_base_says_to_share_the_store(base_dir):
    """Issue 30, item 23: it said only "locked by another writer". Since issue 29 a second
    Queue is a client of the first's store; refused only when the first does not share."""
    with tflux.Queue(base_dir, "jobs", **FAST) as first:
        with tflux.Queue(base_dir, "other", **FAST) as client:
            assert first.store.is_owner and not client.store.is_owner
            client.put(b"x")
            assert first.store.count("other") == 1
            assert client.get(timeout=1) == b"x"
            client.task_done()
    with tflux.Queue(base_dir, "jobs", share=False, **FAST) as first:
        with pytest.raises(tflux.LockedError, match=r"share its store") as raised:
            tflux.Queue(base_dir, "other", **FAST)
        assert raised.value.path is not None
        with tflux.Queue(first.store, "other") as second:  # what the message says to do
            second.put(b"x")


def test_an_item_that_does_not_load_is_handed_back_once_and_the_queue_moves_on(base_dir):
    """Issue 30, item 10: the item was nacked, so it was the next get forever (the queue was
    wedged). It is raised once with its record, in flight, for the caller to settle."""
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 0, b"not json")
        q = tflux.Queue(store, "jobs", serializer="json")
        q.put({"n": 1}, priority=1)
        with pytest.raises(tflux.UnloadableItemError) as raised:
            q.get(timeout=0)
        assert isinstance(raised.value, ValueError)
        assert isinstance(raised.value.__cause__, ValueError)  # json's own error
        bad = raised.value.record
        assert bad.payload == b"not json" and q.unfinished_tasks == 0
        assert q.get(timeout=0) == {"n": 1}  # moves on
        q.task_done()
        q.nack(bad)  # the caller's choice: put it back ...
        with pytest.raises(tflux.UnloadableItemError) as again:
            q.get(timeout=0)
        q.ack(again.value.record)  # ... or drop it
        assert store.count("jobs") == 0 and q.qsize() == 0


# --- tflux.aio --------------------------------------------------------------------------------


def test_the_store_methods_are_coroutines(base_dir):
    async def main():
        async with tflux.aio.open(base_dir, **FAST) as astore:
            await astore.create_queue("jobs")
            assert await astore.enqueue_many("jobs", [(2, b"b"), (1, b"a")]) == [1, 2]
            assert await astore.count("jobs") == 2
            assert (await astore.peek("jobs")).payload == b"a"
            rec = await astore.dequeue("jobs", timeout=1.0)
            assert rec.payload == b"a"
            await astore.ack(rec)
            rec = await astore.dequeue("jobs", timeout=0)
            await astore.nack(rec)
            assert [q.name for q in await astore.queues()] == ["", "jobs"]
            assert await astore.dequeue("", timeout=0.01) is None

    asyncio.run(main())


def test_the_task_queue_calls_are_coroutines(base_dir):
    async def main():
        async with tflux.aio.open(base_dir, **FAST) as astore:
            await astore.create_queue("jobs", retry_delay=30, lease=60)
            rules = await astore.queue_rules("jobs")
            assert (rules.retry_delay, rules.lease) == (30.0, 60.0)
            await astore.set_queue_rules("jobs", dead_letter=("jobs-dead", 3), lease=None)
            rules = await astore.queue_rules("jobs")
            assert (rules.dead_letter, rules.retry_delay, rules.lease) == (
                ("jobs-dead", 3),
                30.0,
                None,
            )
            await astore.enqueue("jobs", 1, b"now")
            await astore.enqueue("jobs", 1, b"later", delay=60)
            await astore.enqueue("jobs", 1, b"at", at=time.time() + 60)
            await astore.enqueue_many("jobs", [(1, b"m1"), (2, b"m2")], delay=60)
            stats = await astore.stats("jobs")
            assert (stats.ready, stats.delayed, stats.enqueued) == (1, 4, 5)
            rec = await astore.dequeue("jobs", timeout=0)
            await astore.extend(rec, 120)
            await astore.nack(rec, delay=0)  # no retry delay: ready again at once
            rec = await astore.dequeue("jobs", timeout=0)
            assert (rec.payload, rec.attempts) == (b"now", 2)
            await astore.nack(rec)  # the retry rule: 30 s
            stats = await astore.stats("jobs")
            assert (stats.ready, stats.delayed, stats.in_flight) == (0, 5, 0)
            assert await astore.purge("jobs") == 5
            assert (await astore.stats("jobs")).delayed == 0
            with pytest.raises(tflux.ArgumentError, match="not both"):
                await astore.enqueue_many("jobs", [(1, b"x")], delay=1, at=1)

    asyncio.run(main())


def test_a_waiting_dequeue_wakes_when_a_delayed_record_comes_due(base_dir):
    async def main():
        async with tflux.aio.open(base_dir, **FAST) as astore:
            await astore.enqueue_many("", [(1, b"a")], delay=0.3)
            started = time.monotonic()
            rec = await astore.dequeue("", timeout=10)
            assert rec.payload == b"a"
            assert 0.25 <= time.monotonic() - started < 5

    asyncio.run(main())


def test_waiting_dequeues_are_woken_by_an_enqueue_from_another_thread(base_dir):
    async def main():
        async with tflux.aio.open(base_dir, **FAST) as astore:
            waiters = [asyncio.create_task(astore.dequeue("", timeout=60)) for _ in range(5)]
            await asyncio.sleep(0)
            threading.Thread(
                target=astore.store.enqueue_many, args=("", [(k, b"x") for k in range(5)])
            ).start()
            got = await asyncio.gather(*waiters)
            assert sorted(r.key for r in got) == list(range(5))

    asyncio.run(main())


def test_a_cancelled_dequeue_never_loses_or_takes_a_record(base_dir):
    async def main():
        async with tflux.aio.open(base_dir, **FAST) as astore:
            for round in range(20):
                waiter = asyncio.create_task(astore.dequeue("", timeout=60))
                await asyncio.sleep(0)
                # The record arrives around the cancellation: either the waiter got it (and
                # returned it) or it is still ready; never in flight with nobody holding it.
                await astore.enqueue("", round, b"r%d" % round)
                waiter.cancel()
                try:
                    rec = await waiter
                except asyncio.CancelledError:
                    rec = None
                info = next(q for q in await astore.queues() if q.name == "")
                if rec is None:
                    assert (info.count, info.in_flight) == (1, 0)
                    rec = await astore.dequeue("", timeout=0)
                assert rec.key == round
                await astore.ack(rec)
            info = next(q for q in await astore.queues() if q.name == "")
            assert (info.count, info.in_flight) == (0, 0)

    asyncio.run(main())


def test_a_dequeue_cancelled_while_waiting_leaves_the_next_record_to_others(base_dir):
    async def main():
        async with tflux.aio.open(base_dir, **FAST) as astore:
            cancelled = asyncio.create_task(astore.dequeue("", timeout=60))
            patient = asyncio.create_task(astore.dequeue("", timeout=60))
            await asyncio.sleep(0.05)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            await astore.enqueue("", 0, b"x")
            assert (await patient).payload == b"x"

    asyncio.run(main())


def test_closing_wakes_waiting_dequeues(base_dir):
    async def main():
        astore = await tflux.aio.open(base_dir, **FAST)
        waiter = asyncio.create_task(astore.dequeue("", timeout=60))
        await asyncio.sleep(0.05)
        await astore.close()
        with pytest.raises(tflux.ClosedError):
            await waiter

    asyncio.run(main())


def test_the_pickle_serializer_says_what_it_runs_and_json_is_the_safe_choice(base_dir):
    """Issue 30, item 13: ``serializer="pickle"`` runs ``pickle.loads`` on every payload, so
    whoever can enqueue (or write the files) runs code in every consumer. Where the option is
    documented (the docstring and the README) says so and names json as the safe choice for
    objects; json round-trips objects without running anything."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for text in (" ".join(tflux.Queue.__doc__.split()), " ".join(readme.split())):
        assert "pickle.loads" in text and "safe" in text and '"json"' in text, text[:200]
    with tflux.Queue(base_dir, "objects", serializer="json") as q:
        q.put({"a": [1, 2], "b": None})
        assert q.get(timeout=1) == {"a": [1, 2], "b": None}
        q.task_done()
