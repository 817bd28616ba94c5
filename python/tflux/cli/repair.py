"""``tflux repair``: cut a corrupt log at its first bad record, moving later files aside."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import click
from rich.markup import escape

import tflux
from tflux.cli._base import SEGMENT_NAME, _locate
from tflux.cli._check import (
    Checked,
    Finding,
    _check,
    _print_findings,
    _print_notes,
    _records_before,
)
from tflux.cli._render import CONTEXT_SETTINGS, EXIT_CORRUPT, EXIT_OK, CliError, _plural, out


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


@click.command(
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
