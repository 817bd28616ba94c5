"""``python -m benches.report``: renders the parts of the benchmark notes
(``docs/internals/benchmark-notes.md``, the lab notebook) whose JSON is given, into the page as it
stands, in one write. The benchmark page users read, ``docs/benchmarks.md``, is
``python -m benches.report.product``'s.

    python -m pytest benches --benchmark-enable --benchmark-json=.benchmarks/all.json \
        -p no:cacheprovider
    python -m benches.report .benchmarks/all.json                 # the head of the page
    python -m benches.report --restore .benchmarks/restore.json [.benchmarks/scaling.json]
    python -m benches.report --reads .benchmarks/reads.json

(any of them in one call). The head is rendered from a run of the whole suite; the restore
section from runs of ``bench_restore.py`` (its scaling group may come from a later run), the reads
section from a run of ``bench_reads.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benches.report import page, reads, restore


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benches.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "json", type=Path, nargs="?", help="pytest-benchmark JSON of the whole suite (the head)"
    )
    parser.add_argument(
        "--restore", type=Path, nargs="+", metavar="JSON", help="bench_restore.py run(s)"
    )
    parser.add_argument("--reads", type=Path, metavar="JSON", help="a bench_reads.py run")
    parser.add_argument("-o", "--output", type=Path, default=page.NOTES)
    parser.add_argument("--img-dir", type=Path, help="where the PNG plots go (default: docs/img)")
    parser.add_argument(
        "--note-file", type=Path, help="markdown to include as 'Notes on this run' (by hand)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = arguments()
    args = parser.parse_args(argv)
    if not (args.json or args.restore or args.reads):
        parser.error("nothing to render: give the suite's JSON, --restore or --reads")
    text = args.output.read_text() if args.output.exists() else ""
    if args.json:
        data, rows = page.load(args.json)
        if not rows:
            print(f"{args.json}: no benchmarks (was the run made with --benchmark-enable?)")
            return 1
        command = " ".join(["python -m benches.report", *argv])
        note = args.note_file.read_text() if args.note_file else ""
        img_dir = args.img_dir or page.ROOT / "docs" / "img"
        plots = page.make_plots(rows, img_dir, args.output)
        text = page.render(data, rows, command, note, plots, text)
    if args.restore:
        text = restore.splice_into(text, args.restore)
    if args.reads:
        text = reads.splice_into(text, args.reads)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
