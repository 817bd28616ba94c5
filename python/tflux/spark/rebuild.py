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

How it scales (no stage runs one task per queue):

1. A pruned scan (``queue``, ``segment``, ``kind``, ``lsn``, ``implementation``; no messages)
   counts each queue's adds per segment and collects the CreateQueue/DeleteQueue events with the
   number of adds of their queue before them in their segment: a few rows per (queue, segment).
2. The driver turns them into two small broadcast tables: each (queue, segment)'s adds in earlier
   segments (per-segment prefix counts), and each incarnation's LSN interval, first id and the
   adds before it.
3. One scan of the log with messages: an add's rank is its prefix count plus its row number in a
   window over (source, queue, segment), so a busy queue spreads over its segments; its
   incarnation (and so its id) comes from the interval table; a remove's incarnation too.
4. Live records: adds (and snapshot records) without a matching remove, in the final incarnation.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

import tflux
from tflux.spark import _paths, register

MAX_LSN = 2**63 - 1

SEGMENT_BASE = StructType(
    [
        StructField("source", StringType()),
        StructField("queue", StringType()),
        StructField("segment", StringType()),
        StructField("seg_base", LongType()),
    ]
)
INCARNATIONS = StructType(
    [
        StructField("source", StringType()),
        StructField("queue", StringType()),
        StructField("inc", LongType()),
        StructField("inc_start", LongType()),
        StructField("inc_end", LongType()),
        StructField("adds_before", LongType()),
        StructField("base_id", LongType()),
    ]
)
SUMMARY = StructType(
    [
        StructField("source", StringType()),
        StructField("queue", StringType()),
        StructField("inc", LongType()),
        StructField("implementation", IntegerType()),
        StructField("last_id", LongType()),
    ]
)


@dataclass
class _Name:
    """One queue name of one source, as the driver sees it after the pruned scan."""

    start_impl: int | None = None  # in the snapshot (or the default queue without one)
    start_last_id: int | None = None
    segments: dict[str, int] = field(default_factory=dict)  # adds per segment
    events: list[tuple[int, str, int | None, str, int]] = field(default_factory=list)


