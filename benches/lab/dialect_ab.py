"""The taskflux dialect against the spec dialect, and ``tflux convert`` against a file copy
(issue 28's targets; docs/internals/benchmark-notes.md, "Dialects"). Whole processes, timed side by
side with ``farm-bench``; the same logical log in both dialects (the taskflux base is the spec
base converted by ``tflux convert``).

    python benches/lab/dialect_ab.py make BASE N SIZE   # N AddRecord deltas of SIZE-byte payloads
                                                     # (spec), and BASE-taskflux (converted)
    python benches/lab/dialect_ab.py restore BASE        # a read-only restore
    python benches/lab/dialect_ab.py verify BASE         # tflux.verify_base without the replay
    python benches/lab/dialect_ab.py convert BASE OUT    # tflux convert BASE OUT --to taskflux
"""

from __future__ import annotations

import shutil
import sys

import tflux


def make(base: str, n: str, size: str) -> None:
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(base + "-taskflux", ignore_errors=True)
    count, payload = int(n), b"p" * int(size)
    opts = dict(log_sync_policy="never", snapshot_creation_segments_threshold=0)
    with tflux.open(base, **opts) as s:
        s.create_queue("q")
        step = 20_000
        for i in range(0, count, step):
            s.enqueue_many("q", [(k % 97, payload) for k in range(i, min(i + step, count))])
    tflux.convert(base, base + "-taskflux", to="taskflux")


def restore(base: str) -> None:
    with tflux.open(base, readonly=True) as s:
        assert s.count("q") > 0


def verify(base: str) -> None:
    assert tflux.verify_base(base, replay=False).ok


def convert(base: str, out: str) -> None:
    shutil.rmtree(out, ignore_errors=True)
    tflux.convert(base, out, to="taskflux")


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    {"make": make, "restore": restore, "verify": verify, "convert": convert}[what](*args)
