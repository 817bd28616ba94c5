"""Queue state rebuilt with Spark operations from the snapshot and log of each source.

The rules are the state machine's (spec 7), expressed as columns instead of a loop:

- Restore starts from the snapshot (its queues, their ``last id`` and records) or, without one,
  from the default queue ``""`` alone; log entries at or below the snapshot's last index are
  skipped.
- Every ``CreateQueue`` starts a new *incarnation* of its name: ``inc`` is the number of
  CreateQueues of that name up to each entry, in LSN order (0 = the queue as the snapshot left
  it). Removes and adds belong to the incarnation they were logged in.
- An AddRecord gets ``last id + 1``: the queue's last id at the start of its incarnation (the
  snapshot's for incarnation 0, else 0) plus its rank among that incarnation's adds.
- A record is live when no RemoveRecord of the same (queue, incarnation, id) exists and its
  incarnation is the queue's last one, unless the last CreateQueue/DeleteQueue of the name is a
  delete.

One window (partitioned by source and queue, ordered by LSN) numbers the entries; the rest are
joins and aggregations, so work spreads over queues and sources. The snapshot's per-queue
metadata (name, implementation, last id) comes from :attr:`tflux.SnapshotBatch.queues` on the
driver (the records themselves are read by the tasks).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

import tflux
from tflux.spark import _paths, register

START_SCHEMA = StructType(
    [
        StructField("source", StringType()),
        StructField("queue", StringType()),
        StructField("implementation", IntegerType()),
        StructField("last_id", LongType()),
    ]
)


class _Frames:
    """The DataFrames replay and the summary are built from (nothing is executed here)."""

    def __init__(self, spark: SparkSession, path) -> None:
        register(spark)
        self.sources = _paths.resolve(path)
        starts, logs, snaps = [], [], []
        for src in self.sources:
            snap = tflux.read_snapshot_batch(src.snapshot) if src.snapshot else None
            after = snap.last_index if snap is not None else -1
            if snap is None:
                starts.append((src.base, "", 1, 0))
            else:
                starts += [
                    (src.base, q["name"], q["implementation"], q["last_id"]) for q in snap.queues
                ]
                if len(snap):
                    snaps.append(src.snapshot)
            names = _paths.segment_names(src.log_dir) if src.log_dir else []
            if names:
                first = _paths.start_lsn(names[0])
                if first > after + 1:
                    what = f"the snapshot's last index {after}" if snap else "no snapshot"
                    raise tflux.CorruptionError(
                        f"{src.log_dir}: the log starts at LSN {first} after {what} (a gap)",
                        src.log_dir,
                        None,
                    )
                logs.append(
                    spark.read.format("tflux").option("fromLsn", str(after + 1)).load(src.log_dir)
                )
        self.many = len(self.sources) > 1
        self.start = F.broadcast(spark.createDataFrame(starts, START_SCHEMA))
        cols = ["source", "queue", "lsn", "kind", "key", "record_id", "message", "implementation"]
        if logs:
            events = logs[0].select(*cols)
            for df in logs[1:]:
                events = events.unionByName(df.select(*cols))
        else:
            events = spark.createDataFrame([], logs_schema(spark))
        by_queue = (
            Window.partitionBy("source", "queue")
            .orderBy("lsn")
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        is_create = (F.col("kind") == "create_queue").cast("long")
        is_add = (F.col("kind") == "add_record").cast("long")
        events = events.withColumn("inc", F.sum(is_create).over(by_queue)).withColumn(
            "adds", F.sum(is_add).over(by_queue)
        )
        # Adds logged before the incarnation's CreateQueue (the value of ``adds`` on that row).
        events = events.withColumn(
            "adds_before",
            F.coalesce(
                F.max(F.when(F.col("kind") == "create_queue", F.col("adds"))).over(by_queue),
                F.lit(0).cast("long"),
            ),
        )
        self.events = events
        base_id = F.when(F.col("inc") == 0, F.coalesce(F.col("last_id"), F.lit(0))).otherwise(0)
        self.adds = (
            events.filter(F.col("kind") == "add_record")
            .join(self.start.select("source", "queue", "last_id"), ["source", "queue"], "left")
            .select(
                "source",
                "queue",
                "inc",
                (base_id + F.col("adds") - F.col("adds_before")).alias("record_id"),
                "key",
                "message",
            )
        )
        self.removes = events.filter(F.col("kind") == "remove_record").select(
            "source", "queue", "inc", "record_id", "lsn"
        )
        records = self.adds
        if snaps:
            snap_records = (
                spark.read.format("tflux_snapshot")
                .load(",".join(snaps))
                .select(
                    "source",
                    "queue",
                    F.lit(0).cast("long").alias("inc"),
                    "record_id",
                    "key",
                    "message",
                )
            )
            records = snap_records.unionByName(records)
        self.records = records
        # Per name: its last incarnation and whether the last CreateQueue/DeleteQueue deleted it.
        self.final = (
            events.filter(F.col("kind").isin("create_queue", "delete_queue"))
            .groupBy("source", "queue")
            .agg(
                F.max("inc").alias("final_inc"),
                F.max_by("kind", "lsn").alias("last_cd"),
                F.max_by("implementation", "lsn").alias("created_impl"),
            )
        )

    def check(self) -> None:
        """Raise :class:`tflux.ReplayError` (with the LSN) where the local restore would: a
        RemoveRecord of a record that is not there, or removed twice. Costs two Spark jobs."""
        keys = ["source", "queue", "inc", "record_id"]
        present = self.records.select(*keys)
        missing = self.removes.join(present, keys, "left_anti").orderBy("lsn").limit(1).collect()
        twice = (
            self.removes.groupBy(*keys)
            .agg(F.count("*").alias("n"), F.max("lsn").alias("lsn"))
            .filter(F.col("n") > 1)
            .orderBy("lsn")
            .limit(1)
            .collect()
        )
        bad = sorted(missing + twice, key=lambda r: r.lsn)
        if bad:
            r = bad[0]
            raise tflux.ReplayError(
                f"replay failed at LSN {r.lsn}: RemoveRecord: record id {r.record_id} is not in "
                f"queue {r.queue!r} ({r.source})",
                r.lsn,
            )

    def live(self) -> DataFrame:
        live = self.records.join(
            self.removes, ["source", "queue", "inc", "record_id"], "left_anti"
        ).join(self.final, ["source", "queue"], "left")
        keep = (F.col("last_cd").isNull() & (F.col("inc") == 0)) | (
            (F.col("last_cd") == "create_queue") & (F.col("inc") == F.col("final_inc"))
        )
        return live.filter(keep).select("source", "queue", "record_id", "key", "message")

    def summary(self) -> DataFrame:
        queues = self.start.join(self.final, ["source", "queue"], "full_outer")
        alive = (F.col("last_cd").isNull() & F.col("last_id").isNotNull()) | (
            F.col("last_cd") == "create_queue"
        )
        final_inc = F.coalesce(F.col("final_inc"), F.lit(0).cast("long"))
        queues = queues.filter(alive).select(
            "source",
            "queue",
            final_inc.alias("inc"),
            F.when(final_inc > 0, F.col("created_impl"))
            .otherwise(F.col("implementation"))
            .alias("impl"),
            F.when(final_inc == 0, F.col("last_id")).otherwise(0).alias("base_id"),
        )
        adds = self.adds.groupBy("source", "queue", "inc").agg(F.count("*").alias("n_adds"))
        counts = self.live().groupBy("source", "queue").agg(F.count("*").alias("count"))
        impl = F.col("impl")
        name = impl.cast("string")  # an unknown code shows as itself
        for code, label in tflux.IMPLEMENTATIONS.items():
            name = F.when(impl == code, label).otherwise(name)
        return (
            queues.join(adds, ["source", "queue", "inc"], "left")
            .join(counts, ["source", "queue"], "left")
            .select(
                "source",
                "queue",
                name.alias("implementation"),
                F.coalesce(F.col("count"), F.lit(0).cast("long")).alias("count"),
                (F.col("base_id") + F.coalesce(F.col("n_adds"), F.lit(0))).alias("last_id"),
            )
        )

    def output(self, df: DataFrame) -> DataFrame:
        """The ``source`` column only when PATH named more than one source."""
        return df if self.many else df.drop("source")


def logs_schema(spark: SparkSession) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    from tflux.spark._columns import log_schema

    full = from_arrow_schema(log_schema())
    keep = ["source", "queue", "lsn", "kind", "key", "record_id", "message", "implementation"]
    return StructType([full[name] for name in keep])


def replay(spark: SparkSession, path, validate: bool = False) -> DataFrame:
    """Live records per queue: ``queue``, ``record_id``, ``key``, ``message`` (ready records, as
    ``tflux.open(base, readonly=True).records(queue)`` returns them; in-flight records of a
    running store are ready after a restore). Order by ``queue, key, record_id`` for dequeue
    order. With several sources a leading ``source`` column names each record's base directory.

    ``validate=True`` first checks what the local restore checks for removals (a RemoveRecord
    of a missing or already removed record raises :class:`tflux.ReplayError` with its LSN); it
    costs two extra Spark jobs, so it is off by default.
    """
    frames = _Frames(spark, path)
    if validate:
        frames.check()
    return frames.output(frames.live())


def queue_summary(spark: SparkSession, path) -> DataFrame:
    """One row per queue alive after the replay: ``queue``, ``implementation`` (heap/array),
    ``count`` (live records), ``last_id`` -- the fields of ``store.queues()`` (with ``source``
    first when PATH named several sources)."""
    frames = _Frames(spark, path)
    return frames.output(frames.summary())
