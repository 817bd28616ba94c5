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

Removes as id ranges (issue 31) and bitmaps (issue 45), filtered in the scans with no removes'
scan and no join: see :mod:`tflux.spark._removed`.
"""

from __future__ import annotations

import base64
from collections import defaultdict
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import tflux
from tflux.spark import _paths, _tasks, register
from tflux.spark._jvm import jvm_reader_loaded
from tflux.spark._removed import _Bitmap, _merge_ranges, _Removed
from tflux.spark._snapshots import _first_incarnation, _snapshot_describer
from tflux.spark._tables import (
    INCARNATIONS,
    SEGMENT_BASE,
    SUMMARY,
    _broadcast_allowed,
    _small,
    logs_schema,
)
from tflux.spark._tasks import HasTasks
from tflux.spark._validate import check_removes

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
# At most this many bits of removed bitmaps (each final incarnation's ids from its first removed
# one to its last id) travel in the replayPlan option (issue 45); more fall back to the removes'
# join. 2**28 bits are 32 MiB of bitmaps (45 MB of plan text, base64), for 268M ids, about 2 s
# more per scan: docs/benchmarks.md (Spark, issue 45) has what a bitmap costs by size.
PLAN_BITS = 1 << 28
# Bits of bitmaps one chunk of the summary scan may hold (the reader's summaryBits): a chunk's
# group holds its ids as a bitmap from its smallest id to its largest.
SUMMARY_BITS = 1 << 27


@dataclass
class _Name:
    """One queue name of one source, as the driver sees it after the pruned scan."""

    start_impl: int | None = None  # in the snapshot (or the default queue without one)
    start_last_id: int | None = None
    segments: dict[str, int] = field(default_factory=dict)  # adds per segment
    events: list[tuple[int, str, int | None, str, int]] = field(default_factory=list)


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
                small = summaries(
                    spark, logs, self.dialects, ranges=ranges, runs=runs, bits=SUMMARY_BITS
                )
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
            _merge_ranges(
                removed,
                inc_rows,
                self.final_incs,
                removes,
                RANGE_PLAN_RANGES,
                {inc: span for inc, (_, span) in keys.items()} if keys is not None else None,
                PLAN_BITS,
            )
            if in_scan and removed is not None and removes
            else None
        )
        plan = replay_plan(seg_rows, inc_rows, keys, self.ranges) if in_scan else None
        self.plan = plan
        log = union(spark, logs, ends, cols, fmt, plan, self.dialects) if logs else None
        if log is None:
            log = _small(spark, [], logs_schema(spark))
        add_rows = log.filter(F.col("kind") == "add_record")

        def remove_rows() -> DataFrame:
            return log.filter(F.col("kind") == "remove_record")

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
            # Built when a join or check() needs it: with the removed ids in the scans, a
            # replay never reads it (and each DataFrame built costs py4j round trips).
            removed_cols = ["source", "queue", "inc", "record_id", "lsn", *rkey]
            self._removes = lambda: remove_rows().select(*removed_cols)
        else:
            self.adds, removes_df = self._joined(add_rows, remove_rows(), seg_rows)
            self._removes = lambda: removes_df
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
                snap_records,
                inc_rows,
                self.incs,
                self.many,
                keys if self.keyed else None,
                CASE_NAMES,
            )
            # Added before the log's first LSN (check() orders a remove after its add).
            snap_records = snap_records.withColumn("add_lsn", F.lit(-1).cast("long"))
            records = snap_records.unionByName(records)
        self.records = records

    @property
    def removes(self) -> DataFrame:
        """The RemoveRecords with their incarnation (``source``, ``queue``, ``inc``,
        ``record_id``, ``lsn``, and ``rkey`` when keyed), built on first use."""
        if not hasattr(self, "_removes_df"):
            self._removes_df = self._removes()
        return self._removes_df

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
                elif r.rm_bits is not None:  # a group's ids as a bitmap
                    bitmaps = removed.bits[(r.source, r.queue)]
                    bitmaps.append((r.rm_lsn, r.rm_lo, bytes(r.rm_bits)))
                    removed.covered += r.rm_count
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
        check_removes(self.records, self.removes)

    def live(self) -> DataFrame:
        on = ["rkey"] if self.keyed else ["inc", "record_id"]
        # In a final incarnation: a set of longs tested in the task, no join.
        live = self.records.filter(F.col("inc").isin(self.final_incs))
        if self.join_removes:  # else no removes, or the scans dropped the removed records
            removes = self.removes.select(*on)
            if self.broadcast_removes:
                removes = F.broadcast(removes)
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


# The task-queue deltas' kinds (spec section 12), which Spark's replay does not apply.
TASK_KINDS = ("queue_rules", "add_later", "delivered", "failed", "purge")


def _refuse_task_deltas(rows) -> None:
    """:class:`~tflux.spark._tasks.HasTasks` naming the first task-queue delta of step 1's
    rows (their ``task`` field), if any: the plain path applies TaskFlux's four deltas only (a
    skipped AddLater or Purge would give wrong records); :func:`replay` then takes the task
    path (:mod:`tflux.spark._tasks`). The JVM reader's summary scan stops the same way."""
    tasks = [(r, getattr(r, "task", None)) for r in rows]  # no such field: the JVM's rows
    firsts = [(t.lsn, t.kind, r) for r, t in tasks if t is not None]
    if firsts:
        lsn, kind, r = min(firsts, key=lambda t: (t[2].source, t[0]))
        raise HasTasks(
            f"Spark replay cannot replay the {kind} delta at LSN {lsn} of queue {r.queue!r} "
            f"({r.source}) on the plain path: task-queue deltas (spec section 12) take the "
            "task path"
        )


