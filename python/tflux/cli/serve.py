"""``tflux serve``: hold a base directory as its owner, in a process of its own, until stopped.

Every other ``tflux.open`` of the directory (web workers, consumers) is then a client of this
process, so none of them carries the owner's loop and fsyncs on its own CPU, and none of their
exits hands the directory over (a restore from disk). The owner itself is ``tflux.open``'s: this
verb only opens, waits for a signal and closes.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from types import FrameType

import click
from rich.markup import escape

import tflux
from tflux.cli._base import dialect_option
from tflux.cli._logging import log_level_option, use_log_level
from tflux.cli._render import CONTEXT_SETTINGS, CliError, _plural, out

#: The signals that stop the server (SIGHUP: the terminal it ran in went away).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Own a base directory and serve the other processes' opens until stopped.",
)
@click.argument("base", type=click.Path(path_type=Path))
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="NAME",
    help="Create this heap queue unless it exists (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON line once serving (for machines).")
@click.option(
    "--create",
    is_flag=True,
    help="Also create BASE's missing parent directories (as mkdir -p; by default only BASE).",
)
@dialect_option
@log_level_option
def serve(
    base: Path,
    queues: tuple[str, ...],
    as_json: bool,
    create: bool,
    dialect: str | None,
    log_level: str | None,
) -> None:
    """Open BASE as its owner (tflux.open, creating BASE if needed, and its missing parents
    with --create; without it a missing parent is an error, exit 2) and serve every other
    process's tflux.open of it (over data/tflux.sock) until SIGINT (Ctrl-C), SIGTERM or SIGHUP.

    Running the owner apart from the workers is the steadier deployment: no worker's exit hands
    the directory over, and the owner's loop and fsyncs do not share a worker's interpreter.
    If BASE already has an owner, nothing is changed (exit 2). On a stop signal the owner closes
    as tflux's close does: the clients settle the records they hold (up to 10 s, or
    TFLUX_OWNER_DRAIN seconds), everything is synced, and a client then takes over by itself.

    With --json, one line once serving: base, dialect, pid and queues (their names).

    tflux's own events (this process is the owner, clients' owner changes, expired leases,
    dead letters, torn tails cut) are logged on stderr at --log-level, info by default.

    \b
    Examples:
      tflux serve ./base --queue jobs &
      tflux serve ./base --json > ready.json &   # one line in ready.json once it serves

    \b
    Exit codes: 0 stopped by a signal and closed cleanly, 1 corrupt data, 2 usage or I/O
    error (BASE already has an owner, a locked or unreadable directory).
    """
    use_log_level(log_level, default="info")
    stop = threading.Event()
    caught: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        caught.append(signum)
        stop.set()

    # Handlers first: a signal that arrives during the restore still stops the server cleanly.
    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        store = tflux.open(base, dialect=dialect, create=create)
        try:
            if not store.is_owner:
                raise CliError(
                    f"{base} is already served by process {store.owner_pid}: stop that one first"
                )
            for name in queues:
                store.create_queue(name, exist_ok=True)
            _announce(store, as_json)
            while not stop.wait(0.5):
                pass
        finally:
            store.close()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if not as_json:
        out.print(f"stopped by {signal.Signals(caught[0]).name}: {escape(str(base))} closed")


def _announce(store: tflux.Store, as_json: bool) -> None:
    """The one line that says the owner serves (scripts wait for it), flushed at once."""
    infos = store.queues()
    if as_json:
        line = {
            "base": store.path,
            "dialect": store.dialect,
            "pid": store.owner_pid,
            "queues": [q.name for q in infos],
        }
        print(json.dumps(line), flush=True)
        return
    ready = sum(q.count for q in infos)
    out.print(
        f"serving {escape(store.path)} ({store.dialect} dialect, "
        f"{_plural(len(infos), 'queue')}, {_plural(ready, 'ready record')}) as process "
        f"{store.owner_pid}; Ctrl-C or SIGTERM stops"
    )
    out.file.flush()
