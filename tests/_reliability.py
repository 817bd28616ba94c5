"""Shared pieces of the reliability tests (test_crash, test_power_loss, ...).

The writer child below drives a store with tiny segment limits so that roll-over, automatic
snapshots and compaction happen every few calls. It reports on stdout:

  ``B <what> ...``   just before a call (so the parent knows what a kill interrupted)
  ``E <queue> <id> <token>``  after ``enqueue``/``enqueue_many`` returned (acknowledged, durable)
  ``A <queue> <id>``          after ``ack`` returned
  ``S``                       after ``snapshot()`` returned
  ``READY`` / ``DONE``

Payloads are self-checking: ``payload_of(token)`` is a pure function of the token, so a record
found after a crash is either byte-for-byte right or provably damaged.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Tiny limits: a segment rolls every couple of records and a snapshot (with compaction) follows
# every second roll.
TINY = {
    "log_file_soft_limit": 256,
    "log_file_hard_limit": 1024,
    "log_preallocate_segments": True,
    "snapshot_creation_segments_threshold": 2,
}

QUEUES = ("", "q")  # the default heap queue and an array queue with keys 0..3
KEYS = 4

WRITER = r"""
import random, sys, hashlib
import tflux

base, seed, ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
settings = eval(sys.argv[4])
rng = random.Random(seed)

def say(*parts):
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()

def payload_of(token):
    h = hashlib.sha256(token.encode()).digest()
    n = 1 + h[0] % 120
    return (token.encode() + b"|" + (h * 8)[:n])

def key_of(token):
    return hashlib.sha256(token.encode()).digest()[1] % 4

say("B open")
store = tflux.open(base, **settings)
if "q" not in [q.name for q in store.queues()]:
    say("B create")
    store.create_queue("q", implementation="array", key_range=(0, 3))
say("READY")
seq = 0
done = 0
while ops < 0 or done < ops:
    done += 1
    r = rng.random()
    queue = rng.choice(("", "q"))
    if r < 0.35:
        seq += 1
        token = "%d.%d.1.0" % (seed, seq)
        say("B enqueue", queue, token)
        rid = store.enqueue(queue, key_of(token), payload_of(token))
        say("E", queue, rid, token)
    elif r < 0.47:
        n = rng.randint(2, 24)
        seq += 1
        tokens = ["%d.%d.%d.%d" % (seed, seq, n, i) for i in range(n)]
        say("B enqueue_many", queue, tokens[0], n)
        ids = store.enqueue_many(queue, [(key_of(t), payload_of(t)) for t in tokens])
        for rid, t in zip(ids, tokens):
            say("E", queue, rid, t)
    elif r < 0.90:
        rec = store.dequeue(queue, timeout=0)
        if rec is None:
            continue
        if rng.random() < 0.1:
            store.nack(rec)
            continue
        say("B ack", queue, rec.id)
        store.ack(rec)
        say("A", queue, rec.id)
    else:
        say("B snapshot")
        store.snapshot()
        say("S")
