"""tflux on Spark: the log and snapshot as DataFrames, replay with Spark, a streaming tail.

Needs the ``spark`` extra (``pip install 'tflux[spark]'``: pyspark >= 4.0 and pyarrow).
Two formats, each with two readers that return the same rows:

- ``spark.read.format("tflux").load(PATH)``: log records;
- ``spark.read.format("tflux_snapshot").load(PATH)``: snapshot records.

The **JVM reader** (Java sources shipped in ``tflux/spark/jvm``, compiled by :func:`build_jar`
with the JDK against the installed pyspark's jars) serves both when its jar is on the session's
class path: start the session with ``.config("spark.jars", tflux.spark.jar_path())``. It reads
columnar batches with column pruning, LSN-range pushdown, ``kind = '...'`` filters applied in
the scan (Spark does not compare every row's ``kind`` again) and byte-split partitions. Otherwise
(no JDK, or a session started without the jar) :func:`register` adds the **Python sources**
(Spark 4's ``pyspark.sql.datasource``, decoded by the Rust core) under those names. The Python
sources are always reachable as ``tflux_python`` and ``tflux_snapshot_python``, and serve
``spark.readStream.format("tflux")`` in both cases.

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

__all__ = [
    "build_jar",
    "export_parquet",
    "jar_path",
    "jvm_reader",
    "queue_summary",
    "register",
    "replay",
]


def build_jar(force: bool = False) -> str:
    """Compiles the JVM reader's jar (cached per source hash and Spark version); returns its
    path. Raises :class:`tflux.spark._jvm.JarBuildError` without a JDK."""
    from tflux.spark._jvm import build_jar as _build

    return _build(force)


def jar_path() -> str | None:
    """The JVM reader's jar for ``spark.jars``, or None where the Python sources serve.

    A wheel carries the jar, compiled when the wheel was built (``javac --release 17``) against
    the newest pyspark the ``spark`` extra allows; it is returned when the running pyspark has
    the same major.minor version, and needs only a Java runtime. Otherwise (a source checkout,
    another Spark minor release: a ``RuntimeWarning`` says why the shipped jar was passed over)
    the jar is compiled with the JDK against the installed pyspark on first call and cached (see
    :func:`build_jar`); without a JDK the result is None.
    """
    from tflux.spark._jvm import jar_path as _path

    return _path()


def jvm_reader(spark: SparkSession) -> bool:
    """Whether ``format("tflux")`` is served by the JVM reader in this session."""
    from tflux.spark._jvm import jvm_reader_loaded

    return jvm_reader_loaded(spark)


def _require_spark() -> None:
    """``ImportError`` saying which extra to install when pyspark or pyarrow is missing."""
    for module in ("pyspark", "pyarrow"):
        try:
            __import__(module)
        except ImportError as exc:
            raise ImportError(
                f"tflux.spark needs {module}, which is not installed: pip install 'tflux[spark]'"
            ) from exc


def register(spark: SparkSession) -> SparkSession:
    """Makes ``tflux`` and ``tflux_snapshot`` readable in ``spark``; returns it.

    The Python sources are registered as ``tflux_python``/``tflux_snapshot_python``. When the
    JVM reader's jar is on the driver's class path (``spark.jars`` at session start) it serves
    ``tflux``/``tflux_snapshot``; otherwise the Python sources are registered under those names
    too. A jar cannot be added to a running session's data source lookup: start the session
    with ``spark.jars`` set to :func:`jar_path` to get the JVM reader.

    Registering again in the same session does nothing (replay registers on every call, and a
    registration sends the sources' classes to the JVM: some 25 py4j round trips).
    """
    if getattr(spark, "_tflux_registered", False):
        return spark
    _require_spark()
    from tflux.spark._jvm import jvm_reader_loaded
    from tflux.spark.snapshot_source import (
        TfluxSnapshotDataSource,
        TfluxSnapshotPythonDataSource,
    )
    from tflux.spark.source import TfluxDataSource, TfluxPythonDataSource

    spark.dataSource.register(TfluxPythonDataSource)
    spark.dataSource.register(TfluxSnapshotPythonDataSource)
    if not jvm_reader_loaded(spark):
        spark.dataSource.register(TfluxDataSource)
        spark.dataSource.register(TfluxSnapshotDataSource)
    spark._tflux_registered = True
    return spark


def replay(
    spark: SparkSession, path, validate: bool = False, dialect: str | None = None
) -> DataFrame:
    """The live records of every queue after snapshot + log (see :mod:`tflux.spark.rebuild`);
    ``validate=True`` raises :class:`tflux.ReplayError` where the local restore would;
    ``dialect`` ("spec"/"taskflux", default: what the files say) as for :func:`tflux.open`."""
    _require_spark()
    from tflux.spark.rebuild import replay as _replay

    return _replay(spark, path, validate, dialect)


def queue_summary(spark: SparkSession, path, dialect: str | None = None) -> DataFrame:
    """One row per live queue: implementation, count of ready records, last id."""
    _require_spark()
    from tflux.spark.rebuild import queue_summary as _summary

    return _summary(spark, path, dialect)


def export_parquet(base, out) -> dict[str, int]:
    """``OUT/log.parquet`` and ``OUT/snapshot.parquet`` (see :func:`tflux.parquet.export`)."""
    from tflux.parquet import export

    return export(base, out)
