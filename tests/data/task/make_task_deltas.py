"""Writes task_deltas.json: the task-queue deltas of spec section 12 as docs/format.md lays them
out, encoded here from that table with `struct` alone (never with tflux).

Run from this folder: python make_task_deltas.py
"""

import json
import struct
from pathlib import Path


def name(n: str) -> bytes:
    b = n.encode("ascii")
    return bytes([len(b)]) + b


def change_int(v: object) -> bytes:
    # Change<Int64> = Nullable<Nullable<Int64>>: "keep" absent, None cleared, int set.
    if v == "keep":
        return b"\x00"
    if v is None:
        return b"\x01\x00"
    return b"\x01\x01" + struct.pack(">q", v)


def change_dead(v: object) -> bytes:
    if v == "keep":
        return b"\x00"
    if v is None:
        return b"\x01\x00"
    q, n = v
    return b"\x01\x01" + name(q) + struct.pack(">i", n)


def rules(queue, dead_letter, retry_delay_ms, retry_backoff, retry_max_delay_ms, lease_ms):
    data = b"Q" + name(queue) + change_dead(dead_letter)
    for v in (retry_delay_ms, retry_backoff, retry_max_delay_ms, lease_ms):
        data += change_int(v)
    return {
        "kind": "Q",
        "queue": queue,
        "dead_letter": dead_letter,
        "retry_delay_ms": retry_delay_ms,
        "retry_backoff": retry_backoff,
        "retry_max_delay_ms": retry_max_delay_ms,
        "lease_ms": lease_ms,
        "hex": data.hex(),
    }


def add_later(queue, key, not_before, message: bytes):
    data = b"L" + name(queue) + struct.pack(">qqi", key, not_before, len(message)) + message
    return {
        "kind": "L",
        "queue": queue,
        "key": key,
        "not_before": not_before,
        "message_hex": message.hex(),
        "hex": data.hex(),
    }


def delivered(queue, rid):
    data = b"V" + name(queue) + struct.pack(">Q", rid)
    return {"kind": "V", "queue": queue, "record_id": rid, "hex": data.hex()}


def failed(queue, rid, due):
    data = b"F" + name(queue) + struct.pack(">Qq", rid, due)
    return {"kind": "F", "queue": queue, "record_id": rid, "due": due, "hex": data.hex()}


def purge(queue, kept):
    data = b"P" + name(queue) + struct.pack(">i", len(kept))
    data += b"".join(struct.pack(">Q", k) for k in kept)
    return {"kind": "P", "queue": queue, "kept": kept, "hex": data.hex()}


vectors = {
    "what": "task-queue deltas (spec 12, docs/format.md): fields and exact bytes; "
    "'keep' = the rule is unchanged, null = cleared; retry_backoff in millionths",
    "rules_set_all": rules("jobs", ["jobs-dead", 5], 1000, 2_000_000, 300_000, 30_000),
    "rules_change_lease_clear_dead_letter": rules("jobs", None, "keep", "keep", "keep", 60_000),
    "rules_nothing": rules("", "keep", "keep", "keep", "keep", "keep"),
    "add_later": add_later("jobs", -3, 1_765_000_000_000, b"hello"),
    "add_later_default_queue_empty": add_later("", 9223372036854775807, 0, b""),
    "delivered": delivered("jobs", 18446744073709551615),
    "failed": failed("jobs", 7, 1_765_000_001_500),
    "purge_keeping_two": purge("jobs", [3, 9]),
    "purge_all": purge("q", []),
}

out = Path(__file__).with_name("task_deltas.json")
out.write_text(json.dumps(vectors, indent=1) + "\n")
