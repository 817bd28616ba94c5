"""Stateful property test: tflux.Log against a plain Python model of the spec's segmented log.

The model keeps the entries in a list and the segment layout as a list of first LSNs, applying the
roll-over rule of spec section 3 literally (after each append batch and each commit: roll when
``soft < size`` and everything is committed, or ``hard < size``; never roll an empty segment).
Limits are tiny so that segments roll, get truncated, emptied, compacted and restarted all the
time. After every step the log, its segment list and the bytes of every segment file are compared
with the model.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import tflux
from conftest import (
    HEADER_SIZE,
    entry_tuples,
    parse_segment,
    record_size,
    segment_files,
    segment_name,
)
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

SOFT = 64
HARD = 160

datas = st.binary(max_size=40)


class LogModel:
    def __init__(self) -> None:
        self.start = 0
        self.entries: list[tuple[int, bytes]] = []  # (term, data) from LSN self.start on
        self.commit = -1
        self.segs = [0]  # first LSN of every segment file, oldest first
        self.max_term = 0  # highest term ever written: a safe floor once the log is empty

    @property
    def last(self) -> int:
        return self.start + len(self.entries) - 1

    def term_floor(self, before: int) -> int:
        """Lowest term an entry at LSN ``before`` may carry."""
        if self.start <= before - 1 <= self.last:
            return self.entries[before - 1 - self.start][0]
        return self.max_term

    def seg_entries(self, k: int) -> list[tuple[int, bytes]]:
        lo = self.segs[k]
        hi = self.segs[k + 1] if k + 1 < len(self.segs) else self.last + 1
        return self.entries[lo - self.start : hi - self.start]

    def seg_size(self, k: int) -> int:
        return HEADER_SIZE + sum(record_size(len(d)) for _, d in self.seg_entries(k))

    def roll_due(self) -> bool:
        k = len(self.segs) - 1
        if not self.seg_entries(k):
            return False
        size = self.seg_size(k)
        return (SOFT < size and self.commit == self.last) or HARD < size

    def maybe_roll(self) -> None:
        if self.roll_due():
            self.segs.append(self.last + 1)

    def append_batch(self, items: list[tuple[int, bytes]]) -> None:
        self.entries.extend(items)
        self.max_term = max([self.max_term, *(t for t, _ in items)])
        self.maybe_roll()

    def truncate_after(self, i: int) -> None:
        if i >= self.last:
            return
        cut = i + 1
        del self.entries[cut - self.start :]
        self.segs = [s for s in self.segs if s <= cut]

    def insert_range(self, start: int, items: list[tuple[int, bytes]]) -> None:
        if start > self.last + 1:
            self.start, self.entries, self.segs, self.commit = start, [], [start], start - 1
        else:
            self.truncate_after(start - 1)
        if items:
            self.append_batch(items)

    def compact(self, i: int) -> int:
        deleted = 0
        while len(self.segs) > 1 and self.segs[1] - 1 <= i:
            drop = self.segs.pop(0)
            del self.entries[: self.segs[0] - drop]
            deleted += 1
        self.start = self.segs[0]
        return deleted


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="tflux-model-"))
        self.dir = self.tmp / "data" / "log"
        self.dir.mkdir(parents=True)
        self.model = LogModel()
        self.log: tflux.Log | None = None
        self.counter = 0

    def teardown(self) -> None:
        if self.log is not None and not self.log.closed:
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def open(self, **kwargs) -> tflux.Log:
        return tflux.Log.open(
            self.dir,
            soft_limit=SOFT,
            hard_limit=HARD,
            preallocate=self.preallocate,
            sync=self.sync,
            **kwargs,
        )

    def unique(self, data: bytes) -> bytes:
        """Make replacement entries differ from what they replace, so a Raft-style "skip identical
        entries" shortcut cannot hide a missing rewrite."""
        self.counter += 1
        return data + self.counter.to_bytes(2, "big")

    def adopt_optional_roll(self) -> None:
        """After a cut, a reopen or a commit that does not move the commit index, the spec does not
        say whether a roll-over that became due happens now or at the next append or commit that
        moves the index; accept either, but nothing else."""
        if self.model.roll_due():
            starts = [s.start_lsn for s in self.log.segments]
            if starts == [*self.model.segs, self.model.last + 1]:
                self.model.segs.append(self.model.last + 1)

    @initialize(preallocate=st.booleans(), sync=st.sampled_from(["always", "batch", "never"]))
    def start(self, preallocate: bool, sync: str) -> None:
        self.preallocate = preallocate
        self.sync = sync
        self.log = self.open()

    # --- operations that succeed ---------------------------------------------------------------

    @rule(data=datas, bump=st.integers(0, 1))
    def append(self, data: bytes, bump: int) -> None:
        term = self.model.term_floor(self.model.last + 1) + bump
        assert self.log.append(term, data) == self.model.last + 1
        self.model.append_batch([(term, data)])

    @rule(items=st.lists(datas, min_size=1, max_size=8), bump=st.integers(0, 1))
    def append_many(self, items: list[bytes], bump: int) -> None:
        first = self.model.last + 1
        term = self.model.term_floor(first) + bump
        ret = self.log.append_many(term, items)
        assert ret in (first, first + len(items) - 1)
        self.model.append_batch([(term, d) for d in items])

    @rule(
        where=st.integers(0, 100),
        gap=st.sampled_from([0, 0, 0, 0, 0, 0, 0, 1, 3]),
        items=st.lists(st.tuples(st.integers(0, 1), datas), max_size=6),
    )
    def insert_range(self, where: int, gap: int, items: list[tuple[int, bytes]]) -> None:
        m = self.model
        lo = max(m.start, m.commit + 1)
        if gap:
            start = m.last + 1 + gap
        elif lo > m.last + 1:
            return
        else:
            start = lo + where % (m.last + 2 - lo)
        term = m.term_floor(start) if start <= m.last + 1 else m.max_term
        batch = []
        for bump, data in items:
            term += bump
            batch.append((term, self.unique(data)))
        self.log.insert_range(start, batch)
        m.insert_range(start, batch)
        if not batch:
            self.adopt_optional_roll()

    @rule(where=st.integers(0, 100))
    def commit(self, where: int) -> None:
        m = self.model
        i = m.start - 1 + where % (m.last - m.start + 2)
        self.log.commit(i)
        if i > m.commit:
            m.commit = i
            m.maybe_roll()
        elif i == m.commit:
            self.adopt_optional_roll()
        # Below the commit index, commit "does nothing" (spec 3.1): not even a due roll-over.

    @rule(where=st.integers(0, 100), past=st.booleans())
    def truncate_after(self, where: int, past: bool) -> None:
        m = self.model
        i = m.last + 1 + where % 3 if past else m.commit + where % (m.last - m.commit + 1)
        self.log.truncate_after(i)
        m.truncate_after(i)
        self.adopt_optional_roll()

    @rule(where=st.integers(0, 100))
    def compact(self, where: int) -> None:
        m = self.model
        i = m.start - 1 + where % (m.commit - m.start + 2)
        assert self.log.compact(i) == m.compact(i)

    @rule(keep_commit=st.booleans())
    def reopen(self, keep_commit: bool) -> None:
        self.log.close()
        if keep_commit:
            self.log = self.open(commit_index=self.model.commit)
        else:
            self.log = self.open()
            self.model.commit = self.model.start - 1
        assert not self.log.recovery.truncated
        self.adopt_optional_roll()

    @rule(where=st.integers(0, 100), budget=st.one_of(st.none(), st.integers(0, 120)))
    def read(self, where: int, budget: int | None) -> None:
        m = self.model
        start = m.start + where % (len(m.entries) + 1)
        expected = []
        total = 0
        for k, (term, data) in enumerate(m.entries[start - m.start :]):
            total += len(data)
            if k > 0 and budget is not None and total > budget:
                break
            expected.append((start + k, term, data))
        assert entry_tuples(self.log.read(start, budget)) == expected

    @rule(a=st.integers(0, 100), b=st.integers(0, 100), nones=st.sampled_from(["", "s", "e", "se"]))
    def range_views(self, a: int, b: int, nones: str) -> None:
        m = self.model
        n = len(m.entries) + 1
        lo, hi = sorted((m.start + a % n, m.start + b % n))
        start = None if "s" in nones else lo
        end = None if "e" in nones else hi
        want = [
            (lsn, *m.entries[lsn - m.start])
            for lsn in range(
                m.start if start is None else start, m.last + 1 if end is None else end
            )
        ]
        assert entry_tuples(self.log.entries(start, end)) == want
        batch = self.log.read_batch(start, end)
        assert entry_tuples(batch) == want
        rb = batch.to_arrow()
        assert rb.column("lsn").to_pylist() == [w[0] for w in want]
        assert rb.column("term").to_pylist() == [w[1] for w in want]
        assert rb.column("data").to_pylist() == [w[2] for w in want]
        for lsn, term, _ in want[:3]:
            assert self.log.term_at(lsn) == term

    @rule()
    def readonly_view_and_verify(self) -> None:
        m = self.model
        self.log.sync()
        with tflux.Log.open(self.dir, readonly=True) as ro:
            assert (ro.start_index, ro.last_index) == (m.start, m.last)
            assert entry_tuples(ro.entries()) == entry_tuples(self.log.entries())
            assert [s.start_lsn for s in ro.segments] == m.segs
        report = tflux.verify(self.dir)
        assert report.ok
        assert report.problems == []
        assert report.records == len(m.entries)
        assert report.bytes == sum(m.seg_size(k) for k in range(len(m.segs)))

    # --- operations that must fail and change nothing --------------------------------------------

    @rule(
        kind=st.sampled_from(
            ["lower term", "commit", "truncate", "insert", "compact", "read below", "read above"]
        ),
        where=st.integers(0, 100),
    )
    def refused(self, kind: str, where: int) -> None:
        """An operation the spec refuses; the invariants then check that it changed nothing."""
        m, log = self.model, self.log
        committed = m.commit - m.start + 1  # committed entries still in the log
        if kind == "lower term" and m.entries and m.entries[-1][0] > 0:
            with pytest.raises(ValueError):
                log.append(m.entries[-1][0] - 1, b"lower")
        elif kind == "commit":
            with pytest.raises(ValueError):
                log.commit(m.last + 1 + where % 3)
        elif kind == "truncate" and committed > 0:
            with pytest.raises(ValueError):
                log.truncate_after(m.start - 1 + where % committed)
        elif kind == "insert" and committed > 0:
            with pytest.raises(ValueError):
                log.insert_range(m.start + where % committed, [(m.max_term, b"never")])
        elif kind == "compact":
            with pytest.raises(ValueError):
                log.compact(m.commit + 1 + where % 3)
        elif kind == "read below":
            with pytest.raises(IndexError):
                log.read(max(m.start - 1 - where % 3, -1))
        elif kind == "read above":
            with pytest.raises(IndexError):
                log.read(m.last + 2 + where % 3)

    # --- checks ----------------------------------------------------------------------------------

    @invariant()
    def log_matches_the_model(self) -> None:
        if self.log is None:
            return
        m, log = self.model, self.log
        assert (log.start_index, log.last_index, log.commit_index) == (m.start, m.last, m.commit)
        assert len(log) == len(m.entries)
        if m.entries:
            assert log.last_entry == (m.last, m.entries[-1][0])
        assert entry_tuples(log.entries()) == [
            (m.start + k, t, d) for k, (t, d) in enumerate(m.entries)
        ]

    @invariant()
    def segments_match_the_model(self) -> None:
        if self.log is None:
            return
        m = self.model
        segs = self.log.segments
        assert [s.start_lsn for s in segs] == m.segs
        assert [s.count for s in segs] == [len(m.seg_entries(k)) for k in range(len(m.segs))]
        assert [s.size for s in segs] == [m.seg_size(k) for k in range(len(m.segs))]
        assert [s.sealed for s in segs] == [True] * (len(segs) - 1) + [False]
        assert [s.name for s in segs] == [segment_name(s) for s in m.segs]
        for s in segs:
            assert Path(s.path).resolve() == (self.dir / s.name).resolve()
            assert s.last_lsn == s.start_lsn + s.count - 1
            assert s.file_size == Path(s.path).stat().st_size
            assert s.file_size >= s.size

    @invariant()
    def files_on_disk_match_the_model(self) -> None:
        if self.log is None:
            return
        m = self.model
        if self.sync != "always":
            self.log.sync()
        assert segment_files(self.dir) == [segment_name(s) for s in m.segs]
        for k, start in enumerate(m.segs):
            buf = (self.dir / segment_name(start)).read_bytes()
            parsed = parse_segment(buf)
            assert parsed.records == m.seg_entries(k), f"segment {start}"
            # Preallocated zeros, or zeros written over a discarded tail: never stale bytes.
            assert parsed.tail.count(0) == len(parsed.tail), f"stale bytes after the end of {start}"
            if self.preallocate:
                assert len(buf) >= SOFT


LogMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestTheLogBehavesLikeAListOfEntries = LogMachine.TestCase
