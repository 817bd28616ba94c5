"""Parquet export of a base directory's log and snapshot (pyarrow only, no Spark).

``export(base, out)`` writes two files with the same columns as the Spark sources
(``tflux.spark``):

- ``OUT/log.parquet``: every log record decoded by the core, ``source``, ``segment``, ``lsn``,
  ``term``, ``kind``, ``queue``, ``key``, ``record_id``, ``message``, ``implementation``,
  ``max_queue_size``, ``max_message_size``, ``key_min``, ``key_max``, the task-queue deltas'
  ``due``, ``kept_ids``, ``rules`` (docs/format.md, "Task-queue deltas") (and ``data`` with
  ``raw=True``);
- ``OUT/snapshot.parquet``: one row per snapshot record, ``source``, ``queue``,
  ``implementation``, ``record_id``, ``key``, ``message``, ``last_index``, ``last_term`` (no rows
  without a snapshot).

Terms are ``int64`` in both files (docs/format.md, "Parquet export"): ``last_term`` is one (a
wide snapshot's term may be past Int32, spec 4.1, and TaskFlux writes Int64 terms), and the
log's ``term``, an Int32 in the core and the Spark sources, is widened to it (lossless), so that
``log.term`` and ``snapshot.last_term`` compare and join without a cast.

``base`` may be anything the Spark sources accept (base directory, log directory, several of
them comma-separated or a glob). Segments are read one at a time through the core (CRCs
checked; a corrupt sealed segment raises :class:`tflux.CorruptionError` naming file and offset),
so memory stays at one batch. Each file is written under a temporary name and renamed into place.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from tflux._tflux import create_named_dir

__all__ = ["export"]

# The extra that installs pyarrow alone (``arrow`` is the same list under another name).
_INSTALL = "pip install 'tflux[parquet]'"


def _require_pyarrow() -> None:
    """Raise ``ImportError`` saying which extra to install when pyarrow cannot be imported."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        message = f"tflux.parquet needs pyarrow, which is not installed: {_INSTALL}"
        raise ImportError(message) from exc


def export(
    base: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    raw: bool = False,
    compression: str = "zstd",
    dialect: str | None = None,
    create: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, int]:
    """Write ``OUT/log.parquet`` and ``OUT/snapshot.parquet``; returns the row counts
    (``{"log": n, "snapshot": m}``). Needs pyarrow (``pip install 'tflux[parquet]'``).

    A new ``OUT`` is made as ``tflux.open`` makes a base, as ``mkdir`` does: a missing parent
    raises :class:`tflux.TfluxIOError` naming it (nothing is made), unless ``create=True``
    makes the missing parents too.

    ``progress(done, total)`` is called after each segment file and the snapshot is read, in
    bytes of those files (``total``: all of them)."""
    _require_pyarrow()
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tflux.spark import _columns, _paths

    sources = _paths.resolve(os.fspath(base), dialect)
    out_dir = Path(out)
    create_named_dir(out_dir, create=create)
    counts = {"log": 0, "snapshot": 0}
    logs = [(src, _paths.segment_names(src.log_dir)) for src in sources if src.log_dir]
    total = sum(_size(os.path.join(src.log_dir, n)) for src, names in logs for n in names)
    total += sum(_size(src.snapshot) for src in sources if src.snapshot)
    done = 0

    def tell(nbytes: int) -> None:
        nonlocal done
        done += nbytes
        if progress is not None:
            progress(done, total)

    def widened(schema):
        """The log's schema with ``term`` as int64, the snapshot's ``last_term`` type."""
        at = schema.get_field_index("term")
        return schema.set(at, schema.field(at).with_type(pa.int64()))

    def cast(batches, schema):
        for batch in batches:
            columns = [c.cast(f.type) for c, f in zip(batch.columns, schema, strict=True)]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    def write(name: str, schema, batches) -> int:
        final = out_dir / name
        # A fresh name made exclusively (O_EXCL never follows a planted symlink), renamed over
        # the final name (a rename replaces a symlink there, never writes through it).
        fd, tmp_name = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".tmp")
        tmp = Path(tmp_name)
        rows = 0
        try:
            with (
                os.fdopen(fd, "wb") as sink,
                pq.ParquetWriter(sink, schema, compression=compression) as writer,
            ):
                for batch in batches:
                    writer.write_batch(batch)
                    rows += batch.num_rows
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        return rows

    def log_batches():
        for src, names in logs:
            for i, name in enumerate(names):
                sealed = i + 1 < len(names)
                end = _paths.start_lsn(names[i + 1]) - 1 if sealed else None
                yield from _columns.read_segment(
                    src.base,
                    src.log_dir,
                    name,
                    _paths.start_lsn(name),
                    end,
                    sealed=sealed,
                    expected_end=end,
                    raw=raw,
                    dialect=src.dialect,
                )
                tell(_size(os.path.join(src.log_dir, name)))

    def snapshot_batches():
        for src in sources:
            if src.snapshot:
                yield from _columns.read_snapshot(src.base, src.snapshot, src.dialect)
                tell(_size(src.snapshot))

    if progress is not None:
        progress(0, total)
    log_schema = widened(_columns.log_schema(raw))
    counts["log"] = write("log.parquet", log_schema, cast(log_batches(), log_schema))
    counts["snapshot"] = write("snapshot.parquet", _columns.snapshot_schema(), snapshot_batches())
    return counts


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:  # gone meanwhile: reading it raises the error that matters
        return 0
