"""Compressed sealed segments (``NNN.log.z``, spec section 9) read by every reader.

The ``.z`` files here are written by an independent encoder: the 37-byte header with ``struct``
from the spec's table and the payload by the codec libraries themselves (``zstandard``,
``lz4.frame``), never by tflux.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import lz4.frame
import pytest
import tflux
import zstandard

Z_MARKER = bytes.fromhex("1276AD5A")
METHODS = {"zstd": 1, "lz4": 2}


def original_bytes(seg: tflux.SegmentInfo) -> bytes:
    """Header through end marker of a plain segment (spec section 9's "original")."""
    data = Path(seg.path).read_bytes()
    return data[: seg.size] + bytes(4)


def encode_z(method: str, first: int, last: int, original: bytes) -> bytes:
    if method == "zstd":
        payload = zstandard.ZstdCompressor(level=3).compress(original)
    else:
        payload = lz4.frame.compress(original)
    header = Z_MARKER + struct.pack(
        ">iqqBqI", 1, first, last, METHODS[method], len(original), zlib.crc32(original)
    )
    assert len(header) == 37
    return header + payload


def compress_by_hand(log_dir: Path, method: str, keep_plain: bool = False) -> list[Path]:
    """Replaces every sealed segment of ``log_dir`` by a ``.log.z`` (independent encoder)."""
    with tflux.Log.open(log_dir, readonly=True) as log:
        sealed = [s for s in log.segments if s.sealed and s.count > 0]
        made = []
        for s in sealed:
            z = Path(s.path + ".z")
            z.write_bytes(encode_z(method, s.start_lsn, s.last_lsn, original_bytes(s)))
            made.append(z)
    if not keep_plain:
        for s in sealed:
            os.remove(s.path)
    return made


def run_cli(*args: str | Path) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "tflux.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def make_store(base: Path, adds: int = 300) -> None:
    with tflux.open(
        base,
        log_sync_policy="never",
        snapshot_creation_segments_threshold=0,
        log_file_soft_limit=4096,
        log_file_hard_limit=8192,
    ) as store:
        store.create_queue("q")
        for i in range(adds):
            store.enqueue("q", i % 7, f"message {i} ".encode() * 8)
        for _ in range(adds // 3):
            rec = store.dequeue("q")
            assert rec is not None
            store.ack(rec)


def state_of(base: Path) -> list[tuple[int, int, bytes]]:
    with tflux.open(base, readonly=True) as store:
        return [(r.id, r.key, bytes(r.payload)) for r in store.records("q")]


def entries_of(log_dir: Path) -> list[tuple[int, int, bytes]]:
    with tflux.Log.open(log_dir, readonly=True) as log:
        return [(e.lsn, e.term, bytes(e.data)) for e in log.entries()]


@pytest.fixture(params=["zstd", "lz4"])
def method(request) -> str:
    return request.param


def test_every_reader_reads_segments_compressed_by_an_independent_encoder(tmp_path, method):
    base = tmp_path / "base"
    make_store(base)
    log_dir = base / "data" / "log"
    entries = entries_of(log_dir)
    state = state_of(base)
    dump = run_cli("dump", base, "--json")
    assert dump.returncode == 0, dump.stderr
    columns = [tflux.read_segment_deltas(p) for p in sorted(log_dir.glob("*.log"))[:-1]]
    made = compress_by_hand(log_dir, method)
    assert len(made) >= 5
    # Log: reads, term_at, segments with their compression.
    assert entries_of(log_dir) == entries
    with tflux.Log.open(log_dir, readonly=True) as log:
        infos = log.segments
        assert [s.compression for s in infos[:-1]] == [method] * len(made)
        assert infos[-1].compression is None
        assert all(s.file_size < s.size for s in infos[:-1])
        for lsn, term, _ in entries[::37]:
            assert log.term_at(lsn) == term
    # Store restore, verify (core and CLI), dump, the Spark reader's per-segment decoder.
    assert state_of(base) == state
    assert tflux.verify(base).ok
    assert tflux.verify_base(base).ok
    verified = run_cli("verify", base)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert run_cli("dump", base, "--json").stdout == dump.stdout
    for z, cols in zip(made, columns, strict=True):
        assert tflux.read_segment_deltas(z).to_arrow().to_pylist() == cols.to_arrow().to_pylist()
        # A reader holding the old name reads the .z (readers look for it first).
        plain = z.with_name(z.name[:-2])
        assert (
            tflux.read_segment_deltas(plain).to_arrow().to_pylist() == cols.to_arrow().to_pylist()
        )


def test_inspect_shows_compressed_size_and_ratio(tmp_path):
    base = tmp_path / "base"
    make_store(base)
    compress_by_hand(base / "data" / "log", "zstd")
    result = run_cli("inspect", base, "--json")
    assert result.returncode == 0, result.stderr
    segments = json.loads(result.stdout)["segments"]
    compressed = [s for s in segments if s.get("compression")]
    assert compressed, segments
    for s in compressed:
        assert s["compression"] == "zstd"
        assert 0 < s["ratio"] < 1


def test_a_damaged_compressed_segment_is_corruption_naming_the_file(tmp_path):
    base = tmp_path / "base"
    make_store(base)
    made = compress_by_hand(base / "data" / "log", "zstd")
    victim = made[1]
    data = bytearray(victim.read_bytes())
    data[33] ^= 0xFF  # original CRC
    victim.write_bytes(bytes(data))
    with pytest.raises(tflux.CorruptionError) as err:
        tflux.open(base, readonly=True)
    assert err.value.path == str(victim)
    with pytest.raises(tflux.CorruptionError) as err:
        tflux.read_segment_deltas(victim)
    assert err.value.path == str(victim)
    assert not tflux.verify(base).ok
    result = run_cli("verify", base)
    assert result.returncode == 1
    assert victim.name in result.stdout + result.stderr


def test_log_compress_replaces_sealed_segments_and_every_reader_agrees(tmp_path, method):
    base = tmp_path / "base"
    make_store(base)
    log_dir = base / "data" / "log"
    entries, state = entries_of(log_dir), state_of(base)
    with tflux.Log.open(log_dir) as log:
        sealed = [s.name for s in log.segments if s.sealed]
        made = log.compress(method)
        assert [Path(p).name for p in made] == [n + ".z" for n in sealed]
        assert log.compress(method) == []
        assert log.segments[-1].compression is None
    assert entries_of(log_dir) == entries
    assert state_of(base) == state
    assert tflux.verify_base(base).ok
    # The store goes on writing after its sealed segments were compressed.
    with tflux.open(base, log_sync_policy="never") as store:
        store.enqueue("q", 1, b"after")
    assert any(p == b"after" for _, _, p in state_of(base))


def test_a_log_twin_that_differs_from_its_z_is_corruption_and_never_deleted(tmp_path):
    """Issue 30, item 3: a `.log` beside its `.log.z` whose bytes differ from what the `.z`
    decodes to was a warning, and a writable open deleted the `.log`. Two versions of a segment
    are corruption: every open refuses, verify reports it, repair keeps the `.log` and moves the
    `.z` into data/temp; nothing is deleted."""
    base = tmp_path / "base"
    make_store(base)
    log_dir = base / "data" / "log"
    (z,) = compress_by_hand(log_dir, "zstd", keep_plain=True)[:1]
    plain = Path(str(z)[: -len(".z")])
    # Another version of the segment: one data byte changed and its record's CRC fixed, so
    # the `.log` scans clean on its own.
    buf = bytearray(plain.read_bytes())
    (first_length,) = struct.unpack_from(">i", buf, 8 + 12)
    at = 8 + 16 + first_length + -first_length % 4  # the second record: an AddRecord
    (length,) = struct.unpack_from(">i", buf, at + 12)
    buf[at + 16 + length - 1] ^= 0x20
    struct.pack_into(">I", buf, at + 8, zlib.crc32(bytes(buf[at + 16 : at + 16 + length])))
    plain.write_bytes(bytes(buf))
    other_z = [p for p in log_dir.glob("*.log.z") if p != z]
    for p in other_z:  # one twin only: the rest back to plain segments
        p.unlink()
    files = {p.name: p.read_bytes() for p in log_dir.iterdir()}
    report = tflux.verify(log_dir)
    assert not report.ok
    assert any("two different versions" in p.message for p in report.problems)
    for readonly in (False, True):
        with pytest.raises(tflux.CorruptionError, match="two different versions"):
            tflux.Log.open(log_dir, readonly=readonly)
    with pytest.raises(tflux.CorruptionError, match="two different versions"):
        tflux.open(base)
    assert run_cli("verify", base).returncode == 1
    assert {p.name: p.read_bytes() for p in log_dir.iterdir()} == files
    with tflux.Log.open(log_dir, repair=True) as log:
        (moved,) = log.recovery.moved
        second = list(log.entries())[1]
    assert Path(moved).parent == base / "data" / "temp"
    assert Path(moved).read_bytes() == files[z.name]
    assert bytes(second.data) == bytes(buf[at + 16 : at + 16 + length])  # the .log was read
    assert not z.exists() and plain.read_bytes() == files[plain.name]
    assert run_cli("verify", base).returncode == 0


def test_compress_refuses_an_unknown_method(tmp_path):
    base = tmp_path / "base"
    make_store(base, adds=60)
    with tflux.Log.open(base / "data" / "log") as log, pytest.raises(ValueError, match="zstd"):
        log.compress("gzip")


def test_cli_compress_then_every_verb_reads_the_result(tmp_path):
    base = tmp_path / "base"
    make_store(base)
    dump = run_cli("dump", base, "--json").stdout
    result = run_cli("compress", base, "--method", "lz4", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["method"] == "lz4" and len(summary["segments"]) >= 5
    assert 0 < summary["compressed_bytes"] < summary["original_bytes"]
    assert run_cli("verify", base).returncode == 0
    assert run_cli("dump", base, "--json").stdout == dump
    assert run_cli("replay", base).returncode == 0
    again = run_cli("compress", base)
    assert again.returncode == 0 and "nothing to compress" in again.stdout


def test_the_store_compresses_sealed_segments_in_the_background(tmp_path, method):
    import time

    base = tmp_path / "base"
    settings = dict(
        log_sync_policy="never",
        snapshot_creation_segments_threshold=0,
        log_file_soft_limit=4096,
        log_file_hard_limit=8192,
        log_compress_sealed_segments=method,
    )
    with tflux.open(base, **settings) as store:
        assert store.settings["LogCompressSealedSegments"] == method
        store.create_queue("q")
        for i in range(300):
            store.enqueue("q", i % 7, f"message {i} ".encode() * 8)
        log_dir = base / "data" / "log"
        deadline = time.monotonic() + 60  # generous: the compressor checks twice a second
        while time.monotonic() < deadline:
            names = os.listdir(log_dir)
            plain = sorted(n for n in names if n.endswith(".log"))
            if len(plain) == 1 and any(n.endswith(".log.z") for n in names):
                break
            time.sleep(0.05)
        # Only the active segment stays plain.
        assert len(plain) == 1, names
        store.enqueue("q", 0, b"last")
        expected = [(r.id, r.key, bytes(r.payload)) for r in store.records("q")]
    assert state_of(base) == expected
    assert tflux.verify_base(base).ok


def test_an_unknown_compression_setting_is_refused_naming_the_key(tmp_path):
    with pytest.raises(tflux.SettingsError, match="LogCompressSealedSegments"):
        tflux.open(tmp_path / "base", log_compress_sealed_segments="gzip")


def test_export_reads_compressed_segments(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    base = tmp_path / "base"
    make_store(base)
    assert run_cli("export", base, tmp_path / "plain").returncode == 0
    compress_by_hand(base / "data" / "log", "zstd")
    result = run_cli("export", base, tmp_path / "zstd")
    assert result.returncode == 0, result.stderr
    plain = pq.read_table(tmp_path / "plain" / "log.parquet").drop_columns(["segment"])
    packed = pq.read_table(tmp_path / "zstd" / "log.parquet").drop_columns(["segment"])
    assert packed.to_pylist() == plain.to_pylist()
