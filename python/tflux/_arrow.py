"""Arrow views of tflux's columnar buffers (pyarrow is imported only when asked for)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow

    from tflux._tflux import EntryBatch


def entry_batch_to_arrow(batch: EntryBatch) -> pyarrow.RecordBatch:
    """Wraps the batch's buffers as Arrow arrays without copying them."""
    import pyarrow as pa

    n = len(batch)
    lsn = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(batch.lsn)])
    term = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(batch.term)])
    data = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(batch.offsets), pa.py_buffer(batch.data)]
    )
    return pa.RecordBatch.from_arrays([lsn, term, data], names=["lsn", "term", "data"])