# Up to this many queue names, a snapshot record's incarnation is a CASE expression on its queue
# (compared in the task, no hashing of strings); more names are a broadcast join.
CASE_NAMES = 32


# At most this many rows of replay's small tables (per (queue, segment) and per incarnation) go
# to the JVM reader's tasks as its replayPlan option; more are broadcast joins.
REPLAY_PLAN_ROWS = 20_000


def replay_plan(
    seg_rows: list[tuple],
    inc_rows: list[tuple],
    keys: dict[int, tuple[int, int]] | None,
    ranges: dict[int, list[tuple[int, int]] | _Bitmap] | None = None,
) -> str:
    """The JVM reader's ``replayPlan`` option (format in ``ReplayIds.java``): per name its
    segments' earlier adds and its incarnations in LSN order with their key ranges (none
    without ``keys``: the reader's ``replay_key`` is then null), each with its removed
    ``ranges`` (``r LO HI`` lines, or a ``b BASE BITS`` line for a :class:`_Bitmap`; the
    readers then drop the records in them)."""
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
        removed = ranges.get(inc) if ranges else None
        if isinstance(removed, _Bitmap):
            text = base64.b64encode(removed.bits).decode()
            by_name[(source, queue)].append(f"b {removed.base} {text}")
        elif removed:
            by_name[(source, queue)].extend(f"r {lo} {hi}" for lo, hi in removed)
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
    bits: int | None = None,
) -> DataFrame:
    """Step 1 through the JVM reader's ``summary`` option: per (log directory, source, queue,
    segment) the last LSN, adds and removes, and a row per CreateQueue/DeleteQueue with the
    adds of its queue before it; the same rows :meth:`_Frames._summarize` aggregates from
    every entry, aggregated here from a few rows per segment (and split). With ``ranges``, also
    the rows of the removed ranges (``rm_lo``, ``rm_hi``, ``rm_lsn``, ``rm_count``; an overflow
    row has ``rm_lo`` null; see ``Summary.java``), kept apart by ``rm_lsn``, with at most
    ``runs`` (default :data:`SUMMARY_RUNS`) runs per chunk; a group of many runs comes as one
    bitmap row instead (``rm_bits``), at most ``bits`` (default :data:`SUMMARY_BITS`) bits of
    them per chunk, and the bitmaps of consecutive chunks of one incarnation are folded into
    one on the executors (``BitsFold.java``).

    The DataFrame is built by ``ReplaySummary.java`` in one py4j call: built here, column by
    column, it took about 900 round trips (0.3 s of a 2.2 s replay, issue 45)."""
    lines = [
        f"{d.encode().hex()} {int(first)} {(dialects or {}).get(d) or '-'}" for d, first in logs
    ]
    jdf = spark.sparkContext._jvm.io.tflux.spark.ReplaySummary.frame(
        spark._jsparkSession,
        "\n".join(lines),
        ranges,
        int(runs or SUMMARY_RUNS),
        int(bits or SUMMARY_BITS),
    )
    return DataFrame(jdf, spark)


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
    try:
        frames = _Frames(spark, path, dialect=dialect, ranges=not validate)
    except Exception as exc:
        if not _tasks.met_tasks(exc):
            raise
        return _tasks.replay(spark, path, validate, dialect)
    if validate:
        frames.check()
    return frames.output(frames.live())


def queue_summary(spark: SparkSession, path, dialect: str | None = None) -> DataFrame:
    """One row per queue alive after the replay: ``queue``, ``implementation`` (heap/array),
    ``count`` (live records), ``last_id`` -- the fields of ``store.queues()`` (with ``source``
    first when PATH named several sources); ``dialect`` as for :func:`replay`."""
    try:
        frames = _Frames(spark, path, dialect=dialect)
    except Exception as exc:
        if not _tasks.met_tasks(exc):
            raise
        return _tasks.queue_summary(spark, path, dialect)
    return frames.output(frames.summary())
