"""``tflux replay`` and ``tflux inspect``: a base directory's queues, settings, metadata, snapshot
and segments.

Driven as a user drives it: a subprocess, its output and exit code.
"""

from __future__ import annotations

import json
import re

import tflux
from _cli_support import flip, offset_of, open_store, run_cli, segment_files, store_with_segments

# --------------------------------------------------------------------------------------------
# replay


def test_replay_json_round_trips_the_queues_written_through_the_store(tmp_path):
    with open_store(tmp_path, log_file_soft_limit=4096) as store:
        store.create_queue("jobs", max_size=100, max_message_size=64)
        store.create_queue("slots", implementation="array", key_range=(-5, 5))
        store.enqueue_many("jobs", [(i % 3, b"job %d" % i) for i in range(40)])
        store.enqueue_many("slots", [(i % 11 - 5, b"slot") for i in range(25)])
        for _ in range(7):
            store.ack(store.dequeue("jobs", timeout=0))
        store.nack(store.dequeue("slots", timeout=0))  # back: nothing changes
        store.snapshot()
        snapshot_index = store.log_bounds[2]
        store.enqueue("", 9, b"default")
        for _ in range(3):
            store.ack(store.dequeue("slots", timeout=0))
        store.dequeue("jobs", timeout=0)  # in flight at close: back after the restore
        last_lsn = store.log_bounds[1]

    result = run_cli("replay", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    restored = json.loads(result.stdout)
    assert restored["snapshot_index"] == snapshot_index
    assert restored["replayed"] == last_lsn - snapshot_index == 4
    assert restored["queues"] == [
        {
            "name": "",
            "implementation": "heap",
            "count": 1,
            "in_flight": 0,
            "last_id": 1,
            "max_size": None,
            "max_message_size": None,
            "key_range": None,
        },
        {
            "name": "jobs",
            "implementation": "heap",
            "count": 33,
            "in_flight": 0,
            "last_id": 40,
            "max_size": 100,
            "max_message_size": 64,
            "key_range": None,
        },
        {
            "name": "slots",
            "implementation": "array",
            "count": 22,
            "in_flight": 0,
            "last_id": 25,
            "max_size": None,
            "max_message_size": None,
            "key_range": [-5, 5],
        },
    ]

    text = run_cli("replay", tmp_path)
    assert text.returncode == 0
    assert f"snapshot at LSN {snapshot_index}" in text.stdout
    assert re.search(r"slots\s+array\s+-5\.\.5\s+22\s", text.stdout), text.stdout


def test_replay_reads_while_a_writer_holds_the_directory(tmp_path):
    with open_store(tmp_path) as store:
        store.create_queue("live")
        store.enqueue_many("live", [(1, b"x")] * 5)
        result = run_cli("replay", tmp_path, "--json")
        assert result.returncode == 0, result.stderr
        (live,) = (q for q in json.loads(result.stdout)["queues"] if q["name"] == "live")
        assert live["count"] == 5
        store.enqueue("live", 1, b"still writable")


def test_replay_of_an_undecodable_delta_exits_1_naming_the_lsn(tmp_path):
    records = store_with_segments(tmp_path, adds=10)
    with tflux.Log.open(tmp_path / "data" / "log", sync="never") as log:
        bad_lsn = log.append(1, b"Zgarbage")
    result = run_cli("replay", tmp_path)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("error:") and f"LSN {bad_lsn}" in line
    segment, offset = offset_of(tmp_path / "data" / "log", bad_lsn, [*records, (1, b"")])
    assert segment.name in line and f"offset {offset}" in line


def test_replay_names_the_offset_of_a_bad_delta_in_a_taskflux_log(tmp_path):
    """The record's offset comes from the core's framing walk in the log's own dialect: a
    taskflux record has a 20-byte header and no padding (spec section 11), so a walker of the
    spec framing (16 bytes, padded to 4) names the wrong byte."""
    with tflux.open(tmp_path, dialect="taskflux", share=False) as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(i, b"m" * (i % 7 + 1)) for i in range(12)])
    log_dir = tmp_path / "data" / "log"
    with tflux.Log.open(log_dir, sync="never", dialect="taskflux") as log:
        bad_lsn = log.append(1, b"Zgarbage")
        (segment,) = [s for s in log.segments if s.start_lsn <= bad_lsn <= s.last_lsn]
        before = log.read(segment.start_lsn)[: bad_lsn - segment.start_lsn]
    offset = 8 + sum(20 + len(entry.data) for entry in before)
    result = run_cli("replay", tmp_path)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert f"LSN {bad_lsn}" in line and f"offset {offset}" in line, line


