"""Pure-Python references: the baselines a user would write without tflux's Rust core.

Two small programs written from the format spec, used by ``tflux bench`` and by ``benches/``:

- a **segment reader** (spec section 3) with ``struct`` and ``zlib.crc32`` only: it does the work
  of ``tflux.verify``: check each segment's header, walk the records from offset 8 to the end
  marker, check every record's framing, padding and CRC, the order of terms and the continuity of
  LSNs across segments, and count the records::

    segment = { file marker 12 76 AD 55 | version Int32 = 1 } record* end marker 00 00 00 00
    record  = { marker AA F5 34 C4 | term Int32 | crc UInt32 | len Int32 | data[len] | 0..3 zeros }

  All integers are big-endian; the CRC (ISO-HDLC, as ``zlib.crc32``) covers the data bytes only.

- a **queue replay** (spec sections 6 and 7): it reads the log with ``Log.read_batch`` (tflux's
  bulk reader, so the baseline pays nothing for reading segments in Python), decodes every delta
  with ``struct`` and applies it to one ``heapq`` per queue: ids are ``last id + 1``, a
  RemoveRecord of the record at the front pops it and any other is remembered as removed (lazily
  skipped when it reaches the front), and rule violations raise.

They are references for speed comparisons, not a second implementation: nothing in tflux uses
them to read data.
"""

from __future__ import annotations

import heapq
import os
import re
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tflux._tflux import Log

# --- the segment reader ------------------------------------------------------------------------

FILE_HEADER = bytes.fromhex("1276ad55") + struct.pack(">i", 1)
RECORD_MARKER = bytes.fromhex("aaf534c4")
END_MARKER = bytes(4)
RECORD_HEADER = struct.Struct(">4siIi")  # marker, term, crc, data length


class SegmentError(ValueError):
    """A segment that cannot be read, with the byte offset where the bad header or record starts."""

    def __init__(self, path: str, offset: int, message: str) -> None:
        super().__init__(f"{path}: offset {offset}: {message}")
        self.path = path
        self.offset = offset


def scan_bytes(buf: bytes, path: str = "<bytes>", previous_term: int = 0) -> tuple[int, int]:
    """Checks every record of one segment's bytes; returns ``(records, last term)``.

    Raises :class:`SegmentError` at the first bad header or record (a torn tail included: this
    reader reports, it does not repair).
    """
    if buf[:8] != FILE_HEADER:
        raise SegmentError(path, 0, "bad segment header (marker or version)")
    view = memoryview(buf)
    unpack = RECORD_HEADER.unpack_from
    crc32 = zlib.crc32
    end = len(buf)
    at = 8
    count = 0
    term_before = previous_term
    while at < end:  # reaching the physical end at a record boundary is a clean end
        if buf[at : at + 4] == END_MARKER:
            break
        if end - at < RECORD_HEADER.size:
            raise SegmentError(path, at, "incomplete record header")
        marker, term, stored, length = unpack(buf, at)
        if marker != RECORD_MARKER:
            raise SegmentError(path, at, f"bad record marker {marker.hex(' ')}")
        if length < 0:
            raise SegmentError(path, at, f"negative data length {length}")
        start = at + RECORD_HEADER.size
        stop = start + length
        following = stop + (-length % 4)
        if following > end:
            raise SegmentError(path, at, f"data length {length} runs past the end of the file")
        if following != stop and any(view[stop:following]):
            raise SegmentError(path, at, "non-zero padding byte")
        if crc32(view[start:stop]) != stored:
            raise SegmentError(path, at, "checksum mismatch")
        if term < term_before:
            raise SegmentError(path, at, f"term {term} lower than the previous term {term_before}")
        term_before = term
        count += 1
        at = following
    return count, term_before


def scan_segment(path: str | os.PathLike[str], previous_term: int = 0) -> tuple[int, int]:
    """Reads one segment file and checks it; returns ``(records, last term)``."""
    return scan_bytes(Path(path).read_bytes(), os.fspath(path), previous_term)


def segment_files(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The segment files of a log directory in LSN order (19 digits + ``.log``; others ignored)."""
    names = (p for p in Path(log_dir).iterdir() if p.is_file())
    segments = [p for p in names if re.fullmatch(r"[0-9]{19}\.log", p.name)]
    return sorted(segments, key=lambda p: int(p.name[:19]))


def scan_log(paths: list[Path]) -> int:
    """Checks consecutive segments in order: each must start at the LSN after the previous one's
    last record and terms must not decrease across them. Returns the number of records."""
    total = 0
    term = 0
    expected = None
    for path in paths:
        first_lsn = int(path.name[:19])
        if expected is not None and first_lsn != expected:
            raise SegmentError(
                os.fspath(path), 0, f"segment starts at LSN {first_lsn}, not {expected}"
            )
        count, term = scan_segment(path, term)
        expected = first_lsn + count
        total += count
    return total


# --- the queue replay --------------------------------------------------------------------------

_I32X3 = struct.Struct(">iii")
_PAIR = struct.Struct(">qq")
_KEY_LEN = struct.Struct(">qi")
_ID = struct.Struct(">Q")


class ReplayError(Exception):
    """A delta the pure-Python replay cannot apply (message names the LSN)."""


class PyQueue:
    """One queue of the pure-Python reference state (a heap with lazy removal)."""

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
    """The pure-Python reference queue state (what ``replay`` rebuilds)."""

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


def replay(log: Log, end: int | None = None, max_bytes: int = 1 << 20) -> PyState:
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
