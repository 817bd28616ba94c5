"""``validate=True``: the local restore's rule for a RemoveRecord, checked with Spark for every
replay path (the plain one in :mod:`tflux.spark.rebuild` and the task path in
:mod:`tflux.spark._tasks`): a remove of a record that is not there (never added, or added only
after the remove) or removed twice raises :class:`tflux.ReplayError` at its LSN."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import tflux


def check_removes(records: DataFrame, removes: DataFrame) -> None:
    """Raise where the local restore would. ``records`` has every record (``inc``,
    ``record_id``, ``add_lsn``: -1 for a snapshot's record); ``removes`` every remove (``inc``,
    ``record_id``, ``lsn``, ``queue`` and, where the frames have it, ``source``). Two Spark
    jobs."""
    keys = ["inc", "record_id"]
    # An (incarnation, id) is added once: its ids count its adds. The join keeps each remove
    # once, with the LSN of its add (null for none).
    present = records.select(*keys, "add_lsn")
    missing = (
        removes.join(present, keys, "left")
        .filter(F.col("add_lsn").isNull() | (F.col("add_lsn") > F.col("lsn")))
        .orderBy("lsn")
        .limit(1)
        .collect()
    )
    named = "source" in removes.columns
    twice = (
        removes.groupBy(*keys)
        .agg(
            F.count("*").alias("n"),
            F.max("lsn").alias("lsn"),
            *([F.first("source").alias("source")] if named else []),
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
        where = f" ({r.source})" if named else ""
        raise tflux.ReplayError(
            f"replay failed at LSN {r.lsn}: RemoveRecord: record id {r.record_id} is not in "
            f"queue {r.queue!r}{where}",
            r.lsn,
        )
