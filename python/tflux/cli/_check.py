"""Checking a base directory: the log (tflux.verify), the metadata and snapshot files, how they
agree, and optionally a full replay. Shared by verify, repair, inspect and demo.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterator, Sequence
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
from tflux._layout import SEGMENT_NAME, Layout
from tflux.cli._base import _open_store
from tflux.cli._render import MiB, _file_size, _plural, _size, _stopwatch, err, out
from tflux.errors import CorruptionError, ReplayError

LARGE = 64 * MiB  # verify shows a progress bar (on a terminal) from this many bytes on


def _record_offsets(segment: tflux.SegmentInfo, upto: int) -> list[int]:
    """Byte offsets of the first ``upto`` records of ``segment`` (framing only, spec section 3)."""
    with open(segment.path, "rb") as f:
        raw = f.read(segment.size)
    offsets, offset = [], 8
    for _ in range(upto):
        offsets.append(offset)
        (length,) = struct.unpack_from(">i", raw, offset + 12)
        offset += 16 + length + (-length) % 4
    return offsets


def _lsn_location(segments: Sequence[tflux.SegmentInfo], lsn: int) -> tuple[str | None, int | None]:
    """The segment file holding ``lsn`` and the offset where its record starts."""
    for seg in segments:
        if seg.count and seg.start_lsn <= lsn <= seg.last_lsn:
            try:
                return seg.path, _record_offsets(seg, lsn - seg.start_lsn + 1)[-1]
            except (OSError, struct.error):
                return seg.path, None
    return None, None


def _records_before(path: str, offset: int) -> int | None:
    """How many whole records precede ``offset`` in the segment file ``path``."""
    try:
        with open(path, "rb") as f:
            raw = f.read(offset)
        count, at = 0, 8
        while at < offset:
            (length,) = struct.unpack_from(">i", raw, at + 12)
            at += 16 + length + (-length) % 4
            count += 1
        return count if at == offset else None
    except (OSError, struct.error):
        return None


@dataclass(frozen=True)
class Finding:
    """One problem: fatal (exit 1) or a warning, with the file and byte offset when known."""

    fatal: bool
    kind: str
    path: str | None
    offset: int | None
    message: str
    in_log: bool = False  # a problem of the segments (what repair can cut away)


def _strip_location(message: str, path: str | None, offset: int | None) -> str:
    """Drop the ``corrupt PATH at offset N:`` prefix that the line will say anyway."""
    for prefix in (f"corrupt {path} at offset {offset}: ", f"corrupt {path}: "):
        if path is not None and message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _finding_from_problem(problem: tflux.Problem) -> Finding:
    return Finding(
        problem.fatal,
        problem.kind.replace("_", " "),
        problem.path,
        problem.offset,
        problem.message,
        in_log=problem.kind in ("torn_tail", "corruption", "gap"),
    )


def _finding_from_error(kind: str, exc: BaseException, path: Path | str | None = None) -> Finding:
    where = getattr(exc, "path", None) or (str(path) if path is not None else None)
    offset = getattr(exc, "offset", None)
    message = getattr(exc, "message", None) or str(exc)
    return Finding(True, kind, where, offset, _strip_location(message, where, offset))


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
    for finding in findings:
        out.print(_finding_line(finding))


@dataclass
class Checked:
    """What ``_check`` found, and what it read on the way (for the summaries)."""

    report: tflux.VerifyReport
    base: Path | None
    findings: list[Finding] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (what, summary) lines
    snapshot: tflux.Snapshot | None = None
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


@contextmanager
def _stages(total: int) -> Iterator[Callable[[str, int], Any]]:
    """``with _stages(total_bytes) as stage: with stage("snapshot", nbytes): ...``.

    A bar in bytes on stderr, only on a terminal and only for large directories. The Rust calls
    report no progress of their own, so the bar advances stage by stage while a spinner turns.
    """
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description:<9}"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not (err.is_terminal and total >= LARGE),
    )

    @contextmanager
    def stage(name: str, nbytes: int) -> Iterator[None]:
        progress.update(task, description=name)
        yield
        progress.advance(task, nbytes)

    with progress:
        task = progress.add_task("checking", total=max(total, 1))
        yield stage


def _segment_bytes(log_dir: Path) -> int:
    total = 0
    for entry in os.scandir(log_dir):
        if SEGMENT_NAME.match(entry.name):
            total += entry.stat().st_size
    return total


def _check(base: Path | None, log_dir: Path, *, replay: bool = False) -> Checked:
    """Check the log of ``log_dir`` and, for a base directory, its other files and their agreement.

    Never writes. Fatal findings are corruption (exit 1); a torn tail and ignored files are
    warnings, as the next open deals with them.
    """
    files = Layout(base) if base is not None else None
    log_bytes = _segment_bytes(log_dir)
    snapshot_bytes = (_file_size(files.snapshot) or 0) if files else 0
    total = log_bytes + snapshot_bytes + (log_bytes + snapshot_bytes if replay else 0)
    started = time.perf_counter()
    with _stages(total) as stage:
        with stage("segments", log_bytes), _stopwatch() as log_seconds:
            report = tflux.verify(log_dir)
        checked = Checked(report, base, [_finding_from_problem(p) for p in report.problems])
        if files is not None:
            with stage("snapshot", snapshot_bytes):
                _check_files(checked, files)
            if replay:
                if checked.fatal:
                    checked.notes.append(("replay", "skipped: fix the problems above first"))
                else:
                    with stage("replay", log_bytes + snapshot_bytes):
                        _check_replay(checked, files)
    checked.seconds = time.perf_counter() - started
    checked.log_seconds = log_seconds()
    return checked


def _check_files(checked: Checked, files: Layout) -> None:
    """Metadata and snapshot checksums, and whether the log continues the snapshot."""
    meta_size = _file_size(files.metadata)
    try:
        checked.metadata = tflux.read_metadata(files.metadata)
    except CorruptionError as exc:
        checked.add(_finding_from_error("corruption", exc, files.metadata))
    else:
        vote = checked.metadata.voted_for
        said = f"term {checked.metadata.term}, " + (
            "no vote" if vote is None else f"voted for {vote}"
        )
        checked.notes.append(
            ("metadata", f"{said}" + ("" if meta_size else " (absent: the defaults)"))
        )

    snapshot_ok = True
    try:
        checked.snapshot = tflux.read_snapshot(files.snapshot)
    except CorruptionError as exc:
        snapshot_ok = False
        checked.add(_finding_from_error("corruption", exc, files.snapshot))
    else:
        snap = checked.snapshot
        if snap is None:
            checked.notes.append(("snapshot", "absent: the log must start at LSN 0"))
        else:
            records = sum(len(q.records) for q in snap.queues)
            checked.notes.append(
                (
                    "snapshot",
                    f"last index {snap.last_index:,}, term {snap.last_term}, "
                    f"{_plural(len(snap.queues), 'queue')}, {_plural(records, 'record')}, "
                    f"{_size(_file_size(files.snapshot) or 0)}",
                )
            )

    segments = checked.report.segments
    if not segments or not snapshot_ok:
        return
    first, snap = segments[0], checked.snapshot
    start, last = first.start_lsn, segments[-1].last_lsn
    if snap is None and start != 0:
        checked.add(
            Finding(
                True,
                "gap",
                first.path,
                0,
                f"the log starts at LSN {start:,} and there is no snapshot "
                f"(LSNs 0..{start - 1:,} are missing)",
            )
        )
    elif snap is not None and start > snap.last_index + 1:
        checked.add(
            Finding(
                True,
                "gap",
                first.path,
                0,
                f"the log starts at LSN {start:,} but the snapshot ends at LSN "
                f"{snap.last_index:,} (LSNs {snap.last_index + 1:,}..{start - 1:,} are missing)",
            )
        )
    else:
        span = f"LSN {start:,}..{last:,}" if last >= start else f"empty, starts at LSN {start:,}"
        if snap is None:
            agrees = "starts at 0 (no snapshot)"
        elif last < snap.last_index:
            agrees = f"the snapshot is ahead of it (the log restarts at {snap.last_index + 1:,})"
        else:
            agrees = f"continues the snapshot (last index + 1 = {snap.last_index + 1:,})"
        checked.notes.append(("log", f"{span}: {agrees}"))
    if any(f.fatal and f.in_log for f in checked.findings):
        return
    _check_terms(checked, files)


def _check_terms(checked: Checked, files: Layout) -> None:
    """Terms in the log against the metadata's current term and the snapshot's last term."""
    try:
        log = tflux.Log.open(files.log, readonly=True, empty_entries=False)
    except CorruptionError as exc:
        checked.add(_finding_from_error("corruption", exc, files.log))
        return
    with log:
        last = log.last_entry
        meta = checked.metadata
        if last is not None and meta is not None and (_file_size(files.metadata) or 0) > 0:
            lsn, term = last
            if term > meta.term:
                path, offset = _lsn_location(checked.report.segments, lsn)
                checked.add(
                    Finding(
                        True,
                        "corruption",
                        path,
                        offset,
                        f"entry {lsn:,} has term {term}, above the current term {meta.term} "
                        f"in {files.metadata}",
                    )
                )
        snap = checked.snapshot
        if snap is not None and log.start_index <= snap.last_index <= log.last_index:
            term = log.term_at(snap.last_index)
            if term != snap.last_term:
                checked.add(
                    Finding(
                        True,
                        "corruption",
                        str(files.snapshot),
                        None,
                        f"the snapshot ends at LSN {snap.last_index:,} with term "
                        f"{snap.last_term}, but the log has term {term} there",
                    )
                )


def _check_replay(checked: Checked, files: Layout) -> None:
    """Restore the state (snapshot + replay) read-only; a bad delta is reported with its LSN."""
    try:
        with _stopwatch() as elapsed, _open_store(files.base) as store:
            queues = store.queues()
            replayed = store.replayed
    except ReplayError as exc:
        path, offset = (None, None)
        if exc.lsn is not None:
            path, offset = _lsn_location(checked.report.segments, exc.lsn)
        checked.add(Finding(True, "replay error", path, offset, exc.message))
        return
    except CorruptionError as exc:
        checked.add(_finding_from_error("corruption", exc))
        return
    ready = sum(q.count for q in queues)
    checked.notes.append(
        (
            "replay",
            f"{_plural(len(queues), 'queue')}, {_plural(ready, 'ready record')}: "
            f"{_plural(replayed, 'delta')} replayed in {elapsed():.3f} s",
        )
    )


def _print_notes(checked: Checked) -> None:
    for what, summary in checked.notes:
        out.print(f"[bold]{what:<9}[/] {escape(summary)}")
