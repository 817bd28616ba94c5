"""``spark.readStream.format("tflux").load(PATH)``: tail one log as it grows.

Offsets are ``{"lsn": N}``: the next LSN to read (the end of a micro-batch is exclusive). The
latest offset is what a read-only open of the log sees: every complete record, never a torn
tail (the read-only open ignores a record still being written). Spark requires an offset range
to return the same rows when read again, so only entries already on disk are exposed; a Raft
follower that later truncates uncommitted entries would break that, which is why the stream is
meant for a store's (or leader's) log.

Options: ``path`` (one source), ``fromLsn`` (first LSN of a new query; default: the log's first
entry), ``maxRecordsPerTrigger`` (entries per micro-batch), ``rawData``. A restarted query resumes
from its checkpoint's offset. ``Trigger.AvailableNow`` reads what exists when the query starts,
in micro-batches of at most ``maxRecordsPerTrigger``.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

import tflux
from tflux.spark import _columns, _paths
from tflux.spark._options import column_names, dialect_option, flag, lsn_option, select

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0/4.1
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


class StreamPartition(InputPartition):
    """Entries ``first..last`` (inclusive) of one segment file."""

    def __init__(self, source: str, log_dir: str, name: str, first: int, last: int) -> None:
        super().__init__((name, first, last))
        self.source = source
        self.log_dir = log_dir
        self.name = name
        self.first = first
        self.last = last


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options) -> None:
        sources = [
            s for s in _paths.resolve(options.get("path"), dialect_option(options)) if s.log_dir
        ]
        if len(sources) != 1:
            raise ValueError(
                f"tflux: a stream reads exactly one log, PATH names {len(sources)} "
                "(start one stream per source and union them)"
            )
        self.source = sources[0].base
        self.log_dir = sources[0].log_dir
        self.dialect = sources[0].dialect
        self.from_lsn = lsn_option(options, "fromLsn")
        self.max_rows = lsn_option(options, "maxRecordsPerTrigger")
        if self.max_rows == 0:
            raise ValueError("tflux: maxRecordsPerTrigger must be at least 1")
        self.raw = flag(options, "rawData")
        if flag(options, "addCounts"):
            raise ValueError("tflux: addCounts is for batch reads (a stream has no segment start)")
        self.names = column_names(options)
        self.target: int | None = None  # Trigger.AvailableNow: stop here
        self.last_end: int | None = None  # for Spark < 4.2, which passes no start

    # --- offsets ---------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        if self.from_lsn is not None:
            return {"lsn": self.from_lsn}
        names = _paths.segment_names(self.log_dir)
        return {"lsn": _paths.start_lsn(names[0]) if names else 0}

    def available_end(self, start: int) -> int:
        """One past the last complete entry on disk (opening only the segments from the one
        holding ``start``, so each trigger checks the tail rather than the whole log)."""
        names = _paths.segment_names(self.log_dir)
        keep = [n for n in names if _paths.start_lsn(n) <= start] or names[:1]
        tail = names[names.index(keep[-1]) :] if names else []
        if not tail:
            return start
        with _paths.open_view(self.log_dir, tail, self.dialect) as log:
            if start < log.start_index:
                raise tflux.CorruptionError(
                    f"{self.log_dir}: the stream needs LSN {start} but the log starts at "
                    f"{log.start_index} (compacted away after a snapshot); restart the query "
                    "with a fromLsn at or after the log's start",
                    self.log_dir,
                    None,
                )
            return max(start, log.last_index + 1)

    def getDefaultReadLimit(self):
        if self.max_rows is not None and ReadMaxRows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        if start is None:  # Spark < 4.2
            begin = self.last_end if self.last_end is not None else self.initialOffset()["lsn"]
            cap = self.max_rows
        else:
            begin = int(start["lsn"])
            limited = ReadMaxRows is not None and isinstance(limit, ReadMaxRows)
            cap = limit.max_rows if limited else None
        end = self.available_end(begin)
        if self.target is not None:
            end = min(end, max(begin, self.target))
        if cap is not None:
            end = min(end, begin + cap)
        return {"lsn": end}

    def reportLatestOffset(self) -> dict | None:
        return None

    def prepareForTriggerAvailableNow(self) -> None:
        names = _paths.segment_names(self.log_dir)
        first = _paths.start_lsn(names[0]) if names else 0
        self.target = self.available_end(first) if names else 0

    # --- reading ---------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> list[StreamPartition]:
        first, stop = int(start["lsn"]), int(end["lsn"])
        self.last_end = stop
        if first >= stop:
            return []
        names = _paths.segment_names(self.log_dir)
        parts = []
        for i, name in enumerate(names):
            lo = _paths.start_lsn(name)
            hi = _paths.start_lsn(names[i + 1]) - 1 if i + 1 < len(names) else stop - 1
            lo, hi = max(lo, first), min(hi, stop - 1)
            if lo <= hi:
                parts.append(StreamPartition(self.source, self.log_dir, name, lo, hi))
        if not parts or parts[0].first != first:
            raise tflux.CorruptionError(
                f"{self.log_dir}: entries from LSN {first} are no longer in the log "
                "(compacted away after a snapshot)",
                self.log_dir,
                None,
            )
        return parts

    def read(self, partition: StreamPartition) -> Iterator:
        batches = _columns.read_segment(
            partition.source,
            partition.log_dir,
            partition.name,
            partition.first,
            partition.last,
            sealed=False,
            raw=self.raw,
            dialect=self.dialect,
        )
        yield from select(batches, self.names)

    def commit(self, end: dict) -> None:
        self.last_end = int(end["lsn"])
