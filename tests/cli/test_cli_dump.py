"""``tflux dump``: every kind of delta decoded, raw records in JSON, base64 and text, ranges,
damaged and torn segments.

Driven as a user drives it: a subprocess, its output and exit code.

Delta bytes and record offsets the CLI must report are computed from the spec (sections 3 and 6)
with ``struct``, not taken from the CLI.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import zlib
from pathlib import Path

import tflux
from _cli_support import (
    GOLDEN,
    flip,
    json_lines,
    known_records,
    open_store,
    parse_delta,
    run_cli,
    sealed_log_with_known_offsets,
    segment_files,
    write_log,
)
from _task_vectors import VECTORS, dump_fields

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


def test_dump_decodes_every_task_queue_delta_vector(tmp_path):
    # Spec section 12's deltas, from the golden vectors (written with struct alone).
    names = list(VECTORS)
    write_log(tmp_path, [(1, bytes.fromhex(VECTORS[n]["hex"])) for n in names])
    result = run_cli("dump", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    rows = json_lines(result.stdout)
    for lsn, (row, name) in enumerate(zip(rows, names, strict=True)):
        want = {"lsn": lsn, "term": 1, **dump_fields(VECTORS[name])}
        message = bytes.fromhex(VECTORS[name].get("message_hex", ""))
        if want["kind"] == "add_later":
            want["message"] = message.decode()  # printable: the preview is the text
            want["message_b64"] = base64.b64encode(message).decode()
        assert row == want, name
    text = run_cli("dump", tmp_path).stdout.splitlines()
    by_name = dict(zip(names, text, strict=True))
    assert by_name["rules_set_all"] == (
        'lsn=0 term=1 kind=queue_rules queue="jobs" dead_letter="jobs-dead":5 '
        "retry_delay_ms=1000 retry_backoff=2000000 retry_max_delay_ms=300000 lease_ms=30000"
    )
    assert by_name["rules_change_lease_clear_dead_letter"].endswith(
        'queue="jobs" dead_letter=none lease_ms=60000'
    )
    assert by_name["rules_nothing"].endswith('kind=queue_rules queue=""')
    assert by_name["add_later"].endswith(
        'kind=add_later queue="jobs" key=-3 not_before=1765000000000 message_length=5 '
        'message="hello"'
    )
    assert by_name["delivered"].endswith("record_id=18446744073709551615")
    assert by_name["failed"].endswith("record_id=7 due=1765000001500")
    assert by_name["purge_keeping_two"].endswith('kind=purge queue="jobs" kept_ids=3,9')
    assert by_name["purge_all"].endswith('kind=purge queue="q" kept_ids=none')


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
