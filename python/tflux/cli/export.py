"""``tflux export``: the log and snapshot of a base directory as Parquet files."""

from __future__ import annotations

import os
from pathlib import Path

import click

from tflux.cli._base import _dialect, _locate, dialect_option
from tflux.cli._render import CONTEXT_SETTINGS, CliError, _print_json, _progress
from tflux.parquet import _require_pyarrow
from tflux.parquet import export as export_parquet


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Write the log and snapshot of BASE as Parquet files in OUT (needs pyarrow).",
)
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--raw", is_flag=True, help="Add the undecoded bytes of each record (column data).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
@click.option("--force", is_flag=True, help="Replace OUT's Parquet files if they exist.")
@click.option(
    "--create",
    is_flag=True,
    help="Also create OUT's missing parent directories (as mkdir -p; by default only OUT).",
)
@dialect_option
def export(
    base: Path,
    out: Path,
    raw: bool,
    as_json: bool,
    force: bool,
    create: bool,
    dialect: str | None,
) -> None:
    """Write OUT/log.parquet (every log record, decoded) and OUT/snapshot.parquet (the
    snapshot's records), read-only, through pyarrow: for data lakes without Spark.

    BASE is a base directory (holding data/log) or a log directory, as for tflux dump and
    verify (and refused as they refuse it). pyarrow is an extra: pip install 'tflux[parquet]'.

    OUT may exist; its log.parquet and snapshot.parquet are never overwritten unless --force
    is given. A new OUT is made as a base directory is, as mkdir makes it: its parent must
    exist (--create makes the missing parents too). A progress bar (bytes of the segment
    files and snapshot read) is shown on stderr when it is a terminal, not with --json.

    With --json, one object: base, dialect (of a base directory; null for a log read alone),
    out, log and snapshot, each {path, rows}.

    \b
    Examples:
      tflux export ./node1 ./lake/node1
      tflux export ./node1 ./lake/node1 --raw

    \b
    Exit codes: 0 written, 1 corrupt data (file and offset named), 2 usage or I/O error.
    """
    located, _ = _locate(base)  # the same checks, errors and exit codes as dump and verify
    dialect = _dialect(located, dialect)
    try:
        _require_pyarrow()
    except ImportError as exc:  # pyarrow is an extra, not a core dependency
        raise CliError(str(exc)) from exc
    written = [out / "log.parquet", out / "snapshot.parquet"]
    there = [str(p) for p in written if os.path.lexists(p)]
    if there and not force:
        raise CliError(f"{there[0]} exists: export never overwrites it (--force replaces it)")
    with _progress(in_bytes=True, quiet=as_json) as progress:  # bytes of the files read
        task = progress.add_task("export", total=None)

        def tell(done: int, total: int) -> None:
            progress.update(task, completed=done, total=max(total, 1))

        counts = export_parquet(base, out, raw=raw, dialect=dialect, create=create, progress=tell)
    if as_json:
        _print_json(
            {
                "base": str(base),
                "dialect": dialect,
                "out": str(out),
                "log": {"path": str(out / "log.parquet"), "rows": counts["log"]},
                "snapshot": {"path": str(out / "snapshot.parquet"), "rows": counts["snapshot"]},
            }
        )
        return
    click.echo(
        f"wrote {counts['log']:,} log rows to {out / 'log.parquet'} and "
        f"{counts['snapshot']:,} snapshot rows to {out / 'snapshot.parquet'}"
    )
