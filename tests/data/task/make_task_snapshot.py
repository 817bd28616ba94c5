"""Writes the task-layout snapshot vectors (spec 12, docs/format.md "Snapshot task layout") and
task_snapshot.json (what a reader must return, or the offset and reason it must refuse at),
encoded here from the format text with `struct` and `zlib.crc32` alone (never with tflux).

Layout: B6 38 0F CB | Int64 last index | Int64 last term | Buffer state (section 4) | Buffer tasks
| UInt32 CRC-32 of index, term, state bytes and tasks bytes.
tasks = Array<QueueName | RulesChange (every rule named: 01 00 none, 01 01 value)
        | Array<Pair<UInt64,Int64>> delayed (id, due) | Array<Pair<UInt64,Int32>> attempts>.

Run from this folder: python make_task_snapshot.py
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

TASK_MARKER = bytes.fromhex("B6380FCB")
HEAD = 4 + 8 + 8  # marker, index, term
RULE_NAMES = ("retry_delay_ms", "retry_backoff", "retry_max_delay_ms", "lease_ms")


def name(n: str) -> bytes:
    b = n.encode("ascii")
    return bytes([len(b)]) + b


def state_bytes(queues: list[dict]) -> bytes:
    out = struct.pack(">i", len(queues))
    for q in queues:
        out += name(q["queue"]) + struct.pack(">iQii", q["implementation"], q["last_id"], -1, -1)
        if q["key_range"] is None:
            out += b"\x00"
        else:
            out += b"\x01" + struct.pack(">qq", *q["key_range"])
        out += struct.pack(">i", len(q["records"]))
        for r in q["records"]:
            msg = bytes.fromhex(r["message_hex"])
            out += struct.pack(">Qqi", r["id"], r["key"], len(msg)) + msg
    return out


def rules_bytes(rules: dict) -> bytes:
    """Every rule named (a snapshot carries the rules whole): 01 00 none, 01 01 value."""
    dead = rules["dead_letter"]
    out = b"\x01\x00" if dead is None else b"\x01\x01" + name(dead[0]) + struct.pack(">i", dead[1])
    for k in RULE_NAMES:
        v = rules[k]
        out += b"\x01\x00" if v is None else b"\x01\x01" + struct.pack(">q", v)
    return out


def tasks_bytes(tasks: list[dict], raw_rules: dict[str, bytes] | None = None) -> bytes:
    out = struct.pack(">i", len(tasks))
    for t in tasks:
        out += name(t["queue"])
        out += (raw_rules or {}).get(t["queue"]) or rules_bytes(t["rules"])
        out += struct.pack(">i", len(t["delayed"]))
        out += b"".join(struct.pack(">Qq", i, due) for i, due in t["delayed"])
        out += struct.pack(">i", len(t["attempts"]))
        out += b"".join(struct.pack(">Qi", i, n) for i, n in t["attempts"])
    return out


def snapshot(index: int, term: int, state: bytes, tasks: bytes, crc: int | None = None) -> bytes:
    head = struct.pack(">qq", index, term)
    if crc is None:
        crc = zlib.crc32(head + state + tasks)
    out = TASK_MARKER + head + struct.pack(">i", len(state)) + state
    return out + struct.pack(">i", len(tasks)) + tasks + struct.pack(">I", crc)


def record(rid: int, key: int, message: bytes) -> dict:
    return {"id": rid, "key": key, "message_hex": message.hex()}


QUEUES = [
    {"queue": "", "implementation": 1, "last_id": 0, "key_range": None, "records": []},
    {
        "queue": "jobs",
        "implementation": 1,
        "last_id": 6,
        "key_range": None,
        "records": [
            record(1, 5, b"first"),
            record(2, -1, b"later"),
            record(3, 0, b""),
            record(5, 5, b"poison"),
            record(6, 2, b"later too"),
        ],
    },
    {"queue": "jobs-dead", "implementation": 1, "last_id": 2, "key_range": None, "records": []},
    {
        "queue": "slots",
        "implementation": 2,
        "last_id": 3,
        "key_range": [0, 9],
        "records": [record(2, 9, b"slot"), record(3, 0, b"\x00\xff")],
    },
]
NO_RULES = {"dead_letter": None, **dict.fromkeys(RULE_NAMES)}
TASKS = [
    {
        "queue": "jobs",
        "rules": {
            "dead_letter": ["jobs-dead", 3],
            "retry_delay_ms": 1000,
            "retry_backoff": 2_000_000,
            "retry_max_delay_ms": 60_000,
            "lease_ms": 30_000,
        },
        "delayed": [[2, 1_767_225_600_000], [6, 1_767_225_600_500]],
        "attempts": [[1, 2], [5, 3]],
    },
    # Delayed records only: no rules, no counted deliveries.
    {"queue": "slots", "rules": NO_RULES, "delayed": [[3, 0]], "attempts": []},
]
INDEX, TERM = 41, 3


def tasks_at(state: bytes) -> int:
    """File offset of the tasks bytes (after the state Buffer and the tasks length)."""
    return HEAD + 4 + len(state) + 4


def with_task(**change) -> list[dict]:
    """TASKS with the first entry's fields changed."""
    return [{**TASKS[0], **change}, TASKS[1]]


