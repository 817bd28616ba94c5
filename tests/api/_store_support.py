"""What the ``test_store_*.py`` modules share: independent encoders and decoders of the snapshot
(spec 4) and the metadata (spec 5) written with ``struct`` and ``zlib`` (checked against the golden
files in ``tests/data``), readers of what a store wrote (through the strict segment parser of
``conftest.py``).
"""

from __future__ import annotations

import struct
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import tflux
from conftest import (
    parse_segment,
    segment_files,
)
from test_state import ARRAY, HEAP, qname

IMPL_NAMES = {HEAP: "heap", ARRAY: "array"}
IMPL_CODES = {v: k for k, v in IMPL_NAMES.items()}

# Settings that make segments roll and snapshots happen after a handful of records.
SMALL = {
    "log_file_soft_limit": 256,
    "log_file_hard_limit": 1024,
    "log_preallocate_segments": False,
    "snapshot_creation_segments_threshold": 2,
    "log_sync_policy": "never",
}
FAST = {"log_preallocate_segments": False, "log_sync_policy": "never"}


# --- independent codecs of the snapshot (spec 4) and metadata (spec 5) ---------------------------

SNAPSHOT_MARKER = bytes.fromhex("b6380fc9")
WIDE_SNAPSHOT_MARKER = bytes.fromhex("b6380fca")  # spec 4.1: Int64 index and term
METADATA_MARKER = bytes.fromhex("5a6ea012")


@dataclass
class SnapQueue:
    name: str
    impl: int = HEAP
    last_id: int = 0
    max_size: int = -1
    max_message_size: int = -1
    key_range: tuple[int, int] | None = None
    records: list[tuple[int, int, bytes]] = field(default_factory=list)  # (id, key, data)


def encode_state(queues: list[SnapQueue]) -> bytes:
    out = struct.pack(">i", len(queues))
    for q in queues:
        out += qname(q.name) + struct.pack(
            ">iQii", q.impl, q.last_id, q.max_size, q.max_message_size
        )
        out += b"\x00" if q.key_range is None else b"\x01" + struct.pack(">qq", *q.key_range)
        out += struct.pack(">i", len(q.records))
        for rid, key, data in q.records:
            out += struct.pack(">Qqi", rid, key, len(data)) + data
    return out


def encode_snapshot(
    last_index: int,
    last_term: int,
    queues: list[SnapQueue] | None = None,
    state: bytes | None = None,
) -> bytes:
    """Marker | Int32 last index | Int32 last term | Buffer state | UInt32 CRC of the state."""
    if state is None:
        state = encode_state(queues if queues is not None else [SnapQueue("")])
    return (
        SNAPSHOT_MARKER
        + struct.pack(">iii", last_index, last_term, len(state))
        + state
        + struct.pack(">I", zlib.crc32(state))
    )


class Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        assert 0 <= n <= len(self.buf) - self.pos, f"short read of {n} at {self.pos}"
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))

    def name(self) -> str:
        (n,) = self.unpack(">B")
        raw = self.take(n)
        assert all(0x21 <= c <= 0x7E for c in raw), raw
        return raw.decode("ascii")


def decode_snapshot(buf: bytes) -> tuple[int, int, dict[str, SnapQueue]]:
    """Strict reader for snapshots tflux wrote: any deviation from spec 4 fails the test."""
    r = Reader(buf)
    marker = r.take(4)
    assert marker in (SNAPSHOT_MARKER, WIDE_SNAPSHOT_MARKER)
    wide = marker == WIDE_SNAPSHOT_MARKER
    last_index, last_term, length = r.unpack(">qqi" if wide else ">iii")
    # Spec 4.1: written wide only when index or term does not fit Int32.
    assert wide == (max(last_index, last_term) > 2**31 - 1)
    state = r.take(length)
    (crc,) = r.unpack(">I")
    covered = buf[4:20] + state if wide else state
    assert crc == zlib.crc32(covered), "snapshot checksum"
    assert r.pos == len(buf), "trailing bytes after the snapshot checksum"
    s = Reader(state)
    queues: dict[str, SnapQueue] = {}
    (count,) = s.unpack(">i")
    for _ in range(count):
        name = s.name()
        impl, last_id, max_size, max_msg = s.unpack(">iQii")
        (flag,) = s.unpack(">B")
        assert flag in (0, 1)
        key_range = s.unpack(">qq") if flag else None
        (n,) = s.unpack(">i")
        records = []
        for _ in range(n):
            rid, key, dlen = s.unpack(">Qqi")
            records.append((rid, key, s.take(dlen)))
        assert name not in queues, f"duplicate queue {name!r}"
        queues[name] = SnapQueue(name, impl, last_id, max_size, max_msg, key_range, records)
    assert s.pos == len(state), "trailing bytes in the snapshot state"
    return last_index, last_term, queues


def encode_metadata(term: int, vote: int, version: int = 1) -> bytes:
    body = struct.pack(">iii", version, term, vote)
    return METADATA_MARKER + body + struct.pack(">I", zlib.crc32(body))


# --- helpers -------------------------------------------------------------------------------------


def rec(r) -> tuple[int, int, bytes, str]:
    return (r.id, r.key, bytes(r.payload), r.queue)


def contents(store, queue: str) -> list[tuple[int, int, bytes, str]]:
    return [rec(r) for r in store.records(queue)]


def info(store, name: str):
    found = [q for q in store.queues() if q.name == name]
    assert len(found) == 1, f"queue {name!r} listed {len(found)} times"
    return found[0]


def names(store) -> list[str]:
    return sorted(q.name for q in store.queues())


def log_dir_of(base: Path) -> Path:
    return base / "data" / "log"


def log_entries(base: Path) -> list[tuple[int, int, bytes]]:
    """(lsn, term, data) of every record in every segment file, read with the strict parser."""
    out = []
    for name in segment_files(log_dir_of(base)):
        start = int(name[:19])
        parsed = parse_segment((log_dir_of(base) / name).read_bytes())
        if out:
            assert out[-1][0] + 1 == start, f"segment {name} does not continue the log"
        out.extend((start + i, t, d) for i, (t, d) in enumerate(parsed.records))
    return out


def log_datas(base: Path) -> list[bytes]:
    return [d for _, _, d in log_entries(base)]


def read_snapshot_file(base: Path):
    return decode_snapshot((base / "data" / "tflux.snapshot").read_bytes())


def files_of(base: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(base)): p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and "temp" not in p.parts
    }


def assert_nothing_lost(base: Path, before: dict[str, bytes]) -> None:
    after = files_of(base)
    for path, data in before.items():
        assert path in after, f"{path} was deleted"
        assert after[path] == data, f"{path} was modified"


def setting(store, pascal: str) -> str:
    values = store.settings
    snake = "".join("_" + c.lower() if c.isupper() else c for c in pascal).lstrip("_")
    key = pascal if pascal in values else snake
    return str(values[key]).lower()


def reopen(store, base: Path, **kwargs):
    store.close()
    return tflux.open(base, **kwargs)


def run_thread(target) -> tuple[threading.Thread, list]:
    result: list = []

    def body():
        try:
            result.append(target())
        except BaseException as e:  # pragma: no cover - reported by the assertion below
            result.append(e)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, result
