"""``tflux inspect``: settings, metadata, snapshot and segments of a base directory."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

import tflux
from tflux._layout import SETTINGS_FILE, Layout
from tflux.cli._base import _base_dir, _is_channel, _settings_for_reading, dialect_option
from tflux.cli._check import (
    Checked,
    SnapshotView,
    _check,
    _finding_json,
    _print_findings,
    _segment_json,
)
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    EXIT_CORRUPT,
    EXIT_OK,
    _file_size,
    _implementation,
    _key_range,
    _limit,
    _plural,
    _print_json,
    _queue_label,
    _segments_table,
    _size,
    _table,
    out,
)
from tflux.cli.stats import ask_owner, owner_holds


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Settings, metadata, snapshot and segments of a base directory at a glance.",
)
@click.argument("base", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
@dialect_option
def inspect(base: Path, as_json: bool, dialect: str | None) -> None:
    """Show the settings in force, the metadata, the snapshot and the log segments of BASE.

    Nothing is written and the state is not replayed (tflux replay does that). Checksums of
    every file are checked on the way; problems are listed at the end (tflux verify says more).

    A bad settings file is a warning (naming it) and the defaults are shown, as a read-only
    open uses them.

    With --json, one object: base, kind ("store", or "channel": a channel reads no settings
    file and has no metadata or snapshot, so those are null), dialect ("spec" or "taskflux",
    spec section 11), settings (in force, PascalCase keys, typed values),
    settings_file (the keys set by taskflux.settings.json, or null), settings_warning (why
    the file was ignored, or null), metadata ({term, voted_for} or null when
    corrupt), snapshot (null or {last_index, last_term, bytes, queues: [{name, implementation,
    records, last_id, max_size, max_message_size, key_range}]}), segments ([{name, first_lsn,
    last_lsn, records, bytes, file_bytes, sealed}]), temp (file names under data/temp, or
    data/temporary in the taskflux dialect), owner (stores: null when no process owns BASE,
    else {pid, answered, error}: the owner holds the records in flight, which no file shows;
    tflux stats asks it) and
    problems ([{fatal, kind, path, offset, message}]).

    \b
    Examples:
      tflux inspect ./base
      tflux inspect ./base --json | jq .snapshot.last_index

    \b
    Exit codes: 0 all readable, 1 a file is corrupt, 2 usage or I/O error.
    """
    base, log_dir = _base_dir(base)
    files = Layout(base, dialect)
    channel = _is_channel(base)
    settings: dict[str, Any] | None = None
    ignored = from_file = None
    if not channel:  # a channel reads no settings file: a store's settings are not its
        settings, ignored = _settings_for_reading(base)
        from_file = None if ignored is not None else _settings_file(files.settings)
    # A channel holds opaque messages: segment checks only, no snapshot/log continuity (collection
    # deletes the oldest segments), exactly as verify treats it.
    checked = _check(None if channel else base, log_dir, dialect=files.dialect)
    temp = sorted(os.listdir(files.temp)) if files.temp.is_dir() else []
    receivers = _receivers(base)
    # A live store: its owner holds the records in flight, which no file shows.
    owner = None if channel or not owner_holds(base) else ask_owner(base, dialect, id)[0]
    if as_json:
        doc = _inspect_json(base, settings, from_file, ignored, checked, temp)
        if receivers is not None:
            doc["receivers"] = receivers
        if not channel:
            doc["owner"] = None if owner is None else owner.as_json()
        _print_json(doc)
    else:
        _inspect_text(base, settings, from_file, ignored, checked, temp)
        if receivers is not None:
            _receivers_text(receivers)
        if owner is not None:
            out.print()
            out.print(f"[bold]owner[/]     {escape(owner.line())} (tflux stats BASE asks it)")
    sys.exit(EXIT_CORRUPT if checked.fatal else EXIT_OK)


def _receivers(base: Path) -> list[dict[str, Any]] | None:
    """A channel directory's receivers: name, first unacknowledged LSN and lag (messages sent
    and not acknowledged); None for a directory that is not a channel (no data/cursors)."""
    if not _is_channel(base):
        return None
    with tflux.Channel.open(base, readonly=True) as ch:
        end = ch.next_lsn
        return [
            {"name": name, "acked": acked, "lag": max(0, end - acked)}
            for name, acked in sorted(ch.receivers().items())
        ]


def _receivers_text(receivers: list[dict[str, Any]]) -> None:
    out.print()
    out.print(f"[bold]receivers[/] {_plural(len(receivers), 'receiver')} (channel cursors)")
    if receivers:
        table = _table("receiver", "first unacked", "lag", right=("first unacked", "lag"))
        for r in receivers:
            table.add_row(escape(r["name"]), f"{r['acked']:,}", f"{r['lag']:,}")
        out.print(table)


def _settings_file(path: Path) -> dict[str, Any] | None:
    """The keys the settings file sets (``{}`` when empty), or None: absent, or not a JSON
    object (then the defaults are in force and ``_settings_for_reading`` said why)."""
    try:
        text = path.read_text()
        parsed = json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _snapshot_json(snap: SnapshotView, nbytes: int) -> dict[str, Any]:
    return {
        "last_index": snap.last_index,
        "last_term": snap.last_term,
        "bytes": nbytes,
        "queues": [
            {
                "name": q.name,
                "implementation": _implementation(q.implementation),
                "records": q.records,
                "last_id": q.last_id,
                "max_size": q.max_queue_size,
                "max_message_size": q.max_message_size,
                "key_range": list(q.key_range) if q.key_range is not None else None,
            }
            for q in snap.queues
        ],
    }


def _inspect_json(
    base: Path,
    settings: dict[str, Any] | None,
    from_file: dict[str, Any] | None,
    ignored: str | None,
    checked: Checked,
    temp: list[str],
) -> dict[str, Any]:
    files = Layout(base, checked.report.dialect)
    meta, snap = checked.metadata, checked.snapshot
    return {
        "base": str(base),
        "kind": "store" if settings is not None else "channel",
        "dialect": checked.report.dialect,
        "settings": settings,
        "settings_file": from_file,
        "settings_warning": ignored,
        "metadata": None if meta is None else {"term": meta.term, "voted_for": meta.voted_for},
        "snapshot": None if snap is None else _snapshot_json(snap, _file_size(files.snapshot) or 0),
        "segments": [_segment_json(s) for s in checked.report.segments],
        "temp": temp,
        "problems": [_finding_json(f) for f in checked.findings],
    }


def _inspect_text(
    base: Path,
    settings: dict[str, Any] | None,
    from_file: dict[str, Any] | None,
    ignored: str | None,
    checked: Checked,
    temp: list[str],
) -> None:
    files = Layout(base, checked.report.dialect)
    out.print(f"[bold]base[/]      {escape(str(base))}")
    out.print(f"[bold]dialect[/]   {checked.report.dialect}")
    if settings is None:
        out.print(
            "[bold]channel[/]   data/cursors: a channel's log of opaque messages "
            "(no settings file, metadata or snapshot apply)"
        )
        out.print()
    else:
        _store_files_text(files, settings, from_file, ignored, checked)
    _log_text(base, checked, temp)


def _store_files_text(
    files: Layout,
    settings: dict[str, Any],
    from_file: dict[str, Any] | None,
    ignored: str | None,
    checked: Checked,
) -> None:
    """A store's settings in force, metadata and snapshot."""
    if ignored is not None:
        source = f"defaults ({SETTINGS_FILE} ignored: see the warning)"
    elif from_file is not None:
        source = f"{SETTINGS_FILE} (*) and defaults"
    else:
        source = f"defaults (no {SETTINGS_FILE})"
    out.print(f"[bold]settings[/]  in force, from {source}:")
    _settings_lines(settings, from_file)
    out.print()

    meta = checked.metadata
    if meta is None:
        out.print(f"[bold]metadata[/]  {escape(str(files.metadata))}: unreadable (see below)")
    else:
        vote = "no vote" if meta.voted_for is None else f"voted for {meta.voted_for}"
        absent = "" if _file_size(files.metadata) else " (absent: the defaults)"
        out.print(f"[bold]metadata[/]  term {meta.term}, {vote}{absent}")

    snap = checked.snapshot
    if snap is None:
        corrupt = any(f.path == str(files.snapshot) for f in checked.findings)
        out.print(f"[bold]snapshot[/]  {'unreadable (see below)' if corrupt else 'none'}")
    else:
        records = sum(q.records for q in snap.queues)
        out.print(
            f"[bold]snapshot[/]  last index {snap.last_index:,}, last term {snap.last_term}, "
            f"{_plural(len(snap.queues), 'queue')}, {_plural(records, 'record')}, "
            f"{_size(_file_size(files.snapshot) or 0)}"
        )
        table = _table(
            "queue",
            "implementation",
            "key range",
            "records",
            "last id",
            "max size",
            "max message",
            right=("records", "last id", "max size", "max message"),
            optional=("max message", "max size", "key range", "implementation"),
        )
        for q in snap.queues:
            table.add_row(
                escape(_queue_label(q.name)),
                _implementation(q.implementation),
                _key_range(q.key_range),
                f"{q.records:,}",
                f"{q.last_id:,}",
                _limit(q.max_queue_size),
                _limit(q.max_message_size),
            )
        out.print(table)
    out.print()


