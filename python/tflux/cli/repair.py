"""``tflux repair``: cut a corrupt log at its first bad record, moving later files aside."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

import tflux
from tflux._layout import Layout
from tflux.cli._base import _dialect, _locate, dialect_option
from tflux.cli._check import Checked, _check, _checked_json, _print_findings, _print_notes
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    EXIT_CORRUPT,
    EXIT_OK,
    CliError,
    _plural,
    _print_json,
    out,
)


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
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object; never asks (without --yes: a dry run).",
)
@dialect_option
def repair(path: Path, yes: bool, as_json: bool, dialect: str | None) -> None:
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

    With --json, one object and no question: path, base, before (the checks, as tflux verify
    --json reports them), plan (null: nothing to cut; else {cut_path, cut_offset,
    records_kept, first_lost_lsn, moved}), repaired, recovery (null, or what was done:
    {cut_path, cut_offset, records_kept, bytes_cut, reason, moved, log: {first_lsn,
    last_lsn}}), after (the checks after the repair, or null) and ok. Without --yes it is a
    dry run: the plan, nothing changed, exit 1 when there is something to repair.

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
    dialect = _dialect(base, dialect)
    checked = _check(base, log_dir, dialect=dialect)
    report = checked.report
    dialect = report.dialect  # a log alone: the one its first segment says
    temp = log_dir.parent / Layout(log_dir.parent.parent, dialect, detect=False).temp.name
    plan = tflux.plan_repair(log_dir, empty_entries=base is None, dialect=dialect)
    others = [f for f in checked.findings if f.fatal and not f.in_log]
    result: dict[str, Any] = {
        "path": str(path),
        "base": None if base is None else str(base),
        "dialect": dialect,
        "before": _checked_json(checked),
        "plan": _plan_json(plan),
        "repaired": False,
        "recovery": None,
        "after": None,
    }
    if as_json:
        if plan is None or not yes:  # --json never asks: without --yes it is a dry run
            _print_json({**result, "ok": plan is None and not others})
            sys.exit(EXIT_OK if plan is None and not others else EXIT_CORRUPT)
    else:
        out.print(
            f"checked {escape(str(base if base is not None else log_dir))}: "
            f"{_plural(len(report.segments), 'segment')}, {_plural(report.records, 'record')}"
        )
        _print_notes(checked)
        _print_findings(checked.findings)
        if plan is None:
            if others:
                out.print(
                    "nothing in the log to repair; tflux repair does not fix the problems above"
                )
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
    with tflux.Log.open(log_dir, repair=True, empty_entries=base is None, dialect=dialect) as log:
        recovery = log.recovery
        bounds = (log.start_index, log.last_index)
    after = _check(base, log_dir, dialect=dialect)
    if as_json:
        result["repaired"] = True
        result["recovery"] = {
            "cut_path": recovery.cut_path,
            "cut_offset": recovery.cut_offset,
            "records_kept": recovery.records_kept,
            "bytes_cut": recovery.bytes_cut,
            "reason": recovery.reason,
            "moved": list(recovery.moved),
            "log": {"first_lsn": bounds[0], "last_lsn": bounds[1]},
        }
        result["after"] = _checked_json(after)
        _print_json({**result, "ok": not after.fatal})
        sys.exit(EXIT_CORRUPT if after.fatal else EXIT_OK)
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
    _print_notes(after)
    _print_findings(after.findings)
    out.print("[bold red]CORRUPT[/]" if after.fatal else "[bold green]OK[/]")
    sys.exit(EXIT_CORRUPT if after.fatal else EXIT_OK)


def _plan_json(plan: tflux.RepairPlan | None) -> dict[str, Any] | None:
    if plan is None:
        return None
    return {
        "cut_path": plan.cut_path,
        "cut_offset": plan.cut_offset,
        "records_kept": plan.records_kept,
        "first_lost_lsn": plan.first_lost_lsn,
        "moved": list(plan.moved),
    }
