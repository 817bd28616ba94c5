"""Replay's task path: bases holding task-queue state (spec section 12, issue 44).

The plain path (:mod:`tflux.spark.rebuild`) stays as it was: its step 1 meets the first
task-queue delta (QueueRules, AddLater, Delivered, Failed, Purge) or a task-layout snapshot and
stops; :func:`replay` and :func:`queue_summary` then take this path, which replays what the
core's state machine (``state/tasks.rs``) does, with Spark where the rule is a column rule and
on the driver where it is sequential:

- Incarnations as on the plain path (a CreateQueue after a DeleteQueue starts one), from the
  snapshot's queues and the log's CreateQueue/DeleteQueue, collected to the driver.
- Ids: an AddRecord and an AddLater both take the queue's next id (its incarnation's first id
  plus its rank among the incarnation's adds, a window per incarnation).
- Live records: added (or in the snapshot), in the name's final incarnation, not removed and
  not purged: a Purge at LSN P removes every record of its incarnation added before P except
  its kept ids (the driver holds the few Purges).
- Rules: each incarnation starts with the snapshot's rules (none after a CreateQueue) and
  changes as each QueueRules says (a rule it leaves out stays; null clears it). Each change is
  checked by the core (:class:`tflux.QueueState` applies the delta: the same refusal, with its
  LSN, as a restore).
- Attempts: one per Delivered of the record; a dead-letter rule that starts (none before)
  forgets the counts before it (``Queue::set_rules``), so a record's attempts are its
  Delivered entries after its incarnation's last such start (and the snapshot's count when
  there is none). As a snapshot does (``QueueState::to_tasks``), a queue whose rules end
  without a dead-letter rule has no counted attempts (0): its owner counts in memory.
- Due times: an AddLater's record is delayed until its time; a Failed delays the record until
  its due. Replay has no clock: a delayed record becomes ready only when a Delivered or Failed
  names it while it is delayed, and then every delayed record of the queue due no later does
  too (``Queue::promote_through``: the live store had promoted them). That rule is sequential,
  so the events of the incarnations where it applies (a Failed, or a Delivered of a record
  that was delayed) are replayed on the driver, at most :data:`MAX_DRIVER_EVENTS` of them;
  past that, replay refuses with :class:`tflux.ReplayError` instead of guessing.

Rows: ``queue, record_id, key, message`` as on the plain path, then ``due`` (unix ms while the
record is delayed, null when ready) and ``attempts``; :func:`queue_summary` counts ready
records (as ``Store.queues()`` does) and adds ``rules`` (JSON, every rule named).

Both snapshot sources read a task-layout snapshot's state: each record's ``due`` and
``attempts`` with option ``tasks=true``, and each queue's rules on the driver (the JVM reader's
``SnapshotSource.rules``, the core's ``SnapshotBatch.rules``).
"""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

import tflux
from tflux.spark import _paths, register
from tflux.spark._jvm import jvm_reader_loaded
from tflux.spark._tables import _small
from tflux.spark._validate import check_removes

MAX_LSN = 2**63 - 1
# At most this many events (delays and the deliveries and failures of delayed records) of the
# incarnations whose due times need the sequential rule are replayed on the driver.
MAX_DRIVER_EVENTS = 2_000_000
# At most this many Purges become filters of the live records.
MAX_PURGES = 1_000
RULES = ("dead_letter", "retry_delay_ms", "retry_backoff", "retry_max_delay_ms", "lease_ms")
TASK_KINDS = ("queue_rules", "add_later", "delivered", "failed", "purge")

INCS = StructType(
    [
        StructField("source", StringType()),
        StructField("queue", StringType()),
        StructField("inc", LongType()),
        StructField("inc_start", LongType()),
        StructField("inc_end", LongType()),
        StructField("base_id", LongType()),
        StructField("dl_start", LongType()),
    ]
)
DUES = StructType(
    [
        StructField("inc", LongType()),
        StructField("record_id", LongType()),
        StructField("sim_due", LongType()),
    ]
)
FINAL = StructType(
    [
        StructField("source", StringType()),
        StructField("queue", StringType()),
        StructField("inc", LongType()),
        StructField("implementation", IntegerType()),
        StructField("rules", StringType()),
    ]
)


