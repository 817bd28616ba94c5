"""``tflux verify`` on clean, damaged and torn logs and base directories, and on the golden files
of ``tests/data``: exit codes, and the file and offset of each damage.

Driven as a user drives it: a subprocess, its output and exit code.
"""

from __future__ import annotations

import re
import struct
import zlib

import pytest
import tflux
from _cli_support import (
    EMPTY_SEGMENT,
    GOLDEN,
    MANIFEST,
    flip,
    golden_log,
    json_lines,
    known_records,
    offset_of,
    open_store,
    record_size,
    run_cli,
    sealed_log_with_known_offsets,
    segment_files,
    snapshot_of,
    store_with_segments,
    write_log,
)

# --------------------------------------------------------------------------------------------
# verify


def test_verify_clean_log_exits_0_with_a_summary(tmp_path):
    log_dir, records = sealed_log_with_known_offsets(tmp_path)
    result = run_cli("verify", log_dir)  # a raw Raft log (terms above any metadata)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(records):,} records" in result.stdout
    assert "OK" in result.stdout
    assert "error:" not in result.stderr and "warning:" not in result.stderr


def test_verify_clean_store_with_snapshot_checks_every_file(tmp_path):
    with open_store(tmp_path, log_file_soft_limit=4096) as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(1, bytes(100))] * 100)
        store.snapshot()
        snapshot_index = store.log_bounds[2]
        store.enqueue_many("jobs", [(1, bytes(100))] * 10)
    tflux.write_metadata(tmp_path / "data" / "tflux.metadata", 1)
    result = run_cli("verify", tmp_path, "--replay")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"last index {snapshot_index:,}" in result.stdout
    assert f"continues the snapshot (last index + 1 = {snapshot_index + 1:,})" in result.stdout
    assert "10 deltas replayed" in result.stdout
    assert result.stdout.rstrip().endswith("OK")


def test_verify_flipped_byte_in_sealed_segment_exits_1_naming_file_and_offset(tmp_path):
    log_dir, records = sealed_log_with_known_offsets(tmp_path)
    first = segment_files(log_dir)[0]
    bad_offset = 8 + record_size(records[0][1]) + record_size(records[1][1])  # third record
    raw = flip(first, bad_offset + 16 + 100)  # a data byte: the checksum no longer matches

    result = run_cli("verify", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{first.name} at offset {bad_offset}" in result.stderr
    assert "CORRUPT" in result.stdout
    assert first.read_bytes() == raw  # verify never writes


def test_verify_corrupt_snapshot_exits_1_naming_the_file_and_offset(tmp_path):
    with open_store(tmp_path) as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(1, b"payload")] * 10)
        store.snapshot()
    snapshot = tmp_path / "data" / "tflux.snapshot"
    # Marker 4, last index 4, last term 4, state length 4: byte 20 is in the state bytes.
    flip(snapshot, 20)
    with pytest.raises(tflux.CorruptionError) as error:
        tflux.read_snapshot(snapshot)
    before = snapshot_of(tmp_path)

    result = run_cli("verify", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"error: corruption in {snapshot} at offset {error.value.offset}:" in result.stderr
    assert snapshot_of(tmp_path) == before
    # Issue 30, item 17: no snapshot line, and a log line saying "(no snapshot)". The report says
    # the snapshot is corrupt and what the user can do.
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("snapshot")]
    assert "CORRUPT" in line and "move data/tflux.snapshot aside" in line
    assert "no snapshot" not in result.stdout
    # Issue 30, item 23: "verified X:" on a corrupt base, and "fix the problems above first"
    # printed above the problems.
    assert result.stdout.startswith("checked ") and "verified" not in result.stdout
    replay = run_cli("verify", tmp_path, "--replay")
    assert "fix the problems above" not in replay.stdout


