"""Directories TaskFlux's own C# storage code wrote (spec section 11, the taskflux dialect).

They are another project's data, read from ``../shared/taskflux-csharp`` beside the checkout (or
``$TFLUX_TASKFLUX_DATA``) and copied into a temporary directory before anything opens them; the
tests skip, saying why, where they are absent. Each holds a JSON file with everything TaskFlux's
own restore sees: the tests hold every reader of tflux to it (restore, ``Log``, verify, dump),
and hold what tflux writes in the taskflux dialect to the same byte checks
(``_taskflux_bytes``, an independent plain reader).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tflux
from _taskflux_bytes import read_log, read_metadata, read_snapshot
from conftest import encode_segment

ROOT = Path(__file__).resolve().parents[2]
TASKFLUX_DATA = Path(
    os.environ.get("TFLUX_TASKFLUX_DATA") or ROOT.parent / "shared" / "taskflux-csharp"
)
FIXTURES = [
    "leader-single-segment",
    "follower-segmented",
    "snapshot-compacted",
    "snapshot-ahead-of-log",
    "torn-tail-truncated",
    "torn-tail-bad-crc",
    "after-taskflux-repair",
]
TORN = ["torn-tail-truncated", "torn-tail-bad-crc", "after-taskflux-repair"]


def real_dir(name: str, tmp_path: Path) -> Path:
    """A writable copy of the real directory ``name`` (CI's ``../shared`` is read-only)."""
    source = TASKFLUX_DATA / name
    if not source.is_dir():
        pytest.skip(
            f"TaskFlux's data directories are not at {TASKFLUX_DATA} (set TFLUX_TASKFLUX_DATA)"
        )
    base = tmp_path / name
    shutil.copytree(source, base)
    for p in [base, *base.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)
    return base


def expected(name: str) -> dict:
    return json.loads((TASKFLUX_DATA / f"{name}.json").read_text())


def contents(base: Path) -> dict[str, str]:
    """Every file and directory under ``base`` with a hash of its bytes."""
    out = {}
    for p in sorted(base.rglob("*")):
        key = str(p.relative_to(base))
        out[key] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tflux", *args], capture_output=True, text=True, timeout=120
    )


def queues_of(store: tflux.Store) -> dict[str, dict]:
    """Every queue as the JSON lists it, records in dequeue order."""
    out = {}
    for q in store.queues():
        out[q.name] = {
            "implementation": {"heap": 1, "array": 2}[q.implementation],
            "last_id": q.last_id,
            "max_queue_size": q.max_size,
            "max_payload_size": q.max_message_size,
            "priority_range": list(q.key_range) if q.key_range else None,
            "records": [(r.id, r.key, r.payload.hex()) for r in store.records(q.name)],
        }
    return out


def queues_expected(doc: dict) -> dict[str, dict]:
    """The JSON's queues; TaskFlux dequeues the smallest key first, equal keys by id."""
    out = {}
    for q in doc["queues"]:
        records = sorted(q["records"], key=lambda r: (r["key"], r["id"]))
        out[q["name"]] = {
            "implementation": q["implementation"],
            "last_id": q["last_id"],
            "max_queue_size": q["max_queue_size"],
            "max_payload_size": q["max_payload_size"],
            "priority_range": q["priority_range"],
            "records": [(r["id"], r["key"], r["payload_hex"]) for r in records],
        }
    return out


def entries_expected(doc: dict) -> list[tuple[int, int, str]]:
    return [(e["index"], e["term"], e["payload_hex"]) for e in doc["log_entries"]]