store.close()
say("DONE")
"""


def payload_of(token: str) -> bytes:
    h = hashlib.sha256(token.encode()).digest()
    n = 1 + h[0] % 120
    return token.encode() + b"|" + (h * 8)[:n]


def key_of(token: str) -> int:
    return hashlib.sha256(token.encode()).digest()[1] % KEYS


def token_of(payload: bytes) -> str | None:
    """The token a payload claims, or None when the payload is not one the writer could write."""
    head, sep, _ = payload.partition(b"|")
    if not sep:
        return None
    try:
        token = head.decode("ascii")
    except UnicodeDecodeError:
        return None
    return token if payload_of(token) == payload else None


def writer_cmd(base: Path, seed: int, ops: int, settings: dict | None = None) -> list[str]:
    return [sys.executable, "-c", WRITER, str(base), str(seed), str(ops), repr(settings or TINY)]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    return env


@dataclass
class Expected:
    """What the store must hold: acknowledged enqueues minus acknowledged acks, per queue."""

    records: dict[str, dict[int, str]] = field(default_factory=lambda: {q: {} for q in QUEUES})
    max_id: dict[str, int] = field(default_factory=lambda: {q: 0 for q in QUEUES})
    queue_q_acked: bool = False

    def apply_line(self, parts: list[str]) -> None:
        kind = parts[0]
        if kind == "E":
            queue, rid, token = _queue(parts[1]), int(parts[2]), parts[3]
            if rid in self.records[queue] and self.records[queue][rid] != token:
                raise AssertionError(f"id {rid} of queue {queue!r} handed out twice")
            self.records[queue][rid] = token
            self.max_id[queue] = max(self.max_id[queue], rid)
        elif kind == "A":
            queue, rid = _queue(parts[1]), int(parts[2])
            self.records[queue].pop(rid, None)


def _queue(word: str) -> str:
    # ``say`` prints the default queue's empty name as an empty field, which split() drops, so
    # lines are split with split(" ") and the empty name survives as "".
    return word


def split_line(line: str) -> list[str]:
    return line.rstrip("\n").split(" ")


@dataclass
class CheckResult:
    lost: list[tuple[str, int]] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    extra: list[tuple[str, int]] = field(default_factory=list)  # unacknowledged but present
    partial_batch: bool = False


def check_store(store, expected: Expected, in_flight: list[str] | None) -> CheckResult:
    """Compares an opened store with what was acknowledged.

    ``in_flight`` is the ``B ...`` line of the call the kill interrupted (or None): an ack in
    flight may or may not have landed, an enqueue in flight may or may not be present (but never
    half), every other difference is a failure. Updates ``expected`` to the store's content.
    """
    res = CheckResult()
    ack_in_flight = None
    if in_flight and in_flight[1] == "ack":
        ack_in_flight = (in_flight[2], int(in_flight[3]))
    batch_prefix = None
    if in_flight and in_flight[1] in ("enqueue", "enqueue_many"):
        batch_prefix = in_flight[3].rsplit(".", 1)[0] + "."
    seen_tokens: set[str] = set()
    names = {q.name: q for q in store.queues()}
    present_batch = 0
    for queue in QUEUES:
        if queue not in names:
            if expected.queue_q_acked or expected.records[queue]:
                res.wrong.append(f"queue {queue!r} is gone")
            continue
        info = names[queue]
        if info.last_id < expected.max_id[queue]:
            res.wrong.append(f"queue {queue!r} last id {info.last_id} < {expected.max_id[queue]}")
        got = {}
        for rec in store.records(queue):
            token = token_of(rec.payload)
            if token is None:
                res.wrong.append(f"queue {queue!r} record {rec.id}: damaged payload")
                continue
            if rec.key != key_of(token):
                res.wrong.append(f"queue {queue!r} record {rec.id}: key {rec.key} for {token}")
            if token in seen_tokens:
                res.wrong.append(f"token {token} present twice")
            seen_tokens.add(token)
            got[rec.id] = token
        want = expected.records[queue]
        for rid, token in want.items():
            if rid not in got:
                if ack_in_flight == (queue, rid):
                    continue
                res.lost.append((queue, rid))
            elif got[rid] != token:
                res.wrong.append(f"queue {queue!r} record {rid}: {got[rid]} instead of {token}")
        for rid, token in got.items():
            if rid in want:
                continue
            if batch_prefix and token.startswith(batch_prefix) and in_flight[2] == queue:
                res.extra.append((queue, rid))
                present_batch += 1
            else:
                res.wrong.append(f"queue {queue!r} record {rid} ({token}) was never enqueued")
        expected.records[queue] = got
        expected.max_id[queue] = max(expected.max_id[queue], info.last_id)
    if "q" in names:
        expected.queue_q_acked = True
    if in_flight and in_flight[1] == "enqueue_many" and present_batch:
        res.partial_batch = present_batch != int(in_flight[4])
    return res