class _Frames:
    """The DataFrames replay and the summary are built from (one small job runs here)."""

    def __init__(self, spark: SparkSession, path) -> None:
        register(spark)
        self.spark = spark
        self.sources = _paths.resolve(path)
        names: dict[tuple[str, str], _Name] = defaultdict(_Name)
        logs, snaps = [], []
        for src in self.sources:
            snap = tflux.read_snapshot_batch(src.snapshot) if src.snapshot else None
            after = snap.last_index if snap is not None else -1
            if snap is None:
                names[(src.base, "")].start_impl = 1
                names[(src.base, "")].start_last_id = 0
            else:
                for q in snap.queues:
                    n = names[(src.base, q["name"])]
                    n.start_impl, n.start_last_id = q["implementation"], q["last_id"]
                if len(snap):
                    snaps.append(src.snapshot)
            seg_names = _paths.segment_names(src.log_dir) if src.log_dir else []
            if seg_names:
                first = _paths.start_lsn(seg_names[0])
                if first > after + 1:
                    what = f"the snapshot's last index {after}" if snap else "no snapshot"
                    raise tflux.CorruptionError(
                        f"{src.log_dir}: the log starts at LSN {first} after {what} (a gap)",
                        src.log_dir,
                        None,
                    )
                logs.append((src.log_dir, after + 1))
        self.many = len(self.sources) > 1
        cols = ["source", "segment", "queue", "lsn", "kind", "key", "record_id", "message"]
        cols += ["implementation"]
        ends: dict[str, str] = {}
        if logs:
            # Both scans read the same LSNs: the second stops where the first did (a live store
            # may append meanwhile).
            last = self._collect_events(union(spark, logs, {}, cols), names)
            logs = [(d, first) for d, first in logs if d in last]  # the others had no entries
            ends = {d: str(last[d]) for d, _ in logs}
        log = union(spark, logs, ends, cols) if logs else None
        if log is None:
            log = spark.createDataFrame([], logs_schema(spark))
        seg_rows, inc_rows, summary_rows = self._plan(names)
        seg_base = F.broadcast(spark.createDataFrame(seg_rows, SEGMENT_BASE))
        incs = F.broadcast(spark.createDataFrame(inc_rows, INCARNATIONS))
        self.final = spark.createDataFrame(summary_rows, SUMMARY)

        def with_inc(df: DataFrame) -> DataFrame:
            cond = (
                (df.source == incs.source)
                & (df.queue == incs.queue)
                & (df.lsn >= incs.inc_start)
                & (df.lsn < incs.inc_end)
            )
            return df.join(incs, cond, "left").drop(incs.source).drop(incs.queue)

        by_segment = Window.partitionBy("source", "queue", "segment").orderBy("lsn")
        adds = (
            log.filter(F.col("kind") == "add_record")
            .select("source", "queue", "segment", "lsn", "key", "message")
            .join(seg_base, ["source", "queue", "segment"], "left")
            .withColumn("rank", F.col("seg_base") + F.row_number().over(by_segment))
        )
        self.adds = with_inc(adds).select(
            "source",
            "queue",
            "inc",
            (F.col("base_id") + F.col("rank") - F.col("adds_before")).alias("record_id"),
            "key",
            "message",
        )
        removes = log.filter(F.col("kind") == "remove_record").select(
            "source", "queue", "lsn", "record_id"
        )
        self.removes = with_inc(removes).select("source", "queue", "inc", "record_id", "lsn")
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

    @staticmethod
    def _collect_events(log: DataFrame, names: dict[tuple[str, str], _Name]) -> dict[str, int]:
        """Step 1: adds per (queue, segment) and the create/delete events, from a pruned scan;
        returns the last LSN read per log directory."""
        by_segment = (
            Window.partitionBy("source", "queue", "segment")
            .orderBy("lsn")
            .rowsBetween(Window.unboundedPreceding, -1)
        )
        is_add = (F.col("kind") == "add_record").cast("long")
        life = F.col("kind").isin("create_queue", "delete_queue")
        small = (
            log.select("log_dir", "source", "queue", "segment", "lsn", "kind", "implementation")
            .withColumn("before", F.coalesce(F.sum(is_add).over(by_segment), F.lit(0)))
            .groupBy("log_dir", "source", "queue", "segment")
            .agg(
                F.max("lsn").alias("last"),
                F.sum(is_add).alias("adds"),
                F.collect_list(
                    F.when(life, F.struct("lsn", "kind", "implementation", "before"))
                ).alias("events"),
            )
        )
        last: dict[str, int] = {}
        for r in small.collect():
            last[r.log_dir] = max(last.get(r.log_dir, -1), r.last)
            n = names[(r.source, r.queue)]
            n.segments[r.segment] = r.adds
            for e in r.events:
                n.events.append((e.lsn, e.kind, e.implementation, r.segment, e.before))
        return last

    @staticmethod
    def _plan(names: dict[tuple[str, str], _Name]):
        """Step 2: the broadcast tables, and per name its final incarnation (for the summary)."""
        seg_rows, inc_rows, summary_rows = [], [], []
        for (source, queue), n in names.items():
            prefix, before = 0, {}
            for seg in sorted(n.segments):
                before[seg] = prefix
                seg_rows.append((source, queue, seg, prefix))
                prefix += n.segments[seg]
            total = prefix
            creates = []
            last_cd, impl = None, n.start_impl
            for lsn, kind, implementation, seg, adds_in_seg in sorted(n.events):
                last_cd = kind
                if kind == "create_queue":
                    creates.append((lsn, before[seg] + adds_in_seg))
                    impl = implementation
            start = [(-1, 0, n.start_last_id or 0)] + [(lsn, b, 0) for lsn, b in creates]
            for inc, (lsn, adds_before, base) in enumerate(start):
                end = start[inc + 1][0] if inc + 1 < len(start) else MAX_LSN
                inc_rows.append((source, queue, inc, lsn, end, adds_before, base))
            alive = last_cd == "create_queue" or (last_cd is None and n.start_impl is not None)
            if alive:
                final = len(start) - 1
                _, adds_before, base = start[final]
                summary_rows.append((source, queue, final, impl, base + total - adds_before))
        return seg_rows, inc_rows, summary_rows

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
        final = F.broadcast(self.final.select("source", "queue", "inc"))
        live = self.records.join(
            self.removes.select("source", "queue", "inc", "record_id"),
            ["source", "queue", "inc", "record_id"],
            "left_anti",
        ).join(final, ["source", "queue", "inc"], "left_semi")
        return live.select("source", "queue", "record_id", "key", "message")

    def summary(self) -> DataFrame:
        counts = self.live().groupBy("source", "queue").agg(F.count("*").alias("count"))
        impl = F.col("implementation")
        name = impl.cast("string")  # an unknown code shows as itself
        for code, label in tflux.IMPLEMENTATIONS.items():
            name = F.when(impl == code, label).otherwise(name)
        return self.final.join(counts, ["source", "queue"], "left").select(
            "source",
            "queue",
            name.alias("implementation"),
            F.coalesce(F.col("count"), F.lit(0).cast("long")).alias("count"),
            "last_id",
        )

    def output(self, df: DataFrame) -> DataFrame:
        """The ``source`` column only when PATH named more than one source."""
        return df if self.many else df.drop("source")


def union(spark: SparkSession, logs, ends: dict[str, str], cols: list[str]) -> DataFrame:
    """The log entries of every (log directory, first LSN), up to ``ends[dir]`` when given,
    with a ``log_dir`` column."""
    out = None
    for log_dir, first in logs:
        reader = spark.read.format("tflux").option("fromLsn", str(first))
        if log_dir in ends:
            reader = reader.option("toLsn", ends[log_dir])
        df = reader.load(log_dir).select(F.lit(log_dir).alias("log_dir"), *cols)
        out = df if out is None else out.unionByName(df)
    return out


def logs_schema(spark: SparkSession) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    from tflux.spark._columns import log_schema

    full = from_arrow_schema(log_schema())
    keep = ["source", "segment", "queue", "lsn", "kind", "key", "record_id", "message"]
    keep += ["implementation"]
    return StructType([StructField("log_dir", StringType())] + [full[name] for name in keep])


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
