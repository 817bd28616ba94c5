"""``tflux replay``: restore a base directory read-only and list its queues."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

import tflux
from tflux.cli._base import (
    _base_dir,
    _dialect,
    _open_store,
    _settings_for_reading,
    dialect_option,
)
from tflux.cli._check import _lsn_location
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    EXIT_CORRUPT,
    CliError,
    _plural,
    _print_json,
    _queue_json,
    _queues_table,
    _rate,
    _stopwatch,
    out,
)
from tflux.cli.stats import ask_owner, owner_holds
from tflux.errors import ReplayError


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Restore a base directory read-only and list its queues.",
)
@click.argument("base", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
@dialect_option
def replay(base: Path, as_json: bool, dialect: str | None) -> None:
    """Restore BASE (snapshot + replay of the log after it) and print its queues.

    BASE is opened read-only, as tflux.open(BASE, readonly=True): without the writer lock
    (a running writer is fine) and without writing anything, not even the trim of a torn tail.
    Records that were in flight when the writer stopped are back in their queues. When a
    process owns BASE (a worker's tflux.open, tflux serve), it holds the records in flight: the
    queues' figures are then asked of it (as its client) and the output says so; an owner that
    does not answer is named, and the records it holds in flight count as ready.

    With --json, one object: base, dialect, seconds, snapshot_index (null without a snapshot),
    replayed (deltas applied after the snapshot), log_start, log_last, owner (null: no owner;
    else {pid, answered, error}, and queues come from the owner when it answered) and queues,
    a list of
    objects with name, implementation, count (ready records), in_flight, last_id, max_size,
    max_message_size (null: no limit) and key_range ([min, max] or null).

    \b
    Examples:
      tflux replay ./base
      tflux replay ./base --json | jq '.queues[] | {name, count}'

    \b
    Exit codes: 0 restored, 1 corrupt data or a delta that cannot be applied (its LSN is
    named), 2 usage or I/O error.
    """
    base, log_dir = _base_dir(base)
    _settings_for_reading(base)  # a bad settings file: a warning, then the defaults
    try:
        with _stopwatch() as elapsed, _open_store(base, dialect) as store:
            queues = store.queues()
            dialect = store.dialect
            replayed, snapshot_index = store.replayed, store.restored_snapshot_index
            start, last, _ = store.log_bounds
    except ReplayError as exc:  # name the file and offset of the bad delta too
        path, offset = None, None
        if exc.lsn is not None:
            segments = tflux.verify(log_dir, dialect=_dialect(base, dialect)).segments
            path, offset = _lsn_location(segments, exc.lsn)
        where = "" if path is None else f" (file {path}, offset {offset})"
        raise CliError(f"{exc.message}{where}", EXIT_CORRUPT) from exc
    seconds = elapsed()
    owner = None
    if owner_holds(base):
        owner, live = ask_owner(base, dialect, lambda client: client.queues())
        queues = live if live is not None else queues
    if as_json:
        _print_json(
            {
                "base": str(base),
                "dialect": dialect,
                "seconds": round(seconds, 6),
                "snapshot_index": snapshot_index,
                "replayed": replayed,
                "log_start": start,
                "log_last": last,
                "owner": None if owner is None else owner.as_json(),
                "queues": [_queue_json(q) for q in queues],
            }
        )
        return
    since = f"snapshot at LSN {snapshot_index:,}" if snapshot_index is not None else "no snapshot"
    out.print(
        f"restored {escape(str(base))} in {seconds:.3f} s: {since} + "
        f"{_plural(replayed, 'delta')} replayed ({_rate(replayed, seconds)} deltas/s)"
    )
    if owner is not None:
        out.print(escape(owner.line()))
    ready = sum(q.count for q in queues)
    out.print(f"{_plural(len(queues), 'queue')}, {_plural(ready, 'ready record')}\n")
    out.print(_queues_table(queues))
