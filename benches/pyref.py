"""A pure-Python reader of tflux log segments: the baseline a user would write without tflux.

Written from the format spec (section 3) with ``struct`` and ``zlib.crc32`` only; it never
imports tflux. It does the work of ``tflux.verify``: check each segment's header, walk the records
from offset 8 to the end marker, check every record's framing, padding and CRC, the order of terms
and the continuity of LSNs across segments, and count the records.

    segment  = { file marker 12 76 AD 55 | version Int32 = 1 } record* end marker 00 00 00 00
    record   = { marker AA F5 34 C4 | term Int32 | crc UInt32 | len Int32 | data[len] | 0..3 zeros }

All integers are big-endian; the CRC (ISO-HDLC, as ``zlib.crc32``) covers the data bytes only.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from pathlib import Path

FILE_HEADER = bytes.fromhex("1276ad55") + struct.pack(">i", 1)
RECORD_MARKER = bytes.fromhex("aaf534c4")
END_MARKER = bytes(4)
RECORD_HEADER = struct.Struct(">4siIi")  # marker, term, crc, data length


class SegmentError(ValueError):
    """A segment that cannot be read, with the byte offset where the bad header or record starts."""

    def __init__(self, path: str, offset: int, message: str) -> None:
        super().__init__(f"{path}: offset {offset}: {message}")
        self.path = path
        self.offset = offset


def scan_bytes(buf: bytes, path: str = "<bytes>", previous_term: int = 0) -> tuple[int, int]:
    """Checks every record of one segment's bytes; returns ``(records, last term)``.

    Raises :class:`SegmentError` at the first bad header or record (a torn tail included: this
    reader reports, it does not repair).
    """
    if buf[:8] != FILE_HEADER:
        raise SegmentError(path, 0, "bad segment header (marker or version)")
    view = memoryview(buf)
    unpack = RECORD_HEADER.unpack_from
    crc32 = zlib.crc32
    end = len(buf)
    at = 8
    count = 0
    term_before = previous_term
    while at < end:  # reaching the physical end at a record boundary is a clean end
        if buf[at : at + 4] == END_MARKER:
            break
        if end - at < RECORD_HEADER.size:
            raise SegmentError(path, at, "incomplete record header")
        marker, term, stored, length = unpack(buf, at)
        if marker != RECORD_MARKER:
            raise SegmentError(path, at, f"bad record marker {marker.hex(' ')}")
        if length < 0:
            raise SegmentError(path, at, f"negative data length {length}")
        start = at + RECORD_HEADER.size
        stop = start + length
        following = stop + (-length % 4)
        if following > end:
            raise SegmentError(path, at, f"data length {length} runs past the end of the file")
        if following != stop and any(view[stop:following]):
            raise SegmentError(path, at, "non-zero padding byte")
        if crc32(view[start:stop]) != stored:
            raise SegmentError(path, at, "checksum mismatch")
        if term < term_before:
            raise SegmentError(path, at, f"term {term} lower than the previous term {term_before}")
        term_before = term
        count += 1
        at = following
    return count, term_before


def scan_segment(path: str | os.PathLike[str], previous_term: int = 0) -> tuple[int, int]:
    """Reads one segment file and checks it; returns ``(records, last term)``."""
    return scan_bytes(Path(path).read_bytes(), os.fspath(path), previous_term)


def segment_files(log_dir: str | os.PathLike[str]) -> list[Path]:
    """The segment files of a log directory in LSN order (19 digits + ``.log``; others ignored)."""
    names = (p for p in Path(log_dir).iterdir() if p.is_file())
    segments = [p for p in names if re.fullmatch(r"[0-9]{19}\.log", p.name)]
    return sorted(segments, key=lambda p: int(p.name[:19]))


def scan_log(paths: list[Path]) -> int:
    """Checks consecutive segments in order: each must start at the LSN after the previous one's
    last record and terms must not decrease across them. Returns the number of records."""
    total = 0
    term = 0
    expected = None
    for path in paths:
        first_lsn = int(path.name[:19])
        if expected is not None and first_lsn != expected:
            raise SegmentError(
                os.fspath(path), 0, f"segment starts at LSN {first_lsn}, not {expected}"
            )
        count, term = scan_segment(path, term)
        expected = first_lsn + count
        total += count
    return total