@pytest.mark.parametrize("name", FIXTURES)
def test_a_real_directory_restores_read_only_exactly_as_its_json_says(name, tmp_path):
    base = real_dir(name, tmp_path)
    doc = expected(name)
    before = contents(base)
    with tflux.open(base, readonly=True) as store:
        assert store.dialect == "taskflux"
        assert queues_of(store) == queues_expected(doc)
        assert store.term == doc["metadata"]["term"]
    meta = tflux.read_metadata(base / "data" / "tflux.metadata")
    assert (meta.term, meta.voted_for) == (doc["metadata"]["term"], doc["metadata"]["voted_for"])
    snap = tflux.read_snapshot(base / "data" / "tflux.snapshot")
    if doc["snapshot"] is None:
        assert snap is None
    else:
        assert (snap.last_index, snap.last_term) == (
            doc["snapshot"]["last_index"],
            doc["snapshot"]["last_term"],
        )
    assert contents(base) == before


@pytest.mark.parametrize("name", FIXTURES)
def test_every_log_entry_reads_back_as_the_json_lists_it(name, tmp_path):
    base = real_dir(name, tmp_path)
    doc = expected(name)
    with tflux.Log.open(base / "data" / "log", readonly=True, dialect="taskflux") as log:
        got = [(e.lsn, e.term, bytes(e.data).hex()) for e in log.entries()]
        assert log.dialect == "taskflux"
    assert got == entries_expected(doc)
    # dump --json: the same entries, decoded.
    done = cli("dump", "--json", "--raw", str(base))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(x["lsn"], x["term"], x["data"]) for x in lines] == entries_expected(doc)


@pytest.mark.parametrize("name", FIXTURES)
def test_verify_passes_every_real_directory_and_names_its_dialect(name, tmp_path):
    base = real_dir(name, tmp_path)
    report = tflux.verify_base(base)
    assert report.ok and report.dialect == "taskflux"
    torn = [p for p in report.problems if p.kind == "torn_tail"]
    assert len(torn) == (1 if name in TORN else 0)
    assert all(not p.fatal for p in report.problems)
    done = cli("verify", "--json", str(base))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["dialect"] == "taskflux"
    done = cli("inspect", "--json", str(base))
    assert done.returncode == 0 and json.loads(done.stdout)["dialect"] == "taskflux"


@pytest.mark.parametrize("name", FIXTURES)
def test_the_plain_reader_reads_every_real_directory_as_its_json_says(name, tmp_path):
    """The byte checks tflux's own taskflux output is held to (``_taskflux_bytes``) pass on
    what TaskFlux wrote: the checks are TaskFlux's, not tflux's."""
    base = real_dir(name, tmp_path)
    doc = expected(name)
    log = [(i, t, d.hex()) for i, t, d in read_log(base / "data" / "log")]
    assert log == entries_expected(doc)
    term, vote = read_metadata(base / "data" / "tflux.metadata")
    assert (term, None if vote == -1 else vote) == (
        doc["metadata"]["term"],
        doc["metadata"]["voted_for"],
    )
    snap = read_snapshot(base / "data" / "tflux.snapshot")
    if doc["snapshot"] is None:
        assert snap is None
    else:
        assert snap[:2] == (doc["snapshot"]["last_index"], doc["snapshot"]["last_term"])


@pytest.mark.parametrize("name", TORN)
def test_a_torn_fixture_loses_its_last_record_only_and_keeps_a_copy_of_it(name, tmp_path):
    """``after-taskflux-repair`` (which TaskFlux itself can no longer open: term 0 where its
    repair left the old marker) opens with its 52 entries; the cut bytes are kept aside."""
    base = real_dir(name, tmp_path)
    doc = expected(name)
    segment = base / "data" / "log" / "0000000000000000000.log"
    tail = segment.read_bytes()[2647:].rstrip(b"\0")
    with tflux.open(base) as store:
        assert store.dialect == "taskflux"
        assert queues_of(store) == queues_expected(doc)
        assert store.log_bounds[:2] == (0, 51)
        moved = [Path(p) for p in store.moved_aside]
    # The copy is in TaskFlux's temp directory, and holds the bytes the cut removed.
    assert [p.parent.name for p in moved] == ["temporary"]
    assert moved[0].read_bytes().rstrip(b"\0") == tail
    assert not (base / "data" / "temp").exists()
    # What is left is what TaskFlux reads: 52 entries, then the end marker.
    assert read_log(base / "data" / "log") == [
        (i, t, bytes.fromhex(p)) for i, t, p in entries_expected(doc)
    ]
    assert tflux.verify_base(base).problems == []


