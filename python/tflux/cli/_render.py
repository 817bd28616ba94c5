"""Shared output of the ``tflux`` verbs: consoles, errors and exit codes, tables, numbers."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table
from rich.text import Text

import tflux
from tflux.errors import CorruptionError, ReplayError

EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_USAGE = 2

MB = 1_000_000
MiB = 1 << 20

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# Reports go to stdout; progress, warnings and errors to stderr. Rich drops colours and animation
# by itself when the stream is not a terminal (and honours NO_COLOR / FORCE_COLOR). Off a terminal
# rich would assume 80 columns and squeeze tables; pipes get wide, unwrapped tables instead.
class _Stdout(Console):
    """Stdout whose reader went away (``tflux verify BASE | head -1``) ends the command with
    exit 0, as ``cat`` or ``grep`` would: rich's own handler exits 1, tflux's "corrupt" code."""

    def on_broken_pipe(self) -> None:
        _silence_stdout()
        raise SystemExit(EXIT_OK)


# On a terminal rich wraps prose at spaces (the terminal itself would cut a line anywhere, a
# number included: issue 30 item 22); off one, lines stay whole for grep and friends.
out = _Stdout(highlight=False, soft_wrap=False)
if not out.is_terminal:
    out = _Stdout(highlight=False, soft_wrap=True, width=200)
err = Console(stderr=True, highlight=False)
err.soft_wrap = not err.is_terminal


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


def _silence_stdout() -> None:
    """After the reader of our stdout went away (``| head``): stop writing, quietly.

    Python would otherwise complain about the broken pipe again when it flushes stdout at exit.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# ----------------------------------------------------------------------------------------------
# Small helpers


