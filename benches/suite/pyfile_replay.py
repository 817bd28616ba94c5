"""A restore written in plain Python, as a user without tflux would: read the segment files
(``struct`` for the framing, ``zlib.crc32`` for the checksums), decode the deltas of spec
section 6 and apply them with one ``heapq`` per queue (spec section 7's rules: ids in order,
removal by id, front removal pops, others are skipped when they reach the front).

``replay(log_dir, limit)`` stops after ``limit`` deltas and returns the state and the count.
Only CreateQueue/AddRecord/RemoveRecord/DeleteQueue of heap queues are handled: what the
benchmark logs hold.
"""

from __future__ import annotations

import heapq
import os
import struct
import zlib

MARKER = b"\xaa\xf5\x34\xc4"
_HEAD = struct.Struct(">4siIi")  # marker, term, crc, length
_Q = struct.Struct(">q")
_QI = struct.Struct(">qi")
_ID = struct.Struct(">Q")


class Queue:
    __slots__ = ("alive", "dead", "heap", "last_id")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, bytes]] = []
        self.alive: set[int] = set()
        self.dead: set[int] = set()
        self.last_id = 0


def segment_paths(log_dir: str | os.PathLike[str]) -> list[str]:
    names = sorted(n for n in os.listdir(log_dir) if n.endswith(".log") and n[:-4].isdigit())
    return [os.path.join(log_dir, n) for n in names]


def replay(log_dir: str | os.PathLike[str], limit: int) -> tuple[dict[bytes, Queue], int]:
    queues: dict[bytes, Queue] = {b"": Queue()}
    done = 0
    unpack_head, push, pop = _HEAD.unpack_from, heapq.heappush, heapq.heappop
    for path in segment_paths(log_dir):
        with open(path, "rb") as f:
            buf = f.read()
        at = 8
        end = len(buf)
        while at + 16 <= end and done < limit:
            marker, _term, crc, n = unpack_head(buf, at)
            if marker != MARKER:
                break
            data = buf[at + 16 : at + 16 + n]
            if zlib.crc32(data) != crc:
                raise ValueError(f"{path}: bad checksum at {at}")
            at += 16 + ((n + 3) & ~3)
            kind = data[0]
            nlen = data[1]
            name = data[2 : 2 + nlen]
            p = 2 + nlen
            if kind == 0x41:  # 'A'
                q = queues[name]
                key, mlen = _QI.unpack_from(data, p)
                q.last_id += 1
                q.alive.add(q.last_id)
                push(q.heap, (key, q.last_id, data[p + 12 : p + 12 + mlen]))
            elif kind == 0x52:  # 'R'
                q = queues[name]
                (rid,) = _ID.unpack_from(data, p)
                q.alive.remove(rid)
                if q.heap and q.heap[0][1] == rid:
                    pop(q.heap)
                    while q.heap and q.heap[0][1] in q.dead:
                        q.dead.remove(pop(q.heap)[1])
                else:
                    q.dead.add(rid)
            elif kind == 0x43:  # 'C'
                if name in queues:
                    raise ValueError(f"CreateQueue of existing queue {name!r}")
                queues[name] = Queue()
            elif kind == 0x44:  # 'D'
                del queues[name]
            else:
                raise ValueError(f"unknown delta {kind}")
            done += 1
        if done >= limit:
            break
    return queues, done