def test_a_snapshot_ahead_of_the_log_restarts_the_log_after_it(tmp_path):
    """TaskFlux names the empty tail after a snapshot install at the snapshot's index; tflux
    reads it, and a writable open starts the log at index + 1 (TaskFlux's own next open
    renames it so), keeping the old segment aside."""
    base = real_dir("snapshot-ahead-of-log", tmp_path)
    doc = expected("snapshot-ahead-of-log")
    with tflux.open(base) as store:
        assert queues_of(store) == queues_expected(doc)
        assert store.log_bounds[:2] == (31, 30)
        store.enqueue("remote", 1, b"after the install")
    names = sorted(p.name for p in (base / "data" / "log").iterdir())
    assert names == ["0000000000000000031.log"]
    assert [(i, t) for i, t, _ in read_log(base / "data" / "log")] == [(31, 2)]


@pytest.mark.parametrize("name", ["leader-single-segment", "snapshot-compacted"])
def test_tflux_appends_snapshots_and_compacts_in_taskflux_bytes(name, tmp_path):
    """A writable store on a real directory goes on in TaskFlux's bytes: what it appends, its
    snapshot and its compaction pass the same plain checks as TaskFlux's own files."""
    base = real_dir(name, tmp_path)
    with tflux.open(base) as store:
        store.create_queue("tflux", exist_ok=True)
        ids = store.enqueue_many("tflux", [(k, f"payload {k}".encode()) for k in range(20)])
        before = queues_of(store)
        store.snapshot()
        store.enqueue("tflux", -5, b"after the snapshot")
        after = queues_of(store)
        last = store.log_bounds[1]
    assert before["tflux"]["records"][0] == (ids[0], 0, b"payload 0".hex())
    index, term, _ = read_snapshot(base / "data" / "tflux.snapshot")
    assert term == 2 or term == 3
    entries = read_log(base / "data" / "log")
    assert entries[-1][0] == last and entries[0][0] <= index + 1
    assert read_metadata(base / "data" / "tflux.metadata")[0] >= term
    assert not (base / "data" / "temp").exists()
    with tflux.open(base, readonly=True) as store:
        assert store.dialect == "taskflux"
        assert queues_of(store) == after


def test_a_new_taskflux_store_writes_only_taskflux_bytes(tmp_path):
    base = tmp_path / "new"
    with tflux.open(base, dialect="taskflux") as store:
        store.create_queue("jobs", implementation="array", key_range=(0, 9), max_size=100)
        store.enqueue_many("jobs", [(k % 10, bytes([k]) * k) for k in range(50)])
        got = store.dequeue("jobs")
        store.ack(got)
        store.snapshot()
        store.enqueue("jobs", 3, b"tail")
        want = queues_of(store)
    assert read_metadata(base / "data" / "tflux.metadata") == (1, -1)
    assert read_snapshot(base / "data" / "tflux.snapshot") is not None
    log = read_log(base / "data" / "log")
    assert log and all(term == 1 for _, term, _ in log)
    assert (base / "data" / "temporary").is_dir() and not (base / "data" / "temp").exists()
    # It reopens as taskflux without being told, and restores the same.
    with tflux.open(base, readonly=True) as store:
        assert store.dialect == "taskflux" and queues_of(store) == want


