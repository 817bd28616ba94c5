"""Writing the benchmark logs and what the writer knows about them (shared by conftest and benches).

A module of its own rather than conftest: fixtures belong in conftest, plain code in a module.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import tflux

RECORD_HEADER = 16
# Bytes handed to one append_many while building: large batches, segments still near 16 MiB.
BUILD_BATCH_BYTES = 1 << 20


def record_size(payload: int) -> int:
    """Bytes one record of ``payload`` data bytes occupies in a segment (spec 3)."""
    return RECORD_HEADER + payload + (-payload % 4)


@dataclass(frozen=True)
class LogData:
    """A log directory written by the fixtures, and what is known about it from the writer."""

    path: Path
    payload: int
    records: int
    segments: tuple[tflux.SegmentInfo, ...]

    @property
    def bytes(self) -> int:
        """Bytes a full scan covers: every segment's header and records (no end marker)."""
        return sum(s.size for s in self.segments)

    def subset(self, max_bytes: int) -> tuple[tflux.SegmentInfo, ...]:
        """The leading segments a slow reader scans: at least one, while within ``max_bytes``."""
        chosen = [self.segments[0]]
        for s in self.segments[1:]:
            if sum(c.size for c in chosen) + s.size > max_bytes:
                break
            chosen.append(s)
        return tuple(chosen)


def build_log(path: Path, payload: int, total_bytes: int, flush: bool = True) -> LogData:
    """Writes ``total_bytes`` of records of ``payload`` random bytes with ``sync="never"``.

    Commits after every batch, as a leader would, so segments roll at the 16 MiB soft limit.
    Terms grow every 64 batches so the log is not a single term run.
    """
    records = max(1, total_bytes // record_size(payload))
    batch = max(1, min(10_000, BUILD_BATCH_BYTES // payload))
    rng = random.Random(payload)
    pool = [rng.randbytes(payload) for _ in range(batch)]
    written = 0
    with tflux.Log.open(path, sync="never") as log:
        k = 0
        while written < records:
            n = min(batch, records - written)
            first = log.append_many(1 + k // 64, pool if n == batch else pool[:n])
            log.commit(first + n - 1)
            written += n
            k += 1
        segments = tuple(log.segments)
        assert len(log) == records
    if flush:
        # Flush dirty pages now so writeback does not run under the timed scans; the data stays
        # in the page cache ("cached segments").
        os.sync()
    return LogData(path=path, payload=payload, records=records, segments=segments)
