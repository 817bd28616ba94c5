"""Cost of ``Log.truncate_after`` (a Raft follower dropping an uncommitted tail).

A cut rewrites the kept records of the active segment into a new file (copy-on-truncate, see
docs/format.md), so its cost grows with the bytes kept in that segment and with preallocation.
For each case the log holds ``kept`` bytes of 1 KiB entries in its active segment followed by 64
uncommitted entries; one round times ``truncate_after`` dropping those 64 (``sync="always"``, the
default: the cut is durable when the call returns), then appends them again (untimed).

    python benches/lab/truncate_cost.py [--rounds 15]

Prints one line per case: median and 90th percentile in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import tflux

ENTRY = b"x" * 1024
TAIL = 64


def measure(root: Path, kept: int, preallocate: bool, rounds: int) -> list[float]:
    path = root / f"log-{kept}-{preallocate}"
    times = []
    with tflux.Log.open(path, preallocate=preallocate) as log:  # 16 MiB soft, 32 MiB hard limit
        log.append_many(1, [ENTRY] * (kept // len(ENTRY)))
        keep = log.last_index
        for _ in range(rounds + 1):
            log.append_many(1, [ENTRY] * TAIL)
            start = time.perf_counter()
            log.truncate_after(keep)
            times.append(time.perf_counter() - start)
        assert log.last_index == keep and len(log.segments) == 1
    return times[1:]  # the first round warms the page cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        for preallocate in (True, False):
            for kept in (4 << 10, 1 << 20, 8 << 20):
                t = sorted(measure(Path(tmp), kept, preallocate, args.rounds))
                p90 = t[int(0.9 * (len(t) - 1))]
                print(
                    f"preallocate={preallocate!s:5} kept={kept >> 10:>5} KiB  "
                    f"median {statistics.median(t) * 1e3:7.2f} ms  p90 {p90 * 1e3:7.2f} ms"
                )


if __name__ == "__main__":
    main()
