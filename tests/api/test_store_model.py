"""Stateful property test: ``tflux.Store`` against a plain Python model of the queues (hypothesis
``RuleBasedStateMachine``).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tflux
from _store_support import IMPL_CODES, SMALL, contents, decode_snapshot, rec
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
from test_state import I64_MAX, I64_MIN
from tflux.errors import (
    NotInFlightError,
    PolicyViolation,
    QueueExistsError,
    QueueNotFoundError,
)

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
