"""What the ``test_codec_*.py`` modules share: a reference encoder of deltas (spec section 6), the
snapshot (spec 4) and the metadata (spec 5) written from the spec with ``struct`` and ``zlib``
only, the golden vectors of ``tests/data`` it is checked against, and hypothesis strategies of
names, integers, sizes and key ranges.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

from hypothesis import strategies as st
from tflux import (
    Delta,
)

DATA_DIR = Path(__file__).parent.parent / "data"
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1
SNAPSHOT_MARKER = bytes.fromhex("b6380fc9")
METADATA_MARKER = bytes.fromhex("5a6ea012")
NO_LIMIT = -1


# ---------------------------------------------------------------- reference encoder (spec)


def ref_name(name: str) -> bytes:
    raw = name.encode("ascii")
    return struct.pack(">B", len(raw)) + raw


def ref_range(key_range: tuple[int, int] | None) -> bytes:
    return b"\x00" if key_range is None else b"\x01" + struct.pack(">qq", *key_range)


def ref_create(queue, implementation, max_queue_size, max_message_size, key_range) -> bytes:
    return (
        b"C"
        + ref_name(queue)
        + struct.pack(">iii", implementation, max_queue_size, max_message_size)
        + ref_range(key_range)
    )


def ref_delete(queue: str) -> bytes:
    return b"D" + ref_name(queue)


def ref_add(queue: str, key: int, message: bytes) -> bytes:
    return b"A" + ref_name(queue) + struct.pack(">qi", key, len(message)) + message


def ref_remove(queue: str, record_id: int) -> bytes:
    return b"R" + ref_name(queue) + struct.pack(">Q", record_id)


def ref_queue(
    name: str,
    implementation: int = 1,
    last_id: int = 0,
    max_queue_size: int = NO_LIMIT,
    max_message_size: int = NO_LIMIT,
    key_range: tuple[int, int] | None = None,
    records: list[tuple[int, int, bytes]] = (),
    record_count: int | None = None,
) -> bytes:
    out = ref_name(name) + struct.pack(
        ">iQii", implementation, last_id, max_queue_size, max_message_size
    )
    out += ref_range(key_range)
    out += struct.pack(">i", len(records) if record_count is None else record_count)
    for rid, key, data in records:
        out += struct.pack(">Qqi", rid, key, len(data)) + data
    return out


def ref_state(queues: list[bytes], count: int | None = None) -> bytes:
    return struct.pack(">i", len(queues) if count is None else count) + b"".join(queues)


def ref_snapshot(index: int, term: int, state: bytes, *, length: int | None = None) -> bytes:
    length = len(state) if length is None else length
    return (
        SNAPSHOT_MARKER
        + struct.pack(">iii", index, term, length)
        + state
        + struct.pack(">I", zlib.crc32(state))
    )


def ref_metadata(term: int, vote: int, version: int = 1) -> bytes:
    body = struct.pack(">iii", version, term, vote)
    return METADATA_MARKER + body + struct.pack(">I", zlib.crc32(body))


def manifest() -> dict:
    return json.loads((DATA_DIR / "manifest.json").read_text())


def golden_deltas() -> dict:
    return json.loads((DATA_DIR / "deltas.json").read_text())


def limit(v: int) -> int | None:
    return None if v == NO_LIMIT else v


def delta_from_vector(v: dict) -> Delta:
    kind = v["kind"]
    if kind == "C":
        return Delta.create_queue(
            v["queue"],
            implementation=v["implementation"],
            max_queue_size=limit(v["max_queue_size"]),
            max_message_size=limit(v["max_message_size"]),
            key_range=tuple(v["key_range"]) if v["key_range"] is not None else None,
        )
    if kind == "D":
        return Delta.delete_queue(v["queue"])
    if kind == "A":
        return Delta.add_record(v["queue"], v["key"], bytes.fromhex(v["message_hex"]))
    assert kind == "R"
    return Delta.remove_record(v["queue"], v["record_id"])


names = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=255)
int32s = st.integers(-(2**31), INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)
sizes = st.none() | st.integers(0, INT32_MAX)
ranges = st.none() | st.tuples(int64s, int64s)
