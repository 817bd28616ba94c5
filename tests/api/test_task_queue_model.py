"""Stateful property test of the task queue: a store's queue with rules (a dead-letter rule, a
retry delay) against a plain Python model (hypothesis ``RuleBasedStateMachine``).

Delays are an hour, so "delayed" never turns into "ready" while a case runs and the model needs
no clock. After every step the store's ready records, its counts of ready, delayed and in-flight
records, the dead-letter queue and the counters since the open must equal the model's; every
delivery must carry the model's attempt count. ``reopen`` closes and reopens the base: records
in flight come back ready, with their logged deliveries under a dead-letter rule and with none
otherwise (the count is then kept in memory only).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import tflux
from _store_support import SMALL
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from tflux.errors import NotInFlightError

HOUR = 3600.0
LEASE = 3600.0


@dataclass
class Rec:
    key: int
    payload: bytes
    attempts: int = 0
    state: str = "ready"  # "ready", "delayed" or "in_flight"


class TaskQueueMachine(RuleBasedStateMachine):
    #: The dead-letter rule's N (None: no rule), fixed per subclass so that each kind of queue
    #: gets its share of the examples.
    DEAD_AFTER: int | None = None

    @initialize(retry_delay=st.sampled_from([None, HOUR]))
    def start(self, retry_delay: float | None, dead_after: int | None = -1) -> None:
        if dead_after == -1:
            dead_after = self.DEAD_AFTER
        self.base = Path(tempfile.mkdtemp(prefix="tflux-task-model-"))
        self.store = tflux.open(self.base, **SMALL)
        self.dead_after = dead_after
        self.retry_delay = retry_delay
        self.store.create_queue("dead")
        self.store.create_queue(
            "q",
            dead_letter=("dead", dead_after) if dead_after is not None else None,
            retry_delay=retry_delay,
        )
        self.records: dict[int, Rec] = {}
        self.last_id = 0
        self.dead: list[tuple[int, bytes]] = []
        # Deliveries not yet settled: id -> the Record the store handed out.
        self.held: dict[int, tflux.Record] = {}
        # Records handed out before the last reopen: settling them must be refused.
        self.stale: list[tflux.Record] = []
        self.counters = dict(enqueued=0, acked=0, nacked=0, dead_lettered=0)

    def teardown(self) -> None:
        store = getattr(self, "store", None)
        if store is not None:
            store.close()
        if hasattr(self, "base"):
            shutil.rmtree(self.base, ignore_errors=True)

    # -- the model's rules --------------------------------------------------------------------

    def ready(self) -> list[tuple[int, int]]:
        """(key, id) of the ready records, in delivery order."""
        return sorted((r.key, i) for i, r in self.records.items() if r.state == "ready")

    def dead_letter(self, rid: int) -> None:
        rec = self.records.pop(rid)
        self.dead.append((rec.key, rec.payload))
        self.counters["dead_lettered"] += 1

    def exhausted(self, rec: Rec) -> bool:
        return self.dead_after is not None and rec.attempts >= self.dead_after

    # -- steps --------------------------------------------------------------------------------

    @rule(key=st.integers(-3, 3), payload=st.binary(max_size=4), later=st.booleans())
    def enqueue(self, key: int, payload: bytes, later: bool) -> None:
        self.store.enqueue("q", key, payload, delay=HOUR if later else None)
        self.last_id += 1
        self.records[self.last_id] = Rec(key, payload, state="delayed" if later else "ready")
        self.counters["enqueued"] += 1

    def deliver_next(self) -> int | None:
        """The model's next delivery: its record's id (now in flight), None when none is ready.
        A ready record whose deliveries reached the rule's N goes to the dead-letter queue
        instead of out an (N+1)-th time."""
        while True:
            order = self.ready()
            if not order:
                return None
            rid = order[0][1]
            if not self.exhausted(self.records[rid]):
                break
            self.dead_letter(rid)
        rec = self.records[rid]
        rec.attempts += 1
        rec.state = "in_flight"
        return rid

    def delivered(self, rid: int, got) -> None:
        rec = self.records[rid]
        assert (got.id, got.key, got.payload) == (rid, rec.key, rec.payload)
        assert got.attempts == rec.attempts
        self.held[rid] = got

    @rule()
    def dequeue(self) -> None:
        got = self.store.dequeue("q", timeout=0, lease=LEASE)
        rid = self.deliver_next()
        if rid is None:
            assert got is None
            return
        assert got is not None
        self.delivered(rid, got)

    @rule(n=st.integers(1, 4))
    def dequeue_many(self, n: int) -> None:
        got = self.store.dequeue_many("q", n, timeout=0, lease=LEASE)
        rids = [rid for rid in (self.deliver_next() for _ in range(n)) if rid is not None]
        assert [g.id for g in got] == rids
        for rid, g in zip(rids, got, strict=True):
            self.delivered(rid, g)

    @rule(data=st.data())
    def ack(self, data) -> None:
        if not self.held:
            return
        rid = data.draw(st.sampled_from(sorted(self.held)))
        self.store.ack(self.held.pop(rid))
        del self.records[rid]
        self.counters["acked"] += 1

    @rule(data=st.data(), delay=st.sampled_from([None, 0.0, HOUR]))
    def nack(self, data, delay: float | None) -> None:
        if not self.held:
            return
        self.nack_one(data.draw(st.sampled_from(sorted(self.held))), delay)

    def nack_one(self, rid: int, delay: float | None) -> None:
        self.store.nack(self.held.pop(rid), delay=delay)
        self.counters["nacked"] += 1
        rec = self.records[rid]
        if self.exhausted(rec):
            self.dead_letter(rid)
            return
        wait = delay if delay is not None else (self.retry_delay or 0.0)
        rec.state = "delayed" if wait > 0 else "ready"

    @rule(delay=st.sampled_from([None, 0.0]), crash=st.booleans())
    def fail_the_next_delivery(self, delay: float | None, crash: bool) -> None:
        """A delivery that fails at once (nack), or whose taker dies (the owner reopens): the
        steps that drive attempts up to the dead-letter rule's N."""
        before = set(self.held)
        self.dequeue()
        taken = set(self.held) - before
        if not taken:
            return
        if crash:
            self.reopen()
        else:
            self.nack_one(taken.pop(), delay)

    @rule(data=st.data(), settle=st.sampled_from(["ack", "nack"]))
    def settle_a_delivery_from_before_the_reopen(self, data, settle: str) -> None:
        if not self.stale:
            return
        old = data.draw(st.sampled_from(self.stale))
        with pytest.raises(NotInFlightError):
            getattr(self.store, settle)(old)

    @rule()
    def purge(self) -> None:
        gone = [i for i, r in self.records.items() if r.state != "in_flight"]
        assert self.store.purge("q") == len(gone)
        for i in gone:
            del self.records[i]

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = tflux.open(self.base, **SMALL)
        for rec in self.records.values():
            if rec.state == "in_flight":
                rec.state = "ready"
            if self.dead_after is None:
                rec.attempts = 0  # counted in memory only, since the owner started
        self.stale.extend(self.held.values())
        self.held.clear()
        self.counters = dict.fromkeys(self.counters, 0)

    # -- what must hold after every step ---------------------------------------------------------

    @invariant()
    def the_store_holds_what_the_model_holds(self) -> None:
        want = [(i, k, self.records[i].payload) for k, i in self.ready()]
        assert [(r.id, r.key, r.payload) for r in self.store.records("q")] == want
        # The dead-letter queue's ids follow the order records were moved there.
        want_dead = [(k, p) for k, _, p in sorted((k, n, p) for n, (k, p) in enumerate(self.dead))]
        assert [(r.key, r.payload) for r in self.store.records("dead")] == want_dead
        stats = self.store.stats("q")
        states = [r.state for r in self.records.values()]
        assert (stats.ready, stats.delayed, stats.in_flight) == (
            states.count("ready"),
            states.count("delayed"),
            states.count("in_flight"),
        )
        assert (stats.enqueued, stats.acked, stats.nacked, stats.dead_lettered) == (
            self.counters["enqueued"],
            self.counters["acked"],
            self.counters["nacked"],
            self.counters["dead_lettered"],
        ), stats


class DeadAfterTwoMachine(TaskQueueMachine):
    DEAD_AFTER = 2


class DeadAfterOneMachine(TaskQueueMachine):
    DEAD_AFTER = 1


SETTINGS = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestQueueWithoutRules = TaskQueueMachine.TestCase
TestQueueWithoutRules.settings = SETTINGS
TestQueueDeadAfterTwo = DeadAfterTwoMachine.TestCase
TestQueueDeadAfterTwo.settings = SETTINGS
TestQueueDeadAfterOne = DeadAfterOneMachine.TestCase
TestQueueDeadAfterOne.settings = SETTINGS
