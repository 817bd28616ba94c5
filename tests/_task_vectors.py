"""The task-queue delta vectors of spec section 12 (``data/task/task_deltas.json``, written with
``struct`` alone) as every reader should see them: the bytes of each delta, and the fields a
reader gives back, in the names of the log's columns (``due``, ``kept_ids``, ``rules``) and of
``tflux dump`` (``not_before``/``due``, ``kept_ids``, the rules by name). Never tflux output.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any

VECTORS: dict[str, Any] = {
    name: v
    for name, v in json.loads(
        (Path(__file__).parent / "data" / "task" / "task_deltas.json").read_text()
    ).items()
    if isinstance(v, dict)
}

KINDS = {"Q": "queue_rules", "L": "add_later", "V": "delivered", "F": "failed", "P": "purge"}
RULES = ["dead_letter", "retry_delay_ms", "retry_backoff", "retry_max_delay_ms", "lease_ms"]

# Ids past Int64 are refused by the columns (Spark has no unsigned type): a Delivered of an id
# Int64 holds, encoded by hand from spec section 12, for the column readers.
# The rules column of vector rules_set_all, exactly (the core and the JVM write the same text).
RULES_SET_ALL_TEXT = (
    '{"dead_letter":["jobs-dead",5],"retry_delay_ms":1000,"retry_backoff":2000000,'
    '"retry_max_delay_ms":300000,"lease_ms":30000}'
)
DELIVERED_SMALL = b"V" + bytes([4]) + b"jobs" + struct.pack(">Q", 5)


def data(name: str) -> bytes:
    return bytes.fromhex(VECTORS[name]["hex"])


def rules_change(v: dict[str, Any]) -> dict[str, Any]:
    """The rules a QueueRules vector changes (absent: kept; None: cleared)."""
    return {r: v[r] for r in RULES if v[r] != "keep"}


def columns_of(v: dict[str, Any]) -> dict[str, Any]:
    """The non-null log columns of the delta of vector ``v`` (``rules`` as parsed JSON)."""
    kind = v["kind"]
    out: dict[str, Any] = {"kind": KINDS[kind], "queue": v["queue"]}
    if kind == "Q":
        out["rules"] = rules_change(v)
    elif kind == "L":
        out.update(key=v["key"], message=bytes.fromhex(v["message_hex"]), due=v["not_before"])
    elif kind == "V":
        out["record_id"] = v["record_id"]
    elif kind == "F":
        out.update(record_id=v["record_id"], due=v["due"])
    elif kind == "P":
        out["kept_ids"] = v["kept"]
    return out


def column_rows() -> list[tuple[bytes, dict[str, Any]]]:
    """(data, non-null columns) of every vector the columns read (ids within Int64)."""
    rows = [(data(n), columns_of(v)) for n, v in VECTORS.items() if n != "delivered"]
    rows.append((DELIVERED_SMALL, {"kind": "delivered", "queue": "jobs", "record_id": 5}))
    return rows


def dump_fields(v: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``tflux dump --json`` for vector ``v`` (after lsn and term)."""
    kind = v["kind"]
    out: dict[str, Any] = {"kind": KINDS[kind], "queue": v["queue"]}
    if kind == "Q":
        out.update(rules_change(v))
    elif kind == "L":
        message = bytes.fromhex(v["message_hex"])
        out.update(key=v["key"], not_before=v["not_before"], message_length=len(message))
    elif kind == "V":
        out["record_id"] = v["record_id"]
    elif kind == "F":
        out.update(record_id=v["record_id"], due=v["due"])
    elif kind == "P":
        out["kept_ids"] = v["kept"]
    return out


def task_layout_snapshot(snapshot: Path) -> None:
    """Rewrites the spec snapshot at ``snapshot`` (narrow or wide layout) in the task layout
    (docs/format.md "Task-queue deltas", from its byte table): the same state, and queue "jobs"
    with a lease rule of 30 s (every other rule cleared), no delayed record, no counts."""
    data = snapshot.read_bytes()
    wide = data[:4] == bytes.fromhex("b6380fca")
    head = "!qqi" if wide else "!iii"
    index, term, n = struct.unpack_from(head, data, 4)
    state = data[4 + struct.calcsize(head) : 4 + struct.calcsize(head) + n]
    rules = b"\x01\x00" * 4 + b"\x01\x01" + struct.pack("!q", 30_000)
    tasks = struct.pack("!i", 1) + b"\x04jobs" + rules + struct.pack("!ii", 0, 0)
    header = struct.pack("!qq", index, term)
    body = header + struct.pack("!i", len(state)) + state + struct.pack("!i", len(tasks)) + tasks
    crc = zlib.crc32(header + state + tasks)
    snapshot.write_bytes(bytes.fromhex("b6380fcb") + body + struct.pack("!I", crc))