# --------------------------------------------------------------------------------------------
# inspect


def test_inspect_shows_settings_metadata_snapshot_and_segments(tmp_path):
    (tmp_path / "taskflux.settings.json").write_text('{"LogFileSoftLimit": 5000}')
    with open_store(tmp_path, log_file_soft_limit=5000) as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(1, bytes(100))] * 120)
        store.ack(store.dequeue("jobs", timeout=0))
        store.snapshot()
        snapshot_index = store.log_bounds[2]
        store.enqueue_many("jobs", [(2, bytes(100))] * 80)
    tflux.write_metadata(tmp_path / "data" / "tflux.metadata", 1, 3)
    segments = segment_files(tmp_path / "data" / "log")
    assert snapshot_index > 0 and len(segments) >= 2

    result = run_cli("inspect", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"last index {snapshot_index:,}" in result.stdout
    assert "voted for 3" in result.stdout
    assert re.search(r"LogFileSoftLimit\s+5000 \*", result.stdout), result.stdout
    assert re.search(r"SnapshotCreationSegmentsThreshold\s+5\n", result.stdout)  # the default
    for segment in segments:
        assert segment.name in result.stdout

    info = json.loads(run_cli("inspect", tmp_path, "--json").stdout)
    assert info["snapshot"]["last_index"] == snapshot_index
    records = {q["name"]: q["records"] for q in info["snapshot"]["queues"]}
    assert records == {"": 0, "jobs": 119}
    assert info["settings"]["LogFileSoftLimit"] == 5000
    assert info["settings_file"] == {"LogFileSoftLimit": 5000}
    assert info["metadata"] == {"term": 1, "voted_for": 3}
    assert [s["name"] for s in info["segments"]] == [p.name for p in segments]
    assert info["segments"][-1]["last_lsn"] == snapshot_index + 80
    assert info["problems"] == []


def test_inspect_counts_the_snapshot_in_the_core_and_never_reads_it_into_python(
    tmp_path, monkeypatch
):
    """Issue 30, item 21: inspect read the whole snapshot into one Python object per record
    (2.8 GB and 7-12 s for 8M records) to count them. The core counts them while verify
    decodes the file; every field shown equals what ``read_snapshot`` holds."""
    from click.testing import CliRunner
    from tflux.cli import cli

    with open_store(tmp_path) as store:
        store.create_queue("heap", "heap", max_size=500, key_range=(-5, 5))
        store.create_queue("array", "array", max_message_size=64, key_range=(0, 50))
        store.enqueue_many("heap", [(k % 11 - 5, bytes([k % 7])) for k in range(300)])
        store.enqueue_many("array", [(k, b"x") for k in range(40)])
        store.ack(store.dequeue("heap", timeout=0))
        store.snapshot()
    snap = tflux.read_snapshot(tmp_path / "data" / "tflux.snapshot")
    want = {
        q.name: {
            "records": len(q.records),
            "last_id": q.last_id,
            "max_size": q.max_queue_size,
            "max_message_size": q.max_message_size,
            "key_range": list(q.key_range) if q.key_range is not None else None,
        }
        for q in snap.queues
    }

    def refuse(*args, **kwargs):
        raise AssertionError("inspect read the snapshot into Python objects")

    monkeypatch.setattr(tflux, "read_snapshot", refuse)
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    got = {
        q["name"]: {k: q[k] for k in ("records", "last_id", "max_size", "max_message_size")}
        | {"key_range": q["key_range"]}
        for q in json.loads(result.output)["snapshot"]["queues"]
    }
    assert got == want and got["heap"]["records"] == 299
    assert list(got) == sorted(got)  # by name, as before


def test_inspect_of_a_corrupt_snapshot_still_shows_the_rest_and_exits_1(tmp_path):
    with open_store(tmp_path) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 1, b"x")
        store.snapshot()
    snapshot = tmp_path / "data" / "tflux.snapshot"
    flip(snapshot, 20)
    result = run_cli("inspect", tmp_path)
    assert result.returncode == 1
    assert "tflux.snapshot at offset" in result.stderr
    assert "LogFileSoftLimit" in result.stdout
    assert segment_files(tmp_path / "data" / "log")[0].name in result.stdout
