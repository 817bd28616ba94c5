"""The ``tflux`` command group: the verbs, and tflux or OS errors turned into exit codes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import click

import tflux
from tflux.cli._logging import log_level_option, remember_group_level
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    EXIT_OK,
    _error_for,
    _print_json_failure,
    _silence_stdout,
)
from tflux.cli.bench import bench
from tflux.cli.compress import compress
from tflux.cli.convert import convert
from tflux.cli.demo import demo
from tflux.cli.dump import dump
from tflux.cli.export import export
from tflux.cli.inspect import inspect
from tflux.cli.repair import repair
from tflux.cli.replay import replay
from tflux.cli.serve import serve
from tflux.cli.stats import stats
from tflux.cli.verify import verify
from tflux.errors import TfluxError


class _TfluxGroup(click.Group):
    """Turns tflux and OS errors raised by any verb into one line on stderr, never a traceback."""

    def invoke(self, ctx: click.Context):
        # A verb asked for --json prints one JSON object on failure too (its own, or the error).
        args = ctx.args[: ctx.args.index("--")] if "--" in ctx.args else ctx.args
        as_json = "--json" in args
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _silence_stdout()
            ctx.exit(EXIT_OK)
        except (TfluxError, OSError) as exc:
            error = _error_for(exc)
            if as_json:
                _print_json_failure(error)
            raise error from exc
        except click.ClickException as exc:
            if as_json:
                _print_json_failure(exc)
            raise


@click.group(cls=_TfluxGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(tflux.__version__, "-V", "--version", prog_name="tflux")
@log_level_option
def cli(log_level: str | None) -> None:
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
      tflux compress BASE         compress the sealed segments (NNN.log -> NNN.log.z)
      tflux convert SRC DST --to taskflux   the base written again in the other dialect
      tflux serve BASE            own BASE in a process of its own; other opens are its clients
      tflux stats BASE            live figures of the queues (from the owner, else the files)

    \b
    Logging: tflux's own events (owner changes, expired leases, dead letters, torn tails cut)
    go to stderr at --log-level (info for serve, warning otherwise), never to stdout.
    """
    remember_group_level(log_level)


for _verb in (
    demo,
    replay,
    inspect,
    dump,
    verify,
    repair,
    bench,
    export,
    compress,
    convert,
    serve,
    stats,
):
    cli.add_command(_verb)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of the ``tflux`` script."""
    cli.main(args=argv, prog_name="tflux")
    raise AssertionError("unreachable: click exits")  # pragma: no cover
