"""The ``tflux`` command line.

One function per verb (``demo``, ``dump``, ``verify``), each registered on the ``cli`` group; later
verbs (replay, inspect, repair, bench) are added the same way. All storage work happens in the Rust
core; this module only parses arguments, formats output and maps errors to exit codes:

    0  success
    1  the data is corrupt (``verify`` found a fatal problem, or a read hit a bad record)
    2  usage or I/O problem (bad arguments, missing directory, permission, locked directory...)

Progress bars and colours appear only on a terminal, so pipes and CI logs stay plain.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

import tflux
from tflux.errors import CorruptionError, TfluxError

EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_USAGE = 2

MB = 1_000_000
MiB = 1 << 20
SEGMENT_NAME = re.compile(r"^[0-9]{19}\.log$")

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

# Reports go to stdout; progress, warnings and errors to stderr. Rich drops colours and animation
# by itself when the stream is not a terminal (and honours NO_COLOR / FORCE_COLOR).
out = Console(highlight=False, soft_wrap=True)
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
    code = EXIT_CORRUPT if isinstance(exc, CorruptionError) else EXIT_USAGE
    return CliError(_describe(exc), code)


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


def _ints(view: memoryview, code: str) -> memoryview:
    """``view`` read as native integers of struct format ``code``, whatever its export format."""
    return view if view.format == code else view.cast("B").cast(code)


def _rate(amount: float, seconds: float, digits: int = 0) -> str:
    return f"{amount / seconds:,.{digits}f}" if seconds > 0 else "-"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _size(nbytes: int) -> str:
    return f"{nbytes / MB:,.1f} MB" if nbytes >= MB else f"{nbytes:,} B"


def _segments_table(segments: Sequence[tflux.SegmentInfo], limit: int = 8) -> Table:
    """One row per segment; long lists show their first and last few rows."""
    table = Table(box=box.SIMPLE, pad_edge=False, show_edge=False)
    table.add_column("segment")
    for name in ("first LSN", "records", "bytes"):
        table.add_column(name, justify="right")
    table.add_column("state")
    shown = list(segments)
    if len(shown) > limit:
        head, tail = shown[: limit // 2], shown[-(limit // 2) :]
        hidden = len(shown) - len(head) - len(tail)
        shown = [*head, None, *tail]
    for seg in shown:
        if seg is None:
            table.add_row(f"... {hidden} more", "", "", "", "")
            continue
        state = "sealed" if seg.sealed else "active"
        table.add_row(seg.name, f"{seg.start_lsn:,}", f"{seg.count:,}", f"{seg.size:,}", state)
    return table


# ----------------------------------------------------------------------------------------------
# Delta encoding for the demo.
#
# A stand-in for the delta codec (spec section 6), to be replaced by ``tflux.encode_delta`` when the
# codec lands in the Rust core. It writes only what the demo needs, in spec order, big-endian.

_HEAP = 1  # implementation code of the 4-ary heap (spec section 7)
_CREATE_QUEUE_TAIL = struct.Struct(">iiiB")  # implementation, max size, max message size, no range
_PRIORITY_AND_LENGTH = struct.Struct(">qi")  # Int64 priority, Int32 message length


def _queue_name(name: str) -> bytes:
    """QueueName: Byte length, then the ASCII name (0x21..0x7E)."""
    raw = name.encode("ascii")
    if len(raw) > 255 or any(not 0x21 <= c <= 0x7E for c in raw):
        raise ValueError(f"invalid queue name: {name!r}")
    return bytes([len(raw)]) + raw


def _encode_create_queue(queue: bytes) -> bytes:
    """CreateQueue: 'C' | QueueName | heap | no size limit | no message limit | no key range."""
    return b"C" + queue + _CREATE_QUEUE_TAIL.pack(_HEAP, -1, -1, 0)


def _encode_add_record(queue: bytes, priority: int, message: bytes) -> bytes:
    """AddRecord: 'A' | QueueName | Int64 priority | Buffer message (``queue`` pre-encoded)."""
    return b"A" + queue + _PRIORITY_AND_LENGTH.pack(priority, len(message)) + message


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
      tflux demo                  write, reopen, verify and scan a 1M-record sample log
      tflux verify BASE           check every record of BASE/data/log
      tflux dump BASE | head      print the records of a log
    """


