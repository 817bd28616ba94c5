"""Checking a base directory: the log (tflux.verify), the metadata and snapshot files, how they
agree, and optionally a full replay. Shared by verify, repair, inspect and demo.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

import tflux
from tflux._layout import is_segment_name
from tflux._tflux import record_offset
from tflux.cli._render import (
    MiB,
    _compression_ratio,
    _file_size,
    _plural,
    _queue_json,
    _size,
    _stopwatch,
    err,
    out,
)

LARGE = 64 * MiB  # verify shows a progress bar (on a terminal) from this many bytes on


def _lsn_location(segments: Sequence[tflux.SegmentInfo], lsn: int) -> tuple[str | None, int | None]:
    """The segment file holding ``lsn`` and the offset where its record starts."""
    for seg in segments:
        if seg.count and seg.start_lsn <= lsn <= seg.last_lsn:
            if seg.compression is not None:
                return seg.path, None  # offsets inside a .log.z are the original's
            try:  # the core walks the framing (either dialect)
                return seg.path, record_offset(seg.path, lsn - seg.start_lsn)
            except (OSError, tflux.TfluxError):
                return seg.path, None
    return None, None


@dataclass(frozen=True)
class Finding:
    """One problem: fatal (exit 1) or a warning, with the file and byte offset when known."""

    fatal: bool
    kind: str
    path: str | None
    offset: int | None
    message: str
    in_log: bool = False  # a problem of the segments (what repair can cut away)


# How the CLI names the core's finding kinds (tflux.Problem.kind).
_KIND_LABELS = {
    "replay": "replay error",
    "snapshot_gap": "gap",
    "term_above_metadata": "corruption",
    "io_error": "I/O error",
    "not_regular_file": "not a regular file",
}


def _finding_from_problem(
    problem: tflux.Problem, segments: Sequence[tflux.SegmentInfo] = ()
) -> Finding:
    path, offset = problem.path, problem.offset
    if problem.lsn is not None and offset is None:  # a replay failure: where its record is
        path, offset = _lsn_location(segments, problem.lsn)
        path = path or problem.path
    return Finding(
        problem.fatal,
        _KIND_LABELS.get(problem.kind, problem.kind.replace("_", " ")),
        path,
        offset,
        problem.reason,  # the line says the file and offset itself
        # A problem of a segment file (what repair can cut away): the core says.
        in_log=problem.in_log,
    )


def _finding_line(finding: Finding) -> str:
    """``error:``/``warning:`` KIND in FILE at offset N: MESSAGE (markup-escaped)."""
    kind, message = finding.kind, finding.message
    if message.lower().startswith(kind + ": "):  # the kind is already said once
        message = message[len(kind) + 2 :]
    if kind == "torn tail" and "next open" not in message:
        message += " (the next open trims it)"
    level = "[bold red]error:[/]" if finding.fatal else "[yellow]warning:[/]"
    if finding.path is None:
        return f"{level} {kind}: {escape(message)}"
    where = finding.path if finding.offset is None else f"{finding.path} at offset {finding.offset}"
    return f"{level} {kind} in {escape(where)}: {escape(message)}"


def _print_findings(findings: Sequence[Finding]) -> None:
    """``error:``/``warning:`` lines go to stderr (as every other error line); reports to stdout."""
    for finding in findings:
        err.print(_finding_line(finding))


@dataclass(frozen=True)
class SnapshotQueueView:
    """One queue of the snapshot, its records counted, not read (``BaseReport.snapshot_queues``)."""

    name: str
    implementation: int
    records: int
    last_id: int
    max_queue_size: int | None
    max_message_size: int | None
    key_range: tuple[int, int] | None


@dataclass(frozen=True)
class SnapshotView:
    """What inspect and demo show of the snapshot verify read."""

    last_index: int
    last_term: int
    queues: list[SnapshotQueueView]


@dataclass
class Checked:
    """What ``_check`` found, and what it read on the way (for the summaries)."""

    report: tflux.VerifyReport | tflux.BaseReport
    base: Path | None
    findings: list[Finding] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (what, summary) lines
    snapshot: SnapshotView | None = None
    metadata: tflux.Metadata | None = None
    seconds: float = 0.0  # all the checks
    log_seconds: float = 0.0  # tflux.verify of the segments

    @property
    def fatal(self) -> bool:
        return any(f.fatal for f in self.findings)

    def add(self, finding: Finding) -> None:
        same = any(
            (f.path, f.offset) == (finding.path, finding.offset) and f.fatal for f in self.findings
        )
        if not same:
            self.findings.append(finding)


class _Bar:
    """A bar in bytes on stderr, only on a terminal and only for large directories:
    ``bar.set(done)`` as the core reports its scan (``verify_base(progress=...)``), then
    ``bar.stage("replaying")`` with the bar full while the replay (not counted) runs."""

    def __init__(self, total: int) -> None:
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description:<9}"),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=not (err.is_terminal and total >= LARGE),
        )
        self.task = self.progress.add_task("checking", total=max(total, 1))

    def set(self, done: int) -> None:
        self.progress.update(self.task, completed=done)

    def stage(self, name: str) -> None:
        self.progress.update(self.task, description=name)


@contextmanager
def _bar(total: int) -> Iterator[_Bar]:
    bar = _Bar(total)
    with bar.progress:
        yield bar


def _segment_bytes(log_dir: Path) -> int:
    total = 0
    for entry in os.scandir(log_dir):
        if is_segment_name(entry.name):
            total += entry.stat().st_size
    return total


def _check(
    base: Path | None, log_dir: Path, *, replay: bool = False, dialect: str | None = None
) -> Checked:
    """Check ``log_dir`` alone (a log outside a base directory) or the whole base directory.

    Only renders: the checks are the core's (``tflux.verify`` for a log directory,
    ``tflux.verify_base`` for a base, the same checks ``tflux.open`` applies). Never writes.
    """
    log_bytes = _segment_bytes(log_dir)
    started = time.perf_counter()
    with _bar(log_bytes) as bar:
        if base is None:
            with _stopwatch() as log_seconds:
                log_report = tflux.verify(log_dir, dialect=dialect)
            checked = Checked(log_report, None)
            checked.log_seconds = log_seconds()
        else:

            def scanned(done: int) -> None:
                bar.set(done)
                if replay and done >= log_bytes:
                    bar.stage("replaying")

            report = tflux.verify_base(base, replay=replay, dialect=dialect, progress=scanned)
            checked = Checked(report, base)
            checked.log_seconds = report.log_seconds
    segments = checked.report.segments
    checked.findings = [_finding_from_problem(p, segments) for p in checked.report.problems]
    if isinstance(checked.report, tflux.BaseReport):
        _notes(checked, checked.report, replay)
    checked.seconds = time.perf_counter() - started
    return checked


def _notes(checked: Checked, report: tflux.BaseReport, replay: bool) -> None:
    """Summary lines of what the core read: metadata, snapshot, log, replay."""
    layout = report.layout
    meta = checked.metadata = report.metadata
    if meta is not None:
        vote = meta.voted_for
        said = f"term {meta.term}, " + ("no vote" if vote is None else f"voted for {vote}")
        absent = "" if report.metadata_present else " (absent: the defaults)"
        checked.notes.append(("metadata", said + absent))
    snap = report.snapshot
    if snap is not None:
        last_index, last_term, queues, records = snap
        # inspect and demo show the snapshot's queues: counted by the core as verify decoded
        # it (reading it again into one Python object per record took 2.8 GB and 7-12 s for
        # 8M records: issue 30 item 21).
        checked.snapshot = SnapshotView(
            last_index,
            last_term,
            [SnapshotQueueView(**q) for q in report.snapshot_queues or []],
        )
        checked.notes.append(
            (
                "snapshot",
                f"last index {last_index:,}, term {last_term}, "
                f"{_plural(queues, 'queue')}, {_plural(records, 'record')}, "
                f"{_size(_file_size(Path(layout.snapshot)) or 0)}",
            )
        )
    snapshot_bad = snap is None and any(p.path == layout.snapshot for p in report.problems)
    if snapshot_bad:
        checked.notes.append(
            (
                "snapshot",
                "CORRUPT (below): no store can open until it is fixed. If the log starts at "
                "LSN 0 it holds everything: move data/tflux.snapshot aside and verify again. "
                "Otherwise restore the snapshot from a backup or another node.",
            )
        )
    elif snap is None:
        checked.notes.append(("snapshot", "absent: the log must start at LSN 0"))
    bounds = report.log_bounds
    if bounds is not None and report.continuity != "gap":
        start, last = bounds
        span = f"LSN {start:,}..{last:,}" if last >= start else f"empty, starts at LSN {start:,}"
        # The restore's verdict (BaseReport.continuity), only worded here.
        next_lsn = f"{snap[0] + 1:,}" if snap is not None else "0"
        agrees = {
            "from_zero": "starts at 0 (no snapshot)",
            "continues": f"continues the snapshot (last index + 1 = {next_lsn})",
            "snapshot_ahead": f"the snapshot is ahead of it (the log restarts at {next_lsn})",
        }.get(
            report.continuity,
            "whether it continues the snapshot cannot be checked (the snapshot is corrupt)",
        )
        checked.notes.append(("log", f"{span}: {agrees}"))
    if report.queues is not None and report.replayed is not None:
        ready = sum(q.count for q in report.queues)
        checked.notes.append(
            (
                "replay",
                f"{_plural(len(report.queues), 'queue')}, {_plural(ready, 'ready record')}: "
                f"{_plural(report.replayed, 'delta')} replayed in {report.replay_seconds:.3f} s",
            )
        )
    elif replay and checked.fatal:
        # The notes print before the problems: "below" (issue 30 item 23).
        checked.notes.append(("replay", "skipped: fix the problems listed below first"))


def _print_notes(checked: Checked) -> None:
    for what, summary in checked.notes:
        out.print(f"[bold]{what:<9}[/] {escape(summary)}")


# ----------------------------------------------------------------------------------------------
# JSON (one schema for every verb that reports checks: verify, repair, inspect, demo)


def _segment_json(s: tflux.SegmentInfo) -> dict[str, Any]:
    return {
        "name": s.name,
        "first_lsn": s.start_lsn,
        "last_lsn": s.last_lsn,
        "records": s.count,
        "bytes": s.size,
        "file_bytes": s.file_size,
        "sealed": s.sealed,
        "compression": s.compression,
        "ratio": _compression_ratio(s),
    }


def _finding_json(f: Finding) -> dict[str, Any]:
    return {
        "fatal": f.fatal,
        "kind": f.kind,
        "path": f.path,
        "offset": f.offset,
        "message": f.message,
    }


def _checked_json(checked: Checked) -> dict[str, Any]:
    """``ok``, the log (segments, records, bytes, seconds), what the core read of the metadata,
    snapshot and replay (null when not read), and the problems."""
    report = checked.report
    base_report = report if isinstance(report, tflux.BaseReport) else None
    meta = checked.metadata
    snap = base_report.snapshot if base_report is not None else None
    queues = base_report.queues if base_report is not None else None
    bounds = base_report.log_bounds if base_report is not None else None
    return {
        "ok": not checked.fatal,
        "segments": [_segment_json(s) for s in report.segments],
        "records": report.records,
        "bytes": report.bytes,
        "log_seconds": round(checked.log_seconds, 6),
        "seconds": round(checked.seconds, 6),  # every check: settings to replay
        "log": None if bounds is None else {"first_lsn": bounds[0], "last_lsn": bounds[1]},
        "metadata": None
        if meta is None
        else {
            "term": meta.term,
            "voted_for": meta.voted_for,
            "present": bool(base_report and base_report.metadata_present),
        },
        "snapshot": None
        if snap is None
        else {"last_index": snap[0], "last_term": snap[1], "queues": snap[2], "records": snap[3]},
        "replayed": None if base_report is None else base_report.replayed,
        "queues": None if queues is None else [_queue_json(q) for q in queues],
        "problems": [_finding_json(f) for f in checked.findings],
    }
