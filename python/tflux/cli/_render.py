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
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

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


def _silence_stdout() -> None:
    """After the reader of our stdout went away (``| head``): stop writing, quietly.

    Python would otherwise complain about the broken pipe again when it flushes stdout at exit.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


# ----------------------------------------------------------------------------------------------
# Small helpers


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
    return tflux.IMPLEMENTATIONS.get(code, f"unknown ({code})") if code is not None else None


@contextmanager
def _nothing() -> Iterator[None]:
    yield
