"""``tflux compress``: replace the sealed segments of a log by compressed ``.log.z`` files."""

from __future__ import annotations

import os
from pathlib import Path

import click

import tflux
from tflux.cli._base import _dialect, _locate, dialect_option
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    _plural,
    _print_json,
    _progress,
    _size,
    _stopwatch,
    out,
)


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Compress the sealed segments of a log (NNN.log -> NNN.log.z).",
)
@click.argument("path", metavar="BASE", type=click.Path(path_type=Path))
@click.option(
    "--method",
    type=click.Choice(["zstd", "lz4"]),
    default="zstd",
    show_default=True,
    help="zstd: smaller files; lz4: faster to compress and to read back.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the summary.")
@dialect_option
def compress(path: Path, method: str, as_json: bool, dialect: str | None) -> None:
    """Replace every sealed segment of BASE not yet compressed by a compressed copy
    (NNN.log.z, spec section 9). The active segment is never compressed.

    Each segment is checked, compressed into data/temp/, fsynced, read back and decoded,
    renamed beside the original and only then is the original deleted: a crash at any point
    loses nothing, and the next open cleans up. Every reader of tflux (the store, verify, dump,
    inspect, export, Spark) reads compressed segments.

    Compressed segments exist only in the spec dialect: a taskflux directory is refused
    (exit 2) and left as it is.

    The writer lock is taken: stop the process using BASE first (a store can compress on its
    own with the setting LogCompressSealedSegments).

    \b
    Exit codes:
      0  done (also when there was nothing to compress)
      1  a segment is corrupt (nothing was changed for it)
      2  usage or I/O error, or the directory is locked

    \b
    Examples:
      tflux compress ./base
      tflux compress ./base --method lz4 && tflux inspect ./base
    """
    base, log_dir = _locate(path)
    dialect = _dialect(base, dialect)
    with tflux.Log.open(log_dir, empty_entries=base is None, dialect=dialect) as log:
        dialect = log.dialect
        todo = log.compressible()
        before = {s.start_lsn: s.size + 4 for s in log.segments if s.start_lsn in set(todo)}
        made: list[str] = []
        with _stopwatch() as elapsed, _progress(quiet=as_json) as progress:
            task = progress.add_task("compress", total=max(len(todo), 1))
            for first in todo:
                done = log.compress_one(first, method)
                if done is not None:
                    made.append(done)
                progress.advance(task)
    original = sum(before[int(os.path.basename(p)[:19])] for p in made)
    compressed = sum(os.path.getsize(p) for p in made)
    seconds = elapsed()
    if as_json:
        _print_json(
            {
                "path": str(path),
                "dialect": dialect,
                "method": method,
                "segments": made,
                "original_bytes": original,
                "compressed_bytes": compressed,
                "seconds": round(seconds, 3),
            }
        )
        return
    if not made:
        out.print("nothing to compress (no sealed segment left uncompressed)")
        return
    ratio = compressed / original if original else 1.0
    speed = original / seconds / 1e6 if seconds > 0 else 0.0
    out.print(
        f"compressed {_plural(len(made), 'segment')} with {method}: "
        f"{_size(original)} -> {_size(compressed)} ({ratio:.1%}) in {seconds:.2f} s "
        f"({speed:,.0f} MB/s)"
    )
