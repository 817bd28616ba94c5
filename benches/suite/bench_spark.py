"""Spark through the tflux data source, beside Spark reading the same rows from Parquet.

Group ``spark-64B``: a log of ``TFLUX_BENCH_SPARK_RECORDS`` AddRecords of 64 B messages (4M when
timed, 20,000 otherwise) in 16 MiB segments, and the same rows written to Parquet by
``tflux.parquet.export`` (zstd). Each workload runs on a ``local[2]`` session:

- *count*: ``count(lsn)`` (Parquet would answer ``count()`` from its footers);
- *aggregate*: per ``kind``, ``count(*)``, ``sum(key)``, ``sum(length(message))``, which
  reads every row's key and message;
- the same aggregate through the source's tuple path (``arrow=false``: Python tuples instead of
  Arrow batches), the baseline of the Arrow path.

Spark does not prune the columns of a Python data source, so the tflux rows name the columns the
query needs with the ``columns`` option (Parquet prunes by itself); one row also shows the
aggregate over the full 14-column rows.

Targets: tflux at least 0.5x Parquet's throughput; the Arrow path at least 1.5x the tuple path.
Every body checks its result against the writer's bookkeeping. Skipped without pyspark.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import _needs
import pytest

from benches.suite._queuedata import QueueLog, build_queue_log

_needs.pyspark()

import tflux.parquet  # noqa: E402
import tflux.spark  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

FULL_RECORDS = 4_000_000
SMOKE_RECORDS = 20_000
ROUNDS = int(os.environ.get("TFLUX_BENCH_SPARK_ROUNDS", "3"))
PAYLOAD = 64
AGG_COLUMNS = "kind,key,message"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("tflux-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    tflux.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_log(bench_root: Path, timed: bool) -> Iterator[tuple[QueueLog, Path]]:
    text = os.environ.get("TFLUX_BENCH_SPARK_RECORDS")
    records = int(text.replace("_", "")) if text else (FULL_RECORDS if timed else SMOKE_RECORDS)
    base = bench_root / "spark"
    started = time.perf_counter()
    data = build_queue_log(base, records + 1, PAYLOAD, removes=False, flush=timed)
    out = bench_root / "spark-parquet"
    counts = tflux.parquet.export(base, out)
    assert counts["log"] == data.deltas
    print(
        f"\nbuilt {data.deltas} deltas ({data.bytes / 2**20:.1f} MiB of segments) and "
        f"{(out / 'log.parquet').stat().st_size / 2**20:.1f} MiB of Parquet in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    yield data, out / "log.parquet"
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)


def run(benchmark, target, *, label: str, role: str, data: QueueLog):
    benchmark.extra_info.update(
        label=label, role=role, records=data.deltas, bytes=data.bytes, payload=data.payload
    )
    return benchmark.pedantic(target, rounds=ROUNDS, warmup_rounds=1, iterations=1)


def aggregate(df) -> dict[str, tuple[int, int, int]]:
    rows = (
        df.groupBy("kind")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("key").alias("keys"),
            F.sum(F.length("message")).alias("bytes"),
        )
        .collect()
    )
    return {r.kind: (r.n, r.keys, r.bytes) for r in rows}


def check_aggregate(got, data: QueueLog) -> None:
    assert got["create_queue"] == (1, None, None)
    n, keys, nbytes = got["add_record"]
    assert n == data.adds and nbytes == data.adds * PAYLOAD and keys is not None


def tflux_df(spark, data: QueueLog, **options: str):
    reader = spark.read.format("tflux")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(data.base))


@pytest.mark.benchmark(group="spark-64B")
def test_tflux_source_count(benchmark, spark, spark_log) -> None:
    data, _ = spark_log
    df = tflux_df(spark, data, columns="lsn")

    def count() -> int:
        return df.agg(F.count("lsn")).first()[0]

    n = run(
        benchmark, count, label="tflux source, columns=lsn: count(lsn)", role="tflux", data=data
    )
    assert n == data.deltas


@pytest.mark.benchmark(group="spark-64B")
def test_parquet_count(benchmark, spark, spark_log) -> None:
    data, parquet = spark_log
    df = spark.read.parquet(str(parquet))

    def count() -> int:
        return df.agg(F.count("lsn")).first()[0]

    n = run(benchmark, count, label="Parquet: count(lsn)", role="baseline", data=data)
    assert n == data.deltas


@pytest.mark.benchmark(group="spark-64B")
def test_tflux_source_aggregate(benchmark, spark, spark_log) -> None:
    data, _ = spark_log
    df = tflux_df(spark, data, columns=AGG_COLUMNS)
    got = run(
        benchmark,
        lambda: aggregate(df),
        label=f"tflux source, columns={AGG_COLUMNS}: count, sum(key), sum(length(message)) by kind",
        role="tflux",
        data=data,
    )
    check_aggregate(got, data)


@pytest.mark.benchmark(group="spark-64B")
def test_tflux_source_aggregate_all_columns(benchmark, spark, spark_log) -> None:
    data, _ = spark_log
    df = tflux_df(spark, data)
    got = run(
        benchmark,
        lambda: aggregate(df),
        label="tflux source, all 14 columns: same aggregate",
        role="tflux",
        data=data,
    )
    check_aggregate(got, data)


@pytest.mark.benchmark(group="spark-64B")
def test_parquet_aggregate(benchmark, spark, spark_log) -> None:
    data, parquet = spark_log
    df = spark.read.parquet(str(parquet))
    got = run(
        benchmark,
        lambda: aggregate(df),
        label="Parquet (zstd): count, sum(key), sum(length(message)) by kind",
        role="baseline",
        data=data,
    )
    check_aggregate(got, data)
    assert got == aggregate(tflux_df(spark, data))


@pytest.mark.benchmark(group="spark-64B")
def test_tuple_path_aggregate(benchmark, spark, spark_log) -> None:
    data, _ = spark_log
    df = tflux_df(spark, data, arrow="false", columns=AGG_COLUMNS)
    got = run(
        benchmark,
        lambda: aggregate(df),
        label=f"tflux source, tuple path (arrow=false), columns={AGG_COLUMNS}: same aggregate",
        role="baseline",
        data=data,
    )
    check_aggregate(got, data)
