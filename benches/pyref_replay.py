"""A pure-Python replay of queue deltas: the baseline a user of ``tflux.Log`` would write.

It reads the log with ``Log.read_batch`` (tflux's bulk reader, so the baseline pays nothing for
reading segments in Python), decodes every delta with ``struct`` as spec section 6 lays it out,
and applies it to one ``heapq`` per queue, following the apply rules of spec section 7: ids are
``last id + 1``, a RemoveRecord of the record at the front pops it and any other is remembered
as removed (lazily skipped when it reaches the front), and rule violations raise.
"""

from __future__ import annotations

import heapq
import struct

import tflux

_I32X3 = struct.Struct(">iii")
_PAIR = struct.Struct(">qq")
_KEY_LEN = struct.Struct(">qi")
_ID = struct.Struct(">Q")


class ReplayError(Exception):
    pass


class PyQueue:
    __slots__ = ("alive", "config", "heap", "last_id", "removed")

    def __init__(self, config: tuple) -> None:
        self.config = config  # (implementation, max size, max message size, key range)
        self.last_id = 0
        self.heap: list[tuple[int, int, bytes]] = []  # (key, id, message)
        self.alive: set[int] = set()
        self.removed: set[int] = set()

    def __len__(self) -> int:
        return len(self.alive)

    def front(self) -> tuple[int, int, bytes] | None:
        """The record a dequeue would return (skipping removed records)."""
        heap, removed = self.heap, self.removed
        while heap and heap[0][1] in removed:
            removed.discard(heapq.heappop(heap)[1])
        return heap[0] if heap else None


class PyState:
    def __init__(self) -> None:
        self.queues: dict[bytes, PyQueue] = {b"": PyQueue((1, -1, -1, None))}

    def apply(self, data: bytes, at: int, end: int, lsn: int) -> None:
        """Applies the delta in ``data[at:end]``."""
        marker = data[at]
        n = data[at + 1]
        name = data[at + 2 : at + 2 + n]
        at += 2 + n
        if marker == 0x41:  # AddRecord
            key, length = _KEY_LEN.unpack_from(data, at)
            at += 12
            if length < 0 or at + length != end:
                raise ReplayError(f"LSN {lsn}: bad AddRecord length {length}")
            q = self.queues.get(name)
            if q is None:
                raise ReplayError(f"LSN {lsn}: AddRecord to missing queue {name!r}")
            rng = q.config[3]
            if q.config[0] == 2 and not rng[0] <= key <= rng[1]:
                raise ReplayError(f"LSN {lsn}: key {key} outside the array queue's range")
            q.last_id += 1
            heapq.heappush(q.heap, (key, q.last_id, data[at:end]))
            q.alive.add(q.last_id)
        elif marker == 0x52:  # RemoveRecord
            if at + 8 != end:
                raise ReplayError(f"LSN {lsn}: RemoveRecord with {end - at} bytes after the name")
            (rid,) = _ID.unpack_from(data, at)
            q = self.queues.get(name)
            if q is None:
                raise ReplayError(f"LSN {lsn}: RemoveRecord from missing queue {name!r}")
            if rid not in q.alive:
                raise ReplayError(f"LSN {lsn}: record id {rid} is not in the queue")
            q.alive.remove(rid)
            if q.heap and q.heap[0][1] == rid:
                heapq.heappop(q.heap)
            else:
                q.removed.add(rid)
        elif marker == 0x43:  # CreateQueue
            impl, max_size, max_msg = _I32X3.unpack_from(data, at)
            at += 12
            if data[at] == 1:
                key_range = _PAIR.unpack_from(data, at + 1)
                at += 17
            elif data[at] == 0:
                key_range = None
                at += 1
            else:
                raise ReplayError(f"LSN {lsn}: bad Bool {data[at]}")
            if at != end:
                raise ReplayError(f"LSN {lsn}: trailing bytes after CreateQueue")
            if impl not in (1, 2) or (impl == 2 and key_range is None):
                raise ReplayError(f"LSN {lsn}: bad implementation {impl}")
            if name in self.queues:
                raise ReplayError(f"LSN {lsn}: CreateQueue of existing queue {name!r}")
            self.queues[name] = PyQueue((impl, max_size, max_msg, key_range))
        elif marker == 0x44:  # DeleteQueue
            if at != end:
                raise ReplayError(f"LSN {lsn}: trailing bytes after DeleteQueue")
            if not name or self.queues.pop(name, None) is None:
                raise ReplayError(f"LSN {lsn}: cannot delete queue {name!r}")
        else:
            raise ReplayError(f"LSN {lsn}: unknown delta marker {marker:#x}")


def replay(log: tflux.Log, end: int | None = None, max_bytes: int = 1 << 20) -> PyState:
    """Replays ``log`` from its start up to ``end`` (exclusive; default: all of it)."""
    state = PyState()
    start = log.start_index
    end = log.last_index + 1 if end is None else end
    apply = state.apply
    while start < end:
        batch = log.read_batch(start, end, max_bytes=max_bytes)
        data = batch.data
        offsets = batch.offsets.tolist()
        for i in range(len(batch)):
            apply(data, offsets[i], offsets[i + 1], start + i)
        start += len(batch)
    return state