class HasTasks(Exception):
    """The plain path met task-queue state: replay takes this path."""


def met_tasks(exc: BaseException) -> bool:
    """Whether ``exc`` is the plain path's stop at task-queue state (its own, or the JVM
    reader's summary scan's, which names the delta kind and LSN)."""
    text = str(exc)
    return isinstance(exc, HasTasks) or (
        "Spark replay cannot replay the " in text and " delta at LSN " in text
    )


def no_rules() -> dict:
    return dict.fromkeys(RULES)


@dataclass
class _Inc:
    gid: int
    source: str
    queue: str
    start: int
    end: int = MAX_LSN
    base: int = 0
    rules: dict = field(default_factory=no_rules)
    dl_start: int | None = None
    purges: list[tuple[int, list[int]]] = field(default_factory=list)


class TaskFrames:
    """The DataFrames of the task path (a few small jobs run here)."""

    def __init__(self, spark: SparkSession, path, fmt: str = "tflux", dialect=None) -> None:
        register(spark)
        self.spark = spark
        self.sources = _paths.resolve(path, dialect)
        self.many = len(self.sources) > 1
        jvm = fmt == "tflux" and jvm_reader_loaded(spark)
        starts: dict[tuple[str, str], tuple[int | None, int, dict]] = {}
        snaps: list[str] = []
        logs: list[tuple] = []
        for src in self.sources:
            after = -1
            if src.snapshot:
                after = self._snapshot(src, jvm, starts, snaps)
            else:
                starts[(src.base, "")] = (1, 0, no_rules())
            seg_names = _paths.segment_names(src.log_dir) if src.log_dir else []
            if seg_names:
                first = _paths.start_lsn(seg_names[0])
                if first > after + 1:
                    what = f"the snapshot's last index {after}" if after >= 0 else "no snapshot"
                    raise tflux.CorruptionError(
                        f"{src.log_dir}: the log starts at LSN {first} after {what} (a gap)",
                        src.log_dir,
                        None,
                    )
                logs.append((src, after + 1))
        log = self._scan(logs, fmt)
        small = (
            log.where(F.col("kind").isin("create_queue", "delete_queue", "queue_rules", "purge"))
            .select(
                "source",
                "queue",
                "lsn",
                "kind",
                "implementation",
                "kept_ids",
                "rules",
                F.when(F.col("kind") == "queue_rules", F.col("data")).alias("data"),
            )
            .collect()
        )
        incs, final = self._incarnations(starts, small)
        self.incs = incs
        rows = [
            (i.source, i.queue, i.gid, i.start, i.end, i.base, i.dl_start) for i in incs.values()
        ]
        inc_table = F.broadcast(_small(spark, rows, INCS))

        def with_inc(df: DataFrame) -> DataFrame:
            t = inc_table
            cond = (
                (df.source == t.source)
                & (df.queue == t.queue)
                & (df.lsn >= t.inc_start)
                & (df.lsn < t.inc_end)
            )
            return df.join(t, cond, "left").drop(t.source).drop(t.queue)

        adds = with_inc(log.where(F.col("kind").isin("add_record", "add_later")))
        rank = F.row_number().over(Window.partitionBy("inc").orderBy("lsn"))
        adds = adds.select(
            "source",
            "queue",
            "inc",
            (F.col("base_id") + rank).alias("record_id"),
            "key",
            "message",
            F.col("lsn").alias("add_lsn"),
            F.when(F.col("kind") == "add_later", F.col("due")).alias("due"),
            F.lit(0).alias("snap_attempts"),
        )
        records = adds
        if snaps:
            snap_reader = spark.read.format(fmt.replace("tflux", "tflux_snapshot", 1))
            snap_df = snap_reader.option("tasks", "true").load(",".join(snaps))
            first_incs = inc_table.where(F.col("inc_start") == -1).select("source", "queue", "inc")
            snap_records = snap_df.join(first_incs, ["source", "queue"], "left").select(
                "source",
                "queue",
                "inc",
                "record_id",
                "key",
                "message",
                F.lit(-1).cast("long").alias("add_lsn"),
                "due",
                F.col("attempts").alias("snap_attempts"),
            )
            records = snap_records.unionByName(adds)
        self.records = records
        self.removes = with_inc(log.where(F.col("kind") == "remove_record")).select(
            "source", "queue", "inc", "record_id", "lsn"
        )
        finals = list(final)
        live = records.where(F.col("inc").isin(finals))
        live = live.join(self.removes.select("inc", "record_id"), ["inc", "record_id"], "left_anti")
        live = live.where(self._not_purged())
        # Attempts: Delivered entries after the incarnation's last dead-letter start, plus the
        # snapshot's count when there is none.
        delivered = with_inc(log.where(F.col("kind") == "delivered"))
        counted = delivered.where(F.col("dl_start").isNull() | (F.col("lsn") > F.col("dl_start")))
        counts = counted.groupBy("inc", "record_id").agg(F.count("*").alias("delivered"))
        cleared = [i.gid for i in incs.values() if i.dl_start is not None]
        snap_part = F.when(F.col("inc").isin(cleared), F.lit(0)).otherwise(F.col("snap_attempts"))
        # Counts are the files' under a dead-letter rule only (``to_tasks``: a queue without
        # one counts in memory since its owner started; a snapshot carries none of it).
        uncounted = [g for g, i in incs.items() if i.rules["dead_letter"] is None]
        logged = (snap_part + F.coalesce(F.col("delivered"), F.lit(0))).cast("int")
        live = live.join(counts, ["inc", "record_id"], "left").withColumn(
            "attempts", F.when(F.col("inc").isin(uncounted), F.lit(0)).otherwise(logged)
        )
        # Due times: the sequential rule on the driver where it applies, else the delays as
        # logged.
        failed = with_inc(log.where(F.col("kind") == "failed")).select(
            "inc", "record_id", "lsn", "due", "kind"
        )
        delays = records.where(F.col("due").isNotNull()).select(
            "inc",
            "record_id",
            F.col("add_lsn").alias("lsn"),
            "due",
            F.lit("delay").alias("kind"),
        )
        delayed_ids = delays.select("inc", "record_id").unionByName(
            failed.select("inc", "record_id")
        )
        touches = delivered.select(
            "inc", "record_id", "lsn", F.lit(None).cast("long").alias("due"), "kind"
        ).join(delayed_ids.distinct(), ["inc", "record_id"], "left_semi")
        touches = touches.unionByName(failed)
        touched = [r.inc for r in touches.select("inc").distinct().collect()]
        dues = self._simulate(touched, delays, touches) if touched else []
        sim = F.broadcast(_small(spark, dues, DUES)) if dues else None
        if sim is not None:
            live = live.join(sim, ["inc", "record_id"], "left")
        else:
            live = live.withColumn("sim_due", F.lit(None).cast("long"))
        due = F.when(F.col("inc").isin(touched), F.col("sim_due")).otherwise(F.col("due"))
        self.live = live.select(
            "source", "queue", "inc", "record_id", "key", "message", due.alias("due"), "attempts"
        )
        # last id per final incarnation: its first id plus its adds.
        add_counts = {
            r.inc: r.n
            for r in adds.where(F.col("inc").isin(finals))
            .groupBy("inc")
            .agg(F.count("*").alias("n"))
            .collect()
        }
        self._final = []
        for g, impl in final.items():
            i = incs[g]
            rules = json.dumps(i.rules, separators=(",", ":"))
            last = i.base + add_counts.get(g, 0)
            self._final.append((i.source, i.queue, g, impl, last, rules))

    def _snapshot(self, src, jvm: bool, starts: dict, snaps: list) -> int:
        """Reads what the driver needs of ``src``'s snapshot into ``starts``; returns its last
        index (-1 without one)."""
        if jvm:
            sources = self.spark.sparkContext._jvm.io.tflux.spark.SnapshotSource
            text = sources.describe(src.snapshot)
            if text is None:
                starts[(src.base, "")] = (1, 0, no_rules())
                return -1
            head, *lines = text.split("\n")
            last_index, records, *_ = head.split(" ")
            rules: dict[str, dict] = {}
            for line in (sources.rules(src.snapshot) or "").splitlines():
                name, text_rules = line.split(" ", 1)
                rules[bytes.fromhex(name).decode()] = json.loads(text_rules)
            for line in lines:
                impl, last_id, name = line.split(" ")
                queue = bytes.fromhex(name).decode()
                starts[(src.base, queue)] = (int(impl), int(last_id), rules.get(queue, no_rules()))
            if int(records):
                snaps.append(src.snapshot)
            return int(last_index)
        snap = tflux.read_snapshot_batch(src.snapshot)
        if snap is None:
            starts[(src.base, "")] = (1, 0, no_rules())
            return -1
        rules = {name: json.loads(text) for name, text in snap.rules.items()}
        for q in snap.queues:
            start_rules = rules.get(q["name"], no_rules())
            starts[(src.base, q["name"])] = (q["implementation"], q["last_id"], start_rules)
        if len(snap):
            snaps.append(src.snapshot)
        return snap.last_index

    def _scan(self, logs, fmt: str) -> DataFrame:
        """Every entry of every log (up to the last LSN each held when the replay started), its
        ``data`` too (the driver checks a QueueRules' bytes with the core)."""
        cols = ["source", "lsn", "kind", "queue", "implementation", "key", "record_id"]
        cols += ["message", "due", "kept_ids", "rules", "data"]
        out = None
        for src, first in logs:

            def reader(src=src, first=first):
                r = self.spark.read.format(fmt).option("fromLsn", str(first))
                r = r.option("rawData", "true").option("dialect", src.dialect)
                return r

            last = reader().load(src.log_dir).agg(F.max("lsn").alias("last")).collect()[0].last
            if last is None:
                continue
            df = reader().option("toLsn", str(last)).load(src.log_dir).select(*cols)
            out = df if out is None else out.unionByName(df)
        if out is None:
            schema = StructType(
                [
                    StructField("source", StringType()),
                    StructField("lsn", LongType()),
                    StructField("kind", StringType()),
                    StructField("queue", StringType()),
                    StructField("implementation", IntegerType()),
                    StructField("key", LongType()),
                    StructField("record_id", LongType()),
                    StructField("message", BinaryType()),
                    StructField("due", LongType()),
                    StructField("kept_ids", ArrayType(LongType())),
                    StructField("rules", StringType()),
                    StructField("data", BinaryType()),
                ]
            )
            return self.spark.createDataFrame([], schema)
        return out

    def _incarnations(self, starts: dict, small: list) -> tuple[dict[int, _Inc], dict[int, int]]:
        """Each name's incarnations with their rules, dead-letter start and purges; and the
        final incarnation of each live name (with its implementation)."""
        events: dict[tuple[str, str], list] = defaultdict(list)
        for r in small:
            events[(r.source, r.queue)].append(r)
        incs: dict[int, _Inc] = {}
        final: dict[int, int] = {}  # final incarnation -> implementation
        gid = 0
        purges = 0
        for key in sorted(set(starts) | set(events)):
            source, queue = key
            impl, base, rules = starts.get(key, (None, 0, no_rules()))
            inc = _Inc(gid, source, queue, -1, base=base, rules=dict(rules))
            incs[gid] = inc
            alive = impl is not None
            checker = self._checker(queue)
            for r in sorted(events[key], key=lambda r: r.lsn):
                if r.kind in ("create_queue", "delete_queue"):
                    inc.end = r.lsn
                    gid += 1
                    inc = _Inc(gid, source, queue, r.lsn)
                    incs[gid] = inc
                    alive = r.kind == "create_queue"
                    impl = r.implementation if alive else impl
                    checker = self._checker(queue)
                elif r.kind == "queue_rules":
                    # The core checks the change: its ReplayError, naming the LSN.
                    checker.apply(bytes(r.data), r.lsn)
                    change = json.loads(r.rules)
                    before = inc.rules["dead_letter"]
                    inc.rules.update(change)
                    if before is None and inc.rules["dead_letter"] is not None:
                        inc.dl_start = r.lsn
                elif r.kind == "purge":
                    purges += 1
                    inc.purges.append((r.lsn, list(r.kept_ids or [])))
            if alive:
                final[inc.gid] = impl
            gid += 1
        if purges > MAX_PURGES:
            raise tflux.ReplayError(
                f"Spark replay cannot replay {purges} purge deltas (at most {MAX_PURGES}): "
                "tflux.open and tflux replay restore the base"
            )
        return incs, final

    @staticmethod
    def _checker(queue: str):
        state = tflux.QueueState()
        if queue:
            state.apply(tflux.Delta.create_queue(queue).encode())
        return state

    def _not_purged(self):
        """A filter of the records no Purge removed (added before it, not kept)."""
        cond = F.lit(True)
        for inc in self.incs.values():
            for lsn, kept in inc.purges:
                gone = (F.col("inc") == inc.gid) & (F.col("add_lsn") < lsn)
                if kept:
                    gone = gone & ~F.col("record_id").isin(kept)
                cond = cond & ~gone
        return cond

    def _simulate(self, touched: list[int], delays: DataFrame, touches: DataFrame) -> list:
        """The due times, at the end of the log, of the delayed records of the ``touched``
        incarnations (``Queue::promote_through``'s rule, event by event)."""
        events = delays.where(F.col("inc").isin(touched)).unionByName(
            touches.where(F.col("inc").isin(touched))
        )
        n = events.count()
        if n > MAX_DRIVER_EVENTS:
            raise tflux.ReplayError(
                f"Spark replay cannot replay the due times of {n} delays, deliveries and "
                f"failures of delayed records (at most {MAX_DRIVER_EVENTS}): tflux.open and "
                "tflux replay restore the base"
            )
        by_inc: dict[int, list] = defaultdict(list)
        order = {"delay": 0, "delivered": 1, "failed": 1}
        for r in events.collect():
            by_inc[r.inc].append((r.lsn, order[r.kind], r.kind, r.record_id, r.due))
        out = []
        for inc, evs in by_inc.items():
            evs.sort()
            delayed: dict[int, int] = {}
            heap: list[tuple[int, int]] = []

            def promote(limit: int, delayed=delayed, heap=heap) -> None:
                while heap and heap[0][0] <= limit:
                    due, rid = heapq.heappop(heap)
                    if delayed.get(rid) == due:
                        del delayed[rid]

            for _, _, kind, rid, due in evs:
                if kind != "delay" and rid in delayed:
                    promote(delayed[rid])
                if kind != "delivered":
                    delayed[rid] = due
                    heapq.heappush(heap, (due, rid))
            out += [(inc, rid, due) for rid, due in delayed.items()]
        return out

    def final(self) -> DataFrame:
        return _small(
            self.spark,
            [(s, q, g, impl, rules) for s, q, g, impl, _, rules in self._final],
            FINAL,
        )

    def last_ids(self) -> dict[int, int]:
        return {g: last for _, _, g, _, last, _ in self._final}


