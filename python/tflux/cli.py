"""The ``tflux`` command line.

One function per verb (``demo``, ``replay``, ``inspect``, ``dump``, ``verify``, ``repair``,
``bench``), each registered on the ``cli`` group. All storage work
happens in the Rust core; this module only parses arguments, formats output and maps errors to
exit codes:

    0  success
    1  the data is corrupt (``verify`` found a fatal problem, a read or a replay hit a bad record)
    2  usage or I/O problem (bad arguments, missing directory, permission, locked directory...)

Progress bars and colours appear only on a terminal, so pipes and CI logs stay plain.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

import tflux
from tflux.errors import CorruptionError, ReplayError, TfluxError

EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_USAGE = 2

MB = 1_000_000
MiB = 1 << 20
SEGMENT_NAME = re.compile(r"^[0-9]{19}\.log$")
SETTINGS_FILE = "taskflux.settings.json"
LARGE = 64 * MiB  # verify shows a progress bar (on a terminal) from this many bytes on

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# Reports go to stdout; progress, warnings and errors to stderr. Rich drops colours and animation
# by itself when the stream is not a terminal (and honours NO_COLOR / FORCE_COLOR). Off a terminal
# rich would assume 80 columns and squeeze tables; pipes get wide, unwrapped tables instead.
out = Console(highlight=False, soft_wrap=True)
if not out.is_terminal:
    out = Console(highlight=False, soft_wrap=True, width=200)
err = Console(stderr=True, highlight=False, soft_wrap=True)


# ----------------------------------------------------------------------------------------------
# Errors and exit codes


class CliError(click.ClickException):
    """A problem reported as one ``error: ...`` line on stderr, with an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file=None) -> None:  # click's default prints "Error: ..."
        err.print(f"[bold red]error:[/] {escape(self.message)}")


def _describe(exc: BaseException) -> str:
    """The exception's message, plus the file and offset it carries when the message lacks them."""
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    path = getattr(exc, "path", None) or getattr(exc, "filename", None)
    offset = getattr(exc, "offset", None)
    where = []
    if path is not None and str(path) not in message:
        where.append(f"file {path}")
    if offset is not None and f"offset {offset}" not in message:
        where.append(f"offset {offset}")
    return f"{message} ({', '.join(where)})" if where else message


def _error_for(exc: BaseException) -> CliError:
    corrupt = isinstance(exc, (CorruptionError, ReplayError))
    return CliError(_describe(exc), EXIT_CORRUPT if corrupt else EXIT_USAGE)


class _TfluxGroup(click.Group):
    """Turns tflux and OS errors raised by any verb into one line on stderr, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(EXIT_OK)
        except (TfluxError, OSError) as exc:
            raise _error_for(exc) from exc


def _silence_stdout() -> None:
    """After the reader of our stdout went away (``| head``): stop writing, quietly.

    Python would otherwise complain about the broken pipe again when it flushes stdout at exit.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# ----------------------------------------------------------------------------------------------
# Small helpers


def _log_dir(path: Path) -> Path:
    """The log directory of ``path``: a base directory (holding ``data/log``) or a log directory."""
    if not path.exists():
        raise CliError(f"{path}: no such directory")
    if not path.is_dir():
        raise CliError(f"{path}: not a directory (give a base directory or its data/log directory)")
    candidate = path / "data" / "log"
    log_dir = candidate if candidate.is_dir() else path
    if not any(SEGMENT_NAME.match(name) for name in os.listdir(log_dir)):
        raise CliError(
            f"{path}: no log segments found "
            "(expected a base directory with data/log/ or a log directory with NNN...N.log files)"
        )
    return log_dir


def _locate(path: Path) -> tuple[Path | None, Path]:
    """``(base directory, log directory)`` of ``path``; no base for a log outside ``data/log``."""
    log_dir = _log_dir(path)
    if log_dir != path:
        return path, log_dir
    if path.name == "log" and path.parent.name == "data":
        return path.parent.parent, log_dir
    return None, log_dir


def _base_dir(path: Path) -> tuple[Path, Path]:
    """``(base directory, log directory)`` of a base directory (or of its ``data/log``)."""
    base, log_dir = _locate(path)
    if base is None:
        raise CliError(f"{path}: not a base directory (expected a directory holding data/log/)")
    return base, log_dir


@dataclass(frozen=True)
class _Files:
    """The files of a base directory (spec section 1)."""

    base: Path

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log(self) -> Path:
        return self.data / "log"

    @property
    def snapshot(self) -> Path:
        return self.data / "tflux.snapshot"

    @property
    def metadata(self) -> Path:
        return self.data / "tflux.metadata"

    @property
    def temp(self) -> Path:
        return self.data / "temp"

    @property
    def settings(self) -> Path:
        return self.base / SETTINGS_FILE


def _open_store(base: Path) -> tflux.Store:
    """``tflux.open(base, readonly=True)``: restore without the writer lock, write nothing.

    A bad settings file raises a plain ``ValueError``; it becomes a usage error here.
    """
    try:
        return tflux.open(base, readonly=True)
    except ValueError as exc:
        if isinstance(exc, TfluxError):
            raise
        raise CliError(str(exc)) from exc


