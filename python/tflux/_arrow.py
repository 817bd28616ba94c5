"""Arrow views of tflux's columnar buffers (pyarrow is imported only when asked for)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow

    from tflux._tflux import EntryBatch

# What to install for the Arrow views (the install hint of every "needs pyarrow" error).
INSTALL_ARROW = "pip install 'tflux[arrow]'"


def require_pyarrow(what: str = "Arrow views of tflux's buffers"):
    """pyarrow, or an ``ImportError`` that says which extra to install."""
    try:
        import pyarrow
    except ImportError as exc:
        raise ImportError(f"{what} need pyarrow, which is not installed: {INSTALL_ARROW}") from exc
    return pyarrow


def entry_batch_to_arrow(batch: EntryBatch) -> pyarrow.RecordBatch:
    """Wraps the batch's buffers as Arrow arrays without copying them."""
    pa = require_pyarrow()

    n = len(batch)
    # ColumnBuffer objects own the columns; py_buffer wraps them in place and keeps them alive.
    lsns, terms, offsets, data = (pa.py_buffer(b) for b in batch._buffers())
    lsn = pa.Array.from_buffers(pa.int64(), n, [None, lsns])
    term = pa.Array.from_buffers(pa.int32(), n, [None, terms])
    data = pa.Array.from_buffers(pa.binary(), n, [None, offsets, data])
    return pa.RecordBatch.from_arrays([lsn, term, data], names=["lsn", "term", "data"])


def delta_batch_schema(raw: bool = False) -> pyarrow.Schema:
    """The schema of :meth:`DeltaBatch.to_arrow` (all fields nullable, as Spark expects)."""
    pa = require_pyarrow()

    fields = [
        ("lsn", pa.int64()),
        ("term", pa.int32()),
        ("kind", pa.string()),
        ("queue", pa.string()),
        ("key", pa.int64()),
        ("record_id", pa.int64()),
        ("message", pa.binary()),
        ("implementation", pa.int32()),
        ("max_queue_size", pa.int32()),
        ("max_message_size", pa.int32()),
        ("key_min", pa.int64()),
        ("key_max", pa.int64()),
        # The task-queue deltas' (spec section 12; docs/format.md "Task-queue deltas").
        ("due", pa.int64()),
        ("kept_ids", pa.list_(pa.int64())),
        ("rules", pa.string()),
    ]
    if raw:
        fields.append(("data", pa.binary()))
    return pa.schema(fields)


def delta_batch_to_arrow(batch) -> pyarrow.RecordBatch:
    """Wraps a DeltaBatch's column buffers as Arrow arrays without copying them."""
    pa = require_pyarrow()

    names, arrays = _arrays_from_buffers(len(batch), batch._buffers())
    return pa.RecordBatch.from_arrays(arrays, schema=delta_batch_schema(raw="data" in names))


def snapshot_batch_schema(tasks: bool = False) -> pyarrow.Schema:
    """The Arrow schema of ``SnapshotBatch.to_arrow``; with ``tasks``, also ``due`` (unix ms of
    a delayed record, null when ready) and ``attempts`` (counted deliveries, 0 when none)."""
    pa = require_pyarrow()

    fields = [
        ("queue", pa.string()),
        ("implementation", pa.int32()),
        ("record_id", pa.int64()),
        ("key", pa.int64()),
        ("message", pa.binary()),
    ]
    if tasks:  # a task-layout snapshot's (spec section 12)
        fields += [("due", pa.int64()), ("attempts", pa.int32())]
    return pa.schema(fields)


def _arrays_from_buffers(n: int, buffers) -> tuple[list[str], list]:
    pa = require_pyarrow()

    types = {"int64": pa.int64(), "int32": pa.int32(), "string": pa.string(), "binary": pa.binary()}
    names, arrays = [], []
    for name, (kind, validity, values, offsets) in buffers:
        bufs = [pa.py_buffer(validity) if validity is not None else None]
        if kind == "list<int64>":  # int32 offsets into one int64 child of every list's values
            child = pa.py_buffer(values)
            items = pa.Array.from_buffers(pa.int64(), child.size // 8, [None, child])
            bufs.append(pa.py_buffer(offsets))
            names.append(name)
            arrays.append(pa.Array.from_buffers(pa.list_(pa.int64()), n, bufs, children=[items]))
            continue
        if offsets is not None:
            bufs.append(pa.py_buffer(offsets))
        bufs.append(pa.py_buffer(values))
        names.append(name)
        arrays.append(pa.Array.from_buffers(types[kind], n, bufs))
    return names, arrays


def snapshot_batch_to_arrow(batch, tasks: bool = False) -> pyarrow.RecordBatch:
    """Wraps a SnapshotBatch's column buffers as Arrow arrays without copying them."""
    pa = require_pyarrow()

    _, arrays = _arrays_from_buffers(len(batch), batch._buffers(tasks))
    return pa.RecordBatch.from_arrays(arrays, schema=snapshot_batch_schema(tasks))
