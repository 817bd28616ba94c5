"""Compressed sealed segments side by side, in one run
(docs/internals/benchmark-notes.md, issue 14).

For three workloads (the demo's 64-byte messages, 1 KiB random, 1 KiB text-like) it writes one base
directory, copies it twice and compresses the copies' sealed segments with zstd and lz4
(``Log.compress``), then reports bytes on disk, compression throughput, and the median time of a
read-only restore (``tflux.open(readonly=True)``) and of ``tflux.verify_base`` for each. Every
restore and verify runs in a fresh process (timed inside it), so the decompressed-segment cache
starts empty, as after a restart. Run with a release build:

    python benches/lab/compress_report.py [--scale 1.0] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tflux

WORDS = (
    "queue task flux record segment log snapshot replay priority message ack nack lease "
    "worker batch commit term index order payload delivery retry timeout status"
).split()


def payloads(kind: str, n: int, rng: random.Random) -> list[bytes]:
    if kind == "demo 64 B":
        return [
            f"job-{i:08d}:{rng.choice(WORDS)}:{rng.randrange(10**9):09d}".encode()[:64].ljust(
                64, b"."
            )
            for i in range(n)
        ]
    if kind == "1 KiB random":
        return [rng.randbytes(1024) for _ in range(n)]
    out = []
    for i in range(n):
        text = f'{{"id": {i}, "text": "' + " ".join(rng.choice(WORDS) for _ in range(200))
        out.append(text.encode()[:1024].ljust(1024, b" "))
    return out


def build(base: Path, kind: str, n: int) -> None:
    rng = random.Random(14)
    data = payloads(kind, n, rng)
    with tflux.open(
        base,
        log_sync_policy="never",
        snapshot_creation_segments_threshold=0,
        log_file_soft_limit=4 << 20,
        log_file_hard_limit=8 << 20,
        log_preallocate_segments=False,
    ) as store:
        store.create_queue("q")
        for i in range(0, n, 1000):
            store.enqueue_many("q", [(k % 97, p) for k, p in enumerate(data[i : i + 1000])])
        for _ in range(n // 4):
            rec = store.dequeue("q")
            assert rec is not None
            store.ack(rec)


def log_bytes(base: Path) -> int:
    with tflux.Log.open(base / "data" / "log", readonly=True) as log:
        return sum(s.file_size if s.compression else s.size + 4 for s in log.segments)


CHILD = """
import sys, time, tflux
what, base, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = time.perf_counter()
if what == "restore":
    with tflux.open(base, readonly=True) as s:
        n = sum(q.count for q in s.queues())
else:
    assert tflux.verify_base(base).ok
print(time.perf_counter() - t)
"""


def timed(what: str, base: Path, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, what, str(base), "1"],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(float(out.stdout.strip()))
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sizes = {"demo 64 B": 400_000, "1 KiB random": 30_000, "1 KiB text-like": 30_000}
    print(f"load: {os.getloadavg()}  (uptime 1/5/15 min)")
    print(
        f"{'workload':16} {'method':6} {'log bytes':>12} {'ratio':>6} {'compress MB/s':>13} "
        f"{'restore s':>9} {'x plain':>7} {'verify s':>8} {'x plain':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for kind, n in sizes.items():
            n = int(n * args.scale)
            plain = Path(tmp) / f"{kind.replace(' ', '_')}-plain"
            build(plain, kind, n)
            rows = {"none": (plain, log_bytes(plain), None)}
            for method in ("zstd", "lz4"):
                copy = plain.with_name(plain.name.replace("plain", method))
                shutil.copytree(plain, copy)
                before = log_bytes(copy)
                with tflux.Log.open(copy / "data" / "log") as log:
                    sealed = sum(s.size + 4 for s in log.segments if s.sealed)
                    t = time.perf_counter()
                    log.compress(method)
                    speed = sealed / (time.perf_counter() - t) / 1e6
                assert before == rows["none"][1]
                rows[method] = (copy, log_bytes(copy), speed)
            base_restore = base_verify = 0.0
            for method, (base, size, speed) in rows.items():
                restore = timed("restore", base, args.repeat)
                verify = timed("verify", base, args.repeat)
                if method == "none":
                    base_restore, base_verify = restore, verify
                ratio = size / rows["none"][1]
                mbs = f"{speed:13,.0f}" if speed else f"{'-':>13}"
                print(
                    f"{kind:16} {method:6} {size:12,} {ratio:6.2f} {mbs} "
                    f"{restore:9.3f} {restore / base_restore:7.2f} {verify:8.3f} "
                    f"{verify / base_verify:7.2f}"
                )
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