def build() -> tuple[dict[str, bytes], dict]:
    state = state_bytes(QUEUES)
    at = tasks_at(state)
    first_lists = at + 4 + len(name("jobs")) + len(rules_bytes(TASKS[0]["rules"]))
    files: dict[str, bytes] = {}
    manifest: dict = {
        "what": "task-layout snapshots (spec 12, docs/format.md 'Snapshot task layout'): the "
        "queues and records a reader returns (every record, delayed ones included; queues by "
        "name, records by id), each queue's task state (rules whole, null = none; backoff in "
        "millionths; delayed (id, due unix ms) and attempts (id, n), ascending ids), or the "
        "file offset and reason a reader refuses at"
    }
    good = snapshot(INDEX, TERM, state, tasks_bytes(TASKS))
    files["tasks.snapshot"] = good
    manifest["tasks.snapshot"] = {
        "last_index": INDEX,
        "last_term": TERM,
        "queues": QUEUES,
        "tasks": TASKS,
    }

    def bad(file: str, data: bytes, offset: int, error: str) -> None:
        files[file] = data
        manifest[file] = {"error_offset": offset, "error": error}

    # A byte of the tasks flipped: the checksum covers them.
    flipped = bytearray(good)
    flipped[first_lists + 4 + 8] ^= 0x01  # the first delayed due's top byte
    bad("tasks_flipped.snapshot", bytes(flipped), len(good) - 4, "checksum mismatch")
    unknown = [*TASKS, {"queue": "nope", "rules": NO_RULES, "delayed": [], "attempts": []}]
    t = tasks_bytes(unknown)
    bad(
        "tasks_unknown_queue.snapshot",
        snapshot(INDEX, TERM, state, t),
        at + len(tasks_bytes(TASKS)),
        'task entry of queue "nope", which the state does not hold',
    )
    bad(
        "tasks_delayed_not_a_record.snapshot",
        snapshot(INDEX, TERM, state, tasks_bytes(with_task(delayed=[[2, 1], [4, 2]]))),
        at + 4,
        'queue "jobs": delayed id 4 is not one of its records',
    )
    bad(
        "tasks_attempts_descending.snapshot",
        snapshot(INDEX, TERM, state, tasks_bytes(with_task(attempts=[[5, 1], [1, 1]]))),
        at + 4,
        'queue "jobs": attempts ids are not strictly ascending',
    )
    zero = tasks_bytes(with_task(attempts=[[1, 0]]))
    bad(
        "tasks_zero_attempts.snapshot",
        snapshot(INDEX, TERM, state, zero),
        first_lists + 4 + 2 * 16 + 4 + 8,
        "attempts 0 is below 1",
    )
    itself = {**TASKS[0]["rules"], "dead_letter": ["jobs", 3]}
    bad(
        "tasks_dead_letter_to_itself.snapshot",
        snapshot(INDEX, TERM, state, tasks_bytes(with_task(rules=itself))),
        at + 4,
        'queue "jobs": dead letter: a queue cannot dead-letter to itself',
    )
    # A rules Bool other than 0/1: the dead-letter change flag of the first entry.
    two = b"\x02" + rules_bytes(TASKS[0]["rules"])[1:]
    bad(
        "tasks_bad_bool.snapshot",
        snapshot(INDEX, TERM, state, tasks_bytes(TASKS, {"jobs": two})),
        at + 4 + len(name("jobs")),
        "dead letter change flag 0x02 is not a Bool (0 or 1)",
    )
    trailing = tasks_bytes(TASKS) + b"\x00\x00"
    bad(
        "tasks_trailing.snapshot",
        snapshot(INDEX, TERM, state, trailing),
        at + len(trailing) - 2,
        "2 trailing bytes after the tasks",
    )
    return files, manifest


if __name__ == "__main__":
    here = Path(__file__).parent
    files, manifest = build()
    for file, data in files.items():
        (here / file).write_bytes(data)
    (here / "task_snapshot.json").write_text(json.dumps(manifest, indent=1) + "\n")
