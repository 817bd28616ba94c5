"""Queue state rebuilt with Spark operations from the snapshot and log of each source.

The rules are the state machine's (spec 7), expressed as columns instead of a loop:

- Restore starts from the snapshot (its queues, their ``last id`` and records) or, without one,
  from the default queue ``""`` alone; log entries at or below the snapshot's last index are
  skipped.
- Every ``CreateQueue`` starts a new *incarnation* of its name (the first is the queue as the
  snapshot left it). Removes and adds belong to the incarnation they were logged in. ``inc``
  numbers the incarnations of every name of every source, so (``inc``, record id) alone names
  a record: the joins hash two longs, not the source and queue strings.
- An AddRecord gets ``last id + 1``: the queue's last id at the start of its incarnation (the
  snapshot's for incarnation 0, else 0) plus its rank among that incarnation's adds.
- A record is live when no RemoveRecord of the same (queue, incarnation, id) exists and its
  incarnation is the queue's last one, unless the last CreateQueue/DeleteQueue of the name is a
  delete.

How it scales (no window, no stage that runs one task per queue, no shuffle of entries):

1. A pruned scan (no messages) with the reader's ``queue_adds`` column (``addCounts``: the
   running number of adds of each queue within its segment file, counted by the reader, which
   reads a segment in LSN order) is aggregated per (queue, segment) with partial aggregation:
   each queue's adds per segment, its removes, and the CreateQueue/DeleteQueue events with the
   adds of their queue before them in their segment. A few rows per (queue, segment) reach
   the driver.
2. The driver turns them into small broadcast tables: each (queue, segment)'s adds in earlier
   segments (per-segment prefix counts), and each incarnation's LSN interval, first id and the
   adds before it.
3. The scan with messages: an add's rank is its segment's prefix count plus its
   ``queue_adds``, so a busy queue spreads over every split of every segment; its incarnation
   (and so its id) comes from the interval table, a remove's incarnation too. The JVM reader
   evaluates both in the scan from the tables passed as its ``replayPlan`` option (``inc``,
   ``replay_id``, and ``replay_key``: incarnation and id as one long, for the removes' join);
   larger tables, and the Python source, use broadcast joins.
4. Live records: adds (and snapshot records) without a matching remove, in the final
   incarnation. The removes are broadcast when there are at most :data:`BROADCAST_REMOVES`
   (step 1 counted them), so the live records need no shuffle at all; more removes are joined
   with a shuffle by (incarnation, id), which spreads a busy queue too.

Removes as id ranges (issue 31). At the end of a replay the removed ids of an incarnation are
its ids minus the live ones (minus ids never added), so merged over the whole log they are at
most about one range per live record, whatever the order of the acks. Step 1 (the JVM
reader's ``summary`` scan, with its ``rm_*`` columns) gives per queue, chunk and group (the
removes between two CreateQueue/DeleteQueue of the name) the removed ids merged into runs,
each with the group's first LSN and its count of removes; :func:`_merge_ranges` places each
run in the incarnation whose LSN interval holds that LSN (where the scan places a
RemoveRecord), keeps the final incarnations', and merges them. When every RemoveRecord is in a
range (no chunk overflowed past :data:`SUMMARY_RUNS` runs) and the merged ranges are at most
:data:`RANGE_PLAN_RANGES`, they travel in ``replayPlan`` (``r LO HI`` lines) and the JVM
readers drop, in the scan, every AddRecord and snapshot record in a removed range of its
incarnation (``ReplayIds.Queue.removed``, the one place of that rule): step 4 is then the final
incarnations' filter alone, with no removes' scan and no join. The set of removed
(incarnation, id) is what the anti-join uses, so the rows are the same: an id removed twice
merges into one range, a remove of an id never added removes nothing, one logged before its
add removes it, as with the join. ``validate=True`` builds the frames without ranges, so
:meth:`_Frames.check` sees every add and remove, unchanged. Otherwise (too many ranges, an
overflow, the broadcast joins of step 3, the Python source) the join serves as above.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
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
from tflux.spark._jvm import jvm_reader_loaded

MAX_LSN = 2**63 - 1
# At most this many removes are broadcast to every task (about 50 MB); more are shuffled.
BROADCAST_REMOVES = 1_000_000
# At most this many removed ranges (merged over the whole log, final incarnations only) travel
# in the replayPlan option; more fall back to the removes' join. 100,000 ranges are about 2.5 MB
# of plan text parsed once on the driver, 1.6 MB of arrays in the reader factory Spark ships with
# each stage, and 17 steps of binary search per add: small beside a scan of the removes, and
# far above what a queue whose acks keep up needs (about one range per live record).
RANGE_PLAN_RANGES = 100_000
# Runs of removed ids one chunk of the summary scan may hold (the reader's summaryRuns; replay
# asks for less with many segments, see _Frames); past it the chunk gives an overflow row and
# replay falls back to the removes' join.
SUMMARY_RUNS = 65_536

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


@dataclass
class _Removed:
    """Step 1's removed ranges, as the driver collects them from :func:`summaries`."""

    # per (source, queue): (LSN of the range's group, first id, last id)
    by_name: dict[tuple[str, str], list[tuple[int, int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    covered: int = 0  # RemoveRecords the ranges hold
    overflow: bool = False  # a chunk had too many runs: no ranges


def _merge_ranges(
    removed: _Removed, inc_rows: list[tuple], final_incs: list[int], removes: int
) -> dict[int, list[tuple[int, int]]] | None:
    """Each final incarnation's removed ids as merged ranges ``(lo, hi)`` (ascending, apart),
    each range placed in the incarnation whose LSN interval holds its group's LSN (as the scan
    places a RemoveRecord); None when they cannot stand for the removes: a chunk overflowed,
    the ranges do not hold every RemoveRecord step 1 counted, or there are more than
    :data:`RANGE_PLAN_RANGES`. Ids removed twice merge into one range: the set of removed
    (incarnation, id) is what the removes' anti-join uses too, so the live records are the
    same (``validate=True`` checks duplicates on the full frames instead)."""
    if removed.overflow or removed.covered != removes:
        return None
    starts: dict[tuple[str, str], tuple[list[int], list[tuple]]] = {}
    for row in sorted(inc_rows, key=lambda r: (r[0], r[1], r[3])):
        entry = starts.setdefault((row[0], row[1]), ([], []))
        entry[0].append(row[3])
        entry[1].append(row)
    final = set(final_incs)
    per_inc: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for name, rows in removed.by_name.items():
        lsns, incs = starts[name]
        for lsn, lo, hi in rows:
            at = bisect.bisect_right(lsns, lsn) - 1
            _, _, inc, _, end, *_ = incs[at]
            if lsn < end and inc in final:
                per_inc[inc].append((lo, hi))
    out: dict[int, list[tuple[int, int]]] = {}
    total = 0
    for inc, rows in per_inc.items():
        rows.sort()
        merged = [list(rows[0])]
        for lo, hi in rows[1:]:
            if lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        out[inc] = [(lo, hi) for lo, hi in merged]
        total += len(merged)
        if total > RANGE_PLAN_RANGES:
            return None
    return out


class _Frames:
    """The DataFrames replay and the summary are built from (one small job runs here)."""

    def __init__(
        self,
        spark: SparkSession,
        path,
        fmt: str = "tflux",
        dialect: str | None = None,
        ranges: bool = True,
    ) -> None:
        register(spark)
        self.spark = spark
        # Each source's dialect, detected (files that disagree with each other or with
        # ``dialect`` raise DialectError here, before any job) and handed to every reader.
        self.sources = _paths.resolve(path, dialect)
        self.dialects = {src.log_dir: src.dialect for src in self.sources if src.log_dir}
        names: dict[tuple[str, str], _Name] = defaultdict(_Name)
        logs, snaps = [], []
        segments = 0
        describe = _snapshot_describer(spark, fmt)
        for src in self.sources:
            snap = describe(src.snapshot) if src.snapshot else None
            after = snap.last_index if snap is not None else -1
            if snap is None:
                names[(src.base, "")].start_impl = 1
                names[(src.base, "")].start_last_id = 0
            else:
                for name, implementation, last_id in snap.queues:
                    n = names[(src.base, name)]
                    n.start_impl, n.start_last_id = implementation, last_id
                if snap.records:
                    snaps.append(src.snapshot)
            seg_names = _paths.segment_names(src.log_dir) if src.log_dir else []
            segments += len(seg_names)
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
        cols += ["implementation", "queue_adds"]
        ends: dict[str, str] = {}
        removes = 0
        removed: _Removed | None = None
        if logs:
            # Both scans read the same LSNs: the second stops where the first did (a live store
            # may append meanwhile), so their queue_adds agree.
            if fmt == "tflux" and jvm_reader_loaded(spark):
                # Runs per chunk: a share of the plan's cap, so that a log whose removes are
                # too scattered for the plan overflows early instead of sending the driver
                # rows it would drop (at most about RANGE_PLAN_RANGES per split of a segment).
                runs = min(SUMMARY_RUNS, max(1024, RANGE_PLAN_RANGES // max(segments, 1)))
                small = summaries(spark, logs, self.dialects, ranges=ranges, runs=runs)
                removed = _Removed() if ranges else None
            else:
                small = self._summarize(union(spark, logs, {}, cols, fmt, dialects=self.dialects))
            last, removes = self._collect_events(small, names, removed)
            logs = [(d, first) for d, first in logs if d in last]  # the others had no entries
            ends = {d: str(last[d]) for d, _ in logs}
        seg_rows, inc_rows, summary_rows, keys = self._plan(names)
        self._inc_rows, self._summary_rows = inc_rows, summary_rows
        self.final_incs = [row[2] for row in summary_rows]
        # The JVM reader evaluates the id and incarnation rules in the scan when the tables
        # are small enough to ship with every task; else (and with the Python source) they
        # are broadcast joins.
        in_scan = fmt == "tflux" and len(seg_rows) + len(inc_rows) <= REPLAY_PLAN_ROWS
        in_scan = in_scan and bool(logs) and jvm_reader_loaded(spark)
        # (incarnation, id) as one long (replay_key) for the removes' join, when every key fits
        # and the snapshot records' keys are a CASE too.
        first_names = sum(1 for row in inc_rows if row[3] == -1)
        self.keyed = in_scan and keys is not None and (not snaps or first_names <= CASE_NAMES)
        # The removed ids as ranges per final incarnation (step 1 gave them), filtered in the
        # scans: then no removes' scan and no join.
        self.ranges = (
            _merge_ranges(removed, inc_rows, self.final_incs, removes)
            if in_scan and removed is not None and removes
            else None
        )
        plan = replay_plan(seg_rows, inc_rows, keys, self.ranges) if in_scan else None
        self.plan = plan
        log = union(spark, logs, ends, cols, fmt, plan, self.dialects) if logs else None
        if log is None:
            log = _small(spark, [], logs_schema(spark))
        add_rows = log.filter(F.col("kind") == "add_record")
        remove_rows = log.filter(F.col("kind") == "remove_record")
        if plan is not None:
            rkey = [F.col("replay_key").alias("rkey")] if self.keyed else []
            self.adds = add_rows.select(
                "source",
                "queue",
                "inc",
                F.col("replay_id").alias("record_id"),
                "key",
                "message",
                F.col("lsn").alias("add_lsn"),
                *rkey,
            )
            self.removes = remove_rows.select("source", "queue", "inc", "record_id", "lsn", *rkey)
        else:
            self.adds, self.removes = self._joined(add_rows, remove_rows, seg_rows)
        self.remove_count = removes  # RemoveRecords in the LSNs both scans read (step 1)
        # Without removes, or with their ranges in the scans, no removes' scan and no join.
        self.join_removes = bool(removes) and self.ranges is None
        self.broadcast_removes = removes <= BROADCAST_REMOVES and _broadcast_allowed(spark)
        records = self.adds
        if snaps:
            snap_reader = spark.read.format(fmt.replace("tflux", "tflux_snapshot", 1))
            if self.ranges is not None:  # the JVM snapshot reader drops the removed records
                snap_reader = snap_reader.option("replayPlan", plan)
            snap_records = snap_reader.load(",".join(snaps)).select(
                "source", "queue", "record_id", "key", "message"
            )
            snap_records = _first_incarnation(
                snap_records, inc_rows, self, keys if self.keyed else None
            )
            # Added before the log's first LSN (check() orders a remove after its add).
            snap_records = snap_records.withColumn("add_lsn", F.lit(-1).cast("long"))
            records = snap_records.unionByName(records)
        self.records = records

    def incs(self) -> DataFrame:
        """The incarnations' table, broadcast (built only when a join needs it)."""
        return F.broadcast(_small(self.spark, self._inc_rows, INCARNATIONS))

    def final(self) -> DataFrame:
        """Each live name's final incarnation (for the summary)."""
        return _small(self.spark, self._summary_rows, SUMMARY)

    def _joined(
        self, add_rows: DataFrame, remove_rows: DataFrame, seg_rows: list[tuple]
    ) -> tuple[DataFrame, DataFrame]:
        """Steps 3 as broadcast joins: the adds' ids and the incarnation of adds and removes."""
        seg_base = F.broadcast(_small(self.spark, seg_rows, SEGMENT_BASE))
        incs = self.incs()

        def with_inc(df: DataFrame) -> DataFrame:
            cond = (
                (df.source == incs.source)
                & (df.queue == incs.queue)
                & (df.lsn >= incs.inc_start)
                & (df.lsn < incs.inc_end)
            )
            return df.join(incs, cond, "left").drop(incs.source).drop(incs.queue)

        adds = (
            add_rows.select("source", "queue", "segment", "lsn", "key", "message", "queue_adds")
            .join(seg_base, ["source", "queue", "segment"], "left")
            .withColumn("rank", F.col("seg_base") + F.col("queue_adds"))
        )
        adds = with_inc(adds).select(
            "source",
            "queue",
            "inc",
            (F.col("base_id") + F.col("rank") - F.col("adds_before")).alias("record_id"),
            "key",
            "message",
            F.col("lsn").alias("add_lsn"),
        )
        removes = remove_rows.select("source", "queue", "lsn", "record_id")
        return adds, with_inc(removes).select("source", "queue", "inc", "record_id", "lsn")

    @staticmethod
    def _summarize(log: DataFrame) -> DataFrame:
        """Step 1 over entries (the Python source): adds per (queue, segment) and the
        create/delete events, from a pruned scan aggregated without a window. The JVM reader
        gives the same rows from a few per segment (its ``summary`` option, see
        :func:`summaries`)."""
        # One hash aggregate of plain columns (no collect_list): every CreateQueue/DeleteQueue
        # is a group of its own (its LSN, kind and implementation are keys, null for the other
        # entries), so the events reach the driver as rows beside the per-(queue, segment) ones.
        life = F.col("kind").isin("create_queue", "delete_queue")
        return (
            log.select(
                "log_dir",
                "source",
                "queue",
                "segment",
                "lsn",
                "queue_adds",
                (F.col("kind") == "remove_record").cast("long").alias("remove"),
                F.when(life, F.col("lsn")).alias("ev_lsn"),
                F.when(life, F.col("kind")).alias("ev_kind"),
                F.when(life, F.col("implementation")).alias("ev_impl"),
                F.when(F.col("kind").isin(*TASK_KINDS), F.struct("lsn", "kind")).alias("task"),
            )
            .groupBy("log_dir", "source", "queue", "segment", "ev_lsn", "ev_kind", "ev_impl")
            .agg(
                F.max("lsn").alias("last"),
                F.coalesce(F.max("queue_adds"), F.lit(0)).alias("adds"),
                F.sum("remove").alias("removes"),
                F.min("task").alias("task"),  # the first task-queue delta, refused below
            )
        )

    @staticmethod
    def _collect_events(
        small: DataFrame, names: dict[tuple[str, str], _Name], removed: _Removed | None = None
    ) -> tuple[dict[str, int], int]:
        """Step 1 on the driver: the rows of :meth:`_summarize` or :func:`summaries` into
        ``names`` (and, given ``removed``, the removed ranges of :func:`summaries` with
        ``ranges=True`` into it); returns the last LSN read per log directory and the number
        of removes."""
        last: dict[str, int] = {}
        removes = 0
        rows = small.collect()
        _refuse_task_deltas(rows)
        for r in rows:
            if removed is not None and r.rm_lsn is not None:
                if r.rm_lo is None:  # a chunk with too many runs
                    removed.overflow = True
                else:
                    removed.by_name[(r.source, r.queue)].append((r.rm_lsn, r.rm_lo, r.rm_hi))
                    removed.covered += r.rm_count
                continue
            last[r.log_dir] = max(last.get(r.log_dir, -1), r.last)
            removes += r.removes
            n = names[(r.source, r.queue)]
            # A queue's adds in a segment: the largest running count of its rows (an event's
            # row counts the adds before it).
            n.segments[r.segment] = max(n.segments.get(r.segment, 0), r.adds)
            if r.ev_lsn is not None:
                n.events.append((r.ev_lsn, r.ev_kind, r.ev_impl, r.segment, r.adds))
        return last, removes

    @staticmethod
    def _plan(names: dict[tuple[str, str], _Name]):
        """Step 2: the broadcast tables, per name its final incarnation (for the summary), and
        per incarnation the range of its ``replay_key`` (first key - 1, ids it can hold), or
        None when the keys would not fit in 62 bits."""
        seg_rows, inc_rows, summary_rows = [], [], []
        keys: dict[int, tuple[int, int]] | None = {}
        key_base = 0
        gid = 0  # incarnations numbered across every name of every source
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
                inc_rows.append((source, queue, gid + inc, lsn, end, adds_before, base))
                adds = (start[inc + 1][1] if inc + 1 < len(start) else total) - adds_before
                keys[gid + inc] = (key_base, base + adds)  # its ids are 1..base + adds
                key_base += base + adds
            alive = last_cd == "create_queue" or (last_cd is None and n.start_impl is not None)
            if alive:
                final = len(start) - 1
                _, adds_before, base = start[final]
                summary_rows.append((source, queue, gid + final, impl, base + total - adds_before))
            gid += len(start)
        return seg_rows, inc_rows, summary_rows, keys if key_base < 2**62 else None

    def check(self) -> None:
        """Raise :class:`tflux.ReplayError` (with the LSN) where the local restore would: a
        RemoveRecord of a record that is not there (never added, or added only after the
        remove), or removed twice. Costs two Spark jobs. Needs every record, removed or not:
        frames built with ``ranges=False``."""
        if self.ranges is not None:
            raise ValueError("check() needs the frames of every record (ranges=False)")
        keys = ["inc", "record_id"]
        # An (incarnation, id) is added once: its ids count its adds. The join keeps each
        # remove once, with the LSN of its add (-1 for a snapshot's record, null for none).
        present = self.records.select(*keys, "add_lsn")
        missing = (
            self.removes.join(present, keys, "left")
            .filter(F.col("add_lsn").isNull() | (F.col("add_lsn") > F.col("lsn")))
            .orderBy("lsn")
            .limit(1)
            .collect()
        )
        twice = (
            self.removes.groupBy(*keys)
            .agg(
                F.count("*").alias("n"),
                F.max("lsn").alias("lsn"),
                F.first("source").alias("source"),
                F.first("queue").alias("queue"),
            )
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
        on = ["rkey"] if self.keyed else ["inc", "record_id"]
        removes = self.removes.select(*on)
        if self.broadcast_removes:
            removes = F.broadcast(removes)
        # In a final incarnation: a set of longs tested in the task, no join.
        live = self.records.filter(F.col("inc").isin(self.final_incs))
        if self.join_removes:  # else no removes, or the scans dropped the removed records
            live = live.join(removes, on, "left_anti")
        return live.select("source", "queue", "record_id", "key", "message")

    def summary(self) -> DataFrame:
        counts = self.live().groupBy("source", "queue").agg(F.count("*").alias("count"))
        impl = F.col("implementation")
        name = impl.cast("string")  # an unknown code shows as itself
        for code, label in tflux.IMPLEMENTATIONS.items():
            name = F.when(impl == code, label).otherwise(name)
        return (
            self.final()
            .join(counts, ["source", "queue"], "left")
            .select(
                "source",
                "queue",
                name.alias("implementation"),
                F.coalesce(F.col("count"), F.lit(0).cast("long")).alias("count"),
                "last_id",
            )
        )

    def output(self, df: DataFrame) -> DataFrame:
        """The ``source`` column only when PATH named more than one source."""
        return df if self.many else df.drop("source")


@dataclass
class _SnapshotInfo:
    """What the driver needs of a snapshot: its last index, record count and queues
    (name, implementation, last id)."""

    last_index: int
    records: int
    queues: list[tuple[str, int, int]]


def _snapshot_describer(spark: SparkSession, fmt: str):
    """The snapshot reader of the format's side: the JVM reader decodes and checks the file
    once, keeping it for the tasks in the same JVM (``local[N]`` reads it once per query);
    the Python source's side reads it with the core."""
    if fmt == "tflux" and jvm_reader_loaded(spark):
        jvm = spark.sparkContext._jvm

        def jvm_describe(path: str) -> _SnapshotInfo | None:
            text = jvm.io.tflux.spark.SnapshotSource.describe(path)
            if text is None:
                return None
            head, *lines = text.split("\n")
            last_index, records = (int(v) for v in head.split())
            queues = []
            for line in lines:
                impl, last_id, name = line.split(" ")
                queues.append((bytes.fromhex(name).decode(), int(impl), int(last_id)))
            return _SnapshotInfo(last_index, records, queues)

        return jvm_describe

    def core_describe(path: str) -> _SnapshotInfo | None:
        snap = tflux.read_snapshot_batch(path)
        if snap is None:
            return None
        if snap.task_queues:  # spec section 12: state the columns do not carry
            raise tflux.ReplayError(
                f"Spark replay cannot replay {path}: it holds the task-queue state of queue "
                f"{snap.task_queues[0]!r} (rules, delayed records or delivery counts), which "
                "tflux.open and tflux replay restore"
            )
        queues = [(q["name"], q["implementation"], q["last_id"]) for q in snap.queues]
        return _SnapshotInfo(snap.last_index, len(snap), queues)

    return core_describe


# Up to this many queue names, a snapshot record's incarnation is a CASE expression on its queue
# (compared in the task, no hashing of strings); more names are a broadcast join.
CASE_NAMES = 32


def _first_incarnation(
    snap_records: DataFrame,
    inc_rows: list[tuple],
    frames: _Frames,
    keys: dict[int, tuple[int, int]] | None = None,
) -> DataFrame:
    """Snapshot records with ``inc``: every snapshot record is in its name's first
    incarnation (the one starting at LSN -1). Given ``keys``, also their ``rkey`` (as the
    reader's ``replay_key``)."""
    first = [(source, queue, inc) for source, queue, inc, start, *_ in inc_rows if start == -1]
    if len(first) > CASE_NAMES:
        table = frames.incs().filter(F.col("inc_start") == -1).select("source", "queue", "inc")
        return snap_records.join(F.broadcast(table), ["source", "queue"], "left")
    # One SQL expression per column (one analysis on the driver), not a column per name.
    rows = []
    for source, queue, g in first:
        cond = f"queue = {_sql_value(queue, StringType())}"
        if frames.many:
            cond += f" AND source = {_sql_value(source, StringType())}"
        rows.append((cond, g))
    inc = " ".join(f"WHEN {cond} THEN CAST({g} AS BIGINT)" for cond, g in rows)
    cols: list = ["source", "queue", "record_id", "key", "message"]
    cols.append(F.expr(f"CASE {inc} END" if rows else "CAST(NULL AS BIGINT)").alias("inc"))
    if keys is not None:
        rkey = []
        for cond, g in rows:
            key_base, span = keys[g]
            rkey.append(
                f"WHEN {cond} THEN CASE WHEN record_id BETWEEN 1 AND {int(span)} "
                f"THEN record_id + CAST({int(key_base)} AS BIGINT) END"
            )
        text = f"CASE {' '.join(rkey)} END" if rkey else "CAST(NULL AS BIGINT)"
        cols.append(F.expr(text).alias("rkey"))
    return snap_records.select(*cols)


# Up to this many rows, the driver's small tables are inline SQL tables (LocalRelation): Spark
# broadcasts them without running a job. Larger ones go to the JVM as Arrow (one job each).
INLINE_ROWS = 2000


# The task-queue deltas' kinds (spec section 12), which Spark's replay does not apply.
TASK_KINDS = ("queue_rules", "add_later", "delivered", "failed", "purge")


def _refuse_task_deltas(rows) -> None:
    """A :class:`tflux.ReplayError` naming the first task-queue delta of step 1's rows (their
    ``task`` field), if any: Spark's replay applies TaskFlux's four deltas only, and a skipped
    AddLater or Purge would give wrong records, never a silent skip."""
    tasks = [(r, getattr(r, "task", None)) for r in rows]  # no such field: the JVM's rows
    firsts = [(t.lsn, t.kind, r) for r, t in tasks if t is not None]
    if firsts:
        lsn, kind, r = min(firsts, key=lambda t: (t[2].source, t[0]))
        raise tflux.ReplayError(
            f"Spark replay cannot replay the {kind} delta at LSN {lsn} of queue {r.queue!r} "
            f"({r.source}): task-queue deltas (spec section 12) are replayed by "
            "tflux.open and tflux replay only",
            lsn,
        )


def _sql_value(value, type_) -> str:
    if value is None:
        return f"CAST(NULL AS {type_.simpleString()})"
    if isinstance(type_, StringType):  # any text, no escaping rules: its UTF-8 bytes in hex
        return f"CAST(X'{value.encode().hex()}' AS STRING)"
    return f"CAST({int(value)} AS {type_.simpleString()})"


def _small(spark: SparkSession, rows: list[tuple], schema: StructType) -> DataFrame:
    """A DataFrame of the driver's ``rows``: an inline table when small (no job runs to
    broadcast it), else sent to the JVM as Arrow (no Python worker runs for it either, unlike
    ``createDataFrame`` of a list)."""
    if 0 < len(rows) <= INLINE_ROWS:
        types = [f.dataType for f in schema.fields]
        values = ",".join(
            "(" + ",".join(_sql_value(v, t) for v, t in zip(row, types, strict=True)) + ")"
            for row in rows
        )
        names = ",".join(f"`{f.name}`" for f in schema.fields)
        return spark.sql(f"SELECT * FROM VALUES {values} AS t({names})")
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(schema)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(arrow)
    table = pa.Table.from_arrays(
        [pa.array(col, f.type) for col, f in zip(columns, arrow, strict=True)], schema=arrow
    )
    return spark.createDataFrame(table, schema)


def _broadcast_allowed(spark: SparkSession) -> bool:
    """Whether the session allows broadcast joins (``autoBroadcastJoinThreshold`` not -1)."""
    threshold = spark.conf.get("spark.sql.autoBroadcastJoinThreshold", "10485760")
    return str(threshold).strip() != "-1"


# At most this many rows of replay's small tables (per (queue, segment) and per incarnation) go
# to the JVM reader's tasks as its replayPlan option; more are broadcast joins.
REPLAY_PLAN_ROWS = 20_000


def replay_plan(
    seg_rows: list[tuple],
    inc_rows: list[tuple],
    keys: dict[int, tuple[int, int]] | None,
    ranges: dict[int, list[tuple[int, int]]] | None = None,
) -> str:
    """The JVM reader's ``replayPlan`` option (format in ``ReplayIds.java``): per name its
    segments' earlier adds and its incarnations in LSN order with their key ranges (none
    without ``keys``: the reader's ``replay_key`` is then null), each with its removed
    ``ranges`` (``r LO HI`` lines; the readers then drop the records in them)."""
    by_name: dict[tuple[str, str], list[str]] = defaultdict(list)
    for source, queue, seg, prefix in seg_rows:
        by_name[(source, queue)].append(f"s {seg} {prefix}")
    for source, queue, inc, start, end, adds_before, base in sorted(
        inc_rows, key=lambda r: (r[0], r[1], r[3])
    ):
        key_base, span = keys[inc] if keys is not None else (0, 0)
        by_name[(source, queue)].append(
            f"i {inc} {start} {end} {adds_before} {base} {key_base} {span}"
        )
        if ranges and inc in ranges:
            by_name[(source, queue)].extend(f"r {lo} {hi}" for lo, hi in ranges[inc])
    lines = []
    for (source, queue), rows in by_name.items():
        lines.append(f"q {source.encode().hex()} {queue.encode().hex()}")
        lines += rows
    return "\n".join(lines)


def union(
    spark: SparkSession,
    logs,
    ends: dict[str, str],
    cols: list[str],
    fmt: str = "tflux",
    plan: str | None = None,
    dialects: dict[str, str] | None = None,
) -> DataFrame:
    """The log entries of every (log directory, first LSN), up to ``ends[dir]`` when given,
    with a ``log_dir`` column and the ``queue_adds`` counts (and, given a ``plan`` for the
    JVM reader, ``inc`` and ``replay_id``), each directory read in ``dialects[dir]`` when
    given (else the dialect its files say)."""
    out = None
    if plan is not None:
        cols = [*cols, "inc", "replay_id", "replay_key"]
    for log_dir, first in logs:
        reader = spark.read.format(fmt).option("fromLsn", str(first)).option("addCounts", "true")
        if log_dir in ends:
            reader = reader.option("toLsn", ends[log_dir])
        if plan is not None:
            reader = reader.option("replayPlan", plan)
        if dialects and dialects.get(log_dir):
            reader = reader.option("dialect", dialects[log_dir])
        df = reader.load(log_dir).select(F.lit(log_dir).alias("log_dir"), *cols)
        out = df if out is None else out.unionByName(df)
    return out


def summaries(
    spark: SparkSession,
    logs,
    dialects: dict[str, str] | None = None,
    ranges: bool = False,
    runs: int | None = None,
) -> DataFrame:
    """Step 1 through the JVM reader's ``summary`` option: per (log directory, source, queue,
    segment) the last LSN, adds and removes, and a row per CreateQueue/DeleteQueue with the
    adds of its queue before it; the same rows :meth:`_Frames._summarize` aggregates from
    every entry, aggregated here from a few rows per segment (and split). With ``ranges``, also
    the rows of the removed ranges (``rm_lo``, ``rm_hi``, ``rm_lsn``, ``rm_count``; an overflow
    row has ``rm_lo`` null; see ``Summary.java``), kept apart by ``rm_lsn``, with at most
    ``runs`` (default :data:`SUMMARY_RUNS`) runs per chunk."""
    out = None
    keys = ["log_dir", "source", "queue", "segment", "ev_lsn", "ev_kind", "ev_impl"]
    aggs = [
        F.max("last").alias("last"),
        F.coalesce(F.max("adds"), F.lit(0)).alias("adds"),
        F.sum("removes").alias("removes"),
    ]
    if ranges:
        keys += ["rm_lsn", "rm_lo", "rm_hi"]
        aggs.append(F.sum("rm_count").alias("rm_count"))
    for log_dir, first in logs:
        reader = spark.read.format("tflux").option("fromLsn", str(first)).option("summary", "true")
        if ranges:
            reader = reader.option("summaryRuns", str(runs or SUMMARY_RUNS))
        if dialects and dialects.get(log_dir):
            reader = reader.option("dialect", dialects[log_dir])
        df = reader.load(log_dir).withColumn("log_dir", F.lit(log_dir))
        out = df if out is None else out.unionByName(df)
    return out.groupBy(*keys).agg(*aggs)


def logs_schema(spark: SparkSession) -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    from tflux.spark._columns import QUEUE_ADDS, log_schema

    full = from_arrow_schema(log_schema().append(QUEUE_ADDS))
    keep = ["source", "segment", "queue", "lsn", "kind", "key", "record_id", "message"]
    keep += ["implementation", "queue_adds"]
    return StructType([StructField("log_dir", StringType())] + [full[name] for name in keep])


def replay(
    spark: SparkSession, path, validate: bool = False, dialect: str | None = None
) -> DataFrame:
    """Live records per queue: ``queue``, ``record_id``, ``key``, ``message`` (ready records, as
    ``tflux.open(base, readonly=True).records(queue)`` returns them; in-flight records of a
    running store are ready after a restore). Order by ``queue, key, record_id`` for dequeue
    order. With several sources a leading ``source`` column names each record's base directory.

    ``validate=True`` first checks what the local restore checks for removals (a RemoveRecord
    of a missing or already removed record raises :class:`tflux.ReplayError` with its LSN); it
    costs two extra Spark jobs, so it is off by default.

    ``dialect`` ("spec" or "taskflux") says which dialect the sources are in; by default each
    is read in the one its files say. Files that disagree with it, or with each other, raise
    :class:`tflux.DialectError` before any job runs.
    """
    # validate=True checks the full frames (every add and remove), so no ranges there.
    frames = _Frames(spark, path, dialect=dialect, ranges=not validate)
    if validate:
        frames.check()
    return frames.output(frames.live())


def queue_summary(spark: SparkSession, path, dialect: str | None = None) -> DataFrame:
    """One row per queue alive after the replay: ``queue``, ``implementation`` (heap/array),
    ``count`` (live records), ``last_id`` -- the fields of ``store.queues()`` (with ``source``
    first when PATH named several sources); ``dialect`` as for :func:`replay`."""
    frames = _Frames(spark, path, dialect=dialect)
    return frames.output(frames.summary())
