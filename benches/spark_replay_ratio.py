"""``tflux.spark.replay(...).count()`` beside the local restore (``tflux.open(base,
readonly=True)``) of the same base, with 1 and 2 executor cores, in one run (medians).

    python -m benches.spark_replay_ratio [RECORDS] [ROUNDS]

The store: RECORDS enqueues of 64 B over one busy queue (80%) and three others, a third of them
acked, a snapshot at half way. The JVM reader serves the scans (its jar is built first).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import tflux
import tflux.spark


def build(base: str, records: int) -> int:
    rng = random.Random(1)
    with tflux.open(base) as store:
        for q in ("a", "b", "c"):
            store.create_queue(q)
        names = ["busy"] * 8 + ["a", "b"]
        store.create_queue("busy")
        for i in range(0, records, 10_000):
            for q in set(names):
                n = names.count(q) * 1000
                store.enqueue_many(q, [(rng.randint(0, 9), b"x" * 64) for _ in range(n)])
            for q in set(names):
                for _ in range(names.count(q) * 330):
                    store.ack(store.dequeue(q))
            if i == records // 2 // 10_000 * 10_000:
                store.snapshot()
        return sum(q.count for q in store.queues())


def child(base: str, master: str, rounds: int) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "2g")
        .config("spark.jars", tflux.spark.build_jar())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tflux.spark.register(spark)
    tflux.spark.replay(spark, base).count()  # warm up
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        n = tflux.spark.replay(spark, base).count()
        times.append(time.perf_counter() - t)
    print(f"{statistics.median(times):.3f} {n}")
    spark.stop()


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    root = tempfile.mkdtemp(prefix="tflux-bench-replay-")
    try:
        base = os.path.join(root, "base")
        live = build(base, records)
        restore = []
        for _ in range(rounds):
            t = time.perf_counter()
            with tflux.open(base, readonly=True) as store:
                assert sum(q.count for q in store.queues()) == live
            restore.append(time.perf_counter() - t)
        local = statistics.median(restore)
        print(f"records={records} live={live} load={os.getloadavg()[0]:.1f}")
        print(f"local restore {local:.3f}s")
        for master in ("local[1]", "local[2]"):
            out = subprocess.run(
                [sys.executable, "-m", "benches.spark_replay_ratio", "--child", base, master,
                 str(rounds)],
                capture_output=True, text=True, check=True,
            ).stdout.split()  # fmt: skip
            secs, n = float(out[-2]), int(out[-1])
            assert n == live, (n, live)
            print(f"replay {master}: {secs:.3f}s = {secs / local:.1f}x the local restore")
        print(f"load after={os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