def output(frames: TaskFrames, df: DataFrame) -> DataFrame:
    return df if frames.many else df.drop("source")


def replay(spark, path, validate: bool = False, dialect=None, fmt: str = "tflux") -> DataFrame:
    """:func:`tflux.spark.replay` of a base with task-queue state (see the module)."""
    frames = TaskFrames(spark, path, fmt, dialect)
    if validate:
        check(frames)
    return output(
        frames,
        frames.live.select("source", "queue", "record_id", "key", "message", "due", "attempts"),
    )


def queue_summary(spark, path, dialect=None, fmt: str = "tflux") -> DataFrame:
    """:func:`tflux.spark.queue_summary` of a base with task-queue state: ``count`` is the
    ready records (delayed ones are not), ``rules`` the final rules as JSON."""
    frames = TaskFrames(spark, path, fmt, dialect)
    ready = frames.live.where(F.col("due").isNull())
    counts = ready.groupBy("inc").agg(F.count("*").alias("count"))
    last = frames.last_ids()
    impl = F.col("implementation")
    name = impl.cast("string")
    for code, label in tflux.IMPLEMENTATIONS.items():
        name = F.when(impl == code, label).otherwise(name)
    last_id = F.lit(None).cast("long")
    for g, v in last.items():
        last_id = F.when(F.col("inc") == g, F.lit(v).cast("long")).otherwise(last_id)
    df = (
        frames.final()
        .join(counts, ["inc"], "left")
        .select(
            "source",
            "queue",
            name.alias("implementation"),
            F.coalesce(F.col("count"), F.lit(0).cast("long")).alias("count"),
            last_id.alias("last_id"),
            "rules",
        )
    )
    return output(frames, df)


def check(frames: TaskFrames) -> None:
    """``validate=True``: a RemoveRecord of a record that is not there, or removed twice, as
    the plain path checks it."""
    check_removes(frames.records, frames.removes)
