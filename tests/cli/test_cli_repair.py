"""``tflux repair``: damaged files moved aside into ``data/temp`` (with ``--yes`` or a terminal's
answer), torn tails kept as copies, clean and locked directories left alone.

Driven as a user drives it: a subprocess, its output and exit code.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from _cli_support import (
    flip,
    offset_of,
    open_store,
    run_cli,
    segment_files,
    snapshot_of,
    store_with_segments,
)

# --------------------------------------------------------------------------------------------
# repair


def corrupt_sealed_store(base: Path) -> tuple[Path, int, int, dict[str, bytes]]:
    """A store whose second segment has a bad checksum in its third record.

    Returns (that segment, the bad record's offset, its LSN, the segment files' bytes).
    """
    records = store_with_segments(base)
    log_dir = base / "data" / "log"
    segments = segment_files(log_dir)
    assert len(segments) >= 4
    bad = segments[1]
    bad_lsn = int(bad.name[:19]) + 2
    _, offset = offset_of(log_dir, bad_lsn, records)
    flip(bad, offset + 16 + 50)
    return bad, offset, bad_lsn, {p.name: p.read_bytes() for p in segments}


def test_repair_yes_moves_files_into_temp_and_the_directory_verifies_and_opens(tmp_path):
    bad, offset, bad_lsn, before = corrupt_sealed_store(tmp_path)
    log_dir, temp = tmp_path / "data" / "log", tmp_path / "data" / "temp"
    later = [name for name in before if name > bad.name]

    result = run_cli("repair", tmp_path, "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{bad.name} at offset {offset}" in result.stdout
    # Nothing deleted: every later segment is in data/temp, byte for byte, the cut one as .orig.
    moved = {p.name: p.read_bytes() for p in temp.iterdir()}
    for name in later:
        (copy,) = (moved[m] for m in moved if m.endswith("-" + name))
        assert copy == before[name]
        assert not (log_dir / name).exists()
    (original,) = (moved[m] for m in moved if m.endswith(bad.name + ".orig"))
    assert original == before[bad.name]
    for path in temp.iterdir():
        assert str(path) in result.stdout  # the recovery report lists the new paths
    assert [p.name for p in segment_files(log_dir)] == [n for n in before if n <= bad.name]

    assert run_cli("verify", tmp_path, "--replay").returncode == 0
    with open_store(tmp_path) as store:
        (q,) = (q for q in store.queues() if q.name == "q")
        assert q.count == bad_lsn - 1  # LSN 0 is the CreateQueue; everything before the cut
        store.enqueue("q", 1, b"writable again")


def test_repair_without_yes_and_without_a_terminal_refuses_and_changes_nothing(tmp_path):
    corrupt_sealed_store(tmp_path)
    before = snapshot_of(tmp_path)
    result = run_cli("repair", tmp_path)  # stdin is /dev/null
    assert result.returncode == 2
    line = result.stderr.splitlines()[-1]  # after the findings, which go to stderr too
    assert line.startswith("error:") and "--yes" in line
    assert "move" in result.stdout  # the plan is shown all the same
    assert snapshot_of(tmp_path) == before


def test_repair_asks_on_a_terminal_and_no_changes_nothing(tmp_path):
    corrupt_sealed_store(tmp_path)
    before = snapshot_of(tmp_path)
    primary, secondary = os.openpty()
    try:
        os.write(primary, b"n\n")
        result = run_cli("repair", tmp_path, stdin=secondary)
    finally:
        os.close(primary)
        os.close(secondary)
    assert result.returncode == 1
    assert "Repair now?" in result.stderr
    assert "nothing changed" in result.stdout
    assert snapshot_of(tmp_path) == before


def test_repair_of_a_torn_tail_keeps_a_copy_of_the_segment(tmp_path):
    records = store_with_segments(tmp_path, adds=20)
    log_dir = tmp_path / "data" / "log"
    (segment,) = segment_files(log_dir)
    _, offset = offset_of(log_dir, len(records) - 1, records)
    raw = flip(segment, offset + 20)  # in the last record: a torn tail, only a warning
    assert run_cli("verify", tmp_path).returncode == 0

    result = run_cli("repair", tmp_path, "-y")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{segment.name} at offset {offset}" in result.stdout
    (copy,) = (tmp_path / "data" / "temp").iterdir()
    assert copy.name.endswith(segment.name + ".orig") and copy.read_bytes() == raw
    verified = run_cli("verify", tmp_path, "--replay")
    assert verified.returncode == 0 and "warning" not in verified.stdout


def test_repair_of_a_clean_directory_does_nothing(tmp_path):
    store_with_segments(tmp_path, adds=20)
    before = snapshot_of(tmp_path)
    result = run_cli("repair", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nothing to repair" in result.stdout
    assert snapshot_of(tmp_path) == before


def test_repair_leaves_a_corrupt_snapshot_alone_and_exits_1(tmp_path):
    with open_store(tmp_path) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 1, b"x")
        store.snapshot()
    flip(tmp_path / "data" / "tflux.snapshot", 20)
    before = snapshot_of(tmp_path)
    result = run_cli("repair", tmp_path, "--yes")
    assert result.returncode == 1
    assert "tflux.snapshot at offset" in result.stderr
    assert snapshot_of(tmp_path) == before


def test_repair_of_a_locked_directory_is_a_usage_error(tmp_path):
    corrupt_sealed_store(tmp_path)
    before = snapshot_of(tmp_path)
    # The writer lock is an flock on the log directory (what a running store holds).
    fd = os.open(tmp_path / "data" / "log", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = run_cli("repair", tmp_path, "--yes")
    finally:
        os.close(fd)
    assert result.returncode == 2
    line = result.stderr.splitlines()[-1]  # after the findings
    assert line.startswith("error:")
    assert snapshot_of(tmp_path) == before
