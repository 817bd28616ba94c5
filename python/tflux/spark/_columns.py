"""Arrow schemas of the tflux tables and the Rust-decoded batches that fill them.

pyarrow only (no pyspark): ``tflux.parquet`` writes the same tables. Every batch comes from the
core in columnar form (``Log.read_deltas`` / ``read_snapshot_batch``); Python only prepends the
constant ``source``/``segment`` columns, built once per batch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa

import tflux
from tflux._arrow import delta_batch_schema, snapshot_batch_schema
from tflux.spark._paths import check_sealed, open_view

# Data bytes decoded per core call: one Arrow batch (the core's default budget).
BATCH_BYTES = 4 << 20
# Rows per Arrow batch of a snapshot (the core returns a snapshot in one piece).
SNAPSHOT_BATCH_ROWS = 65536


def log_schema(raw: bool = False) -> pa.Schema:
    """``source``, ``segment``, then the columns of :meth:`DeltaBatch.to_arrow`."""
    head = [pa.field("source", pa.string()), pa.field("segment", pa.string())]
    return pa.schema(head + list(delta_batch_schema(raw)))


def snapshot_schema() -> pa.Schema:
    """``source``, the columns of :meth:`SnapshotBatch.to_arrow`, ``last_index``, ``last_term``."""
    return pa.schema(
        [
            pa.field("source", pa.string()),
            *snapshot_batch_schema(),
            pa.field("last_index", pa.int64()),
            pa.field("last_term", pa.int32()),
        ]
    )


def _constant(value, n: int, type_: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), n)


def with_source(batch: pa.RecordBatch, source: str, segment: str, schema: pa.Schema):
    n = batch.num_rows
    head = [_constant(source, n, pa.string()), _constant(segment, n, pa.string())]
    return pa.RecordBatch.from_arrays(head + batch.columns, schema=schema)


def read_segment(
    source: str,
    log_dir: str,
    name: str,
    first: int,
    last: int,
    *,
    sealed: bool,
    expected_end: int | None = None,
    raw: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Entries ``first..last`` (inclusive; ``last`` None: to the end) of one segment file.

    The core checks the CRC of every record when it opens the segment. A sealed segment must
    hold every record up to ``expected_end`` (the LSN before the next segment); a corrupt record
    fails with a :class:`tflux.CorruptionError` naming the file and offset.
    """
    schema = log_schema(raw)
    with open_view(log_dir, [name]) as log:
        if sealed:
            check_sealed(log, log_dir, name, expected_end)
        start = max(first, log.start_index)
        stop = log.last_index if last is None else min(last, log.last_index)
        if not sealed and last is not None and log.last_index < last:
            path = os.path.join(log_dir, name)
            raise tflux.CorruptionError(
                f"{path}: holds entries up to LSN {log.last_index}, expected {last} "
                "(the log was truncated or rewritten while it was read)",
                path,
                None,
            )
        while start <= stop:
            batch = log.read_deltas(start, stop + 1, max_bytes=BATCH_BYTES, raw=raw)
            start += len(batch)
            yield with_source(batch.to_arrow(), source, name, schema)


def read_snapshot(source: str, path: str) -> Iterator[pa.RecordBatch]:
    """The records of one snapshot file, with its last index and term on every row."""
    batch = tflux.read_snapshot_batch(path)
    if batch is None:
        return
    schema = snapshot_schema()
    table = batch.to_arrow()
    for start in range(0, max(table.num_rows, 1), SNAPSHOT_BATCH_ROWS):
        part = table.slice(start, SNAPSHOT_BATCH_ROWS)
        n = part.num_rows
        if n == 0:
            return
        cols = [
            _constant(source, n, pa.string()),
            *part.columns,
            _constant(batch.last_index, n, pa.int64()),
            _constant(batch.last_term, n, pa.int32()),
        ]
        yield pa.RecordBatch.from_arrays(cols, schema=schema)
