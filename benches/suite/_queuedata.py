"""Writing the queue benchmarks' logs: deltas encoded by hand from spec section 6.

The logs are written through ``tflux.Log.open(<base>/data/log, sync="never")`` + ``append_many``
with term 1 (a store without metadata is at term 1), so ``tflux.open(base)`` restores them.
The delta bytes are encoded here with ``struct``, independently of the library, so a restore
that agrees with the writer's own bookkeeping checks the decoder as well.
"""

from __future__ import annotations

import heapq
import os
import random
import struct
from dataclasses import dataclass
from pathlib import Path

import tflux
from tflux._layout import Layout

QUEUE = "bench"
IMPL_HEAP = next(code for code, name in tflux.IMPLEMENTATIONS.items() if name == "heap")
# Priorities of the restore log: 1024 distinct keys, so the heap orders by key and, among equal
# keys, by id (FIFO), as a real workload with a few priority levels would.
KEYS = 1024
# Deltas handed to one append_many while building.
BUILD_BATCH = 10_000

_KEY_LEN = struct.Struct(">qi")
_ID = struct.Struct(">Q")


def queue_name(name: str) -> bytes:
    """QueueName (spec 2): byte length, then the ASCII bytes."""
    raw = name.encode("ascii")
    return bytes([len(raw)]) + raw


def create_queue(
    name: str,
    implementation: int = IMPL_HEAP,
    max_size: int = -1,
    max_message_size: int = -1,
    key_range: tuple[int, int] | None = None,
) -> bytes:
    """CreateQueue: 'C' | QueueName | Int32 impl | Int32 max size | Int32 max message size |
    Nullable<Pair<Int64,Int64>> key range."""
    tail = b"\x00" if key_range is None else b"\x01" + struct.pack(">qq", *key_range)
    return (
        b"C"
        + queue_name(name)
        + struct.pack(">iii", implementation, max_size, max_message_size)
        + tail
    )


def add_record(name: str, key: int, message: bytes) -> bytes:
    """AddRecord: 'A' | QueueName | Int64 priority | Buffer message."""
    return b"A" + queue_name(name) + _KEY_LEN.pack(key, len(message)) + message


def remove_record(name: str, record_id: int) -> bytes:
    """RemoveRecord: 'R' | QueueName | UInt64 id."""
    return b"R" + queue_name(name) + _ID.pack(record_id)


@dataclass(frozen=True)
class QueueLog:
    """A base directory whose log the fixtures wrote, and what the writer knows about it."""

    base: Path
    queue: str
    payload: int
    deltas: int
    adds: int
    removes: int
    bytes: int
    # (key, id) of the record a dequeue must return after the restore.
    front: tuple[int, int]
    # The benchmark group of the restores of this log (e.g. "restore-64B-10M").
    group: str = ""

    @property
    def log_dir(self) -> Path:
        return Layout(self.base).log

    @property
    def live(self) -> int:
        return self.adds - self.removes


def build_queue_log(
    base: Path, deltas: int, payload: int, removes: bool = True, flush: bool = True
) -> QueueLog:
    """Writes a CreateQueue of ``QUEUE`` then ``deltas - 1`` record deltas with ``sync="never"``.

    With ``removes`` the pattern is Add, Add, Remove: every Remove takes the record at the
    front of the queue (what an ack after a dequeue writes), so the queue keeps growing by one
    record per three deltas. The writer tracks the front with ``heapq`` over ``(key, id)``.
    Without ``removes`` every delta after the CreateQueue is an Add.
    """
    rng = random.Random(deltas ^ payload)
    pool = [rng.randbytes(payload) for _ in range(1024)]
    a_prefix = b"A" + queue_name(QUEUE)
    r_prefix = b"R" + queue_name(QUEUE)
    pack_key, pack_id = _KEY_LEN.pack, _ID.pack
    heap: list[tuple[int, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    keys = [rng.randrange(KEYS) for _ in range(4096)]
    adds = removed = 0
    batch: list[bytes] = [create_queue(QUEUE)]
    written = 0
    last_id = 0
    with tflux.Log.open(Layout(base).log, sync="never") as log:
        while written + len(batch) < deltas:
            i = written + len(batch)
            if removes and i % 3 == 0:
                _, rid = pop(heap)
                batch.append(r_prefix + pack_id(rid))
                removed += 1
            else:
                last_id += 1
                key = keys[last_id & 4095]
                batch.append(a_prefix + pack_key(key, payload) + pool[last_id & 1023])
                if removes:
                    push(heap, (key, last_id))
                adds += 1
            if len(batch) == BUILD_BATCH:
                first = log.append_many(1, batch)
                log.commit(first + len(batch) - 1)
                written += len(batch)
                batch = []
        if batch:
            first = log.append_many(1, batch)
            log.commit(first + len(batch) - 1)
            written += len(batch)
        assert len(log) == deltas == written
        nbytes = sum(s.size for s in log.segments)
    if removes:
        front = heap[0]
    else:
        # All Adds: the front is the smallest key, first id among equal keys.
        front = min((keys[i & 4095], i) for i in range(1, min(adds, 4096) + 1))
    if flush:
        os.sync()
    return QueueLog(
        base=base,
        queue=QUEUE,
        payload=payload,
        deltas=deltas,
        adds=adds,
        removes=removed,
        bytes=nbytes,
        front=front,
    )