def _settings_lines(settings: dict[str, Any], from_file: dict[str, Any] | None) -> None:
    """One ``key value`` line per setting, values aligned when every line fits the width; else
    unaligned, and a value too long for its key's line on the next one: a key and its value
    never wrap apart (issue 43 item 19)."""
    rows = [
        (key, json.dumps(value) + (" *" if from_file and key in from_file else ""))
        for key, value in settings.items()
    ]
    pad = max([34, *(len(key) for key, _ in rows)])
    aligned = all(2 + pad + 1 + len(value) <= out.width for _, value in rows)
    for key, value in rows:
        if aligned:
            out.print(f"  {key:<{pad}} {escape(value)}")
        elif 2 + len(key) + 1 + len(value) <= out.width:
            out.print(f"  {key} {escape(value)}")
        else:
            out.print(f"  {key}")
            out.print(f"      {escape(value)}", overflow="fold")


def _log_text(base: Path, checked: Checked, temp: list[str]) -> None:
    """The segments, the temp directory and the problems."""
    segments = checked.report.segments
    used = sum(s.size for s in segments)
    allocated = sum(s.file_size for s in segments)
    span = (
        f"LSN {segments[0].start_lsn:,}..{segments[-1].last_lsn:,}, "
        if segments and segments[-1].last_lsn >= segments[0].start_lsn
        else ""
    )
    out.print(
        f"[bold]log[/]       {span}{_plural(checked.report.records, 'record')} in "
        f"{_plural(len(segments), 'segment')}, {_size(used)} ({_size(allocated)} allocated)"
    )
    out.print(_segments_table(segments, limit=16))
    if temp:
        shown = ", ".join(temp[:5]) + (f" and {len(temp) - 5} more" if len(temp) > 5 else "")
        out.print(f"[bold]temp[/]      {_plural(len(temp), 'file')} in data/temp: {escape(shown)}")
    # The settings warning was printed with the settings (_settings_for_reading).
    findings = [f for f in checked.findings if f.fatal or f.kind != "settings"]
    _print_findings(findings)
    if findings:
        out.print(f"run: tflux verify {escape(str(base))}")
