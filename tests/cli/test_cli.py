"""The ``tflux`` command line, driven as a user drives it: a subprocess, its output and exit code.

Base directories with known contents are written through ``tflux.open`` (the Store) and raw logs
through ``tflux.Log``; then they are damaged byte by byte where the spec says each structure lives.
Offsets and delta bytes the CLI must report are computed here from the spec (sections 3 and 6)
with ``struct``, not taken from the CLI.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import tflux

SEGMENT_SUFFIX = ".log"
GOLDEN = Path(__file__).parent.parent / "data"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
EMPTY_SEGMENT = bytes.fromhex("1276AD550000000100000000")  # header, then the end marker
VERBS = [
    "demo", "replay", "inspect", "dump", "verify", "repair", "bench", "compress", "export",
    "convert",
]  # fmt: skip
DIALECT_VERBS = ["replay", "inspect", "dump", "verify", "repair", "compress", "export", "convert"]


def run_cli(
    *args: str | Path, env: dict[str, str] | None = None, stdin=subprocess.DEVNULL
) -> subprocess.CompletedProcess:
    """Run ``python -m tflux.cli ARGS``; never a traceback, whatever the exit code."""
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    environ.update(env or {})
    result = subprocess.run(
        [sys.executable, "-m", "tflux.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
        stdin=stdin,
        timeout=300,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout
    return result


def record_size(data: bytes) -> int:
    """Bytes a record occupies in a segment (spec section 3): header, data, padding to 4."""
    return 16 + len(data) + (-len(data)) % 4


def known_records() -> list[tuple[int, bytes]]:
    """Terms rising, lengths covering every padding class, empty and binary data."""
    records = [(1, b""), (1, b"a"), (1, b"ab"), (1, b"abc"), (1, b"abcd"), (2, bytes(range(256)))]
    records += [(2, b"\x00\xff" * 17), (3, "h\u00e9llo w\u00f6rld".encode())]
    records += [(3 + i // 10, bytes([i]) * (i * 7 % 61)) for i in range(40)]
    return records


def write_log(
    base: Path,
    records: list[tuple[int, bytes]],
    *,
    soft_limit: int = 16 << 20,
    preallocate: bool = True,
) -> Path:
    """Append and commit ``records`` one by one into ``base/data/log``; returns the log dir."""
    log_dir = base / "data" / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    with tflux.Log.open(
        log_dir,
        soft_limit=soft_limit,
        hard_limit=max(soft_limit, 32 << 20),
        preallocate=preallocate,
        sync="never",
    ) as log:
        for term, data in records:
            log.commit(log.append(term, data))
    return log_dir


def golden_log(base: Path, segments: dict[str, bytes]) -> Path:
    """``base/data/log`` holding the given segment files (name -> bytes)."""
    log_dir = base / "data" / "log"
    log_dir.mkdir(parents=True)
    for name, raw in segments.items():
        (log_dir / name).write_bytes(raw)
    return log_dir


def segment_files(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.name.endswith(SEGMENT_SUFFIX))


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def flip(path: Path, offset: int) -> bytes:
    """Flip one bit of the byte at ``offset``; returns the file's new bytes."""
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))
    return bytes(raw)


def snapshot_of(base: Path) -> dict[str, bytes]:
    """Every file under ``base`` (relative path -> bytes), to prove a command changed nothing."""
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def open_store(base: Path, **settings) -> tflux.Store:
    settings.setdefault("log_sync_policy", "never")
    settings.setdefault("snapshot_creation_segments_threshold", 0)
    return tflux.open(base, **settings)


def store_with_segments(base: Path, adds: int = 150) -> list[tuple[int, bytes]]:
    """A base directory of several 4 KiB segments: CreateQueue "q", then ``adds`` AddRecords.

    Returns the log's (term, data) in LSN order, read back for computing offsets.
    """
    with open_store(base, log_file_soft_limit=4096, log_file_hard_limit=8192) as store:
        store.create_queue("q")
        for i in range(adds):
            store.enqueue("q", i % 7, bytes([65 + i % 26]) * 100)
    with tflux.Log.open(base / "data" / "log", readonly=True) as log:
        return [(e.term, e.data) for e in log.entries()]


