"""The ``tflux`` command line, driven as a user drives it: a subprocess, its output and exit code.

Logs with known contents are written through ``tflux.Log``; deltas written by ``tflux demo`` are
checked with a small decoder written here from the spec (section 6), independent of the CLI's.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import tflux

SEGMENT_SUFFIX = ".log"
GOLDEN = Path(__file__).parent / "data"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
EMPTY_SEGMENT = bytes.fromhex("1276AD550000000100000000")  # header, then the end marker


def run_cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m tflux.cli ARGS``; never a traceback, whatever the exit code."""
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    environ.update(env or {})
    result = subprocess.run(
        [sys.executable, "-m", "tflux.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
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
    log_dir.mkdir(parents=True)
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


def parse_delta(data: bytes) -> tuple[str, bytes]:
    """Checks one CreateQueue or AddRecord delta consumes its bytes exactly; (kind, queue)."""
    kind, name_length = chr(data[0]), data[1]
    name, rest = data[2 : 2 + name_length], data[2 + name_length :]
    assert all(0x21 <= c <= 0x7E for c in name)
    if kind == "C":
        implementation, _max_size, _max_message, has_range = struct.unpack(">iiiB", rest)
        assert (implementation, has_range) == (1, 0)
    elif kind == "A":
        _priority, length = struct.unpack_from(">qi", rest)
        assert len(rest) == 12 + length
    else:
        raise AssertionError(f"unexpected delta kind {kind!r}")
    return kind, name


# --------------------------------------------------------------------------------------------
# demo


def test_demo_writes_a_multi_segment_log_that_verifies_and_dumps_one_line_per_record(tmp_path):
    base = tmp_path / "sample"
    result = run_cli("demo", "--records", 20000, "--dir", base, "--soft-limit", 256 << 10)
    assert result.returncode == 0, result.stderr
    assert "20,000" in result.stdout
    assert str(base) in result.stdout

    segments = segment_files(base / "data" / "log")
    assert len(segments) >= 5  # 20,000 records of ~100 bytes over 256 KiB segments
    for segment in segments:
        assert segment.name in result.stdout or "more" in result.stdout

    assert run_cli("verify", base).returncode == 0
    dumped = run_cli("dump", base)
    assert dumped.returncode == 0, dumped.stderr
    assert len(dumped.stdout.splitlines()) == 20000


def test_demo_records_are_queue_deltas_with_rising_terms(tmp_path):
    base = tmp_path / "sample"
    assert run_cli("demo", "-n", 20000, "--payload-size", 10, "--dir", base).returncode == 0
    rows = json_lines(run_cli("dump", base, "--json").stdout)
    assert [row["lsn"] for row in rows] == list(range(20000))

    created = {b""}  # the default queue always exists
    for row in rows:
        data = bytes.fromhex(row["data"])
        kind, queue = parse_delta(data)
        if kind == "C":
            created.add(queue)
        else:
            assert queue in created  # replayable: every queue exists before its first record
            assert struct.unpack_from(">i", data, len(data) - 14)[0] == 10  # --payload-size
    assert len(created) >= 3

    terms = [row["term"] for row in rows]
    assert terms == sorted(terms)
    assert len(set(terms)) >= 2


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
    assert len(run_cli("dump", left).stdout.splitlines()) == 3000


def test_demo_refuses_a_directory_that_already_holds_a_log(tmp_path):
    write_log(tmp_path, known_records())
    before = {p.name: p.read_bytes() for p in segment_files(tmp_path / "data" / "log")}
    result = run_cli("demo", "--records", 100, "--dir", tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error:")
    assert {p.name: p.read_bytes() for p in segment_files(tmp_path / "data" / "log")} == before


# --------------------------------------------------------------------------------------------
# dump


def test_dump_json_round_trips_every_record(tmp_path):
    records = known_records()
    write_log(tmp_path, records)
    result = run_cli("dump", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    rows = json_lines(result.stdout)
    assert [set(row) for row in rows] == [{"lsn", "term", "length", "crc", "data"}] * len(records)
    assert [(row["term"], bytes.fromhex(row["data"])) for row in rows] == records
    assert [row["lsn"] for row in rows] == list(range(len(records)))
    assert [row["length"] for row in rows] == [len(data) for _, data in records]
    assert [row["crc"] for row in rows] == [zlib.crc32(data) for _, data in records]


def test_dump_base64_encoding_round_trips(tmp_path):
    records = known_records()
    write_log(tmp_path, records)
    rows = json_lines(run_cli("dump", tmp_path, "--json", "--encoding", "base64").stdout)
    assert [base64.b64decode(row["data"], validate=True) for row in rows] == [d for _, d in records]


def test_dump_text_has_one_line_per_record_with_all_fields(tmp_path):
    records = known_records()
    log_dir = write_log(tmp_path, records)
    result = run_cli("dump", log_dir)  # a log directory works as well as a base directory
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
    rows = json_lines(run_cli("dump", tmp_path, "--json", "--from", 3, "--to", 7).stdout)
    assert [row["lsn"] for row in rows] == [3, 4, 5, 6, 7]
    assert [bytes.fromhex(row["data"]) for row in rows] == [d for _, d in records[3:8]]

    tail = json_lines(run_cli("dump", tmp_path, "--json", "--from", 40).stdout)
    assert [row["lsn"] for row in tail] == list(range(40, len(records)))
    head = json_lines(run_cli("dump", tmp_path, "--json", "--to", 0).stdout)
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
    write_log(tmp_path, [(1, bytes([i % 256]) * 300) for i in range(3000)])  # ~2 MB of hex
    process = subprocess.Popen(
        [sys.executable, "-m", "tflux.cli", "dump", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout.readline().startswith(b"lsn=0 ")
    process.stdout.close()  # like `| head -1`
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0
    assert stderr == ""


# --------------------------------------------------------------------------------------------
# verify


def sealed_log_with_known_offsets(tmp_path: Path) -> tuple[Path, list[tuple[int, bytes]]]:
    records = [(1 + i // 20, bytes([65 + i % 26]) * (500 + i % 5)) for i in range(60)]
    log_dir = write_log(tmp_path, records, soft_limit=4096)
    assert len(segment_files(log_dir)) >= 3
    return log_dir, records


def test_verify_clean_log_exits_0_with_a_summary(tmp_path):
    _, records = sealed_log_with_known_offsets(tmp_path)
    result = run_cli("verify", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(records):,} records" in result.stdout
    assert "OK" in result.stdout
    assert "error:" not in result.stdout and "warning:" not in result.stdout


def test_verify_flipped_byte_in_sealed_segment_exits_1_naming_file_and_offset(tmp_path):
    log_dir, records = sealed_log_with_known_offsets(tmp_path)
    first = segment_files(log_dir)[0]
    bad_offset = 8 + record_size(records[0][1]) + record_size(records[1][1])  # third record
    raw = bytearray(first.read_bytes())
    raw[bad_offset + 16 + 100] ^= 0x01  # a data byte: the checksum no longer matches
    first.write_bytes(bytes(raw))

    result = run_cli("verify", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert first.name in result.stdout
    assert f"offset {bad_offset}" in result.stdout
    assert "CORRUPT" in result.stdout
    assert first.read_bytes() == bytes(raw)  # verify never writes


def test_dump_of_a_corrupt_sealed_segment_fails_with_one_error_line(tmp_path):
    log_dir, _ = sealed_log_with_known_offsets(tmp_path)
    first = segment_files(log_dir)[0]
    raw = bytearray(first.read_bytes())
    raw[8 + 16 + 3] ^= 0xFF
    first.write_bytes(bytes(raw))

    result = run_cli("dump", tmp_path)
    assert result.returncode == 1
    (message,) = result.stderr.splitlines()
    assert message.startswith("error:") and first.name in message


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
    assert "warning" in result.stdout
    assert segment.name in result.stdout
    assert f"offset {last_start}" in result.stdout
    assert segment.read_bytes() == torn

    rows = json_lines(run_cli("dump", tmp_path, "--json").stdout)
    assert [row["lsn"] for row in rows] == list(range(len(records) - 1))
    assert segment.read_bytes() == torn  # dump opens read-only


@pytest.mark.parametrize("verb", ["verify", "dump"])
def test_missing_directory_is_a_clear_error(tmp_path, verb):
    missing = tmp_path / "no-such-base"
    result = run_cli(verb, missing)
    assert result.returncode == 2
    assert result.stderr.startswith("error:")
    assert str(missing) in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not missing.exists()


@pytest.mark.parametrize("verb", ["verify", "dump"])
def test_directory_without_segments_or_a_plain_file_is_a_clear_error(tmp_path, verb):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("not a log\n")
    for path in (tmp_path / "empty", tmp_path / "file.txt"):
        result = run_cli(verb, path)
        assert result.returncode == 2
        assert result.stderr.startswith("error:")
        assert str(path) in result.stderr
    assert list((tmp_path / "empty").iterdir()) == []


# --------------------------------------------------------------------------------------------
# golden files (written from the spec by an independent encoder, see tests/data/README.md)


@pytest.mark.parametrize("golden", ["0000000000000000000.log", "preallocated_4096.log"])
def test_dump_of_a_golden_segment_matches_the_manifest(tmp_path, golden):
    golden_log(tmp_path, {"0000000000000000000.log": (GOLDEN / golden).read_bytes()})
    result = run_cli("dump", tmp_path, "--json")
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
    assert f"0000000000000000000.log at offset {offset}" in result.stdout
    assert "warning" in result.stdout


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
    assert f"0000000000000000000.log at offset {offset}" in result.stdout


def test_demo_delta_encoder_matches_the_golden_deltas():
    from tflux import cli  # the private stand-in for tflux.encode_delta

    deltas = json.loads((GOLDEN / "deltas.json").read_text())
    create = deltas["create_heap_no_limits"]
    assert cli._encode_create_queue(cli._queue_name(create["queue"])).hex() == create["hex"]
    for name in ("add_default_queue", "add_extreme_key"):
        add = deltas[name]
        encoded = cli._encode_add_record(
            cli._queue_name(add["queue"]), add["key"], bytes.fromhex(add["message_hex"])
        )
        assert encoded.hex() == add["hex"]


# --------------------------------------------------------------------------------------------
# help and version


def test_version_prints_the_library_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert tflux.__version__ in result.stdout


@pytest.mark.parametrize("verb", ["demo", "dump", "verify"])
def test_every_verb_has_help_with_examples(verb):
    result = run_cli(verb, "--help")
    assert result.returncode == 0
    assert "Examples:" in result.stdout
    assert f"tflux {verb}" in result.stdout


def test_verify_help_documents_the_exit_codes():
    text = run_cli("verify", "--help").stdout
    assert "Exit codes" in text
    for code in ("0  clean", "1  corruption", "2  usage"):
        assert code in text


def test_unknown_verb_is_a_usage_error():
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "frobnicate" in result.stderr
