"""``tflux.Store`` shared by threads: blocking dequeues woken by enqueues, concurrent producers and
consumers (distinct ids, each record delivered once), snapshots while threads enqueue, and a long
random run against a model.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
import tflux
from _store_support import FAST, SMALL, contents, info, rec, run_thread


@pytest.fixture
def store(base_dir):
    s = tflux.open(base_dir, log_sync_policy="always", log_preallocate_segments=False)
    yield s
    s.close()


# --- threads -------------------------------------------------------------------------------------


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