def offset_of(log_dir: Path, lsn: int, records: list[tuple[int, bytes]]) -> tuple[Path, int]:
    """The segment holding ``lsn`` and the byte offset of its record (spec section 3 framing)."""
    segments = segment_files(log_dir)
    starts = [int(p.name[:19]) for p in segments]
    index = max(i for i, start in enumerate(starts) if start <= lsn)
    offset = 8 + sum(record_size(data) for _, data in records[starts[index] : lsn])
    return segments[index], offset


# Independent decoder of the deltas (spec section 6), for checking what the CLI prints.


def parse_delta(data: bytes) -> dict:
    """One delta's fields; asserts it consumes its bytes exactly."""
    kind, name_length = chr(data[0]), data[1]
    name, rest = data[2 : 2 + name_length], data[2 + name_length :]
    assert all(0x21 <= c <= 0x7E for c in name)
    fields: dict = {"queue": name.decode()}
    if kind == "C":
        implementation, max_size, max_message, has_range = struct.unpack_from(">iiiB", rest)
        fields.update(kind="create_queue", implementation=implementation)
        fields.update(max_size=max_size, max_message_size=max_message)
        if has_range:
            fields["key_range"] = list(struct.unpack_from(">qq", rest, 13))
        assert len(rest) == 13 + 16 * has_range
    elif kind == "A":
        key, length = struct.unpack_from(">qi", rest)
        assert len(rest) == 12 + length
        fields.update(kind="add_record", key=key, message=rest[12:])
    elif kind == "R":
        (record_id,) = struct.unpack(">Q", rest)
        fields.update(kind="remove_record", record_id=record_id)
    elif kind == "D":
        assert rest == b""
        fields.update(kind="delete_queue")
    else:
        raise AssertionError(f"unexpected delta kind {kind!r}")
    return fields


# --------------------------------------------------------------------------------------------
# demo


def demo_counts(stdout: str) -> dict[str, int]:
    """The numbers of deltas the demo says it wrote, by kind."""
    counts = {}
    for kind in ("CreateQueue", "AddRecord", "RemoveRecord"):
        match = re.search(rf"([\d,]+) {kind}", stdout)
        assert match, stdout
        counts[kind] = int(match.group(1).replace(",", ""))
    return counts


def test_demo_writes_a_base_directory_through_the_store_that_restores_and_verifies(tmp_path):
    base = tmp_path / "sample"
    result = run_cli("demo", "--records", 20000, "--dir", base)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "20,000" in result.stdout
    assert str(base) in result.stdout
    assert "LogSyncPolicy=never" in result.stdout
    assert "OK" in result.stdout and "error" not in result.stdout

    # What the demo says it wrote is what the directory holds, checked through other verbs.
    counts = demo_counts(result.stdout)
    assert sum(counts.values()) == 20000
    assert counts["CreateQueue"] == 3 and counts["RemoveRecord"] > 0
    replayed = run_cli("replay", base, "--json")
    assert replayed.returncode == 0, replayed.stderr
    queues = {q["name"]: q for q in json.loads(replayed.stdout)["queues"]}
    assert set(queues) == {"", "emails", "reports", "thumbnails"}
    assert queues["thumbnails"]["implementation"] == "array"
    assert queues["thumbnails"]["key_range"] == [0, 99]
    assert queues["emails"]["implementation"] == "heap"
    assert sum(q["last_id"] for q in queues.values()) == counts["AddRecord"]
    assert sum(q["count"] for q in queues.values()) == counts["AddRecord"] - counts["RemoveRecord"]

    # A manual snapshot, then an automatic one: the file holds the later one, the log after it.
    match = re.search(r"manual at LSN ([\d,]+); 1 automatic one at LSN ([\d,]+)", result.stdout)
    assert match, result.stdout
    manual, automatic = (int(g.replace(",", "")) for g in match.groups())
    snapshot = tflux.read_snapshot(base / "data" / "tflux.snapshot")
    assert manual < automatic == snapshot.last_index < 19999
    segments = segment_files(base / "data" / "log")
    assert len(segments) >= 3
    assert int(segments[0].name[:19]) <= snapshot.last_index + 1
    for segment in segments:
        assert segment.name in result.stdout

    rows = json_lines(run_cli("dump", base, "--raw", "--json").stdout)
    assert rows[-1]["lsn"] == 19999  # exactly --records deltas
    assert [row["lsn"] for row in rows] == list(range(rows[0]["lsn"], 20000))
    kinds = {parse_delta(bytes.fromhex(row["data"]))["kind"] for row in rows}
    assert kinds == {"add_record", "remove_record"}
    assert run_cli("verify", base, "--replay").returncode == 0