def _progress(in_bytes: bool = False, quiet: bool = False, transient: bool = False) -> Progress:
    """A progress bar on stderr, silent when stderr is not a terminal or with ``quiet``;
    ``in_bytes``: the counts are bytes, shown with units (``12.3/45.6 MB``), not as raw
    numbers; ``transient``: the bar is erased when done (a report with a title follows)."""
    return Progress(
        TextColumn("{task.description:<9}"),
        BarColumn(),
        DownloadColumn() if in_bytes else MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        disable=quiet or not err.is_terminal,
        transient=transient,
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
    """``amount / seconds`` with ``digits`` decimals; a small non-zero rate keeps two
    significant digits instead of reading "0" (issue 43 item 19)."""
    if seconds <= 0:
        return "-"
    value = amount / seconds
    shown = f"{value:,.{digits}f}"
    if value > 0 and float(shown.replace(",", "")) == 0:
        return f"{value:.2g}"
    return shown


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


_GAP = 3  # characters between two columns of a box.SIMPLE table without edges
_TEXT_MIN = 8  # a text column is folded down to this width at the least


def _cell_width(cell: Any) -> int:
    return Text.from_markup(cell).cell_len if isinstance(cell, str) else 1


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


class _FitTable(Table):
    """A report table that never cuts a number, whatever the terminal width.

    Rich would shorten a too-wide table by cutting cells (``3,...``). Here the widths are
    chosen at print time: a right-aligned (numeric) column keeps its widest cell whole (its
    header may wrap at spaces); when the cells do not fit whole, the optional columns are
    dropped (in the order given) and named in a note, and only then does a text column fold
    onto more lines.
    """

    def __init__(
        self,
        *,
        right: Sequence[str],
        optional: Sequence[str],
        whole: Sequence[str],
        stack: bool = False,
    ) -> None:
        super().__init__(box=box.SIMPLE, pad_edge=False, show_edge=False)
        self._right = set(right)
        self._whole = set(right) | set(whole)  # cells never folded: numbers, figures
        self._optional = list(optional)
        self._stack = stack

    def _minimum(self, column: Column) -> int:
        cells = max((_cell_width(c) for c in column._cells), default=0)
        header = _longest_word(str(column.header))
        if column.header in self._whole:
            return max(cells, header)
        return min(max(cells, cell_len(str(column.header))), max(_TEXT_MIN, header))

    def _widths(self, columns: list[Column], width: int, fold: bool) -> list[int] | None:
        """Widths that fit ``width`` (each at least its minimum; without ``fold``, text cells
        whole too), or None."""
        natural = [
            max(cell_len(str(c.header)), *(_cell_width(x) for x in c._cells)) for c in columns
        ]
        minimum = [self._minimum(c) for c in columns]
        if not fold:  # only the headers of number columns may wrap
            minimum = [
                m if c.header in self._whole else n
                for c, m, n in zip(columns, minimum, natural, strict=True)
            ]
        available = width - _GAP * (len(columns) - 1)
        if sum(minimum) > available:
            return None
        widths = list(natural)
        # First wrap the headers of number columns, then fold text: each time the column
        # with the most room to give loses one character.
        for phase in ([c.header in self._whole for c in columns], [True] * len(columns)):
            while sum(widths) > available:
                room = [w - m if p else 0 for w, m, p in zip(widths, minimum, phase, strict=True)]
                i = max(range(len(widths)), key=room.__getitem__)
                if room[i] <= 0:
                    break
                widths[i] -= 1
        return widths

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # Optional columns go before any name is folded (a queue name cut mid-word while the
        # key range stayed: issue 30 item 22); folding is the last resort.
        columns = list(self.columns)
        droppable = [c for name in self._optional for c in columns if c.header == name]
        widths = self._widths(columns, options.max_width, fold=False)
        while widths is None and droppable:
            columns.remove(droppable.pop(0))
            widths = self._widths(columns, options.max_width, fold=False)
        if widths is None and self._stack:
            yield from self._stacked(options.max_width)
            return
        if widths is None:
            widths = self._widths(columns, options.max_width, fold=True)
        fitted = Table(box=box.SIMPLE, pad_edge=False, show_edge=False)
        for column, w in zip(columns, widths or [None] * len(columns), strict=True):
            fitted.add_column(
                column.header,
                justify="right" if column.header in self._right else "left",
                width=w,
                overflow="fold",
                no_wrap=w is None,
            )
        for row in range(self.row_count):
            fitted.add_row(*(c._cells[row] for c in columns))
        hidden = [str(c.header) for c in self.columns if c not in columns]
        if hidden:
            fitted.caption = f"not shown at this width: {', '.join(hidden)}"
            fitted.caption_justify = "left"
        yield from fitted.__rich_console__(console, options)

    def _stacked(self, width: int) -> RenderResult:
        """Too narrow for the columns without dropping more: each row as its first cell on a
        line, then every other column as ``header value``, pairs packed onto indented lines
        (a pair never split: issue 43 item 19, the segments at 40 columns)."""
        first, *rest = self.columns
        for row in range(self.row_count):
            yield Text.from_markup(str(first._cells[row]), overflow="fold")
            pairs = [f"{c.header} {c._cells[row]}" for c in rest if str(c._cells[row]).strip()]
            line = ""
            for pair in pairs:
                if line and 2 + cell_len(line) + 2 + cell_len(pair) > width:
                    yield Text.from_markup(f"  {line}", overflow="fold")
                    line = ""
                line = f"{line}, {pair}" if line else pair
            if line:
                yield Text.from_markup(f"  {line}", overflow="fold")


def _table(
    *columns: str,
    right: Sequence[str] = (),
    optional: Sequence[str] = (),
    whole: Sequence[str] = (),
    stack: bool = False,
) -> Table:
    """A report table; ``right`` columns hold numbers and ``whole`` ones figures with units
    (neither is ever cut or folded); ``optional`` ones are dropped first, in that order, when
    the terminal is too narrow; then, with ``stack``, each row is shown on lines of its own
    (every column kept) rather than folding a text column."""
    table = _FitTable(right=right, optional=optional, whole=whole, stack=stack)
    for name in columns:
        table.add_column(name, justify="right" if name in right else "left")
    return table


def _compression_ratio(seg: tflux.SegmentInfo) -> float | None:
    """Compressed size over original size (header through end marker) of a ``.log.z``."""
    if seg.compression is None:
        return None
    return round(seg.file_size / (seg.size + 4), 4)


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
        optional=("state",),
        whole=("state",),  # may carry a compressed size: dropped whole rather than folded
        stack=True,  # never drop the first LSN nor fold a file name (issue 43 item 19)
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
        ratio = _compression_ratio(seg)
        if ratio is not None:
            state += f", {seg.compression} {seg.file_size:,} B ({ratio:.0%})"
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
        optional=("max message", "max size", "key range", "implementation"),
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


_json_said = False  # whether this run printed its JSON object already (_print_json)


def _print_json(value: Any) -> None:
    global _json_said
    _json_said = True
    sys.stdout.write(json.dumps(value, indent=2) + "\n")
    sys.stdout.flush()


def mark_json_said() -> None:
    """This run's JSON output has begun (``dump --json``'s lines): a failure adds no object."""
    global _json_said
    _json_said = True


def _print_json_failure(error: click.ClickException) -> None:
    """The one JSON object a ``--json`` verb prints when it fails before printing its own
    (issue 43 item 17): ``ok`` false, the error line's text and the exit code, on one line
    (so ``dump --json``'s JSON Lines stay lines)."""
    if _json_said:
        return
    said = {"ok": False, "error": error.format_message(), "exit_code": error.exit_code}
    try:
        sys.stdout.write(json.dumps(said) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _implementation(code: int | None) -> str | None:
    return tflux.IMPLEMENTATIONS.get(code, f"unknown ({code})") if code is not None else None


@contextmanager
def _nothing() -> Iterator[None]:
    yield
