"""Side-by-side ratios on ``local[2]``: the JVM reader, the Python source and Parquet over the
same rows (AddRecords of 64 B messages), in one run, interleaved rounds, medians.

    python -m benches.lab.spark_jvm_ratio [RECORDS] [ROUNDS]

Prints one line per query: seconds (median) for tflux (JVM), tflux_python and Parquet, and
the JVM reader's throughput relative to Parquet (Parquet time / tflux time). Needs a JDK.
``TFLUX_BENCH_NO_PYTHON=1`` leaves the Python source out (it is 7-12x slower than the JVM
reader, so at millions of records it would take most of the run).

Messages are 64 B and distinct (each starts with its row number), as a queue's messages are.
``TFLUX_BENCH_MESSAGES=same`` makes every message the same 64 bytes (the data of the earlier
runs): Parquet then stores the message column as one dictionary entry and its row references,
so a query reading every message reads next to nothing there.

``TFLUX_BENCH_DIR=DIR`` keeps the base and its Parquet copy in ``DIR`` (built there when
absent, reused after), ``TFLUX_BENCH_QUERIES=count,sum`` runs only the queries whose names
start with one of the words, and ``TFLUX_BENCH_JAVA_OPTS`` is passed to the driver JVM (for
example ``-XX:StartFlightRecording=filename=/tmp/q.jfr`` to profile with JFR).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time

import tflux
import tflux.parquet
import tflux.spark


def build(base: str, records: int, distinct: bool = True) -> None:
    payload = b"x" * 64
    with tflux.Log.open(os.path.join(base, "data", "log")) as log:
        queues = ["", "jobs", "mail", "img"]
        for q in queues[1:]:
            name = q.encode()
            log.append(
                1, b"C" + bytes([len(name)]) + name + bytes.fromhex("00000001ffffffffffffffff00")
            )
        batch = 20_000
        for i in range(0, records, batch):
            deltas = []
            for j in range(i, min(i + batch, records)):
                name = queues[j % 4].encode()
                deltas.append(
                    b"A"
                    + bytes([len(name)])
                    + name
                    + j.to_bytes(8, "big")
                    + b"\0\0\0\x40"
                    + ((b"%08d" % j) + payload[8:] if distinct else payload)
                )
            first = log.append_many(1, deltas)
            log.commit(first + len(deltas) - 1)


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    kept = os.environ.get("TFLUX_BENCH_DIR")
    root = kept or tempfile.mkdtemp(prefix="tflux-bench-jvm-")
    try:
        base = os.path.join(root, "base")
        distinct = os.environ.get("TFLUX_BENCH_MESSAGES", "distinct") != "same"
        if not (kept and os.path.isdir(os.path.join(root, "pq"))):
            build(base, records, distinct)
            tflux.parquet.export(base, os.path.join(root, "pq"))
        spark = (
            SparkSession.builder.master(os.environ.get("TFLUX_BENCH_MASTER", "local[2]"))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "2g")
            .config("spark.jars", tflux.spark.build_jar())
            .config("spark.driver.extraJavaOptions", os.environ.get("TFLUX_BENCH_JAVA_OPTS", ""))
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        tflux.spark.register(spark)
        assert tflux.spark.jvm_reader(spark)
        frames = {
            "tflux": lambda: spark.read.format("tflux").load(base),
            "python": lambda: spark.read.format("tflux_python").load(base),
            "parquet": lambda: spark.read.parquet(os.path.join(root, "pq", "log.parquet")),
        }
        if os.environ.get("TFLUX_BENCH_NO_PYTHON") == "1":
            del frames["python"]
        queries = {
            "count()": lambda df: df.count(),
            "groupBy(kind,queue).count()": lambda df: df.groupBy("kind", "queue").count().collect(),
            "sum(length(message))": lambda df: df.agg(F.sum(F.length("message"))).collect(),
            "sum(key)": lambda df: df.agg(F.sum("key")).collect(),
        }
        only = [w for w in os.environ.get("TFLUX_BENCH_QUERIES", "").split(",") if w]
        if only:
            queries = {k: q for k, q in queries.items() if any(k.startswith(w) for w in only)}
        for q in queries.values():  # warm up every path once
            for f in frames.values():
                q(f())
        messages = "distinct" if distinct else "same"
        print(
            f"records={records} rounds={rounds} messages={messages} load={os.getloadavg()[0]:.1f}"
        )
        for name, q in queries.items():
            times = {k: [] for k in frames}
            for _ in range(rounds):
                for k, f in frames.items():
                    t = time.perf_counter()
                    q(f())
                    times[k].append(time.perf_counter() - t)
            med = {k: statistics.median(v) for k, v in times.items()}
            python = f"python {med['python']:.3f}s " if "python" in med else "python (not run) "
            versus = (
                f"  jvm vs python {med['python'] / med['tflux']:.1f}x" if "python" in med else ""
            )
            print(
                f"{name:30s} jvm {med['tflux']:.3f}s {python}"
                f"parquet {med['parquet']:.3f}s  jvm/parquet throughput "
                f"{med['parquet'] / med['tflux']:.2f}x{versus}"
            )
        print(f"load after={os.getloadavg()[0]:.1f}")
        spark.stop()
    finally:
        if not kept:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