def test_demo_deletes_its_temporary_directory_unless_kept(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {"TMPDIR": str(scratch)}

    assert run_cli("demo", "--records", 3000, env=env).returncode == 0
    assert list(scratch.iterdir()) == []

    kept = run_cli("demo", "--records", 3000, "--keep", env=env)
    assert kept.returncode == 0
    (left,) = scratch.iterdir()
    assert str(left) in kept.stdout
    assert run_cli("verify", left, "--replay").returncode == 0


def test_demo_refuses_a_directory_that_already_holds_a_log(tmp_path):
    write_log(tmp_path, known_records())
    before = snapshot_of(tmp_path)
    result = run_cli("demo", "--records", 100, "--dir", tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error:")
    assert snapshot_of(tmp_path) == before


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


# --------------------------------------------------------------------------------------------
# dump


def test_dump_decodes_every_kind_of_delta(tmp_path):
    message = b'say "hi"\\ \x00\xff'
    with open_store(tmp_path) as store:
        store.create_queue("jobs", "array", max_size=5, max_message_size=100, key_range=(-5, 5))
        store.enqueue("jobs", -3, message)
        store.enqueue("", 7, b"x" * 100)
        store.ack(store.dequeue("jobs", timeout=0))
        store.create_queue("tmp")
        store.delete_queue("tmp")

    result = run_cli("dump", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    assert json_lines(result.stdout) == [
        {
            "lsn": 0,
            "term": 1,
            "kind": "create_queue",
            "queue": "jobs",
            "implementation": "array",
            "max_size": 5,
            "max_message_size": 100,
            "key_range": [-5, 5],
        },
        {
            "lsn": 1,
            "term": 1,
            "kind": "add_record",
            "queue": "jobs",
            "key": -3,
            "message_length": len(message),
            "message": 'say "hi"\\\\ \\x00\\xff',
            "message_b64": base64.b64encode(message).decode(),
        },
        {
            "lsn": 2,
            "term": 1,
            "kind": "add_record",
            "queue": "",
            "key": 7,
            "message_length": 100,
            "message": "x" * 32 + "...",
            "message_b64": base64.b64encode(b"x" * 100).decode(),
        },
        {"lsn": 3, "term": 1, "kind": "remove_record", "queue": "jobs", "record_id": 1},
        {
            "lsn": 4,
            "term": 1,
            "kind": "create_queue",
            "queue": "tmp",
            "implementation": "heap",
            "max_size": None,
            "max_message_size": None,
            "key_range": None,
        },
        {"lsn": 5, "term": 1, "kind": "delete_queue", "queue": "tmp"},
    ]

    lines = run_cli("dump", tmp_path).stdout.splitlines()
    assert lines[0] == (
        'lsn=0 term=1 kind=create_queue queue="jobs" implementation=array max_size=5 '
        "max_message_size=100 key_range=-5..5"
    )
    assert lines[1] == (
        f'lsn=1 term=1 kind=add_record queue="jobs" key=-3 message_length={len(message)} '
        'message="say \\"hi\\"\\\\ \\x00\\xff"'
    )
    assert lines[3] == 'lsn=3 term=1 kind=remove_record queue="jobs" record_id=1'
    assert lines[5] == 'lsn=5 term=1 kind=delete_queue queue="tmp"'


def test_dump_decodes_the_golden_deltas(tmp_path):
    golden = json.loads((GOLDEN / "deltas.json").read_text())
    names = list(golden)
    write_log(tmp_path, [(1, bytes.fromhex(golden[name]["hex"])) for name in names])
    result = run_cli("dump", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    for row, name in zip(json_lines(result.stdout), names, strict=True):
        want = golden[name]
        assert row["queue"] == want["queue"], name
        if want["kind"] == "C":
            implementation = {1: "heap", 2: "array"}[want["implementation"]]
            assert row["implementation"] == implementation
            limits = [
                None if v == -1 else v for v in (want["max_queue_size"], want["max_message_size"])
            ]
            assert [row["max_size"], row["max_message_size"]] == limits
            assert row["key_range"] == want["key_range"]
        elif want["kind"] == "A":
            message = bytes.fromhex(want["message_hex"])
            assert (row["key"], row["message_length"]) == (want["key"], len(message))
        elif want["kind"] == "R":
            assert row["record_id"] == want["record_id"]
        assert row["kind"] == parse_delta(bytes.fromhex(want["hex"]))["kind"]


def test_dump_shows_undecodable_data_as_such_and_exits_1_after_printing_everything(tmp_path):
    good = tflux.encode_delta(tflux.Delta.create_queue("jobs"))
    write_log(tmp_path, [(1, good), (1, b"Zgarbage"), (1, b""), (1, good + b"\x00")])
    result = run_cli("dump", tmp_path, "--json")
    assert result.returncode == 1
    rows = json_lines(result.stdout)
    assert [row["kind"] for row in rows] == ["create_queue"] + ["undecodable"] * 3
    assert [row["data"] for row in rows[1:]] == ["5a67617262616765", "", good.hex() + "00"]
    assert all(row["error"] for row in rows[1:])
    (line,) = result.stderr.splitlines()
    assert line.startswith("error:") and "LSN 1" in line and "3 records" in line

    text = run_cli("dump", tmp_path).stdout.splitlines()
    assert text[1].startswith("lsn=1 term=1 kind=undecodable error=")
    assert text[1].endswith("data=5a67617262616765")
    assert run_cli("dump", tmp_path, "--raw").returncode == 0


def test_dump_raw_json_round_trips_every_record(tmp_path):
    records = known_records()
    write_log(tmp_path, records)
    result = run_cli("dump", tmp_path, "--raw", "--json")
    assert result.returncode == 0, result.stderr
    rows = json_lines(result.stdout)
    assert [set(row) for row in rows] == [{"lsn", "term", "length", "crc", "data"}] * len(records)
    assert [(row["term"], bytes.fromhex(row["data"])) for row in rows] == records
    assert [row["lsn"] for row in rows] == list(range(len(records)))
    assert [row["length"] for row in rows] == [len(data) for _, data in records]
    assert [row["crc"] for row in rows] == [zlib.crc32(data) for _, data in records]


def test_dump_raw_base64_encoding_round_trips(tmp_path):
    records = known_records()
    write_log(tmp_path, records)
    rows = json_lines(run_cli("dump", tmp_path, "--raw", "--json", "--encoding", "base64").stdout)
    assert [base64.b64decode(row["data"], validate=True) for row in rows] == [d for _, d in records]


def test_dump_raw_text_has_one_line_per_record_with_all_fields(tmp_path):
    records = known_records()
    log_dir = write_log(tmp_path, records)
    result = run_cli("dump", log_dir, "--raw")  # a log directory works as well as a base
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(records)
    for lsn, (line, (term, data)) in enumerate(zip(lines, records, strict=True)):
        fields = dict(field.split("=", 1) for field in line.split(" "))
        assert fields == {
            "lsn": str(lsn),
            "term": str(term),
            "length": str(len(data)),
            "crc": f"0x{zlib.crc32(data):08x}",
            "data": data.hex(),
        }


def test_dump_from_and_to_select_an_inclusive_range(tmp_path):
    records = known_records()
    write_log(tmp_path, records)
    rows = json_lines(run_cli("dump", tmp_path, "--raw", "--json", "--from", 3, "--to", 7).stdout)
    assert [row["lsn"] for row in rows] == [3, 4, 5, 6, 7]
    assert [bytes.fromhex(row["data"]) for row in rows] == [d for _, d in records[3:8]]

    tail = json_lines(run_cli("dump", tmp_path, "--raw", "--json", "--from", 40).stdout)
    assert [row["lsn"] for row in tail] == list(range(40, len(records)))
    head = json_lines(run_cli("dump", tmp_path, "--raw", "--json", "--to", 0).stdout)
    assert [row["lsn"] for row in head] == [0]
    past = run_cli("dump", tmp_path, "--from", 1000)
    assert past.returncode == 0 and past.stdout == ""


def test_dump_reversed_range_is_a_usage_error(tmp_path):
    write_log(tmp_path, known_records())
    result = run_cli("dump", tmp_path, "--from", 7, "--to", 3)
    assert result.returncode == 2
    assert result.stderr.startswith("error:")
    assert result.stdout == ""


def test_dump_into_a_closed_pipe_stops_quietly(tmp_path):
    delta = tflux.encode_delta(tflux.Delta.add_record("jobs", 1, bytes(300)))
    write_log(tmp_path, [(1, delta)] * 20000)  # ~2 MB of lines
    process = subprocess.Popen(
        [sys.executable, "-m", "tflux.cli", "dump", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout.readline().startswith(b"lsn=0 term=1 kind=add_record ")
    process.stdout.close()  # like `| head -1`
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0
    assert stderr == ""


def record_offsets_in(segment: Path) -> list[int]:
    """Start offsets of the records of a spec segment written by tflux (plain walk)."""
    data, at, out = segment.read_bytes(), 8, []
    while at + 16 <= len(data) and data[at : at + 4] == bytes.fromhex("AAF534C4"):
        out.append(at)
        length = int.from_bytes(data[at + 12 : at + 16], "big")
        at += 16 + length + (4 - length % 4) % 4
    return out


def test_dump_of_a_damaged_sealed_segment_prints_what_is_readable_then_the_damage(tmp_path):
    """Issue 30, item 16: one damaged sealed segment made dump print nothing at all."""
    log_dir, records = sealed_log_with_known_offsets(tmp_path)
    segs = segment_files(log_dir)
    with tflux.Log.open(log_dir, readonly=True) as log:
        firsts = [s.start_lsn for s in log.segments]
    damaged = segs[1]
    third = record_offsets_in(damaged)[2]
    flip(damaged, third + 16 + 3)  # the third record's data: its checksum fails
    result = run_cli("dump", tmp_path, "--raw", "--json")
    assert result.returncode == 1
    got = [(r["lsn"], bytes.fromhex(r["data"])) for r in json_lines(result.stdout)]
    lost = set(range(firsts[1] + 2, firsts[2]))  # from the damaged record to the segment's end
    want = [(lsn, data) for lsn, (_, data) in enumerate(records) if lsn not in lost]
    assert got == want
    assert f"corrupt {damaged} at offset {third}" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("error:")
    # A range inside a healthy segment prints, and the exit code still says the log is damaged.
    ranged = run_cli("dump", tmp_path, "--raw", "--json", "--from", "1", "--to", "3")
    assert [r["lsn"] for r in json_lines(ranged.stdout)] == [1, 2, 3]
    assert ranged.returncode == 1
    # One segment file alone: its records (the healthy one), or what is readable, then exit 1.
    alone = run_cli("dump", segs[0], "--raw", "--json")
    assert alone.returncode == 0, alone.stderr
    assert [r["lsn"] for r in json_lines(alone.stdout)] == list(range(firsts[0], firsts[1]))
    alone = run_cli("dump", damaged, "--raw", "--json")
    assert alone.returncode == 1
    assert [r["lsn"] for r in json_lines(alone.stdout)] == [firsts[1], firsts[1] + 1]
    assert f"at offset {third}" in alone.stderr
    missing = run_cli("dump", log_dir / "0000000000000009999.log")
    assert missing.returncode == 2


# --------------------------------------------------------------------------------------------
# verify


def sealed_log_with_known_offsets(tmp_path: Path) -> tuple[Path, list[tuple[int, bytes]]]:
    records = [(1 + i // 20, bytes([65 + i % 26]) * (500 + i % 5)) for i in range(60)]
    log_dir = write_log(tmp_path, records, soft_limit=4096)
    assert len(segment_files(log_dir)) >= 3
    return log_dir, records


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


# --------------------------------------------------------------------------------------------
# bench


def test_bench_tiny_prints_the_three_headline_ratios(tmp_path):
    result = run_cli("bench", "--size", "tiny", "--dir", tmp_path)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for headline in ("verify-scan vs crc32fast", "restore vs pure Python", "durable enqueue vs"):
        line = next(line for line in text.splitlines() if line.startswith(headline))
        assert re.search(r"\d+(\.\d+)?x", line), line
    try:
        import persistqueue  # noqa: F401
    except ImportError:
        assert "durable enqueue vs raw fdatasync" in text and "not installed" in text
    else:
        assert "durable enqueue vs persist-queue" in text
    assert list(tmp_path.iterdir()) == []  # its temporary data is gone


def test_bench_json_has_a_ratio_and_both_rates_per_headline(tmp_path):
    result = run_cli("bench", "--size", "tiny", "--json", "--dir", tmp_path)
    assert result.returncode == 0, result.stderr
    ratios = json.loads(result.stdout)["ratios"]
    assert [r["name"].split(" vs ")[0] for r in ratios] == [
        "verify-scan",
        "restore",
        "durable enqueue",
    ]
    for r in ratios:
        assert r["tflux_rate"] > 0 and r["baseline_rate"] > 0
        assert r["ratio"] == pytest.approx(r["tflux_rate"] / r["baseline_rate"])


def test_bench_full_points_to_make_bench():
    result = run_cli("bench", "--full")
    assert result.returncode == 0
    assert "make bench" in result.stdout and "docs/benchmarks.md" in result.stdout


# --------------------------------------------------------------------------------------------
# help and version


def test_version_prints_the_library_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert tflux.__version__ in result.stdout


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help_with_examples_and_exit_codes(verb):
    result = run_cli(verb, "--help")
    assert result.returncode == 0
    assert "Examples:" in result.stdout
    assert f"tflux {verb}" in result.stdout
    assert "Exit codes" in result.stdout


@pytest.mark.parametrize("verb", DIALECT_VERBS)
def test_every_verb_that_reads_a_base_takes_the_dialect_option(verb):
    """Spec section 11: every verb can be told the dialect (default: detected)."""
    text = run_cli(verb, "--help").stdout
    assert "--dialect [spec|taskflux]" in text


def test_top_level_help_lists_every_verb():
    text = run_cli("--help").stdout
    for verb in VERBS:
        assert f"tflux {verb}" in text


@pytest.mark.parametrize("verb", ["verify", "repair"])
def test_verify_and_repair_help_document_each_exit_code(verb):
    text = run_cli(verb, "--help").stdout
    for code in ("0  ", "1  ", "2  "):
        assert code in text
    assert "--yes" in run_cli("repair", "--help").stdout


def test_unknown_verb_is_a_usage_error():
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "frobnicate" in result.stderr


# --- tflux export ----------------------------------------------------------------------------


def test_export_writes_the_log_and_the_snapshot_as_parquet(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(3, b"a"), (1, b"b")])
        store.snapshot()  # snapshot holds a and b
        store.enqueue("jobs", 2, b"c")
        store.ack(store.dequeue("jobs", timeout=0))  # removes b (key 1)
    result = run_cli("export", base, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    log = pq.read_table(tmp_path / "out" / "log.parquet").to_pylist()
    # After the snapshot the log was compacted only up to the snapshot: the rows that remain
    # after it are exactly the add of c and the remove of b (record id 2).
    tail = [(r["kind"], r["queue"], r["key"], r["record_id"], r["message"]) for r in log][-2:]
    assert tail == [("add_record", "jobs", 2, None, b"c"), ("remove_record", "jobs", None, 2, None)]
    snap = pq.read_table(tmp_path / "out" / "snapshot.parquet").to_pylist()
    assert sorted((r["queue"], r["record_id"], r["key"], r["message"]) for r in snap) == [
        ("jobs", 1, 3, b"a"),
        ("jobs", 2, 1, b"b"),
    ]
    assert "log rows" in result.stdout and "snapshot rows" in result.stdout


@pytest.mark.parametrize("verb", ["verify", "inspect", "dump", "replay"])
def test_a_reader_that_went_away_ends_the_command_with_exit_0(tmp_path, verb):
    """Issue 30, item 18: ``tflux verify BASE | head -1`` exited 1, the "corrupt" code (rich's
    broken-pipe handler). Here the pipe's read end is closed before the command writes."""
    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(1, b"x")] * 50)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tflux.cli", verb, str(base)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")


def test_dump_says_when_the_last_segment_ends_in_a_torn_tail(tmp_path):
    """Issue 30, item 23: dump printed the whole records and said nothing of the torn one."""
    log_dir = tmp_path / "data" / "log"
    with tflux.Log.open(log_dir, sync="never") as log:
        log.append_many(1, [b"D\x01a", b"D\x01b"])
        seg = Path(log.segments[-1].path)
    raw = bytearray(seg.read_bytes())
    raw[8 + 16] ^= 0x01  # the first record's data: a bad checksum in the last segment
    seg.write_bytes(bytes(raw))
    result = run_cli("dump", tmp_path, "--raw")
    assert result.returncode == 0, result.stderr
    assert "torn tail at offset 8" in result.stderr and "data/temp" in result.stderr


def test_export_never_writes_through_a_planted_symlink(tmp_path):
    """Issue 30, item 11: OUT/.log.parquet.tmp was opened by name, so a symlink planted there
    overwrote a file outside OUT; a symlink at the final name is replaced, not written through."""
    pq = pytest.importorskip("pyarrow.parquet")
    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 1, b"a")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"not yours")
    (out / ".log.parquet.tmp").symlink_to(victim)
    (out / "snapshot.parquet").symlink_to(victim)
    result = run_cli("export", base, out)
    assert result.returncode == 0, result.stderr
    assert victim.read_bytes() == b"not yours"
    assert not (out / "snapshot.parquet").is_symlink()
    assert len(pq.read_table(out / "log.parquet")) == 2


def test_export_of_a_corrupt_log_names_the_file_and_exits_1(tmp_path):
    pytest.importorskip("pyarrow.parquet")
    log_dir = tmp_path / "base" / "data" / "log"
    with tflux.Log.open(log_dir, sync="never", soft_limit=64, hard_limit=64) as log:
        for i in range(6):
            log.append(1, b"D\x01" + bytes([ord("a") + i]))
            log.commit(log.last_index)
        first = log.segments[0].path
    raw = bytearray(Path(first).read_bytes())
    raw[8 + 16] ^= 0x01  # a data byte of the first record of a sealed segment
    Path(first).write_bytes(raw)
    result = run_cli("export", tmp_path / "base", tmp_path / "out")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert Path(first).name in result.stderr
