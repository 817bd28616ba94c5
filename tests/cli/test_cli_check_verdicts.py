"""Issue 42 part 2: the checks' verdicts come from the core, not from parsing its text.

``Problem.reason`` says what is wrong without where (the CLI's ``_strip_location`` parsed the
core's error text for that); ``BaseReport.continuity`` is the restore's own verdict on how the
log meets the snapshot (the CLI re-derived its cases).
"""

from __future__ import annotations

import os
from pathlib import Path

import tflux
from _cli_support import flip, open_store, run_cli, segment_files, store_with_segments


def test_a_problem_says_its_reason_without_its_location(tmp_path):
    base = tmp_path / "b"
    store_with_segments(base, adds=150)
    settings = base / "taskflux.settings.json"
    settings.write_text("{bad")
    report = tflux.verify_base(base)
    (problem,) = report.problems
    assert problem.path == str(settings)
    assert str(settings) in problem.message  # the message is whole, for a reader of it alone
    assert problem.reason.startswith("invalid JSON") and str(settings) not in problem.reason
    result = run_cli("verify", base)
    line = next(x for x in result.stderr.splitlines() if "invalid JSON" in x)
    assert line.count("taskflux.settings.json") == 1, line
    settings.unlink()
    seg = segment_files(base / "data" / "log")[0]
    flip(seg, 8 + 16 + 3)
    (corrupt,) = [p for p in tflux.verify_base(base).problems if p.fatal]
    assert corrupt.reason == corrupt.message and str(seg) not in corrupt.reason


def verdict(base: Path) -> tuple[str, str]:
    """The core's verdict and the line verify prints for it."""
    report = tflux.verify_base(base)
    result = run_cli("verify", base)
    line = next((x for x in result.stdout.splitlines() if x.startswith("log ")), "")
    return report.continuity, line


def test_the_continuity_verdict_is_the_restores(tmp_path):
    fresh = tmp_path / "fresh"
    with open_store(fresh) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
    continuity, line = verdict(fresh)
    assert continuity == "from_zero" and "starts at 0 (no snapshot)" in line

    snapped = tmp_path / "snapped"
    with open_store(snapped) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
        store.snapshot()
        store.enqueue("q", 2, b"y")
    continuity, line = verdict(snapped)
    assert continuity == "continues" and "continues the snapshot" in line

    ahead = tmp_path / "ahead"
    with open_store(ahead) as store:
        store.create_queue("q")
        store.snapshot()
    snap = tflux.read_snapshot(ahead / "data" / "tflux.snapshot")
    tflux.write_snapshot(ahead / "data" / "tflux.snapshot", 100, snap.last_term, snap.queues)
    continuity, line = verdict(ahead)
    assert continuity == "snapshot_ahead" and "the log restarts at 101" in line
    with tflux.open(ahead, readonly=True):  # the restore accepts it, as the verdict says
        pass

    gap = tmp_path / "gap"
    store_with_segments(gap, adds=150)
    os.remove(segment_files(gap / "data" / "log")[0])
    assert tflux.verify_base(gap).continuity == "gap"
    assert run_cli("verify", gap).returncode == 1

    unknown = tmp_path / "unknown"
    with open_store(unknown) as store:
        store.create_queue("q")
        store.snapshot()
    flip(unknown / "data" / "tflux.snapshot", 20)
    continuity, line = verdict(unknown)
    assert continuity == "unknown" and "cannot be checked" in line
