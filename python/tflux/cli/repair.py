"""``tflux repair``: cut a corrupt log at its first bad record, moving later files aside."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape

import tflux
from tflux.cli._base import _locate
from tflux.cli._check import Checked, _check, _print_findings, _print_notes
from tflux.cli._render import CONTEXT_SETTINGS, EXIT_CORRUPT, EXIT_OK, CliError, _plural, out


def _print_plan(plan: tflux.RepairPlan, checked: Checked, temp: Path) -> None:
    """The core's plan (``tflux.plan_repair``: what ``Log.open(repair=True)`` executes)."""
    out.print("\n[bold]repair plan[/] (nothing is deleted):")
    if plan.cut_path is not None:
        kept = f", keeping its first {_plural(plan.records_kept or 0, 'record')}"
        lost = f"; LSNs from {plan.first_lost_lsn:,} on leave the log"
        out.print(f"  cut   {escape(plan.cut_path)} at offset {plan.cut_offset}{kept}{lost}")
        name = Path(plan.cut_path).name
        out.print(f"  copy  {escape(name)} as it was -> {escape(str(temp))}/ (.orig)")
    for moved in plan.moved:
        out.print(f"  move  {escape(Path(moved).name)} -> {escape(str(temp))}/")


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Cut a corrupt log at its first bad record; later files move to data/temp/.",
)
@click.argument("path", metavar="BASE", type=click.Path(path_type=Path))
@click.option("-y", "--yes", is_flag=True, help="Do it without asking (needed off a terminal).")
def repair(path: Path, yes: bool) -> None:
    """Cut the log of BASE at its first bad record, moving the segment files after it aside.

    First the checks of `tflux verify` run and their findings are printed, then the plan
    (tflux.plan_repair: the plan the library executes, computed without writing):
    which segment is cut at which offset (the records before it are kept) and which files
    move into data/temp/. After a confirmation (or --yes) the repair is done by
    tflux.Log.open(BASE/data/log, repair=True) and its report is printed: every moved
    file's new path. Nothing is ever deleted: the cut segment's original bytes are kept in
    data/temp/ too (as NAME.orig), also for a torn tail.
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
    plan = tflux.plan_repair(log_dir, empty_entries=base is None)
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
    for moved in recovery.moved:
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
