"""Replay's side of the snapshot: what the driver needs of it, and its records' incarnation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import tflux
from tflux.spark._jvm import jvm_reader_loaded
from tflux.spark._tables import _sql_value
from tflux.spark._tasks import HasTasks


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
            last_index, records, *tasks = head.split(" ")
            if tasks:  # the task layout: the hex name of its first queue with task state
                queue = bytes.fromhex(tasks[0]).decode()
                raise HasTasks(f"{path} holds the task-queue state of queue {queue!r}")
            queues = []
            for line in lines:
                impl, last_id, name = line.split(" ")
                queues.append((bytes.fromhex(name).decode(), int(impl), int(last_id)))
            return _SnapshotInfo(int(last_index), int(records), queues)

        return jvm_describe

    def core_describe(path: str) -> _SnapshotInfo | None:
        snap = tflux.read_snapshot_batch(path)
        if snap is None:
            return None
        if snap.task_queues:  # spec section 12: the task path reads it, as with the JVM reader
            queue = snap.task_queues[0]
            raise HasTasks(f"{path} holds the task-queue state of queue {queue!r}")
        queues = [(q["name"], q["implementation"], q["last_id"]) for q in snap.queues]
        return _SnapshotInfo(snap.last_index, len(snap), queues)

    return core_describe


def _first_incarnation(
    snap_records: DataFrame,
    inc_rows: list[tuple],
    incs: Callable[[], DataFrame],
    many: bool,
    keys: dict[int, tuple[int, int]] | None,
    case_names: int,
) -> DataFrame:
    """Snapshot records with ``inc``: every snapshot record is in its name's first
    incarnation (the one starting at LSN -1); ``incs`` gives the incarnations' table, ``many``
    says whether several log directories are read (then ``source`` tells them apart). Given
    ``keys``, also their ``rkey`` (as the reader's ``replay_key``). Up to ``case_names`` names
    (:data:`~tflux.spark.rebuild.CASE_NAMES`) it is a CASE expression, else a join."""
    first = [(source, queue, inc) for source, queue, inc, start, *_ in inc_rows if start == -1]
    if len(first) > case_names:
        table = incs().filter(F.col("inc_start") == -1).select("source", "queue", "inc")
        return snap_records.join(F.broadcast(table), ["source", "queue"], "left")
    # One SQL expression per column (one analysis on the driver), not a column per name.
    rows = []
    for source, queue, g in first:
        cond = f"queue = {_sql_value(queue, StringType())}"
        if many:
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
