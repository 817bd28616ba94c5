"""``spark.read.format("tflux")``: the log records of one or more base directories.

One input partition per segment file. Each task opens just its segment through the core (every
record's CRC is checked), decodes it in Rust (``Log.read_deltas``) and hands Spark Arrow record
batches whose schema matches the DataFrame's exactly.

Options (strings, as Spark passes them):

``path``       base directory, ``<base>/data/log``, a bare log directory, or several of them
               separated by commas or matched by a glob (``/nodes/*``).
``fromLsn``    first LSN to read (inclusive); ``toLsn`` last LSN (inclusive).
``verify``     ``true``: before planning, check every source with :func:`tflux.verify` and fail
               on the first fatal problem (file and offset). Tasks always check the CRCs of the
               segment they read, and a corrupt sealed segment always fails its task.
``rawData``    ``true`` adds a ``data`` column with each record's undecoded bytes.
``addCounts``  ``true`` appends ``queue_adds``: the AddRecords of the entry's queue in its segment
               file from ``fromLsn`` up to and including the entry (replay's record ids come
               from it and per-segment offsets; batch reads only).
``columns``    comma-separated subset of the columns to return (Python data sources get no
               column pruning from Spark, so a wide scan ships every column to the JVM; naming
               the few you need, e.g. ``lsn,kind,key``, makes scans several times cheaper).
``arrow``      ``false`` yields Python tuples instead of Arrow batches (slower; kept as the
               baseline of the benchmark).
``dialect``    ``spec`` or ``taskflux`` (spec section 11): how the files are laid out. Default:
               detected from each source's files; a choice they contradict is an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

import tflux
from tflux.spark import _columns, _paths
from tflux.spark._options import column_names, dialect_option, flag, lsn_option, select


def verify_sources(sources) -> None:
    """Fails with the first fatal problem :func:`tflux.verify` finds (a torn tail is not)."""
    for src in sources:
        if src.log_dir is None:
            continue
        report = tflux.verify(src.log_dir, dialect=src.dialect)
        for problem in report.problems:
            if problem.fatal:
                where = problem.path + (f" at offset {problem.offset}" if problem.offset else "")
                raise tflux.CorruptionError(
                    f"corrupt {where}: {problem.message}", problem.path, problem.offset
                )


class SegmentPartition(InputPartition):
    """One segment file (plain fields only: partitions are pickled to the workers)."""

    def __init__(
        self,
        source: str,
        log_dir: str,
        name: str,
        first: int,
        last: int | None,
        sealed: bool,
        expected_end: int | None,
        channel: bool = False,
        dialect: str = "spec",
    ) -> None:
        super().__init__(name)
        self.channel = channel  # a channel's messages: not decoded as deltas
        self.dialect = dialect
        self.source = source
        self.log_dir = log_dir
        self.name = name
        self.first = first
        self.last = last
        self.sealed = sealed
        self.expected_end = expected_end

    def __repr__(self) -> str:
        path = os.path.join(self.log_dir, self.name)
        return f"SegmentPartition({path}, {self.first}..{self.last})"


def plan_segments(sources, first: int | None, last: int | None) -> list[SegmentPartition]:
    """One partition per segment file overlapping ``first..last``, from the directory listing
    alone (the tasks open the files)."""
    first = 0 if first is None else first
    parts = []
    for src in sources:
        if src.log_dir is None:
            continue
        names = _paths.segment_names(src.log_dir)
        channel = _paths.is_channel(src.base)
        for i, name in enumerate(names):
            start = _paths.start_lsn(name)
            sealed = i + 1 < len(names)
            end = _paths.start_lsn(names[i + 1]) - 1 if sealed else None
            if last is not None and start > last:
                break
            if end is not None and end < first:
                continue
            hi = end if last is None else (last if end is None else min(end, last))
            parts.append(
                SegmentPartition(
                    src.base,
                    src.log_dir,
                    name,
                    max(first, start),
                    hi,
                    sealed,
                    end,
                    channel,
                    src.dialect,
                )
            )
    return parts


class TfluxDataSource(DataSource):
    """The ``tflux`` format: log records as rows (batch and streaming)."""

    @classmethod
    def name(cls) -> str:
        return "tflux"

    def schema(self) -> StructType:
        schema = _columns.log_schema(flag(self.options, "rawData"))
        names = column_names(self.options)
        if names is not None:
            schema = pa.schema([schema.field(n) for n in names])
        if flag(self.options, "addCounts"):
            schema = schema.append(_columns.QUEUE_ADDS)
        return from_arrow_schema(schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogReader(self.options)

    def streamReader(self, schema: StructType):
        from tflux.spark.stream import LogStreamReader

        return LogStreamReader(self.options)


class LogReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.sources = _paths.resolve(
            options.get("path") or options.get("paths"), dialect_option(options)
        )
        self.first = lsn_option(options, "fromLsn")
        self.last = lsn_option(options, "toLsn")
        if self.first is not None and self.last is not None and self.first > self.last:
            raise ValueError(f"tflux: fromLsn {self.first} is after toLsn {self.last}")
        self.raw = flag(options, "rawData")
        self.arrow = flag(options, "arrow", True)
        self.names = column_names(options)
        self.add_counts = flag(options, "addCounts")
        if self.add_counts and self.names is not None:
            self.names = [*self.names, _columns.QUEUE_ADDS.name]
        for src in self.sources:
            if not self.raw and src.log_dir and _paths.is_channel(src.base):
                raise ValueError(
                    f"tflux: {src.base} is a channel directory: its records are messages, not "
                    "deltas; read them with option rawData=true"
                )
        if flag(options, "verify"):
            verify_sources(self.sources)

    def partitions(self) -> list[SegmentPartition]:
        return plan_segments(self.sources, self.first, self.last)

    def read(self, partition: SegmentPartition) -> Iterator:
        # A channel's segments hold messages, not deltas (spec 10); everything else is shared.
        if partition.channel:
            decode, extra = _columns.read_messages, {}
        else:
            decode = _columns.read_segment
            extra = {"raw": self.raw, "dialect": partition.dialect}
        batches = decode(
            partition.source,
            partition.log_dir,
            partition.name,
            partition.first,
            partition.last,
            sealed=partition.sealed,
            expected_end=partition.expected_end,
            add_counts=self.add_counts,
            **extra,
        )
        yield from self._emit(batches)

    def _emit(self, batches) -> Iterator:
        batches = select(batches, self.names)
        if self.arrow:
            yield from batches
        else:
            for batch in batches:
                yield from zip(*(col.to_pylist() for col in batch.columns), strict=True)


class TfluxPythonDataSource(TfluxDataSource):
    """The Python source under the name ``tflux_python``: always registered, so it stays
    reachable (and serves ``readStream.format("tflux")``) when the JVM reader owns ``tflux``."""

    @classmethod
    def name(cls) -> str:
        return "tflux_python"
