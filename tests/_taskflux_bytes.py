"""TaskFlux's bytes read plainly (spec section 11), independently of tflux's core: the checks a
directory tflux wrote in the taskflux dialect must pass exactly as the real ones TaskFlux
wrote do. Written from ``../shared/taskflux-csharp/README.md`` (byte by byte, no tflux code);
slow and simple on purpose.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

SEGMENT_HEADER = bytes.fromhex("1276AD55") + struct.pack(">i", 1)
RECORD_MARKER = bytes.fromhex("AAF534C4")
SNAPSHOT_MARKER = bytes.fromhex("B6380FC9")
METADATA_MARKER = bytes.fromhex("5A6EA012")


def crc32_mpeg2(data: bytes) -> int:
    """CRC-32/MPEG-2 bit by bit: poly 0x04C11DB7, init 0xFFFFFFFF, no reflection, no xor."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


@dataclass
class Segment:
    entries: list[tuple[int, bytes]]  # (term, payload)
    end: int  # offset of the end marker (or of the torn record)
    torn: bool  # a record that does not read before the end of the file


def read_segment(path: Path) -> Segment:
    """Records as TaskFlux reads them: marker, Int64 term >= 1, UInt32 CRC-32/MPEG-2 of the
    payload, Int32 length, payload, no padding; ``00 00 00 00`` ends the data."""
    b = path.read_bytes()
    assert b[:8] == SEGMENT_HEADER, f"{path}: segment header {b[:8].hex()}"
    at, entries = 8, []
    while True:
        if at + 4 > len(b) or b[at : at + 4] == b"\0\0\0\0":
            return Segment(entries, at, at + 4 > len(b) and at != len(b))
        if b[at : at + 4] != RECORD_MARKER or at + 20 > len(b):
            return Segment(entries, at, True)
        term, crc, length = struct.unpack_from(">qIi", b, at + 4)
        payload = b[at + 20 : at + 20 + length]
        if term < 1 or length < 0 or len(payload) != length or crc32_mpeg2(payload) != crc:
            return Segment(entries, at, True)
        entries.append((term, payload))
        at += 20 + length


def read_metadata(path: Path) -> tuple[int, int]:
    """``(term, vote)`` of a 24-byte metadata file (vote -1: none)."""
    b = path.read_bytes()
    assert len(b) == 24, f"{path}: {len(b)} bytes"
    assert b[:4] == METADATA_MARKER
    version, term, vote, crc = struct.unpack(">iqiI", b[4:])
    assert version == 1 and crc == crc32_mpeg2(b[4:20])
    return term, vote


def read_snapshot(path: Path) -> tuple[int, int, bytes] | None:
    """``(last index, last term, state bytes)``; None for a 0-byte file."""
    b = path.read_bytes()
    if not b:
        return None
    assert b[:4] == SNAPSHOT_MARKER
    index, term, length = struct.unpack_from(">qqi", b, 4)
    state = b[24 : 24 + length]
    (crc,) = struct.unpack_from(">I", b, 24 + length)
    assert len(b) == 28 + length and crc == crc32_mpeg2(state)
    return index, term, state


def read_log(log_dir: Path) -> list[tuple[int, int, bytes]]:
    """``(index, term, payload)`` of every entry, segments in name order (the name is the
    first index); the last segment may end in a torn record, no other may."""
    names = sorted(p for p in log_dir.iterdir() if p.name.endswith(".log"))
    out = []
    for k, path in enumerate(names):
        seg = read_segment(path)
        assert not seg.torn or k == len(names) - 1, f"{path}: torn record in a sealed segment"
        first = int(path.name[:19])
        assert not out or out[-1][0] + 1 == first or not seg.entries, f"{path}: gap"
        out.extend((first + i, term, data) for i, (term, data) in enumerate(seg.entries))
    return out
