"""tflux on Spark: the log and snapshot as DataFrames, replay with Spark, a streaming tail.

Needs the ``spark`` extra (``pip install 'tflux[spark]'``: pyspark >= 4.0 and pyarrow).
:func:`register` adds two Python data sources (Spark 4's ``pyspark.sql.datasource``) to a session:

- ``spark.read.format("tflux").load(PATH)``: log records, one partition per segment file,
  decoded by the Rust core into Arrow batches (also ``spark.readStream.format("tflux")``);
- ``spark.read.format("tflux_snapshot").load(PATH)``: snapshot records.

Spark's Python workers import these sources by module name, so tflux must be installed in the
Python environment the workers run: set ``PYSPARK_PYTHON`` (and ``PYSPARK_DRIVER_PYTHON``) to
that interpreter, e.g. ``sys.executable`` when driver and workers share the machine.

:func:`replay` rebuilds the live records of every queue with Spark operations (equal to what
``tflux.open(base, readonly=True)`` restores); :func:`queue_summary` counts them per queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["export_parquet", "queue_summary", "register", "replay"]


def register(spark: SparkSession) -> SparkSession:
    """Registers the ``tflux`` and ``tflux_snapshot`` formats with ``spark``; returns it."""
    from tflux.spark.snapshot_source import TfluxSnapshotDataSource
    from tflux.spark.source import TfluxDataSource

    spark.dataSource.register(TfluxDataSource)
    spark.dataSource.register(TfluxSnapshotDataSource)
    return spark


def replay(spark: SparkSession, path, validate: bool = False) -> DataFrame:
    """The live records of every queue after snapshot + log (see :mod:`tflux.spark.rebuild`);
    ``validate=True`` raises :class:`tflux.ReplayError` where the local restore would."""
    from tflux.spark.rebuild import replay as _replay

    return _replay(spark, path, validate)


def queue_summary(spark: SparkSession, path) -> DataFrame:
    """One row per live queue: implementation, count of ready records, last id."""
    from tflux.spark.rebuild import queue_summary as _summary

    return _summary(spark, path)


def export_parquet(base, out) -> dict[str, int]:
    """``OUT/log.parquet`` and ``OUT/snapshot.parquet`` (see :func:`tflux.parquet.export`)."""
    from tflux.parquet import export

    return export(base, out)
