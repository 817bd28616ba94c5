"""``tflux stats``: the live figures of a base directory's queues, from its owner when one
holds it (a client open asks it), else from the files, read-only (issue 44)."""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.markup import escape

import tflux
from tflux import owner_holds  # the core's rule; replay and inspect take it from here
from tflux.cli._base import _base_dir, _open_store, _settings_for_reading, dialect_option
from tflux.cli._logging import log_level_option, use_log_level
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    EXIT_OK,
    _print_json,
    _queue_label,
    _table,
    mark_json_said,
    out,
)
from tflux.errors import SettingsWarning, TfluxError

T = TypeVar("T")

#: The figures of `tflux.QueueStats`, in its order (the JSON keys and the table's columns).
FIGURES = tflux.QueueStats._fields


@dataclass
class Owner:
    """What was found of an owner: its pid once it answered, else the reason it did not."""

    pid: int | None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "answered": self.pid is not None, "error": self.error}

    def line(self) -> str:
        if self.pid is not None:
            return (
                f"process {self.pid} owns the base and holds its records in flight: "
                "the figures are its live ones"
            )
        return (
            f"an owner holds the base but did not answer ({self.error}): read from the files, "
            "so the records it holds in flight count as ready"
        )


def ask_owner(
    base: Path, dialect: str | None, ask: Callable[[tflux.Store], T]
) -> tuple[Owner, T | None]:
    """``ask(client)`` of a client of ``base``'s owner, closed at once (so this process never
    stays to take the owner's place), with the owner's pid; or ``(Owner(None, why), None)``
    when the owner did not answer, or went between the probe and the open (then this open
    was the owner: it is closed before anything else happens)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SettingsWarning)
            client = tflux.open(base, dialect=dialect)
    except TfluxError as exc:
        return Owner(None, getattr(exc, "message", None) or str(exc)), None
    with client:
        if client.is_owner:
            return Owner(None, "the owner went before it answered"), None
        return Owner(client.owner_pid), ask(client)


def read_figures(
    base: Path, dialect: str | None, names: Sequence[str]
) -> tuple[Owner | None, list[dict[str, Any]]]:
    """The figures of the queues ``names`` (every queue when empty): the owner's when one
    holds ``base`` and answers, else those of a read-only restore of the files (``Owner``
    None: there is no owner; an ``Owner`` without a pid: it did not answer)."""
    owner = None
    if owner_holds(base):
        owner, figures = ask_owner(base, dialect, lambda s: queue_stats(s, names))
        if figures is not None:
            return owner, figures
    with _open_store(base, dialect) as store:
        return owner, queue_stats(store, names)


def queue_stats(store: tflux.Store, names: Sequence[str]) -> list[dict[str, Any]]:
    """The figures of the queues ``names`` (every queue when empty), as JSON objects."""
    wanted = list(names) or [q.name for q in store.queues()]
    return [{"name": name, **store.stats(name)._asdict()} for name in wanted]


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


def _print_text(base: Path, owner: Owner | None, queues: list[dict[str, Any]]) -> None:
    if owner is None:
        out.print(
            f"{escape(str(base))}: no owner; read from the files (read-only), so every "
            "record not acked counts as ready"
        )
    else:
        out.print(f"{escape(str(base))}: {escape(owner.line())}")
    table = _table(
        "queue",
        *(f.replace("_", " ") for f in FIGURES),
        right=tuple(f.replace("_", " ") for f in FIGURES),
        optional=("oldest ready age", "nacked", "expired"),
    )
    for q in queues:
        table.add_row(
            escape(_queue_label(q["name"])),
            *(_age(q[f]) if f == "oldest_ready_age" else f"{q[f]:,}" for f in FIGURES),
        )
    out.print(table)


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Live figures of the queues: from the owner, else the files.",
)
@click.argument("base", type=click.Path(path_type=Path))
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="Q",
    help="Only this queue (repeatable; default: every queue).",
)
@click.option(
    "--watch",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="S",
    help="Print again every S seconds until Ctrl-C.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
@dialect_option
@log_level_option
def stats(
    base: Path,
    queues: tuple[str, ...],
    watch: float | None,
    as_json: bool,
    dialect: str | None,
    log_level: str | None,
) -> None:
    """Print each queue's ready, delayed, in-flight and dead-lettered records and the counters
    of deliveries (tflux.Store.stats).

    When a process owns BASE (a worker's tflux.open, tflux serve), this verb opens BASE as its
    client and prints the owner's live figures, which know the records in flight; the counters
    count since the owner opened. Without an owner it restores the files read-only (as tflux
    replay does: nothing is written, no lock is taken) and says so: records that were in flight
    then are ready again.

    With --json, one object: base, owner (null, or {pid, answered, error}) and queues, a list
    of objects with name, ready, delayed, in_flight, dead_lettered, oldest_ready_age (seconds,
    null: no record ready, or the oldest was enqueued before the owner started), enqueued,
    acked, nacked, expired. With --watch, the figures are printed again every S seconds until
    Ctrl-C (with --json, one object per line).

    \b
    Examples:
      tflux stats ./base
      tflux stats ./base --queue jobs --watch 2
      tflux stats ./base --json | jq '.queues[] | {name, ready, in_flight}'

    \b
    Exit codes: 0 printed (or stopped by Ctrl-C), 1 corrupt data, 2 usage or I/O error (an
    unknown queue, a directory that is not a base).
    """
    use_log_level(log_level)
    base, _ = _base_dir(base)
    if not owner_holds(base):
        _settings_for_reading(base)  # a bad settings file: a warning, then the defaults
    try:
        while True:
            owner, figures = read_figures(base, dialect, queues)
            if as_json:
                said = {
                    "base": str(base),
                    "owner": None if owner is None else owner.as_json(),
                    "queues": figures,
                }
                if watch is None:
                    _print_json(said)
                else:
                    mark_json_said()
                    sys.stdout.write(json.dumps(said) + "\n")
                    sys.stdout.flush()
            else:
                _print_text(base, owner, figures)
            if watch is None:
                return
            time.sleep(watch)
            if not as_json:
                out.print()
    except KeyboardInterrupt:
        sys.exit(EXIT_OK)
