"""``spark.read.format("tflux_snapshot")``: the records of each source's snapshot file.

One row per record: ``source``, ``queue``, ``implementation``, ``record_id``, ``key``,
``message``, and the snapshot's ``last_index`` and ``last_term`` on every row; with option
``tasks=true`` (replay's task path, as the JVM reader's ``SnapshotSource``) also ``due`` (unix
ms of a delayed record, null when ready) and ``attempts`` (its counted deliveries, 0 when none)
from a task-layout snapshot (spec section 12). One partition per
snapshot file, decoded by the core (``read_snapshot_batch``). ``path`` is resolved as for the
``tflux`` format (a snapshot file may also be named directly); sources without a snapshot
contribute no rows. Queues without records have no row: their metadata is in
:func:`tflux.read_snapshot`.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from tflux.spark import _columns, _paths
from tflux.spark._options import dialect_option, flag


class SnapshotPartition(InputPartition):
    def __init__(self, source: str, path: str, dialect: str = "spec", tasks: bool = False) -> None:
        super().__init__(path)
        self.source = source
        self.path = path
        self.dialect = dialect
        self.tasks = tasks


class TfluxSnapshotDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tflux_snapshot"

    def schema(self) -> StructType:
        return from_arrow_schema(_columns.snapshot_schema(flag(self.options, "tasks")))

    def reader(self, schema: StructType) -> DataSourceReader:
        return SnapshotReader(self.options)


class SnapshotReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.sources = _paths.resolve(
            options.get("path") or options.get("paths"), dialect_option(options)
        )
        self.tasks = flag(options, "tasks")

    def partitions(self) -> list[SnapshotPartition]:
        return [
            SnapshotPartition(s.base, s.snapshot, s.dialect, self.tasks)
            for s in self.sources
            if s.snapshot
        ]

    def read(self, partition: SnapshotPartition) -> Iterator:
        yield from _columns.read_snapshot(
            partition.source, partition.path, partition.dialect, partition.tasks
        )


class TfluxSnapshotPythonDataSource(TfluxSnapshotDataSource):
    """The Python snapshot source as ``tflux_snapshot_python`` (always registered)."""

    @classmethod
    def name(cls) -> str:
        return "tflux_snapshot_python"
