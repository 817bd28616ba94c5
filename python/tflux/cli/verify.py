"""``tflux verify``: check every byte of a base directory; exit 1 on corruption."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape

from tflux.cli._base import _is_channel, _locate, _located, dialect_option
from tflux.cli._check import _check, _checked_json, _print_findings, _print_notes
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    EXIT_CORRUPT,
    EXIT_OK,
    MB,
    _plural,
    _print_json,
    _rate,
    _segments_table,
    _size,
    out,
)


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Check every byte of a base directory; exit 1 on corruption.",
)
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--replay/--no-replay",
    "full",
    default=True,
    show_default=True,
    help="Rebuild the queue state too (snapshot + log), as tflux.open does.",
)
@click.option("-v", "--verbose", is_flag=True, help="List the segments too.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
@dialect_option
def verify(path: Path, full: bool, verbose: bool, as_json: bool, dialect: str | None) -> None:
    """Check every record of every segment, the metadata and snapshot files, and how they agree.

    PATH is a base directory (holding data/log) or a log directory. Nothing is written.
    Checked: each segment (checksums, framing, terms never going down, no gap or overlap
    between segments); the metadata and snapshot checksums; that the log continues the
    snapshot (it starts at or before the snapshot's last index + 1; at LSN 0 without a
    snapshot); that no entry has a term above the metadata's current term (term 1 when the
    file is absent). The queue state is rebuilt too (snapshot + replay),
    as opening the store does, and a delta that cannot be applied is reported with its LSN,
    file and offset; --no-replay skips that (then OK says only that the files are sound).
    The checks are the library's own (tflux.verify_base): exit 0 exactly when a read-only
    tflux.open of the directory succeeds. Every record's checksum is read once.

    Each problem is printed with its file and byte offset. A torn tail (an incomplete last
    record of the last segment, as a crash leaves it) is only a warning: the next open trims
    it. A log directory (PATH naming data/log itself, or a log outside a base directory) gets
    the segment checks only, as a raw Raft log.

    With --json, one object: path, base (null for a log directory checked alone), dialect
    ("spec" or "taskflux", spec section 11), ok,
    replay (whether the state was rebuilt), segments ([{name, first_lsn, last_lsn, records,
    bytes, file_bytes, sealed}]), records, bytes, log_seconds, seconds (every check), log
    ({first_lsn, last_lsn} or null), metadata ({term, voted_for, present} or null), snapshot
    ({last_index, last_term, queues, records} or null), replayed (deltas, or null), queues
    (as tflux replay --json, or null) and problems ([{fatal, kind, path, offset, message}],
    warnings included). The exit code is the same as without --json.

    \b
    Exit codes:
      0  clean, or only a torn tail / ignored files (warnings)
      1  corruption: a bad record in a sealed segment, a bad snapshot or metadata checksum,
         a gap between snapshot and log or between segments, a delta that cannot be replayed...
      2  usage or I/O error (no such directory, no segments, permission denied)

    \b
    Examples:
      tflux verify ./base
      tflux verify ./base --replay
      tflux verify ./base/data/log -v && echo intact
      tflux verify ./base --json | jq '.problems[] | select(.fatal)'
    """
    base, log_dir = _locate(path)
    if _located(path).kind != "base":  # a log directory named itself: a raw Raft log, segment
        base = None  # checks only (the core says what PATH is, whatever its spelling)
    if base is not None and _is_channel(base):
        base = None  # a channel: opaque messages, no snapshot or deltas (segment checks only)
    checked = _check(base, log_dir, replay=full, dialect=dialect)
    if as_json:
        _print_json(
            {
                "path": str(path),
                "base": None if base is None else str(base),
                "dialect": checked.report.dialect,
                "replay": full and base is not None,
                **_checked_json(checked),
            }
        )
        sys.exit(EXIT_CORRUPT if checked.fatal else EXIT_OK)
    report, seconds = checked.report, checked.log_seconds
    # "checked", not "verified", when something is wrong (issue 30 item 23).
    said = "checked" if checked.fatal else "verified"
    out.print(
        f"{said} {escape(str(base if base is not None else log_dir))} "
        f"({checked.report.dialect} dialect): "
        f"{_plural(len(report.segments), 'segment')}, {_plural(report.records, 'record')}, "
        f"{_size(report.bytes)} of log in {seconds:.3f} s "
        f"({_rate(report.bytes / MB, seconds)} MB/s); every check: {checked.seconds:.3f} s"
    )
    _print_notes(checked)
    if verbose:
        out.print(_segments_table(report.segments, limit=sys.maxsize))
    _print_findings(checked.findings)
    if checked.fatal:
        out.print("[bold red]CORRUPT[/]")
    elif base is not None and not full:
        out.print("[bold green]OK[/] (files only: the state was not rebuilt)")
    else:
        out.print("[bold green]OK[/]")
    sys.exit(EXIT_CORRUPT if checked.fatal else EXIT_OK)
