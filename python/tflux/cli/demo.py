"""``tflux demo``: write a sample base directory through the store, restore and verify it."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

import tflux
from tflux._layout import SETTINGS_FILE, Layout, is_segment_name
from tflux.cli._base import _open_store
from tflux.cli._check import Checked, _check, _checked_json, _print_findings
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    EXIT_CORRUPT,
    MB,
    CliError,
    _file_size,
    _key_range,
    _plural,
    _print_json,
    _progress,
    _queue_label,
    _rate,
    _segments_table,
    _size,
    _stopwatch,
    _table,
    err,
    out,
)


@dataclass(frozen=True)
class _DemoQueue:
    name: str
    implementation: str
    key_range: tuple[int, int] | None
    max_message_size: int | None
    keys: int  # keys used: 0 .. keys-1


_DEMO_QUEUES = (
    _DemoQueue("", "heap", None, None, 1000),  # the default queue exists from the start
    _DemoQueue("emails", "heap", None, 1 << 16, 10),
    _DemoQueue("reports", "heap", None, None, 1000),
    _DemoQueue("thumbnails", "array", (0, 99), None, 100),
)
_DEMO_CREATES = len(_DEMO_QUEUES) - 1
_DEMO_MAX_BATCH = 5_000
_DEMO_SEGMENTS = 16  # the default soft limit aims at about this many segments
_DEMO_MANUAL_SNAPSHOT = 0.2  # store.snapshot() once this fraction of the deltas is written
_DEMO_IN_FLIGHT = 3  # records per queue left dequeued, un-acked, at close


@dataclass(frozen=True)
class _DemoStep:
    queue: _DemoQueue
    adds: int  # AddRecord deltas (one enqueue_many)
    acks: int  # dequeue + ack: RemoveRecord deltas


def _demo_record_bytes(delta: tflux.Delta) -> int:
    """Bytes a delta takes in a segment: record header, data, padding (spec section 3)."""
    n = len(tflux.encode_delta(delta))
    return 16 + n + (-n) % 4


def _demo_plan(records: int, payload_size: int, batch: int) -> list[_DemoStep]:
    """Exactly ``records`` deltas: the CreateQueues, then steps of 4 adds for 1 ack, round robin."""
    steps, remaining = [], records - _DEMO_CREATES
    while remaining > 0:
        size = min(batch + batch // 4, remaining)
        queue = _DEMO_QUEUES[len(steps) % len(_DEMO_QUEUES)]
        steps.append(_DemoStep(queue, size - size // 5, size // 5))
        remaining -= size
    return steps


def _demo_log_bytes(steps: Sequence[_DemoStep], payload_size: int) -> int:
    message = bytes(payload_size)
    add = {
        q.name: _demo_record_bytes(tflux.Delta.add_record(q.name, 0, message)) for q in _DEMO_QUEUES
    }
    ack = {q.name: _demo_record_bytes(tflux.Delta.remove_record(q.name, 1)) for q in _DEMO_QUEUES}
    return sum(s.adds * add[s.queue.name] + s.acks * ack[s.queue.name] for s in steps)


def _demo_settings(records: int, payload_size: int, soft_limit: int | None) -> dict[str, Any]:
    """Settings for ~16 segments, one manual snapshot at 20% and one automatic one near 70%."""
    estimate = _demo_log_bytes(_demo_plan(records, payload_size, _DEMO_MAX_BATCH), payload_size)
    if soft_limit is None:
        soft_limit = max(16 << 10, -(-estimate // _DEMO_SEGMENTS // 4096) * 4096)
    segments = max(1, estimate // soft_limit)
    return {
        "log_sync_policy": "never",
        "log_file_soft_limit": soft_limit,
        "log_file_hard_limit": 2 * soft_limit,
        # Counted from the manual snapshot at 20%: the automatic one comes about half the log
        # later, and a second one would need more log than the demo writes.
        "snapshot_creation_segments_threshold": max(1, segments // 2),
    }


def _demo_messages(queue: str, payload_size: int) -> list[bytes]:
    """A small pool of distinct, readable messages of ``payload_size`` bytes, reused round robin."""
    label = (queue or "default").encode()
    return [
        ((b"%s %03d " % (label, j)) * (payload_size // 8 + 1))[:payload_size] for j in range(101)
    ]


def _demo_dir(directory: Path | None) -> Path:
    if directory is None:
        return Path(tempfile.mkdtemp(prefix="tflux-demo-"))
    log_dir = Layout(directory).log
    if log_dir.is_dir() and any(is_segment_name(n) for n in os.listdir(log_dir)):
        raise CliError(f"{directory} already holds a log; give an empty or new directory")
    if Layout(directory).settings.exists():
        raise CliError(f"{directory} already holds {SETTINGS_FILE}; give an empty or new directory")
    return directory


@dataclass
class _DemoRun:
    """What the demo did while writing."""

    settings: dict[str, Any]
    records: int = 0
    adds: int = 0
    acks: int = 0
    nacks: int = 0
    seconds: float = 0.0
    manual_snapshot: int | None = None
    automatic_snapshots: list[int] = field(default_factory=list)
    at_close: dict[str, tflux.QueueInfo] = field(default_factory=dict)


def _write_private(path: Path, text: str) -> None:
    """Write ``path`` as the core makes the files of a private base: its owner's only (0600),
    also when it existed with a wider mode, and never through a planted symlink."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


