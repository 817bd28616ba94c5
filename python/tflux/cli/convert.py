"""``tflux convert``: a whole base directory rewritten in the other dialect (spec section 11)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

import tflux
from tflux.cli._base import DIALECTS, _base_dir, dialect_option
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    MB,
    _plural,
    _print_json,
    _progress,
    _rate,
    _size,
    err,
    out,
)


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Write a base directory again in the other dialect (spec or taskflux).",
)
@click.argument("src", type=click.Path(path_type=Path))
@click.argument("dst", type=click.Path(path_type=Path))
@click.option(
    "--to",
    "to",
    type=click.Choice(DIALECTS),
    required=True,
    help="The dialect to write: spec (tflux's own) or taskflux (what TaskFlux's code writes).",
)
@click.option(
    "--create",
    is_flag=True,
    help="Also create DST's missing parent directories (as mkdir -p; by default only DST).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
@dialect_option
def convert(
    src: Path, dst: Path, to: str, create: bool, as_json: bool, dialect: str | None
) -> None:
    """Write the base directory SRC (log, snapshot, metadata, settings) as a new base
    directory DST in the dialect --to: spec (the format document, tflux's own) or taskflux
    (what TaskFlux's own code writes, so TaskFlux can open it).

    SRC is only read (as tflux.open(SRC, readonly=True) reads it: every checksum checked,
    nothing cut); --dialect names its dialect (default: detected from its files). DST must
    not exist, or be an empty directory (as git clone takes one), and must be neither inside
    SRC nor hold it; its parent must exist, as for mkdir (--create makes the missing
    parents). The copy is built in a hidden directory beside DST, fsynced, verified (every
    record, the snapshot and metadata, as an open checks them) and compared with SRC (every
    entry's LSN, term and data, the snapshot and the metadata), and only then renamed to
    DST: a failure or Ctrl-C leaves no DST. Every segment keeps its name (first LSN). A torn
    tail at the end of SRC's log (a crash's incomplete write) is not converted and is named.

    With --json, one object: source, destination, from, to, entries, segments, bytes_read,
    bytes_written, snapshot, metadata (whether each was written), torn_tail ({path, offset}
    or null), leftovers_removed (half-built copies of DST that killed conversions left beside
    it, removed first), fingerprint (a hash of every entry's LSN, term, length and checksum,
    computed from SRC and found again in DST) and seconds.

    \b
    Examples:
      tflux convert ./taskflux-node ./node-spec --to spec
      tflux convert ./base ./for-taskflux --to taskflux && tflux verify ./for-taskflux

    \b
    Exit codes: 0 converted, 1 corrupt data in SRC (nothing written), 2 usage or I/O error
    (DST exists, SRC is not a base directory, a dialect the files contradict).
    """
    base, _ = _base_dir(src)
    with _progress(in_bytes=True, quiet=as_json) as progress:  # bytes of the log
        task = progress.add_task("convert", total=None)

        def tell(done: int, total: int) -> None:
            progress.update(task, completed=done, total=max(total, 1))

        report = tflux.convert(base, dst, to=to, dialect=dialect, create=create, progress=tell)
    torn = report.torn_tail
    if as_json:
        _print_json(
            {
                "source": report.source,
                "destination": report.destination,
                "from": report.from_dialect,
                "to": report.to_dialect,
                "entries": report.entries,
                "segments": report.segments,
                "bytes_read": report.bytes_read,
                "bytes_written": report.bytes_written,
                "snapshot": report.snapshot,
                "metadata": report.metadata,
                "torn_tail": None if torn is None else {"path": torn[0], "offset": torn[1]},
                "leftovers_removed": report.leftovers_removed,
                "fingerprint": f"{report.fingerprint:016x}",
                "seconds": round(report.seconds, 6),
            }
        )
        return
    for leftover in report.leftovers_removed:
        err.print(f"note: removed {escape(leftover)}, left by a conversion that died")
    if torn is not None:
        err.print(
            f"note: {escape(torn[0])} ends in a torn tail at offset {torn[1]}: it was not "
            "converted (the source keeps it)"
        )
    rate = _rate(report.bytes_read / MB, report.seconds)
    out.print(
        f"converted {escape(str(report.source))} ({report.from_dialect}) -> "
        f"{escape(str(report.destination))} ({report.to_dialect}): "
        f"{report.entries:,} entr{'y' if report.entries == 1 else 'ies'} in "
        f"{_plural(report.segments, 'segment')}, {_size(report.bytes_written)} of log"
        f"{', snapshot' if report.snapshot else ''}{', metadata' if report.metadata else ''}; "
        f"verified, in {report.seconds:.3f} s ({rate} MB/s)"
    )
