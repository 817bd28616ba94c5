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

# Rows per Arrow batch handed to Spark from one decoded segment.
SEGMENT_BATCH_ROWS = 65536
# Rows per Arrow batch of a snapshot (the core returns a snapshot in one piece).
SNAPSHOT_BATCH_ROWS = 65536


def log_schema(raw: bool = False) -> pa.Schema:
    """``source``, ``segment``, then the columns of :meth:`DeltaBatch.to_arrow`."""
    head = [pa.field("source", pa.string()), pa.field("segment", pa.string())]
    return pa.schema(head + list(delta_batch_schema(raw)))


# The column the ``addCounts`` option appends (after every other column).
QUEUE_ADDS = pa.field("queue_adds", pa.int64())


def _array(col) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def queue_adds(table: pa.Table | pa.RecordBatch) -> pa.Array:
    """Per entry, the AddRecords of its queue from the table's first row up to and including the
    entry (a running count per queue name), with Arrow compute alone: a stable sort by queue,
    a cumulative sum restarted at each queue's first row, and the inverse permutation."""
    import pyarrow.compute as pc

    n = table.num_rows
    if n == 0:
        return pa.array([], pa.int64())
    codes = pc.dictionary_encode(_array(table.column("queue"))).indices
    is_add = pc.cast(pc.equal(_array(table.column("kind")), "add_record"), pa.int64())
    order = pc.sort_indices(codes)  # stable: LSN order within each queue
    codes, is_add = pc.take(codes, order), pc.take(is_add, order)
    total = pc.cumulative_sum(is_add)
    first = pa.concat_arrays(
        [pa.array([True]), pc.not_equal(codes.slice(1), codes.slice(0, n - 1))]
    )
    before = pc.fill_null_forward(pc.if_else(first, pc.subtract(total, is_add), None))
    running = pc.subtract(total, before)
    return pc.take(running, pc.sort_indices(order))


def snapshot_schema(tasks: bool = False) -> pa.Schema:
    """``source``, the columns of :meth:`SnapshotBatch.to_arrow`, ``last_index``, ``last_term``;
    with ``tasks`` (the ``tasks`` option, as the JVM reader's ``SnapshotSource``) then ``due``
    and ``attempts``."""
    fields = [
        pa.field("source", pa.string()),
        *snapshot_batch_schema(),
        pa.field("last_index", pa.int64()),
        # Int64: a wide snapshot's term (spec 4.1) may be past Int32.
        pa.field("last_term", pa.int64()),
    ]
    if tasks:
        fields += list(snapshot_batch_schema(tasks=True))[len(snapshot_batch_schema()) :]
    return pa.schema(fields)


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
    add_counts: bool = False,
    dialect: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Entries ``first..last`` (inclusive; ``last`` None: to the end) of one segment file, in
    ``dialect`` (the log's; ``None``: what the file's first record says).

    The core decodes the file alone (``tflux.read_segment_deltas``: no other segment is opened),
    checking every record's framing and CRC. A sealed segment must hold every record up to
    ``expected_end`` (the LSN before the next segment); a corrupt record fails with a
    :class:`tflux.CorruptionError` naming the file and offset. The active segment's torn tail
    (a write in progress) ends its records. ``add_counts`` appends :data:`QUEUE_ADDS`, counted
    from ``first``.
    """
    schema = log_schema(raw)
    path = os.path.join(log_dir, name)
    table = tflux.read_segment_deltas(
        path, last=not sealed, from_lsn=first, to_lsn=last, raw=raw, dialect=dialect
    ).to_arrow()
    lsns = table.column("lsn")
    got_last = lsns[-1].as_py() if table.num_rows else first - 1
    want_last = expected_end if sealed else last
    if sealed and expected_end is not None and last is not None:
        want_last = min(last, expected_end)
    if want_last is not None and got_last < want_last:
        why = (
            "gap or overlap between segments"
            if sealed
            else "the log was truncated or rewritten while it was read"
        )
        raise tflux.CorruptionError(
            f"{path}: holds entries up to LSN {got_last}, expected {want_last} ({why})",
            path,
            None,
        )
    if add_counts:
        table = table.append_column(QUEUE_ADDS, queue_adds(table))
        schema = schema.append(QUEUE_ADDS)
    for start in range(0, table.num_rows, SEGMENT_BATCH_ROWS):
        yield with_source(table.slice(start, SEGMENT_BATCH_ROWS), source, name, schema)


def read_messages(
    source: str,
    log_dir: str,
    name: str,
    first: int,
    last: int | None,
    *,
    sealed: bool,
    expected_end: int | None = None,
    add_counts: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Entries ``first..last`` of one segment of a channel directory (spec 10): its records are
    opaque messages, so only ``lsn``, ``term`` and ``data`` are filled and the delta columns
    are null. The core reads the file alone (a view of it), checking every record's CRC."""
    from tflux.spark import _paths

    schema = log_schema(raw=True)
    if add_counts:  # no queues in a channel: null counts
        schema = schema.append(QUEUE_ADDS)
    path = os.path.join(log_dir, name)
    with _paths.open_view(log_dir, [name]) as log:
        if sealed and log.recovery.truncated:
            raise tflux.CorruptionError(
                f"{path}: a sealed segment ends in a torn or corrupt record "
                f"(offset {log.recovery.cut_offset})",
                path,
                log.recovery.cut_offset,
            )
        start = max(first, log.start_index)
        end = log.last_index + 1 if last is None else min(last, log.last_index) + 1
        want_last = min(last, expected_end) if sealed and last is not None else last
        if want_last is not None and end - 1 < want_last:
            raise tflux.CorruptionError(
                f"{path}: holds entries up to LSN {end - 1}, expected {want_last}", path, None
            )
        while start < end:
            batch = log.read_batch(start, end, max_bytes=16 << 20)
            got = batch.to_arrow()
            n = got.num_rows
            nulls = [pa.nulls(n, f.type) for f in schema][4:]
            cols = [got.column("lsn"), got.column("term"), *nulls]
            cols[schema.names.index("data") - 2] = got.column("data")
            batch = pa.RecordBatch.from_arrays(cols, names=schema.names[2:])
            yield with_source(batch, source, name, schema)
            start += n


def read_snapshot(
    source: str, path: str, dialect: str | None = None, tasks: bool = False
) -> Iterator[pa.RecordBatch]:
    """The records of one snapshot file, with its last index and term on every row (and with
    ``tasks``, each record's ``due`` and ``attempts``)."""
    batch = tflux.read_snapshot_batch(path, dialect=dialect)
    if batch is None:
        return
    schema = snapshot_schema(tasks)
    table = batch.to_arrow(tasks=tasks)
    plain = len(snapshot_batch_schema())  # then due and attempts, after last_index and last_term
    for start in range(0, max(table.num_rows, 1), SNAPSHOT_BATCH_ROWS):
        part = table.slice(start, SNAPSHOT_BATCH_ROWS)
        n = part.num_rows
        if n == 0:
            return
        cols = [
            _constant(source, n, pa.string()),
            *part.columns[:plain],
            _constant(batch.last_index, n, pa.int64()),
            _constant(batch.last_term, n, pa.int64()),
            *part.columns[plain:],
        ]
        yield pa.RecordBatch.from_arrays(cols, schema=schema)
