"""``tflux bench``: the headline ratios of docs/benchmarks.md on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

import tflux
from tflux.cli._render import CONTEXT_SETTINGS, _nothing, _print_json, _stopwatch, _table, err, out

_FULL_SUITE = """\
The full benchmark suite (every group side by side, plots, docs/benchmarks.md) runs from a
source checkout, with the peer libraries of the 'bench' extra:

  git clone <tflux repository> && cd tflux
  python -m pip install -e '.[test,bench]'
  make bench          # writes .benchmarks/all.json, docs/benchmarks.md and docs/img/*.png

It takes about 10 minutes and several GB of temporary data (TFLUX_BENCH_DIR chooses where)."""


def _ratio_text(r: Any) -> str:
    return f"{r.ratio:.2f}x" if r.ratio < 10 else f"{r.ratio:.0f}x"


def _si(x: float, unit: str) -> str:
    """``(1234567, "records/s")`` -> ``1.23 M records/s``; MB/s stay whole numbers."""
    if unit == "MB/s":
        return f"{x:,.0f} MB/s"
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= factor:
            return f"{x / factor:.2f} {prefix} {unit}"
    return f"{x:.0f} {unit}"


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Measure the headline ratios of docs/benchmarks.md on this machine (< 1 min).",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Where to write the temporary data (its disk is the one measured by the durable "
    "enqueue). Default: the system temp directory.",
)
@click.option(
    "--size",
    type=click.Choice(["quick", "tiny"]),
    default="quick",
    show_default=True,
    help="quick: 128 MiB scan, 2M-delta restore, 300 durable calls; tiny: a few seconds, "
    "for checking that it runs (figures are noisy).",
)
@click.option("--full", is_flag=True, help="Explain how to run the full suite (make bench).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (for machines).")
def bench(directory: Path | None, size: str, full: bool, as_json: bool) -> None:
    """Measure tflux beside its baselines and print the headline ratios.

    Three measurements, each tflux against its baseline on the same data seconds apart:

    \b
      verify-scan vs crc32fast     tflux.verify over 64 B records / one crc32fast over the bytes
      restore vs pure Python       tflux.open replaying Add, Add, Remove deltas / the same
                                   replay in pure Python (read_batch + struct + heapq)
      durable enqueue vs           store.enqueue with an fsync per call / persist-queue's
        persist-queue              SQLiteQueue.put (synchronous=FULL); without persist-queue
                                   installed: / a raw os.pwrite + os.fdatasync per call

    A ratio above 1 means tflux is faster. The targets of the project are shown beside them.
    The machine's other work moves the figures: run it twice and compare. The published
    figures and the full suite are in docs/benchmarks.md (--full tells how to run it).

    \b
    Examples:
      tflux bench                     # about 10-30 s
      tflux bench --dir /mnt/data     # measure the disk your data will live on
      tflux bench --size tiny --json  # a few seconds, machine-readable

    \b
    Exit codes: 0 measured (whether targets are met or not), 2 usage or I/O error.
    """
    if full:
        out.print(escape(_FULL_SUITE))
        return
    from tflux import bench as _bench

    with _stopwatch() as elapsed:
        if as_json:
            results = _bench.run(size, directory)
        else:
            with err.status(f"measuring ({size})...") if err.is_terminal else _nothing():
                results = _bench.run(size, directory)
    if as_json:
        _print_json(results.to_json())
        return
    table = _table(
        "headline",
        "ratio",
        "target",
        "tflux",
        "baseline",
        right=("ratio",),
        whole=("tflux", "baseline"),
        optional=("target",),
    )
    for r in results.ratios:
        target = "" if r.target is None else f">= {r.target:g}x " + ("met" if r.met else "missed")
        table.add_row(
            escape(r.name),
            _ratio_text(r),
            target,
            _si(r.tflux_rate, r.unit),
            _si(r.baseline_rate, r.unit),
        )
    out.print(table)
    for r in results.ratios:
        out.print(f"[bold]{escape(r.name)}[/]: {escape(r.tflux)} / {escape(r.baseline)}")
    out.print(
        f"\ndata in {escape(results.directory)}; done in {elapsed():.1f} s "
        f"(tflux {tflux.__version__}, size {size}). Full suite: tflux bench --full"
    )
