"""Stateful property test: a whole tflux.Channel against a plain Python model.

The model is the list of messages sent (message ``i`` has LSN ``i``) and, per named receiver, its
cursor (first unacknowledged LSN) and, while open, its position (next LSN to deliver). Rules send,
receive, acknowledge, open/close/drop receivers, collect, and close and reopen the channel under
new retention settings; segment limits are tiny so that roll-over and collection happen all the
time. Invariants:

- per receiver, delivery is ordered and gap-free (each batch is the model's next messages);
- after a receiver or the channel is reopened it resumes at its cursor: nothing acknowledged is
  delivered again, nothing is skipped;
- nothing some receiver has not acknowledged is ever deleted (the log starts at or before the oldest
  cursor, and every message from there on reads back as sent);
- after a collection (``collect()`` or the automatic one after a roll-over) the first segment
  left is one the rules of ``docs/format.md`` keep: some cursor still needs it, or retention keeps
  it; and whatever was deleted under ``retention_bytes`` left at least that many bytes behind.

Disk watermarks are switched off: the machine's real disk must not decide what is collected.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import tflux
from conftest import HEADER_SIZE, record_size
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

SOFT = 200
HARD = 400
NAMES = ("a", "b", "c")
NEVER_MS = 10**12  # a retention_ms no segment of this test reaches

names = st.sampled_from(NAMES)
payloads = st.binary(min_size=1, max_size=60)
# (retention_bytes, retention_ms): none, by size, by age (0 = every segment is old enough), both.
retentions = st.tuples(
    st.one_of(st.none(), st.integers(0, 3 * HARD)),
    st.sampled_from([None, 0, NEVER_MS]),
)


def segment_starts(log_dir: Path) -> list[int]:
    """First LSN of every segment file, oldest first (from the file names, spec section 3)."""
    return sorted(int(p.name[:19]) for p in log_dir.iterdir() if p.name.endswith(".log"))


class ChannelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="tflux-channel-model-"))
        self.log_dir = self.tmp / "data" / "log"
        self.sent: list[bytes] = []
        self.cursors: dict[str, int] = {}  # receivers with a cursor file: first unacknowledged
        self.positions: dict[str, int] = {}  # open receivers: next LSN to deliver
        self.rx: dict[str, tflux.Receiver] = {}
        self.ch: tflux.Channel | None = None
        self.retention: tuple[int | None, int | None] = (None, None)
        self.first = 0  # the log's first LSN when last looked at

    def teardown(self) -> None:
        if self.ch is not None:
            self.ch.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ----- helpers -----

    def open(self) -> None:
        size, age = self.retention
        self.ch = tflux.Channel.open(
            self.tmp,
            sync="never",
            retention_bytes=size,
            retention_ms=age,
            soft_limit=SOFT,
            hard_limit=HARD,
            preallocate=False,
            disk_high_ratio=None,
            disk_low_ratio=None,
            disk_clean_ratio=None,
        )

    def segments(self) -> list[tuple[int, int, int]]:
        """``(first LSN, last LSN, bytes)`` of every segment, sizes from the model's messages."""
        starts = segment_starts(self.log_dir)
        out = []
        for k, first in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(self.sent)
            size = HEADER_SIZE + sum(record_size(len(d)) for d in self.sent[first:end])
            out.append((first, end - 1, size))
        return out

    def retention_set(self) -> bool:
        return self.retention != (None, None)

    def check_collected(self, deleted: bool) -> None:
        """What a collection that just ran left behind follows the rules."""
        segs = self.segments()
        size, age = self.retention
        total = sum(s[2] for s in segs)
        if deleted and size is not None and age != 0:
            # Deleted by the size limit alone: at least retention_bytes are left.
            assert total >= size, (total, self.retention)
        sealed = segs[:-1]
        if not sealed:
            return
        _, last, first_bytes = sealed[0]
        if self.cursors:
            acknowledged = min(self.cursors.values()) > last
        else:
            acknowledged = self.retention_set()
        breached = age == 0 or (size is not None and total - first_bytes >= size)
        may_go = acknowledged and (not self.retention_set() or breached)
        assert not may_go, f"segment ending at {last} should have been collected: {segs}"

    def expect(self, name: str, got: list[tflux.Message]) -> None:
        pos = self.positions[name]
        want = [tflux.Message(pos + i, d) for i, d in enumerate(self.sent[pos : pos + len(got)])]
        assert got == want, (name, pos)
        self.positions[name] = pos + len(got)

    def send_checked(self, items: list[bytes]) -> None:
        assert self.ch is not None
        before = segment_starts(self.log_dir)
        first = self.ch.sender().send_many(items) if len(items) > 1 else None
        if first is None:
            first = self.ch.sender().send(items[0])
        assert first == len(self.sent)
        self.sent.extend(items)
        after = segment_starts(self.log_dir)
        if after[-1] != before[-1]:
            # Rolled over: the automatic collection ran with today's cursors.
            self.check_collected(after[0] != before[0])

    # ----- rules -----

    @initialize(retention=retentions)
    def start(self, retention) -> None:
        self.retention = retention
        self.open()

    @rule(data=payloads)
    def send(self, data: bytes) -> None:
        self.send_checked([data])

    @rule(items=st.lists(payloads, min_size=2, max_size=12))
    def send_many(self, items: list[bytes]) -> None:
        self.send_checked(items)

    @rule(name=names, start=st.sampled_from(["earliest", "latest", "lsn"]), data=st.data())
    def open_receiver(self, name: str, start: str, data) -> None:
        assert self.ch is not None
        if name in self.rx:
            try:
                self.ch.receiver(name)
            except tflux.LockedError:
                return
            raise AssertionError(f"receiver {name} opened twice")
        first, end = self.ch.start_lsn, self.ch.next_lsn
        lsn = {"earliest": first, "latest": end}.get(start)
        if lsn is None:
            lsn = data.draw(st.integers(first, end), label="start lsn")
        rx = self.ch.receiver(name, start=lsn if start == "lsn" else start)
        self.cursors.setdefault(name, lsn)
        # start= applies only without a cursor; with one, the receiver resumes at it.
        assert (rx.acked, rx.position) == (self.cursors[name], self.cursors[name])
        self.rx[name] = rx
        self.positions[name] = rx.position

    @precondition(lambda self: self.rx)
    @rule(data=st.data())
    def close_receiver(self, data) -> None:
        name = data.draw(st.sampled_from(sorted(self.rx)), label="receiver")
        self.rx.pop(name).close()
        del self.positions[name]

    @rule(name=names)
    def drop_receiver(self, name: str) -> None:
        assert self.ch is not None
        if name in self.rx:
            return
        assert self.ch.drop_receiver(name) is (name in self.cursors)
        self.cursors.pop(name, None)

    @precondition(lambda self: self.rx)
    @rule(data=st.data())
    def recv(self, data) -> None:
        name = data.draw(st.sampled_from(sorted(self.rx)), label="receiver")
        msg = self.rx[name].recv(timeout=0)
        if self.positions[name] == len(self.sent):
            assert msg is None
        else:
            assert msg is not None
            self.expect(name, [msg])

    @precondition(lambda self: self.rx)
    @rule(data=st.data(), most=st.integers(1, 30))
    def recv_many(self, data, most: int) -> None:
        name = data.draw(st.sampled_from(sorted(self.rx)), label="receiver")
        batch = self.rx[name].recv_many(most, timeout=0)
        got = [batch[i] for i in range(len(batch))]
        assert len(got) == min(most, len(self.sent) - self.positions[name])
        self.expect(name, got)

    @precondition(lambda self: self.rx)
    @rule(data=st.data())
    def ack(self, data) -> None:
        name = data.draw(st.sampled_from(sorted(self.rx)), label="receiver")
        pending = self.positions[name] - self.cursors[name]
        n = data.draw(st.integers(0, pending + 1), label="n")
        if n > pending:
            try:
                self.rx[name].ack(n)
            except ValueError:
                return
            raise AssertionError("acknowledged more than was received")
        self.rx[name].ack(n)
        self.cursors[name] += n
        assert self.rx[name].acked == self.cursors[name]

    @rule()
    def collect(self) -> None:
        assert self.ch is not None
        before = segment_starts(self.log_dir)
        n = self.ch.collect()
        after = segment_starts(self.log_dir)
        assert len(before) - len(after) == n
        self.check_collected(n > 0)

    @rule(retention=retentions)
    def reopen(self, retention) -> None:
        assert self.ch is not None
        self.ch.close()
        for rx in self.rx.values():
            assert rx.closed
        self.rx.clear()
        self.positions.clear()
        self.retention = retention
        self.open()

    # ----- invariants -----

    @invariant()
    def bounds_and_cursors_match(self) -> None:
        assert self.ch is not None
        assert self.ch.next_lsn == len(self.sent)
        assert self.ch.receivers() == self.cursors
        first = self.ch.start_lsn
        assert first >= self.first
        if self.cursors:
            # Nothing a receiver has not acknowledged was deleted.
            assert first <= min(self.cursors.values())
        elif not self.retention_set():
            # Nothing was acknowledged by anyone, and no retention lets anything go.
            assert first == self.first
        self.first = first

    @invariant()
    def everything_unacknowledged_reads_back(self) -> None:
        assert self.ch is not None
        first = self.ch.start_lsn
        start = min(self.cursors.values(), default=first)
        rx = self.ch.receiver("zcheck", start=start)
        try:
            got: list[tflux.Message] = []
            while True:
                batch = rx.recv_many(1000, timeout=0)
                if not len(batch):
                    break
                got.extend(batch[i] for i in range(len(batch)))
        finally:
            rx.close()
            self.ch.drop_receiver("zcheck")
        assert got == [tflux.Message(start + i, d) for i, d in enumerate(self.sent[start:])]


ChannelMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestTheChannelBehavesLikeTheModel = ChannelMachine.TestCase