def test_a_log_written_in_taskflux_reads_back_and_passes_the_plain_checks(tmp_path):
    log_dir = tmp_path / "log"
    data = [os.urandom(n) for n in (0, 1, 2, 3, 4, 5, 100, 1000, 4099)]
    with tflux.Log.open(log_dir, dialect="taskflux", soft_limit=2048, hard_limit=4096) as log:
        for term, d in enumerate(data, start=1):
            log.append(term, d)
        assert log.dialect == "taskflux" and len(log.segments) > 1
    assert read_log(log_dir) == [(i, i + 1, d) for i, d in enumerate(data)]
    with tflux.Log.open(log_dir, readonly=True) as log:
        assert log.dialect == "taskflux"
        assert [(e.term, bytes(e.data)) for e in log.entries()] == list(
            zip(range(1, 10), data, strict=True)
        )


def test_without_its_metadata_file_a_real_directory_never_opens_as_an_empty_store(tmp_path):
    """The regression: the log's 53 entries were cut to nothing (no copy) and the store opened
    empty; ``tflux verify`` then said OK. Now the log says taskflux, and the conflict between
    its terms and the absent metadata (term 1) is refused, naming it; nothing changes."""
    base = real_dir("leader-single-segment", tmp_path)
    (base / "data" / "tflux.metadata").unlink()
    before = contents(base)
    with pytest.raises(tflux.CorruptionError, match="above the current term 1 in the metadata"):
        tflux.open(base)
    with pytest.raises(tflux.CorruptionError, match="metadata"):
        tflux.open(base, readonly=True)
    assert contents(base) == before


def test_a_dialect_the_files_contradict_is_refused_and_changes_nothing(tmp_path):
    base = real_dir("follower-segmented", tmp_path)
    before = contents(base)
    with pytest.raises(tflux.DialectError, match="spec dialect was asked for"):
        tflux.open(base, dialect="spec")
    with pytest.raises(tflux.DialectError):
        tflux.Log.open(base / "data" / "log", dialect="spec")
    done = cli("verify", "--dialect", "spec", str(base))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert contents(base) == before
    # Channels exist only in the spec dialect: the log alone (no store files) is refused.
    for store_file in ("tflux.metadata", "tflux.snapshot"):
        (base / "data" / store_file).unlink(missing_ok=True)
    before = contents(base)
    with pytest.raises(tflux.DialectError, match="Int64 term"):
        tflux.Channel.open(base)
    assert contents(base) == before


def test_compression_is_refused_in_the_taskflux_dialect(tmp_path):
    base = real_dir("follower-segmented", tmp_path)
    before = contents(base)
    done = cli("compress", str(base))
    assert done.returncode == 2 and "taskflux dialect" in done.stderr, done.stderr
    with pytest.raises(tflux.DialectError, match="LogCompressSealedSegments"):
        tflux.open(base, log_compress_sealed_segments="zstd")
    assert contents(base) == before


def test_files_of_two_dialects_in_one_directory_are_an_error_naming_both(tmp_path):
    base = real_dir("snapshot-compacted", tmp_path)
    spec_metadata = tmp_path / "spec" / "data" / "tflux.metadata"
    spec_metadata.parent.mkdir(parents=True)
    tflux.write_metadata(spec_metadata, 3, 2)
    shutil.copyfile(spec_metadata, base / "data" / "tflux.metadata")
    before = contents(base)
    with pytest.raises(tflux.DialectError, match="two dialects") as raised:
        tflux.open(base)
    message = str(raised.value)
    assert "tflux.metadata" in message and ("tflux.snapshot" in message or ".log" in message)
    assert contents(base) == before


def test_a_spec_directory_written_by_hand_is_not_mistaken_for_taskflux(tmp_path):
    """The independent encoder's spec records (zlib CRC, Int32 term, padding) open as spec."""
    log_dir = tmp_path / "data" / "log"
    log_dir.mkdir(parents=True)
    (log_dir / "0000000000000000000.log").write_bytes(
        encode_segment([(1, b"C\x01q\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff\x00")])
    )
    with tflux.Log.open(log_dir, readonly=True) as log:
        assert log.last_index == 0 and log.dialect == "spec"
