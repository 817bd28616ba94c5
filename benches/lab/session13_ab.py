"""Session 13 A/B helpers (docs/internals/benchmark-notes.md, "Session 13: what the fixes cost"):
two whole processes timed side by side with `farm-bench`, this build against another one.

    python benches/lab/session13_ab.py make BASE       # 1M x 64 B deltas, a snapshot, 1M more
    python benches/lab/session13_ab.py restore BASE    # a read-only restore of BASE
    python benches/lab/session13_ab.py deliver         # 100k enqueues, then 100k dequeue + ack
"""

from __future__ import annotations

import shutil
import sys
import tempfile

import tflux


def make(base: str) -> None:
    shutil.rmtree(base, ignore_errors=True)
    opts = dict(log_sync_policy="never", snapshot_creation_segments_threshold=0)
    with tflux.open(base, **opts) as s:
        s.create_queue("q")
        for fill in (b"x", b"y"):
            for i in range(0, 1_000_000, 10_000):
                s.enqueue_many("q", [(k % 97, fill * 64) for k in range(i, i + 10_000)])
            if fill == b"x":
                for _ in range(100_000):
                    s.ack(s.dequeue("q", timeout=0))
                s.snapshot()


def restore(base: str) -> None:
    with tflux.open(base, readonly=True) as s:
        assert s.count("q") > 0


def deliver() -> None:
    with tflux.open(tempfile.mkdtemp(), log_sync_policy="never") as s:
        s.create_queue("q")
        s.enqueue_many("q", [(k % 7, b"m") for k in range(100_000)])
        for _ in range(100_000):
            s.ack(s.dequeue("q", timeout=0))


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    {"make": make, "restore": restore, "deliver": deliver}[what](*args)