# ----------------------------------------------------------------------------------------------
# tflux demo

_DEMO_QUEUES = tuple(_queue_name(n) for n in ("", "emails", "reports", "thumbnails"))
_DEMO_CREATES = [_encode_create_queue(q) for q in _DEMO_QUEUES if q != b"\x00"]
_DEMO_TERMS = 5  # the term rises this many times over the run, as after leader elections


def _demo_messages(payload_size: int) -> list[bytes]:
    """A pool of distinct, readable messages of ``payload_size`` bytes, reused round-robin."""
    pool_size = max(1, min(251, (64 * MiB) // max(payload_size, 1)))
    return [
        ((b"message %03d " % j) * (payload_size // 12 + 1))[:payload_size] for j in range(pool_size)
    ]


def _demo_records(start: int, count: int, messages: Sequence[bytes]) -> list[bytes]:
    """Records ``start .. start+count-1`` of the demo: CreateQueue deltas first, then AddRecords."""
    head = _DEMO_CREATES[start : start + count]
    queues, nq, nm = _DEMO_QUEUES, len(_DEMO_QUEUES), len(messages)
    rest = range(start + len(head), start + count)
    return head + [
        _encode_add_record(queues[i % nq], i * 7919 % 1009, messages[i % nm]) for i in rest
    ]


def _demo_open(log_dir: Path, soft_limit: int) -> tflux.Log:
    return tflux.Log.open(log_dir, sync="batch", soft_limit=soft_limit, hard_limit=2 * soft_limit)


def _demo_write(
    log_dir: Path, records: int, payload_size: int, soft_limit: int
) -> tuple[float, int]:
    """Append the demo records with a progress bar; returns (seconds inside tflux, data bytes)."""
    messages = _demo_messages(payload_size)
    # ~10k records per batch, fewer for big records or small segments: roll-over happens between
    # batches, so a batch much larger than a segment would make few, oversized segments.
    batch = max(1, min(10_000, min(8 * MiB, soft_limit // 8) // (payload_size + 40)))
    spent, data_bytes = 0.0, 0
    with _progress() as progress, _demo_open(log_dir, soft_limit) as log:
        task = progress.add_task("writing", total=records)
        for start in range(0, records, batch):
            items = _demo_records(start, min(batch, records - start), messages)
            term = 1 + start * _DEMO_TERMS // records
            data_bytes += sum(map(len, items))
            t0 = time.perf_counter()
            first = log.append_many(term, items)
            log.commit(first + len(items) - 1)
            spent += time.perf_counter() - t0
            progress.advance(task, len(items))
    return spent, data_bytes


def _scan(log: tflux.Log) -> tuple[int, int, set[int]]:
    """Read every entry in columnar chunks; returns (records, data bytes, terms seen)."""
    records, data_bytes, terms = 0, 0, set()
    start, end = log.start_index, log.last_index + 1
    with _progress() as progress:
        task = progress.add_task("scanning", total=end - start)
        while start < end:
            batch = log.read_batch(start, end, max_bytes=8 * MiB)
            if len(batch) == 0:
                raise CliError(
                    f"read_batch({start}) returned nothing before LSN {end}", EXIT_CORRUPT
                )
            offsets = _ints(batch.offsets, "i")
            terms.update(_ints(batch.term, "i"))
            records += len(batch)
            data_bytes += offsets[-1] - offsets[0]
            start += len(batch)
            progress.advance(task, len(batch))
    return records, data_bytes, terms


def _demo_dir(directory: Path | None) -> Path:
    if directory is None:
        return Path(tempfile.mkdtemp(prefix="tflux-demo-"))
    log_dir = directory / "data" / "log"
    if log_dir.is_dir() and any(SEGMENT_NAME.match(n) for n in os.listdir(log_dir)):
        raise CliError(f"{directory} already holds a log; give an empty or new directory")
    return directory


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Write, reopen, verify and scan a sample log; print the throughput.",
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
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    help="Number of log records to write.",
)
@click.option(
    "--payload-size",
    type=click.IntRange(0, 16 * MiB),
    default=64,
    show_default=True,
    help="Message bytes per record (each record is an AddRecord delta around it).",
)
@click.option(
    "--soft-limit",
    type=click.IntRange(min=4096),
    default=16 * MiB,
    show_default=True,
    help="Segment soft limit in bytes (segments roll over past it).",
)
@click.option("--keep", is_flag=True, help="Keep the temporary directory and print its path.")
def demo(
    directory: Path | None, records: int, payload_size: int, soft_limit: int, keep: bool
) -> None:
    """Write a sample log, reopen, verify and scan it, and print what it took.

    The records are real TaskFlux deltas: CreateQueue for a few queues, then AddRecord deltas
    spread over those queues and the default queue, written in batches of up to 10,000 with
    the Raft term rising a few times, committed as they go so that segments roll over.

    \b
    Examples:
      tflux demo                                  # 1,000,000 records of 64 B in a temp dir
      tflux demo --records 20000 --dir ./sample   # keep a small log to play with
      tflux demo --payload-size 4096 --keep       # bigger records, keep the temp dir
    """
    began = time.perf_counter()
    base = _demo_dir(directory)
    temporary = directory is None
    log_dir = base / "data" / "log"
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        write_s, written_bytes = _demo_write(log_dir, records, payload_size, soft_limit)
        with _stopwatch() as open_s:
            log = _demo_open(log_dir, soft_limit)
        with log:
            segments = log.segments
            with _stopwatch() as verify_s:
                report = tflux.verify(log_dir)
            with _stopwatch() as scan_s:
                scanned, scanned_bytes, terms = _scan(log)
        if scanned != records or scanned_bytes != written_bytes:
            raise CliError(
                f"read back {scanned:,} records / {scanned_bytes:,} bytes, "
                f"wrote {records:,} / {written_bytes:,}",
                EXIT_CORRUPT,
            )
        timings = {"write": write_s, "reopen": open_s(), "verify": verify_s(), "scan": scan_s()}
        _demo_summary(base, temporary and not keep, records, payload_size, segments, terms, timings)
        _print_problems(report)
        out.print(f"\ndone in {time.perf_counter() - began:.2f} s")
        if not temporary or keep:
            out.print(
                f"try: tflux verify {escape(str(base))}  or  tflux dump {escape(str(base))} --to 9"
            )
    finally:
        if temporary and not keep:
            shutil.rmtree(base, ignore_errors=True)
    if not report.ok:
        sys.exit(EXIT_CORRUPT)


def _demo_summary(
    base: Path,
    deleted: bool,
    records: int,
    payload_size: int,
    segments: Sequence[tflux.SegmentInfo],
    terms: set[int],
    timings: dict[str, float],
) -> None:
    used = sum(s.size for s in segments)
    allocated = sum(s.file_size for s in segments)
    creates = min(records, len(_DEMO_CREATES))
    note = "  (temporary: deleted on exit, --keep keeps it)" if deleted else ""
    out.print(f"[bold]tflux demo[/]: wrote, reopened, verified and scanned {records:,} records\n")
    out.print(f"[bold]directory[/]  {escape(str(base))}{note}")
    out.print(
        f"[bold]records[/]    {records:,} deltas: {creates} CreateQueue, then AddRecord with "
        f"{payload_size:,} B messages over {len(_DEMO_QUEUES)} queues"
    )
    out.print(
        f"[bold]on disk[/]    {_size(used)} of records in {len(segments)} segment files "
        f"({_size(allocated)} allocated)"
    )
    out.print(f"[bold]terms[/]      {', '.join(map(str, sorted(terms)))}\n")
    out.print(_segments_table(segments))
    out.print()

    speeds = Table(box=box.SIMPLE, pad_edge=False, show_edge=False)
    speeds.add_column("step")
    for name in ("seconds", "records/s", "MB/s"):
        speeds.add_column(name, justify="right")
    for step, seconds in timings.items():
        speeds.add_row(
            step, f"{seconds:.3f}", _rate(records, seconds), _rate(used / MB, seconds, 1)
        )
    out.print(speeds)
    out.print("[dim]write: time inside append_many + commit (building the deltas not counted)[/]")


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


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Print the records of a log, one per line (or JSON Lines).",
)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (JSON Lines).")
@click.option("--from", "first", type=click.IntRange(min=0), help="First LSN to print.")
@click.option("--to", "last", type=click.IntRange(min=0), help="Last LSN to print (inclusive).")
@click.option(
    "--encoding",
    type=click.Choice(sorted(_ENCODINGS)),
    default="hex",
    show_default=True,
    help="How the data bytes are printed.",
)
def dump(path: Path, as_json: bool, first: int | None, last: int | None, encoding: str) -> None:
    """Print the records of a log, one line each: lsn, term, length, crc, data.

    PATH is a base directory (holding data/log) or a log directory. The log is opened
    read-only. The crc is the CRC-32 of the data bytes. With --json each line is an object
    with keys lsn, term, length, crc (an integer) and data (hex or base64 text).
    Output stops quietly when the reader goes away (e.g. `| head`).

    \b
    Examples:
      tflux dump ./base | head
      tflux dump ./base/data/log --from 1000 --to 1009
      tflux dump ./base --json --encoding base64 > records.jsonl

    \b
    Exit codes: 0 success, 1 a corrupt record was met, 2 usage or I/O error.
    """
    if first is not None and last is not None and first > last:
        raise CliError(f"--from {first} is after --to {last}")
    format_line = _dump_line_json if as_json else _dump_line_text
    encode = _ENCODINGS[encoding]
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
                lines.append(format_line(entry.lsn, entry.term, entry.data, encode))
                if len(lines) >= 1000:
                    write("".join(lines))
                    lines.clear()
            write("".join(lines))
            sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
        except TfluxError:
            write("".join(lines))  # what was read before the bad record, then the error
            sys.stdout.flush()
            raise


# ----------------------------------------------------------------------------------------------
# tflux verify


def _problem_line(problem: tflux.Problem) -> str:
    """``error:``/``warning:`` KIND in FILE at offset N: MESSAGE (markup-escaped)."""
    kind = problem.kind.replace("_", " ")
    where = problem.path if problem.offset is None else f"{problem.path} at offset {problem.offset}"
    message = problem.message
    if message.lower().startswith(kind + ": "):  # the kind is already said once
        message = message[len(kind) + 2 :]
    if problem.kind == "torn_tail" and "next open" not in message:
        message += " (the next open trims it)"
    level = "[bold red]error:[/]" if problem.fatal else "[yellow]warning:[/]"
    return f"{level} {kind} in {escape(where)}: {escape(message)}"


def _print_problems(report: tflux.VerifyReport) -> None:
    for problem in report.problems:
        out.print(_problem_line(problem))


@cli.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Check every record of a log; exit 1 on corruption.",
)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("-v", "--verbose", is_flag=True, help="List the segments too.")
def verify(path: Path, verbose: bool) -> None:
    """Check every record of every segment (checksums, framing, terms, LSN gaps).

    PATH is a base directory (holding data/log) or a log directory. Nothing is written. Each
    problem is printed with its file and byte offset. A torn tail (an incomplete last record
    of the last segment, as a crash leaves it) is only a warning: the next open trims it.

    \b
    Exit codes:
      0  clean, or only a torn tail / ignored files (warnings)
      1  corruption: a bad record in a sealed segment, a term going down, a gap between segments...
      2  usage or I/O error (no such directory, no segments, permission denied)

    \b
    Examples:
      tflux verify ./base
      tflux verify ./base/data/log -v && echo intact
    """
    log_dir = _log_dir(path)
    with _stopwatch() as elapsed:
        report = tflux.verify(log_dir)
    seconds = elapsed()
    segments = report.segments
    out.print(
        f"verified {escape(str(log_dir))}: {_plural(len(segments), 'segment')}, "
        f"{_plural(report.records, 'record')}, "
        f"{_size(report.bytes)} in {seconds:.3f} s ({_rate(report.bytes / MB, seconds)} MB/s)"
    )
    if verbose:
        out.print(_segments_table(segments, limit=sys.maxsize))
    _print_problems(report)
    fatal = not report.ok or any(p.fatal for p in report.problems)
    out.print("[bold red]CORRUPT[/]" if fatal else "[bold green]OK[/]")
    sys.exit(EXIT_CORRUPT if fatal else EXIT_OK)


# ----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the ``tflux`` script."""
    cli.main(args=argv, prog_name="tflux")
    raise AssertionError("unreachable: click exits")  # pragma: no cover


if __name__ == "__main__":
    main()