def test_verify_corrupt_metadata_exits_1_naming_the_file_and_offset(tmp_path):
    store_with_segments(tmp_path, adds=3)
    metadata = tmp_path / "data" / "tflux.metadata"
    tflux.write_metadata(metadata, 4, 2)
    raw = bytearray(metadata.read_bytes())
    assert len(raw) == 20 and raw[:4] == bytes.fromhex("5a6ea012")
    raw[8:12] = struct.pack(">i", 5)  # the term, under the checksum
    metadata.write_bytes(bytes(raw))

    result = run_cli("verify", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(
        rf"error: corruption in {re.escape(str(metadata))} at offset \d+:", result.stderr
    )
    assert metadata.read_bytes() == bytes(raw)


@pytest.mark.parametrize("with_snapshot", [True, False])
def test_verify_gap_between_snapshot_and_log_exits_1(tmp_path, with_snapshot):
    with open_store(tmp_path, log_file_soft_limit=4096) as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(1, bytes(100))] * 40)
        if with_snapshot:
            store.snapshot()
            snapshot_index = store.log_bounds[2]
        for _ in range(100):
            store.enqueue("jobs", 1, bytes(100))
    segments = segment_files(tmp_path / "data" / "log")
    # Remove segments until the log starts after where the snapshot (or LSN 0) leaves off.
    limit = snapshot_index + 1 if with_snapshot else 0
    while int(segments[0].name[:19]) <= limit:
        segments.pop(0).unlink()
    first = segments[0]

    result = run_cli("verify", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"error: gap in {first}" in result.stderr
    start = int(first.name[:19])
    assert f"the log starts at LSN {start:,}" in result.stderr
    if with_snapshot:
        assert f"the snapshot ends at LSN {snapshot_index:,}" in result.stderr
    else:
        assert "no snapshot" in result.stderr


def test_verify_replay_names_the_lsn_file_and_offset_of_a_bad_delta(tmp_path):
    records = store_with_segments(tmp_path, adds=100)
    log_dir = tmp_path / "data" / "log"
    bad = tflux.encode_delta(tflux.Delta.remove_record("q", 999))  # no such record
    with tflux.Log.open(log_dir, sync="never") as log:
        bad_lsn = log.append(1, bad)
        log.append(1, tflux.encode_delta(tflux.Delta.add_record("q", 1, b"after")))
    records.append((1, bad))
    segment, offset = offset_of(log_dir, bad_lsn, records)

    files_only = run_cli("verify", tmp_path, "--no-replay")
    assert files_only.returncode == 0, files_only.stdout  # every byte is intact
    assert "the state was not rebuilt" in files_only.stdout
    # tflux.open refuses the directory, so plain verify (which replays) says so too.
    result = run_cli("verify", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"error: replay error in {segment} at offset {offset}:" in result.stderr
    assert f"LSN {bad_lsn}" in result.stderr
    assert "CORRUPT" in result.stdout


def test_verify_entry_term_above_the_metadata_term_exits_1(tmp_path):
    store_with_segments(tmp_path, adds=3)
    tflux.write_metadata(tmp_path / "data" / "tflux.metadata", 1)
    with tflux.Log.open(tmp_path / "data" / "log", sync="never") as log:
        lsn = log.append(2, tflux.encode_delta(tflux.Delta.add_record("q", 1, b"x")))
    result = run_cli("verify", tmp_path)
    assert result.returncode == 1, result.stdout
    assert f"entry {lsn} has term 2, above the current term 1" in result.stderr


def test_verify_torn_tail_exits_0_with_a_warning_and_changes_nothing(tmp_path):
    records = known_records()
    log_dir = write_log(tmp_path, records, preallocate=False)
    (segment,) = segment_files(log_dir)
    raw = segment.read_bytes()
    used = 8 + sum(record_size(data) for _, data in records)
    assert raw[used : used + 4] == b"\0\0\0\0"  # the end marker
    last_start = used - record_size(records[-1][1])
    torn = raw[: used - 5]  # a crash in the middle of the last record's data
    segment.write_bytes(torn)

    result = run_cli("verify", log_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"warning: torn tail in {segment} at offset {last_start}" in result.stderr
    assert segment.read_bytes() == torn

    rows = json_lines(run_cli("dump", tmp_path, "--raw", "--json").stdout)
    assert [row["lsn"] for row in rows] == list(range(len(records) - 1))
    assert segment.read_bytes() == torn  # dump opens read-only


@pytest.mark.parametrize("verb", ["verify", "dump", "replay", "inspect", "repair"])
def test_missing_directory_is_a_clear_error(tmp_path, verb):
    missing = tmp_path / "no-such-base"
    result = run_cli(verb, missing)
    assert result.returncode == 2
    assert result.stderr.startswith("error:")
    assert str(missing) in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not missing.exists()


@pytest.mark.parametrize("verb", ["verify", "dump", "replay", "inspect"])
def test_directory_without_segments_or_a_plain_file_is_a_clear_error(tmp_path, verb):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("not a log\n")
    for path in (tmp_path / "empty", tmp_path / "file.txt"):
        result = run_cli(verb, path)
        assert result.returncode == 2
        assert result.stderr.startswith("error:")
        assert str(path) in result.stderr
    assert list((tmp_path / "empty").iterdir()) == []


def test_replay_and_inspect_need_a_base_directory_not_a_bare_log(tmp_path):
    log_dir = write_log(tmp_path / "raft", known_records())
    loose = tmp_path / "loose"
    log_dir.rename(loose)
    for verb in ("replay", "inspect"):
        result = run_cli(verb, loose)
        assert result.returncode == 2
        assert "not a base directory" in result.stderr


def test_bad_settings_file_is_a_warning_for_a_read_only_look(tmp_path):
    store_with_segments(tmp_path, adds=3)
    (tmp_path / "taskflux.settings.json").write_text('{"LogFileSoftLimt": 1}')
    for verb in ("replay", "inspect"):
        result = run_cli(verb, tmp_path)
        assert result.returncode == 0
        (line,) = result.stderr.splitlines()
        assert line.startswith("warning:") and "LogFileSoftLimt" in line


# --------------------------------------------------------------------------------------------
# golden files (written from the spec by an independent encoder, see tests/data/README.md)


@pytest.mark.parametrize("golden", ["0000000000000000000.log", "preallocated_4096.log"])
def test_dump_of_a_golden_segment_matches_the_manifest(tmp_path, golden):
    golden_log(tmp_path, {"0000000000000000000.log": (GOLDEN / golden).read_bytes()})
    result = run_cli("dump", tmp_path, "--raw", "--json")
    assert result.returncode == 0, result.stderr
    rows = json_lines(result.stdout)
    expected = MANIFEST[golden]["records"]
    assert [(r["lsn"], r["term"], r["data"]) for r in rows] == [
        (r["lsn"], r["term"], r["data_hex"]) for r in expected
    ]
    assert [r["crc"] for r in rows] == [zlib.crc32(bytes.fromhex(r["data_hex"])) for r in expected]


def test_verify_golden_torn_tail_warns_at_the_cut_offset(tmp_path):
    log_dir = golden_log(
        tmp_path, {"0000000000000000000.log": (GOLDEN / "torn_tail.log").read_bytes()}
    )
    result = run_cli("verify", log_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    offset = MANIFEST["torn_tail.log"]["cut_at_offset"]
    assert f"0000000000000000000.log at offset {offset}" in result.stderr
    assert "warning" in result.stderr


def test_verify_golden_bad_checksum_in_a_sealed_segment_is_fatal(tmp_path):
    golden_log(
        tmp_path,
        {
            "0000000000000000000.log": (GOLDEN / "bad_crc_tail.log").read_bytes(),
            "0000000000000000003.log": EMPTY_SEGMENT,
        },
    )
    result = run_cli("verify", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    offset = MANIFEST["bad_crc_tail.log"]["bad_record_offset"]
    assert f"0000000000000000000.log at offset {offset}" in result.stderr