def _settings_in_force(base: Path) -> dict[str, str]:
    """The settings a store opened on ``base`` would use, without restoring its state.

    ``tflux.open`` resolves the settings file against the defaults; opening read-only a scratch
    directory that holds only a copy of the settings file gets them without replaying the log.
    """
    source = base / SETTINGS_FILE
    with tempfile.TemporaryDirectory(prefix="tflux-settings-") as scratch:
        (Path(scratch) / "data" / "log").mkdir(parents=True)
        if source.is_file():
            shutil.copyfile(source, Path(scratch) / SETTINGS_FILE)
        with _open_store(Path(scratch)) as store:
            return dict(store.settings)


def _progress() -> Progress:
    """A progress bar on stderr, silent when stderr is not a terminal."""
    return Progress(
        TextColumn("{task.description:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=not err.is_terminal,
    )


@contextmanager
def _stopwatch() -> Iterator[Callable[[], float]]:
    """``with _stopwatch() as elapsed: ...`` then ``elapsed()`` gives the seconds spent inside."""
    start = time.perf_counter()
    end: float | None = None

    def elapsed() -> float:
        return (end if end is not None else time.perf_counter()) - start

    try:
        yield elapsed
    finally:
        end = time.perf_counter()


def _rate(amount: float, seconds: float, digits: int = 0) -> str:
    return f"{amount / seconds:,.{digits}f}" if seconds > 0 else "-"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _size(nbytes: int) -> str:
    return f"{nbytes / MB:,.1f} MB" if nbytes >= MB else f"{nbytes:,} B"


def _file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _queue_label(name: str) -> str:
    return name if name else '"" (default)'


def _key_range(key_range: tuple[int, int] | None) -> str:
    return "-" if key_range is None else f"{key_range[0]}..{key_range[1]}"


def _limit(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _table(*columns: str, right: Sequence[str] = ()) -> Table:
    table = Table(box=box.SIMPLE, pad_edge=False, show_edge=False)
    for name in columns:
        table.add_column(name, justify="right" if name in right else "left", no_wrap=True)
    return table


def _segments_table(segments: Sequence[tflux.SegmentInfo], limit: int = 8) -> Table:
    """One row per segment; long lists show their first and last few rows."""
    table = _table(
        "segment",
        "first LSN",
        "last LSN",
        "records",
        "bytes",
        "state",
        right=("first LSN", "last LSN", "records", "bytes"),
    )
    shown: list[tflux.SegmentInfo | None] = list(segments)
    hidden = 0
    if len(shown) > limit:
        head, tail = shown[: limit // 2], shown[-(limit // 2) :]
        hidden = len(shown) - len(head) - len(tail)
        shown = [*head, None, *tail]
    for seg in shown:
        if seg is None:
            table.add_row(f"... {hidden} more", "", "", "", "", "")
            continue
        last = f"{seg.last_lsn:,}" if seg.count else "-"
        state = "sealed" if seg.sealed else "active"
        table.add_row(
            seg.name, f"{seg.start_lsn:,}", last, f"{seg.count:,}", f"{seg.size:,}", state
        )
    return table


def _queues_table(queues: Sequence[tflux.QueueInfo]) -> Table:
    table = _table(
        "queue",
        "implementation",
        "key range",
        "ready",
        "in flight",
        "last id",
        "max size",
        "max message",
        right=("ready", "in flight", "last id", "max size", "max message"),
    )
    for q in queues:
        table.add_row(
            escape(_queue_label(q.name)),
            q.implementation,
            _key_range(q.key_range),
            f"{q.count:,}",
            f"{q.in_flight:,}",
            f"{q.last_id:,}",
            _limit(q.max_size),
            _limit(q.max_message_size),
        )
    return table


def _queue_json(q: tflux.QueueInfo) -> dict[str, Any]:
    return {
        "name": q.name,
        "implementation": q.implementation,
        "count": q.count,
        "in_flight": q.in_flight,
        "last_id": q.last_id,
        "max_size": q.max_size,
        "max_message_size": q.max_message_size,
        "key_range": list(q.key_range) if q.key_range is not None else None,
    }


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2) + "\n")
    sys.stdout.flush()


def _implementation(code: int | None) -> str | None:
    return {1: "heap", 2: "array"}.get(code, f"unknown ({code})") if code is not None else None


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


# ----------------------------------------------------------------------------------------------
# Checking a base directory: the log (tflux.verify), the metadata and snapshot files, how they
# agree, and optionally a full replay. Shared by verify, repair, inspect and demo.


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
    files = _Files(base) if base is not None else None
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


def _check_files(checked: Checked, files: _Files) -> None:
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


def _check_terms(checked: Checked, files: _Files) -> None:
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


def _check_replay(checked: Checked, files: _Files) -> None:
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


# ----------------------------------------------------------------------------------------------
# The command group


@click.group(cls=_TfluxGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(tflux.__version__, "-V", "--version", prog_name="tflux")
def cli() -> None:
    """tflux: TaskFlux's storage engine (segmented log, snapshots, queues).

    \b
    Exit codes: 0 success, 1 corrupt data, 2 usage or I/O error.

    \b
    Start here:
      tflux demo                  write a sample base directory through the store, restore it
      tflux replay BASE           restore BASE read-only and list its queues
      tflux inspect BASE          settings, metadata, snapshot and segments at a glance
      tflux dump BASE | head      print the log records as decoded deltas
      tflux verify BASE           check every byte of BASE (log, snapshot, metadata)
      tflux repair BASE           cut the log at the first bad record (moves files, deletes none)
      tflux bench                 headline ratios of docs/benchmarks.md on this machine (< 1 min)
      tflux export BASE OUT       the log and snapshot as Parquet files (needs pyarrow)
    """


# ----------------------------------------------------------------------------------------------
# tflux demo


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
    log_dir = directory / "data" / "log"
    if log_dir.is_dir() and any(SEGMENT_NAME.match(n) for n in os.listdir(log_dir)):
        raise CliError(f"{directory} already holds a log; give an empty or new directory")
    if (directory / SETTINGS_FILE).exists():
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


def _demo_write(base: Path, records: int, payload_size: int, soft_limit: int | None) -> _DemoRun:
    """Write the demo through ``tflux.open``, with a progress bar; the store is closed after."""
    settings = _demo_settings(records, payload_size, soft_limit)
    record_bytes = _demo_record_bytes(tflux.Delta.add_record("reports", 0, bytes(payload_size)))
    # A few batches per segment, so that roll-over (between batches) keeps segments near the limit.
    batch = max(10, min(_DEMO_MAX_BATCH, settings["log_file_soft_limit"] // (4 * record_bytes)))
    steps = _demo_plan(records, payload_size, batch)
    run = _DemoRun(settings)
    messages = {q.name: _demo_messages(q.name, payload_size) for q in _DEMO_QUEUES}
    written = {q.name: 0 for q in _DEMO_QUEUES}
    # The same settings go to the settings file, so later opens (tflux replay, inspect) use them.
    base.mkdir(parents=True, exist_ok=True)
    pascal = {"".join(w.title() for w in k.split("_")): v for k, v in settings.items()}
    (base / SETTINGS_FILE).write_text(json.dumps(pascal, indent=2) + "\n")
    started = time.perf_counter()
    with _progress() as progress, tflux.open(base, **settings) as store:
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


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Write a sample base directory through the store, restore and verify it.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Base directory to write into (kept). Default: a temporary directory, deleted at the end.",
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
@click.option("--keep", is_flag=True, help="Keep the temporary directory and print its path.")
def demo(
    directory: Path | None, records: int, payload_size: int, soft_limit: int | None, keep: bool
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
        run = _demo_write(base, records, payload_size, soft_limit)
        with _stopwatch() as restore_s, _open_store(base) as store:
            restored = {q.name: q for q in store.queues()}
            replayed, snapshot_index = store.replayed, store.restored_snapshot_index
        restore = (restore_s(), replayed, snapshot_index)
        checked = _check(base, base / "data" / "log")
        mismatches = _demo_mismatches(run.at_close, restored)
        _demo_summary(base, temporary and not keep, run, restored, restore, checked)
        for line in mismatches:
            out.print(f"[bold red]error:[/] {escape(line)}")
        out.print(f"\ndone in {time.perf_counter() - began:.2f} s")
        if not temporary or keep:
            where = escape(str(base))
            out.print(
                f"try: tflux inspect {where}  |  tflux replay {where}  |  tflux dump {where} --to 9"
            )
    finally:
        if temporary and not keep:
            shutil.rmtree(base, ignore_errors=True)
    if mismatches or checked.fatal:
        sys.exit(EXIT_CORRUPT)


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
    files = _Files(base)
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
    if snap is not None:
        out.print(
            f"[bold]snapshot[/]   {escape(str(files.snapshot))}: last index {snap.last_index:,}, "
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
    loaded = sum(len(q.records) for q in snap.queues) if snap is not None else 0
    since = f"snapshot at LSN {snapshot_index:,}" if snapshot_index is not None else "no snapshot"
    out.print(
        f"[bold]restore[/]    {seconds:.3f} s: {since} ({loaded:,} records) + {replayed:,} deltas "
        f"replayed = {_rate(replayed, seconds)} deltas/s replayed, "
        f"{_rate(loaded + replayed, seconds)} records+deltas/s, "
        f"{_rate(read / MB, seconds, 1)} MB/s ({_size(read)} of snapshot and log)"
    )
    verdict = "[bold red]CORRUPT[/]" if checked.fatal else "[bold green]OK[/]"
    out.print(
        f"[bold]verify[/]     {verdict}: {_plural(len(segments), 'segment')}, "
        f"{_plural(checked.report.records, 'record')}, metadata, snapshot checksum, "
        f"snapshot/log agreement in {checked.seconds:.3f} s"
    )
    _print_findings(checked.findings)


# ----------------------------------------------------------------------------------------------
# tflux replay


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Restore a base directory read-only and list its queues.",
)
@click.argument("base", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
def replay(base: Path, as_json: bool) -> None:
    """Restore BASE (snapshot + replay of the log after it) and print its queues.

    BASE is opened read-only, as tflux.open(BASE, readonly=True): without the writer lock
    (a running writer is fine) and without writing anything, not even the trim of a torn tail.
    Records that were in flight when the writer stopped are back in their queues.

    With --json, one object: base, seconds, snapshot_index (null without a snapshot),
    replayed (deltas applied after the snapshot), log_start, log_last and queues, a list of
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
    try:
        with _stopwatch() as elapsed, _open_store(base) as store:
            queues = store.queues()
            replayed, snapshot_index = store.replayed, store.restored_snapshot_index
            start, last, _ = store.log_bounds
    except ReplayError as exc:  # name the file and offset of the bad delta too
        path, offset = None, None
        if exc.lsn is not None:
            path, offset = _lsn_location(tflux.verify(log_dir).segments, exc.lsn)
        where = "" if path is None else f" (file {path}, offset {offset})"
        raise CliError(f"{exc.message}{where}", EXIT_CORRUPT) from exc
    seconds = elapsed()
    if as_json:
        _print_json(
            {
                "base": str(base),
                "seconds": round(seconds, 6),
                "snapshot_index": snapshot_index,
                "replayed": replayed,
                "log_start": start,
                "log_last": last,
                "queues": [_queue_json(q) for q in queues],
            }
        )
        return
    since = f"snapshot at LSN {snapshot_index:,}" if snapshot_index is not None else "no snapshot"
    out.print(
        f"restored {escape(str(base))} in {seconds:.3f} s: {since} + "
        f"{_plural(replayed, 'delta')} replayed ({_rate(replayed, seconds)} deltas/s)"
    )
    ready = sum(q.count for q in queues)
    out.print(f"{_plural(len(queues), 'queue')}, {_plural(ready, 'ready record')}\n")
    out.print(_queues_table(queues))


# ----------------------------------------------------------------------------------------------
# tflux inspect


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Settings, metadata, snapshot and segments of a base directory at a glance.",
)
@click.argument("base", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
def inspect(base: Path, as_json: bool) -> None:
    """Show the settings in force, the metadata, the snapshot and the log segments of BASE.

    Nothing is written and the state is not replayed (tflux replay does that). Checksums of
    every file are checked on the way; problems are listed at the end (tflux verify says more).

    With --json, one object: base, settings (in force, PascalCase keys), settings_file (the
    keys set by taskflux.settings.json, or null), metadata ({term, voted_for} or null when
    corrupt), snapshot (null or {last_index, last_term, bytes, queues: [{name, implementation,
    records, last_id, max_size, max_message_size, key_range}]}), segments ([{name, first_lsn,
    last_lsn, records, bytes, file_bytes, sealed}]), temp (file names under data/temp) and
    problems ([{fatal, kind, path, offset, message}]).

    \b
    Examples:
      tflux inspect ./base
      tflux inspect ./base --json | jq .snapshot.last_index

    \b
    Exit codes: 0 all readable, 1 a file is corrupt, 2 usage or I/O error (or a bad settings file).
    """
    base, log_dir = _base_dir(base)
    files = _Files(base)
    settings = _settings_in_force(base)
    from_file: dict[str, Any] | None = None
    if files.settings.is_file():
        text = files.settings.read_text()
        from_file = json.loads(text) if text.strip() else {}
    checked = _check(base, log_dir)
    temp = sorted(os.listdir(files.temp)) if files.temp.is_dir() else []
    if as_json:
        _print_json(_inspect_json(base, settings, from_file, checked, temp))
    else:
        _inspect_text(base, settings, from_file, checked, temp)
    sys.exit(EXIT_CORRUPT if checked.fatal else EXIT_OK)


def _snapshot_json(snap: tflux.Snapshot, nbytes: int) -> dict[str, Any]:
    return {
        "last_index": snap.last_index,
        "last_term": snap.last_term,
        "bytes": nbytes,
        "queues": [
            {
                "name": q.name,
                "implementation": _implementation(q.implementation),
                "records": len(q.records),
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
    settings: dict[str, str],
    from_file: dict[str, Any] | None,
    checked: Checked,
    temp: list[str],
) -> dict[str, Any]:
    files = _Files(base)
    meta, snap = checked.metadata, checked.snapshot
    return {
        "base": str(base),
        "settings": settings,
        "settings_file": from_file,
        "metadata": None if meta is None else {"term": meta.term, "voted_for": meta.voted_for},
        "snapshot": None if snap is None else _snapshot_json(snap, _file_size(files.snapshot) or 0),
        "segments": [
            {
                "name": s.name,
                "first_lsn": s.start_lsn,
                "last_lsn": s.last_lsn,
                "records": s.count,
                "bytes": s.size,
                "file_bytes": s.file_size,
                "sealed": s.sealed,
            }
            for s in checked.report.segments
        ],
        "temp": temp,
        "problems": [
            {
                "fatal": f.fatal,
                "kind": f.kind,
                "path": f.path,
                "offset": f.offset,
                "message": f.message,
            }
            for f in checked.findings
        ],
    }


def _inspect_text(
    base: Path,
    settings: dict[str, str],
    from_file: dict[str, Any] | None,
    checked: Checked,
    temp: list[str],
) -> None:
    files = _Files(base)
    out.print(f"[bold]base[/]      {escape(str(base))}")
    source = (
        f"{SETTINGS_FILE} (*) and defaults"
        if from_file is not None
        else f"defaults (no {SETTINGS_FILE})"
    )
    out.print(f"[bold]settings[/]  in force, from {source}:")
    for key, value in settings.items():
        mark = " *" if from_file and key in from_file else ""
        out.print(f"  {key:<34} {escape(value)}{mark}")
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
        records = sum(len(q.records) for q in snap.queues)
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
        )
        for q in snap.queues:
            table.add_row(
                escape(_queue_label(q.name)),
                _implementation(q.implementation),
                _key_range(q.key_range),
                f"{len(q.records):,}",
                f"{q.last_id:,}",
                _limit(q.max_queue_size),
                _limit(q.max_message_size),
            )
        out.print(table)
    out.print()

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
    _print_findings(checked.findings)
    if checked.findings:
        out.print(f"run: tflux verify {escape(str(base))}")


# ----------------------------------------------------------------------------------------------
# tflux dump


def _dump_line_text(lsn: int, term: int, data: bytes, encode: Callable[[bytes], str]) -> str:
    crc = tflux.crc32(data)
    return f"lsn={lsn} term={term} length={len(data)} crc=0x{crc:08x} data={encode(data)}\n"


def _dump_line_json(lsn: int, term: int, data: bytes, encode: Callable[[bytes], str]) -> str:
    # Formatted by hand, 3x faster than json.dumps: integers and hex/base64 text need no escaping.
    crc = tflux.crc32(data)
    return (
        f'{{"lsn":{lsn},"term":{term},"length":{len(data)},"crc":{crc},"data":"{encode(data)}"}}\n'
    )


_ENCODINGS: dict[str, Callable[[bytes], str]] = {
    "hex": bytes.hex,
    "base64": lambda data: base64.b64encode(data).decode("ascii"),
}

_PREVIEW = 32  # message bytes shown by dump


def _preview(message: bytes) -> str:
    """The first bytes of ``message`` as ASCII: ``\\`` and other bytes escaped, ``...`` if cut."""
    text = "".join(
        "\\\\" if b == 0x5C else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}"
        for b in message[:_PREVIEW]
    )
    return text + ("..." if len(message) > _PREVIEW else "")


def _decoded(data: bytes) -> dict[str, Any]:
    """The fields of the delta in ``data``; kind "undecodable" (and the error) if it is not one."""
    try:
        delta = tflux.decode_delta(data)
    except (TfluxError, ValueError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        return {
            "kind": "undecodable",
            "error": message,
            "offset": getattr(exc, "offset", None),
            "length": len(data),
            "data": data.hex(),
        }
    kind = delta.kind
    fields: dict[str, Any] = {"kind": kind, "queue": delta.queue}
    if kind == "create_queue":
        fields["implementation"] = _implementation(delta.implementation)
        fields["max_size"] = delta.max_queue_size
        fields["max_message_size"] = delta.max_message_size
        fields["key_range"] = list(delta.key_range) if delta.key_range is not None else None
    elif kind == "add_record":
        message = delta.message or b""
        fields["key"] = delta.key
        fields["message_length"] = len(message)
        fields["message"] = _preview(message)
    elif kind == "remove_record":
        fields["record_id"] = delta.record_id
    return fields


def _quoted(text: str, backslashes: bool = True) -> str:
    if backslashes:
        text = text.replace("\\", "\\\\")
    return '"' + text.replace('"', '\\"') + '"'


def _text_value(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return f"{value[0]}..{value[1]}"
    if key == "message":  # a preview: its backslashes are escapes already
        return _quoted(value, backslashes=False)
    if key in ("queue", "error"):
        return _quoted(value)
    return str(value)


def _dump_decoded_text(lsn: int, term: int, fields: dict[str, Any]) -> str:
    parts = [f"lsn={lsn}", f"term={term}"]
    parts += [f"{key}={_text_value(key, value)}" for key, value in fields.items()]
    return " ".join(parts) + "\n"


def _dump_decoded_json(lsn: int, term: int, fields: dict[str, Any]) -> str:
    return json.dumps({"lsn": lsn, "term": term, **fields}, separators=(",", ":")) + "\n"


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Print the records of a log as decoded deltas, one per line (or JSON Lines).",
)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (JSON Lines).")
@click.option("--from", "first", type=click.IntRange(min=0), help="First LSN to print.")
@click.option("--to", "last", type=click.IntRange(min=0), help="Last LSN to print (inclusive).")
@click.option(
    "--raw", is_flag=True, help="Print the raw bytes (lsn, term, length, crc, data), not deltas."
)
@click.option(
    "--encoding",
    type=click.Choice(sorted(_ENCODINGS)),
    default="hex",
    show_default=True,
    help="With --raw: how the data bytes are printed.",
)
def dump(
    path: Path, as_json: bool, first: int | None, last: int | None, raw: bool, encoding: str
) -> None:
    """Print the records of a log, one line each: lsn, term and the decoded delta.

    PATH is a base directory (holding data/log) or a log directory. The log is opened
    read-only. Each line has lsn, term, kind (create_queue, delete_queue, add_record,
    remove_record) and queue ("" is the default queue), then by kind: implementation,
    max_size, max_message_size, key_range (none = no limit / no range); key, message_length
    and message (the first 32 bytes as text, other bytes as \\xNN, "..." when longer);
    record_id. Data that is not a delta is printed as kind=undecodable with the error and
    the bytes in hex, and makes the exit code 1 once everything is printed.

    With --raw, each line is lsn, term, length, crc (CRC-32 of the data) and the data bytes
    (hex or base64), whatever they hold. With --json each line is a JSON object with the same
    keys. Output stops quietly when the reader goes away (e.g. `| head`).

    \b
    Examples:
      tflux dump ./base | head
      tflux dump ./base/data/log --from 1000 --to 1009
      tflux dump ./base --json | jq 'select(.kind == "remove_record")'
      tflux dump ./base --raw --json --encoding base64 > records.jsonl

    \b
    Exit codes: 0 success, 1 a corrupt record or undecodable data was met, 2 usage or I/O error.
    """
    if first is not None and last is not None and first > last:
        raise CliError(f"--from {first} is after --to {last}")
    encode = _ENCODINGS[encoding]
    raw_line = _dump_line_json if as_json else _dump_line_text
    decoded_line = _dump_decoded_json if as_json else _dump_decoded_text
    bad: list[tuple[int, str]] = []  # (lsn, error) of undecodable records
    with tflux.Log.open(_log_dir(path), readonly=True) as log:
        start = max(first if first is not None else 0, log.start_index)
        end = min(last + 1 if last is not None else log.last_index + 1, log.last_index + 1)
        if start >= end and (first is not None or last is not None):
            err.print(
                f"note: nothing in range; the log holds LSNs {log.start_index}..{log.last_index}"
            )
            return
        write = sys.stdout.write
        lines: list[str] = []
        try:
            for entry in log.entries(start, end):
                if raw:
                    lines.append(raw_line(entry.lsn, entry.term, entry.data, encode))
                else:
                    fields = _decoded(entry.data)
                    if fields["kind"] == "undecodable":
                        bad.append((entry.lsn, fields["error"]))
                    lines.append(decoded_line(entry.lsn, entry.term, fields))
                if len(lines) >= 1000:
                    write("".join(lines))
                    lines.clear()
            write("".join(lines))
            sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
            return
        except TfluxError:
            write("".join(lines))  # what was read before the bad record, then the error
            sys.stdout.flush()
            raise
    if bad:
        lsn, message = bad[0]
        raise CliError(
            f"{_plural(len(bad), 'record')} could not be decoded as a delta "
            f"(first at LSN {lsn}: {message}); --raw prints the bytes",
            EXIT_CORRUPT,
        )


# ----------------------------------------------------------------------------------------------
# tflux verify


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Check every byte of a base directory; exit 1 on corruption.",
)
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--replay", "full", is_flag=True, help="Also rebuild the queue state (snapshot + log)."
)
@click.option("-v", "--verbose", is_flag=True, help="List the segments too.")
def verify(path: Path, full: bool, verbose: bool) -> None:
    """Check every record of every segment, the metadata and snapshot files, and how they agree.

    PATH is a base directory (holding data/log) or a log directory. Nothing is written.
    Checked: each segment (checksums, framing, terms never going down, no gap or overlap
    between segments); the metadata and snapshot checksums; that the log continues the
    snapshot (it starts at or before the snapshot's last index + 1; at LSN 0 without a
    snapshot); that no entry has a term above the metadata's current term (when the file
    exists) and that the snapshot's last term is the log's term at its last index. With
    --replay the queue state is rebuilt too, as opening the store would, and a delta that
    cannot be applied is reported with its LSN, file and offset.

    Each problem is printed with its file and byte offset. A torn tail (an incomplete last
    record of the last segment, as a crash leaves it) is only a warning: the next open trims
    it. A log directory outside a base directory gets the segment checks only.

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
    """
    base, log_dir = _locate(path)
    checked = _check(base, log_dir, replay=full)
    report, seconds = checked.report, checked.log_seconds
    out.print(
        f"verified {escape(str(base if base is not None else log_dir))}: "
        f"{_plural(len(report.segments), 'segment')}, {_plural(report.records, 'record')}, "
        f"{_size(report.bytes)} of log in {seconds:.3f} s "
        f"({_rate(report.bytes / MB, seconds)} MB/s)"
    )
    _print_notes(checked)
    if verbose:
        out.print(_segments_table(report.segments, limit=sys.maxsize))
    _print_findings(checked.findings)
    out.print("[bold red]CORRUPT[/]" if checked.fatal else "[bold green]OK[/]")
    sys.exit(EXIT_CORRUPT if checked.fatal else EXIT_OK)


# ----------------------------------------------------------------------------------------------
# tflux repair


@dataclass(frozen=True)
class _RepairPlan:
    """What ``Log.open(repair=True)`` will do, predicted from the verify report."""

    problem: Finding
    cut: tuple[str, int] | None  # (segment, offset) cut there, keeping what comes before
    moved: list[str]  # segment names moved whole into data/temp/
    kept_records: int | None  # records kept in the cut segment


def _repair_plan(checked: Checked, log_dir: Path) -> _RepairPlan | None:
    """The first problem of the log in segment order decides: cut there, move what follows."""
    in_log = [f for f in checked.findings if f.in_log and f.path is not None]
    if not in_log:
        return None
    fatal = [f for f in in_log if f.fatal]
    problem = min(fatal or in_log, key=lambda f: (Path(f.path).name, f.offset or 0))
    names = sorted(n for n in os.listdir(log_dir) if SEGMENT_NAME.match(n))
    name = Path(problem.path).name
    if problem.kind == "gap":  # the segment after the gap and everything after it move
        return _RepairPlan(problem, None, [n for n in names if n >= name], None)
    offset = problem.offset if problem.offset is not None else 0
    kept = _records_before(problem.path, offset) if offset >= 8 else 0
    return _RepairPlan(problem, (problem.path, offset), [n for n in names if n > name], kept)


def _print_plan(plan: _RepairPlan, checked: Checked, temp: Path) -> None:
    out.print("\n[bold]repair plan[/] (nothing is deleted):")
    segments = {Path(s.path).name: s for s in checked.report.segments}
    if plan.cut is not None:
        path, offset = plan.cut
        seg = segments.get(Path(path).name)
        kept = (
            ""
            if plan.kept_records is None
            else f", keeping its first {_plural(plan.kept_records, 'record')}"
        )
        lost = ""
        if seg is not None and plan.kept_records is not None:
            lost = f"; LSNs from {seg.start_lsn + plan.kept_records:,} on leave the log"
        out.print(f"  cut   {escape(path)} at offset {offset}{kept}{lost}")
        out.print(f"  copy  {escape(Path(path).name)} as it was -> {escape(str(temp))}/ (.orig)")
    for name in plan.moved:
        out.print(f"  move  {escape(name)} -> {escape(str(temp))}/")


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Cut a corrupt log at its first bad record; later files move to data/temp/.",
)
@click.argument("path", metavar="BASE", type=click.Path(path_type=Path))
@click.option("-y", "--yes", is_flag=True, help="Do it without asking (needed off a terminal).")
def repair(path: Path, yes: bool) -> None:
    """Cut the log of BASE at its first bad record, moving the segment files after it aside.

    First the checks of `tflux verify` run and their findings are printed, then the plan:
    which segment is cut at which offset (the records before it are kept) and which files
    move into data/temp/. After a confirmation (or --yes) the repair is done by
    tflux.Log.open(BASE/data/log, repair=True) and its report is printed: every moved
    file's new path. Nothing is ever deleted: the cut segment's original bytes are kept in
    data/temp/ too (as NAME.orig), also for a torn tail (copied there by this command).
    Then the directory is checked again.

    Only the log can be repaired: a corrupt snapshot or metadata file, or a gap between the
    snapshot and the log, is reported and left alone (exit 1).

    The writer lock is taken: stop the process using BASE first. Without --yes the command
    asks on the terminal; with no terminal to ask on it refuses (exit 2).

    \b
    Exit codes:
      0  repaired (or nothing to repair) and the directory now verifies clean
      1  problems remain that repair does not fix, or the answer was no
      2  usage or I/O error, the directory is locked, or no --yes and no terminal to ask

    \b
    Examples:
      tflux repair ./base
      tflux repair ./base --yes && tflux verify ./base --replay
    """
    base, log_dir = _locate(path)
    temp = log_dir.parent / "temp"
    checked = _check(base, log_dir)
    report = checked.report
    out.print(
        f"checked {escape(str(base if base is not None else log_dir))}: "
        f"{_plural(len(report.segments), 'segment')}, {_plural(report.records, 'record')}"
    )
    _print_notes(checked)
    _print_findings(checked.findings)
    plan = _repair_plan(checked, log_dir)
    others = [f for f in checked.findings if f.fatal and not f.in_log]
    if plan is None:
        if others:
            out.print("nothing in the log to repair; tflux repair does not fix the problems above")
            sys.exit(EXIT_CORRUPT)
        out.print("[bold green]OK[/]: nothing to repair")
        sys.exit(EXIT_OK)
    _print_plan(plan, checked, temp)
    if not yes:
        if not sys.stdin.isatty():
            raise CliError(
                "refusing to repair without confirmation: no terminal to ask on (pass --yes)"
            )
        if not click.confirm("Repair now?", default=False, err=True):
            out.print("nothing changed")
            sys.exit(EXIT_CORRUPT)
    copied = None
    if plan.cut is not None and not plan.problem.fatal:  # a torn tail: the library keeps no copy
        temp.mkdir(parents=True, exist_ok=True)
        source = Path(plan.cut[0])
        copied = temp / f"repair-{int(time.time())}-{source.name}.orig"
        shutil.copy2(source, copied)
    with tflux.Log.open(log_dir, repair=True, empty_entries=base is None) as log:
        recovery = log.recovery
        bounds = (log.start_index, log.last_index)
    out.print("\n[bold]repaired[/]:")
    if recovery.cut_path is not None:
        out.print(
            f"  cut    {escape(recovery.cut_path)} at offset {recovery.cut_offset}: "
            f"{_plural(recovery.records_kept, 'record')} kept, {recovery.bytes_cut:,} bytes cut"
        )
    if recovery.reason:
        out.print(f"  reason {escape(recovery.reason)}")
    for moved in ([str(copied)] if copied else []) + list(recovery.moved):
        out.print(f"  moved  {escape(moved)}")
    span = (
        f"LSN {bounds[0]:,}..{bounds[1]:,}"
        if bounds[1] >= bounds[0]
        else f"empty, from LSN {bounds[0]:,}"
    )
    out.print(f"  log    now {span}\n")
    after = _check(base, log_dir)
    _print_notes(after)
    _print_findings(after.findings)
    out.print("[bold red]CORRUPT[/]" if after.fatal else "[bold green]OK[/]")
    sys.exit(EXIT_CORRUPT if after.fatal else EXIT_OK)


# ----------------------------------------------------------------------------------------------
# tflux bench

_FULL_SUITE = """\
The full benchmark suite (every group side by side, plots, docs/benchmarks.md) runs from a
source checkout, with the peer libraries of the 'bench' extra:

  git clone <tflux repository> && cd tflux
  python -m pip install -e '.[test,bench]'
  make bench          # writes .benchmarks/all.json, docs/benchmarks.md and docs/img/*.png

It takes about 10 minutes and several GB of temporary data (TFLUX_BENCH_DIR chooses where)."""


def _ratio_text(r: Any) -> str:
    return f"{r.ratio:.2f}x" if r.ratio < 10 else f"{r.ratio:.0f}x"


def _si(x: float, unit: str) -> str:
    """``(1234567, "records/s")`` -> ``1.23 M records/s``; MB/s stay whole numbers."""
    if unit == "MB/s":
        return f"{x:,.0f} MB/s"
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= factor:
            return f"{x / factor:.2f} {prefix} {unit}"
    return f"{x:.0f} {unit}"


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Measure the headline ratios of docs/benchmarks.md on this machine (< 1 min).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Where to write the temporary data (its disk is the one measured by the durable "
    "enqueue). Default: the system temp directory.",
)
@click.option(
    "--size",
    type=click.Choice(["quick", "tiny"]),
    default="quick",
    show_default=True,
    help="quick: 128 MiB scan, 2M-delta restore, 300 durable calls; tiny: a few seconds, "
    "for checking that it runs (figures are noisy).",
)
@click.option("--full", is_flag=True, help="Explain how to run the full suite (make bench).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
def bench(directory: Path | None, size: str, full: bool, as_json: bool) -> None:
    """Measure tflux beside its baselines and print the headline ratios.

    Three measurements, each tflux against its baseline on the same data seconds apart:

    \b
      verify-scan vs crc32fast     tflux.verify over 64 B records / one crc32fast over the bytes
      restore vs pure Python       tflux.open replaying Add, Add, Remove deltas / the same
                                   replay in pure Python (read_batch + struct + heapq)
      durable enqueue vs           store.enqueue with an fsync per call / persist-queue's
        persist-queue              SQLiteQueue.put (synchronous=FULL); without persist-queue
                                   installed: / a raw os.pwrite + os.fdatasync per call

    A ratio above 1 means tflux is faster. The targets of the project are shown beside them.
    The machine's other work moves the figures: run it twice and compare. The published
    figures and the full suite are in docs/benchmarks.md (--full tells how to run it).

    \b
    Examples:
      tflux bench                     # about 10-30 s
      tflux bench --dir /mnt/data     # measure the disk your data will live on
      tflux bench --size tiny --json  # a few seconds, machine-readable

    \b
    Exit codes: 0 measured (whether targets are met or not), 2 usage or I/O error.
    """
    if full:
        out.print(escape(_FULL_SUITE))
        return
    from tflux import bench as _bench

    with _stopwatch() as elapsed:
        if as_json:
            results = _bench.run(size, directory)
        else:
            with err.status(f"measuring ({size})...") if err.is_terminal else _nothing():
                results = _bench.run(size, directory)
    if as_json:
        _print_json(results.to_json())
        return
    table = _table("headline", "ratio", "target", "tflux", "baseline", right=("ratio",))
    for r in results.ratios:
        target = "" if r.target is None else f">= {r.target:g}x " + ("met" if r.met else "missed")
        table.add_row(
            escape(r.name),
            _ratio_text(r),
            target,
            _si(r.tflux_rate, r.unit),
            _si(r.baseline_rate, r.unit),
        )
    out.print(table)
    for r in results.ratios:
        out.print(f"[bold]{escape(r.name)}[/]: {escape(r.tflux)} / {escape(r.baseline)}")
    out.print(
        f"\ndata in {escape(results.directory)}; done in {elapsed():.1f} s "
        f"(tflux {tflux.__version__}, size {size}). Full suite: tflux bench --full"
    )


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# ----------------------------------------------------------------------------------------------
# tflux export


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Write the log and snapshot of BASE as Parquet files in OUT (needs pyarrow).",
)
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--raw", is_flag=True, help="Add the undecoded bytes of each record (column data).")
def export(base: Path, out: Path, raw: bool) -> None:
    """Write OUT/log.parquet (every log record, decoded) and OUT/snapshot.parquet (the
    snapshot's records), read-only, through pyarrow: for data lakes without Spark.

    \b
    Examples:
      tflux export ./node1 ./lake/node1
      tflux export ./node1 ./lake/node1 --raw

    \b
    Exit codes: 0 written, 1 corrupt data (file and offset named), 2 usage or I/O error.
    """
    try:
        from tflux.parquet import export as export_parquet
    except ImportError as exc:  # pyarrow is a test/spark extra, not a core dependency
        raise CliError(f"tflux export needs pyarrow: pip install 'tflux[spark]' ({exc})") from exc
    counts = export_parquet(base, out, raw=raw)
    click.echo(
        f"wrote {counts['log']:,} log rows to {out / 'log.parquet'} and "
        f"{counts['snapshot']:,} snapshot rows to {out / 'snapshot.parquet'}"
    )


# ----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the ``tflux`` script."""
    cli.main(args=argv, prog_name="tflux")
    raise AssertionError("unreachable: click exits")  # pragma: no cover


if __name__ == "__main__":
    main()