def _demo_write(
    base: Path, records: int, payload_size: int, soft_limit: int | None, create: bool = False
) -> _DemoRun:
    """Write the demo through ``tflux.open``, with a progress bar; the store is closed after."""
    settings = _demo_settings(records, payload_size, soft_limit)
    record_bytes = _demo_record_bytes(tflux.Delta.add_record("reports", 0, bytes(payload_size)))
    # A few batches per segment, so that roll-over (between batches) keeps segments near the limit.
    batch = max(10, min(_DEMO_MAX_BATCH, settings["log_file_soft_limit"] // (4 * record_bytes)))
    steps = _demo_plan(records, payload_size, batch)
    run = _DemoRun(settings)
    messages = {q.name: _demo_messages(q.name, payload_size) for q in _DEMO_QUEUES}
    written = {q.name: 0 for q in _DEMO_QUEUES}
    started = time.perf_counter()
    # Erased when done: the summary's title comes first (issue 43 item 19). The open makes
    # DIR as tflux.open makes a base (as mkdir does: a missing parent is an error).
    opened = tflux.open(base, create=create, **settings)
    with _progress(transient=True) as progress, opened as store:
        # The same settings go to the settings file, so later opens (tflux replay, inspect)
        # use them.
        pascal = {"".join(w.title() for w in k.split("_")): v for k, v in settings.items()}
        _write_private(Layout(base).settings, json.dumps(pascal, indent=2) + "\n")
        task = progress.add_task("writing", total=records)
        for q in _DEMO_QUEUES[1:]:
            store.create_queue(
                q.name, q.implementation, max_message_size=q.max_message_size, key_range=q.key_range
            )
        run.records = _DEMO_CREATES
        progress.advance(task, _DEMO_CREATES)
        snapshot_index = store.log_bounds[2]
        for step in steps:
            q, pool, first = step.queue, messages[step.queue.name], written[step.queue.name]
            store.enqueue_many(
                q.name,
                [
                    ((i * 7919) % q.keys, pool[i % len(pool)])
                    for i in range(first, first + step.adds)
                ],
            )
            written[q.name] += step.adds
            for _ in range(step.acks):
                store.ack(store.dequeue(q.name, timeout=0))
            record = store.dequeue(q.name, timeout=0)  # a nack writes nothing: same record back
            store.nack(record)
            run.nacks += 1
            run.adds += step.adds
            run.acks += step.acks
            run.records += step.adds + step.acks
            progress.advance(task, step.adds + step.acks)
            if store.log_bounds[2] != snapshot_index:  # rolled over past the threshold
                snapshot_index = store.log_bounds[2]
                run.automatic_snapshots.append(snapshot_index)
            if run.manual_snapshot is None and run.records >= _DEMO_MANUAL_SNAPSHOT * records:
                store.snapshot()
                snapshot_index = run.manual_snapshot = store.log_bounds[2]
        # Leave a few records in flight: they are back in their queues after the restore.
        for q in _DEMO_QUEUES:
            for _ in range(_DEMO_IN_FLIGHT):
                store.dequeue(q.name, timeout=0)
        run.at_close = {q.name: q for q in store.queues()}
    run.seconds = time.perf_counter() - started
    return run


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Write a sample base directory through the store, restore and verify it.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Base directory to write into (kept; created as mkdir does, its parent must exist). "
    "Default: a temporary directory, deleted at the end.",
)
@click.option(
    "--records",
    "-n",
    type=click.IntRange(min=10),
    default=1_000_000,
    show_default=True,
    help="Number of deltas (log records) to write.",
)
@click.option(
    "--payload-size",
    type=click.IntRange(0, 1 << 16),
    default=64,
    show_default=True,
    help="Message bytes per enqueued record.",
)
@click.option(
    "--soft-limit",
    type=click.IntRange(min=4096),
    help="Segment soft limit in bytes. Default: about 1/16 of the data, for ~16 segments.",
)
@click.option(
    "--create", is_flag=True, help="Make --dir's missing parent directories too (as mkdir -p)."
)
@click.option("--keep", is_flag=True, help="Keep the temporary directory and print its path.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
def demo(
    directory: Path | None,
    records: int,
    payload_size: int,
    soft_limit: int | None,
    create: bool,
    keep: bool,
    as_json: bool,
) -> None:
    """Write a sample base directory through the store, reopen it and print what it holds.

    Everything goes through tflux.open(): three queues are created beside the default one
    (heap queues, and an "array" queue with the key range 0..99), records are enqueued with
    enqueue_many in batches, about one in five is dequeued and acked (each ack logs a
    RemoveRecord delta) and one per batch is nacked (same record back, nothing logged).
    store.snapshot() is called once at 20%; the SnapshotCreationSegmentsThreshold setting is
    chosen so that one automatic snapshot follows. Appends are not fsynced (LogSyncPolicy
    "never": a demo of speed, not of durability). The settings are also written to
    taskflux.settings.json in the directory.

    The store is then closed and reopened read-only, timing the restore (snapshot + replay of
    the log after it); the queue counts must match what was written, the records left in flight
    at close coming back. Last, the directory is verified as `tflux verify` would.

    With --json, one object: directory, kept (false: deleted at the end), settings (the
    snake_case keyword arguments used), wrote ({deltas, adds, acks, nacks, seconds}),
    snapshots ({manual, automatic: [LSN...]}), queues ([{name, implementation, key_range,
    ready_at_close, in_flight_at_close, ready_after_restore, last_id}]), restore ({seconds,
    snapshot_index, snapshot_records, replayed}), verify (as tflux verify --json reports it),
    mismatches (what the restore got wrong: [] when right), ok and seconds.

    \b
    Examples:
      tflux demo                                  # 1,000,000 deltas in a temporary directory
      tflux demo --records 20000 --dir ./sample   # keep a small base directory to play with
      tflux demo --payload-size 4096 --keep       # bigger messages, keep the temporary directory

    \b
    Exit codes: 0 success, 1 the restored state or the files are wrong, 2 usage or I/O error.
    """
    began = time.perf_counter()
    base = _demo_dir(directory)
    temporary = directory is None
    try:
        run = _demo_write(base, records, payload_size, soft_limit, create)
        with _stopwatch() as restore_s, _open_store(base) as store:
            restored = {q.name: q for q in store.queues()}
            replayed, snapshot_index = store.replayed, store.restored_snapshot_index
        restore = (restore_s(), replayed, snapshot_index)
        checked = _check(base, Layout(base).log)
        mismatches = _demo_mismatches(run.at_close, restored)
        if as_json:
            kept = not temporary or keep
            _print_json(_demo_json(base, kept, run, restored, restore, checked, mismatches, began))
        else:
            _demo_summary(base, temporary and not keep, run, restored, restore, checked)
            for line in mismatches:
                err.print(f"[bold red]error:[/] {escape(line)}")
            out.print(f"\ndone in {time.perf_counter() - began:.2f} s")
            if not temporary or keep:
                out.print(_demo_next_steps(base, checked))
    finally:
        if temporary and not keep:
            shutil.rmtree(base, ignore_errors=True)
    if mismatches or checked.fatal:
        sys.exit(EXIT_CORRUPT)


def _demo_json(
    base: Path,
    kept: bool,
    run: _DemoRun,
    restored: dict[str, tflux.QueueInfo],
    restore: tuple[float, int, int | None],
    checked: Checked,
    mismatches: list[str],
    began: float,
) -> dict[str, Any]:
    seconds, replayed, snapshot_index = restore
    snap = checked.snapshot
    return {
        "directory": str(base),
        "kept": kept,
        "settings": run.settings,
        "wrote": {
            "deltas": run.records,
            "adds": run.adds,
            "acks": run.acks,
            "nacks": run.nacks,
            "seconds": round(run.seconds, 6),
        },
        "snapshots": {"manual": run.manual_snapshot, "automatic": run.automatic_snapshots},
        "queues": [
            {
                "name": name,
                "implementation": before.implementation,
                "key_range": list(before.key_range) if before.key_range is not None else None,
                "ready_at_close": before.count,
                "in_flight_at_close": before.in_flight,
                "ready_after_restore": restored[name].count if name in restored else None,
                "last_id": before.last_id,
            }
            for name, before in run.at_close.items()
        ],
        "restore": {
            "seconds": round(seconds, 6),
            "snapshot_index": snapshot_index,
            "snapshot_records": sum(q.records for q in snap.queues) if snap else 0,
            "replayed": replayed,
        },
        "verify": _checked_json(checked),
        "mismatches": mismatches,
        "ok": not mismatches and not checked.fatal,
        "seconds": round(time.perf_counter() - began, 6),
    }


def _demo_next_steps(base: Path, checked: Checked) -> str:
    """Commands to try on the kept directory; the dump range is where the log starts (the
    snapshot compacted the LSNs before it away)."""
    where = escape(str(base))
    segments = checked.report.segments
    start = segments[0].start_lsn if segments else 0
    return (
        f"try: tflux inspect {where}  |  tflux replay {where}  |  "
        f"tflux dump {where} --from {start} --to {start + 9}"
    )


def _demo_mismatches(
    before: dict[str, tflux.QueueInfo], after: dict[str, tflux.QueueInfo]
) -> list[str]:
    """What the restore got wrong: in-flight records come back, everything else is unchanged."""
    problems = []
    if set(before) != set(after):
        problems.append(f"restored queues {sorted(after)}, wrote {sorted(before)}")
    for name in sorted(set(before) & set(after)):
        b, a = before[name], after[name]
        want = (b.implementation, b.count + b.in_flight, 0, b.last_id, b.key_range)
        got = (a.implementation, a.count, a.in_flight, a.last_id, a.key_range)
        if want != got:
            problems.append(
                f"queue {_queue_label(name)}: restored (implementation, ready, in flight, "
                f"last id, key range) = {got}, expected {want}"
            )
    return problems


def _demo_summary(
    base: Path,
    deleted: bool,
    run: _DemoRun,
    restored: dict[str, tflux.QueueInfo],
    restore: tuple[float, int, int | None],
    checked: Checked,
) -> None:
    files = Layout(base)
    segments = checked.report.segments
    used = sum(s.size for s in segments)
    allocated = sum(s.file_size for s in segments)
    snapshot_bytes = _file_size(files.snapshot) or 0
    on_disk = sum(
        (Path(root) / name).stat().st_size for root, _, names in os.walk(base) for name in names
    )
    settings = run.settings
    note = "  (temporary: deleted on exit, --keep keeps it)" if deleted else ""

    out.print(
        f"[bold]tflux demo[/]: {run.records:,} deltas through tflux.open(), then a timed restore\n"
    )
    out.print(f"[bold]directory[/]  {escape(str(base))}{note}")
    out.print(
        f"[bold]settings[/]   LogSyncPolicy={settings['log_sync_policy']} "
        "(no fsync: fast, not durable), "
        f"LogFileSoftLimit={settings['log_file_soft_limit']:,}, "
        f"SnapshotCreationSegmentsThreshold={settings['snapshot_creation_segments_threshold']} "
        f"(also in {SETTINGS_FILE})"
    )
    out.print(
        f"[bold]wrote[/]      {run.records:,} deltas in {run.seconds:.2f} s "
        f"({_rate(run.records, run.seconds)} deltas/s from Python): {_DEMO_CREATES} CreateQueue, "
        f"{run.adds:,} AddRecord (enqueue_many), {run.acks:,} RemoveRecord (dequeue + ack); "
        f"{_plural(run.nacks, 'nack')} (not logged)"
    )
    automatic = run.automatic_snapshots
    if run.manual_snapshot is None:
        snapshots = "none"
    else:
        snapshots = f"manual at LSN {run.manual_snapshot:,}; "
        if automatic:
            at = ", ".join(f"{i:,}" for i in automatic)
            snapshots += f"{_plural(len(automatic), 'automatic one')} at LSN {at}"
        else:
            snapshots += "no automatic one (too few segments: lower --soft-limit)"
    out.print(f"[bold]snapshots[/]  {snapshots}")
    snap = checked.snapshot
    if snap is not None:  # relative: the directory may be gone by the time this is read
        where = files.snapshot.relative_to(base)
        out.print(
            f"[bold]snapshot[/]   {escape(str(where))}: last index {snap.last_index:,}, "
            f"term {snap.last_term}, {_size(snapshot_bytes)}"
        )
    out.print(
        f"[bold]on disk[/]    {_size(on_disk)}: log {_size(used)} in "
        f"{_plural(len(segments), 'segment')} ({_size(allocated)} allocated), "
        f"snapshot {_size(snapshot_bytes)}\n"
    )

    table = _table(
        "queue",
        "implementation",
        "key range",
        "ready at close",
        "in flight at close",
        "ready after restore",
        "last id",
        right=("ready at close", "in flight at close", "ready after restore", "last id"),
        optional=("key range", "implementation", "in flight at close"),
    )
    for name, before in run.at_close.items():
        after = restored.get(name)
        table.add_row(
            escape(_queue_label(name)),
            before.implementation,
            _key_range(before.key_range),
            f"{before.count:,}",
            f"{before.in_flight:,}",
            f"{after.count:,}" if after else "missing",
            f"{before.last_id:,}",
        )
    out.print(table)
    out.print()
    out.print(_segments_table(segments))
    out.print()

    seconds, replayed, snapshot_index = restore
    read = snapshot_bytes + used
    loaded = sum(q.records for q in snap.queues) if snap is not None else 0
    since = f"snapshot at LSN {snapshot_index:,}" if snapshot_index is not None else "no snapshot"
    out.print(
        f"[bold]restore[/]    {seconds:.3f} s: {since} ({loaded:,} records) + {replayed:,} deltas "
        f"replayed = {_rate(replayed, seconds)} deltas/s replayed, "
        f"{_rate(loaded + replayed, seconds)} records+deltas/s, "
        f"{_rate(read / MB, seconds, 1)} MB/s ({_size(read)} of snapshot and log)"
    )
    verdict = "[bold red]CORRUPT[/]" if checked.fatal else "[bold green]OK[/]"
    report = checked.report
    present = isinstance(report, tflux.BaseReport) and report.metadata_present
    # The store writes no metadata file (no Raft election): say so rather than claim a check.
    metadata = "metadata checksum" if present else "no metadata file (term 1 by default)"
    out.print(
        f"[bold]verify[/]     {verdict}: {_plural(len(segments), 'segment')}, "
        f"{_plural(report.records, 'record')}, {metadata}, snapshot checksum, "
        f"snapshot/log agreement in {checked.seconds:.3f} s"
    )
    _print_findings(checked.findings)
