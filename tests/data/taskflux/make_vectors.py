"""Writes the taskflux-dialect golden vectors in this directory (spec section 11), from the bytes
section 11 and ``../shared/taskflux-csharp/README.md`` list, with ``struct`` and a bitwise
CRC-32/MPEG-2: nothing of tflux is imported, so the vectors hold tflux's core (Rust), its Python
face and the JVM reader to an encoder they do not share. Run it to regenerate (the output is
committed; ``tests/core/test_golden.py`` checks the files still match it).

    python tests/data/taskflux/make_vectors.py
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
from _taskflux_bytes import crc32_mpeg2  # noqa: E402  (plain bytes, no tflux import)

SEGMENT_HEADER = bytes.fromhex("1276AD55") + struct.pack(">i", 1)
RECORD_MARKER = bytes.fromhex("AAF534C4")


def pattern(n: int, seed: int) -> bytes:
    return bytes((seed + 31 * i) % 256 for i in range(n))


def record(term: int, data: bytes) -> bytes:
    return RECORD_MARKER + struct.pack(">qIi", term, crc32_mpeg2(data), len(data)) + data


def segment(records: list[tuple[int, bytes]]) -> bytes:
    return SEGMENT_HEADER + b"".join(record(t, d) for t, d in records) + b"\0\0\0\0"


def metadata(term: int, vote: int) -> bytes:
    body = struct.pack(">iqi", 1, term, vote)
    return bytes.fromhex("5A6EA012") + body + struct.pack(">I", crc32_mpeg2(body))


def snapshot() -> bytes:
    """The spec vector's state (``tests/data/tflux.snapshot``, its bytes taken as they are)
    under TaskFlux's header (Int64 index and term) and checksum (CRC-32/MPEG-2 of the state)."""
    spec = (HERE.parent / "tflux.snapshot").read_bytes()
    assert spec[:4] == bytes.fromhex("B6380FC9")
    index, term, length = struct.unpack_from(">iii", spec, 4)
    state = spec[16 : 16 + length]
    head = bytes.fromhex("B6380FC9") + struct.pack(">qqi", index, term, len(state))
    return head + state + struct.pack(">I", crc32_mpeg2(state))


def build() -> tuple[dict[str, bytes], dict[str, dict]]:
    """Every vector's bytes by file name, and the manifest."""
    lengths = [0, 1, 2, 3, 4, 34, 1024, 2051]
    terms = [1, 1, 2, 2, 3, 3, 3, 3]
    records = [(t, pattern(n, 31 * i)) for i, (t, n) in enumerate(zip(terms, lengths, strict=True))]
    files: dict[str, bytes] = {}
    manifest: dict[str, dict] = {}

    def listed(recs: list[tuple[int, bytes]]) -> list[dict]:
        return [{"lsn": i, "term": t, "data_hex": d.hex()} for i, (t, d) in enumerate(recs)]

    files["0000000000000000000.log"] = segment(records)
    manifest["0000000000000000000.log"] = {
        "what": "one segment, records with data lengths 0,1,2,3,4,34,1024,2051 (no padding), "
        "terms 1-3 as Int64, end marker",
        "records": listed(records),
    }
    big_term = [(1, b"first"), (2**31 - 1, b"largest term tflux supports")]
    files["large_term.log"] = segment(big_term)
    manifest["large_term.log"] = {
        "what": "two records, the second with term 2**31-1 (the largest term tflux reads)",
        "records": listed(big_term),
    }
    four = [(1, pattern(10, 1)), (1, pattern(7, 2)), (2, pattern(13, 3)), (2, pattern(21, 4))]
    whole = segment(four)
    fourth = len(SEGMENT_HEADER) + sum(20 + len(d) for _, d in four[:3])
    files["torn_tail.log"] = whole[: fourth + 20 + 5]
    manifest["torn_tail.log"] = {
        "what": "last segment cut in the middle of its 4th record's data: open keeps 3 records "
        "and writes the end marker at the 4th record's start",
        "records": listed(four[:3]),
        "cut_at_offset": fourth,
    }
    three = four[:3]
    bad = bytearray(segment(three))
    third = len(SEGMENT_HEADER) + sum(20 + len(d) for _, d in three[:2])
    bad[third + 20] ^= 0xFF
    files["bad_crc_tail.log"] = bytes(bad)
    manifest["bad_crc_tail.log"] = {
        "what": "3rd (last) record's first data byte flipped: in the last segment open keeps 2 "
        f"records; in a sealed segment it is CorruptionError at offset {third}",
        "records": listed(three[:2]),
        "bad_record_offset": third,
    }
    torn_term = bytearray(segment(three))
    # TaskFlux's own repair leaves the old marker and 8 zero bytes (term 0) after the kept data.
    files["after_taskflux_repair.log"] = bytes(torn_term[:third]) + RECORD_MARKER + bytes(8)
    manifest["after_taskflux_repair.log"] = {
        "what": "what TaskFlux's repair leaves: 2 records, then a marker and 8 zero bytes (term "
        "0): open keeps 2 records",
        "records": listed(three[:2]),
        "cut_at_offset": third,
    }
    files["tflux.metadata"] = metadata(7, 2)
    manifest["tflux.metadata"] = {"what": "metadata: version 1, term 7 (Int64), voted for node 2"}
    files["tflux.metadata.novote"] = metadata(1, -1)
    manifest["tflux.metadata.novote"] = {"what": "metadata: version 1, term 1, no vote (-1)"}
    files["tflux.snapshot"] = snapshot()
    manifest["tflux.snapshot"] = {
        "what": "snapshot: the spec vector's state (tests/data/tflux.snapshot: last index 41, "
        "last term 3, queues '' and 'jobs') under TaskFlux's header (Int64 index and term) "
        "and checksum (CRC-32/MPEG-2 of the state)"
    }
    manifest["crc"] = {
        "what": "CRC-32/MPEG-2 check values",
        **{
            k: f"{crc32_mpeg2(v):08x}"
            for k, v in {"123456789": b"123456789", "empty": b"", "hello": b"hello"}.items()
        },
    }
    return files, manifest


def main() -> None:
    files, manifest = build()
    for file_name, data in files.items():
        (HERE / file_name).write_bytes(data)
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
