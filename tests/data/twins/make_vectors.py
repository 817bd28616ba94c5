"""Writes the shared vectors of the Java twins in this directory, from the spec text alone
(``file-format.md`` sections 2-4.1, 6, 7, 9 and 10): ``struct`` for the byte tables,
``zlib.crc32`` for the spec's CRC-32 (section 2 names zlib's), ``zstandard`` and ``lz4.frame``
for the compressed payloads, and a reference model of the queue state machine written from
section 7 (a dict per queue) for the replay's expected ids and live records. Nothing of tflux is
imported, so the vectors hold the core (Rust), its Python face and the JVM reader to an encoder
none of them shares.

The output is committed; ``tests/test_jvm_twins.py`` checks that the files still match this
script (the compressed payloads by what they decode to, since a codec library may compress the
same bytes differently from one version to the next). Regenerate with

    python tests/data/twins/make_vectors.py

and never with tflux.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

# --- spec 2: encodings ----------------------------------------------------------------------


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def u64(v: int) -> bytes:
    return struct.pack(">Q", v)


def u32(v: int) -> bytes:
    return struct.pack(">I", v)


def buffer(b: bytes) -> bytes:
    return i32(len(b)) + b


def name(q: str) -> bytes:
    raw = q.encode("ascii")
    assert len(raw) <= 255 and all(0x21 <= c <= 0x7E for c in raw), q
    return bytes([len(raw)]) + raw


def key_range(r: tuple[int, int] | None) -> bytes:
    return b"\x00" if r is None else b"\x01" + i64(r[0]) + i64(r[1])


# --- spec 3: log segments -------------------------------------------------------------------

SEGMENT_HEADER = bytes.fromhex("1276AD55") + i32(1)
RECORD_MARKER = bytes.fromhex("AAF534C4")
END_MARKER = bytes(4)


def record(term: int, data: bytes) -> bytes:
    pad = -len(data) % 4
    return RECORD_MARKER + i32(term) + u32(zlib.crc32(data)) + buffer(data) + bytes(pad)


def segment(records: list[tuple[int, bytes]]) -> bytes:
    """Header through end marker: exactly the "original" a ``.log.z`` holds (spec 9)."""
    return SEGMENT_HEADER + b"".join(record(t, d) for t, d in records) + END_MARKER


# --- spec 6: deltas -------------------------------------------------------------------------


def create(q: str, impl: int, max_size: int = -1, max_msg: int = -1, rng=None) -> bytes:
    return b"C" + name(q) + i32(impl) + i32(max_size) + i32(max_msg) + key_range(rng)


def delete(q: str) -> bytes:
    return b"D" + name(q)


def add(q: str, key: int, message: bytes) -> bytes:
    return b"A" + name(q) + i64(key) + buffer(message)


def remove(q: str, record_id: int) -> bytes:
    return b"R" + name(q) + u64(record_id)


# --- spec 4 and 4.1: snapshots --------------------------------------------------------------

NARROW_MARKER = bytes.fromhex("B6380FC9")
WIDE_MARKER = bytes.fromhex("B6380FCA")


def state_bytes(queues: list[dict]) -> bytes:
    out = i32(len(queues))
    for q in queues:
        out += name(q["queue"]) + i32(q["implementation"]) + u64(q["last_id"])
        out += i32(q["max_queue_size"]) + i32(q["max_message_size"])
        out += key_range(tuple(q["key_range"]) if q["key_range"] else None)
        out += i32(len(q["records"]))
        for r in q["records"]:
            out += u64(r["id"]) + i64(r["key"]) + buffer(bytes.fromhex(r["message_hex"]))
    return out


def narrow_snapshot(last_index: int, last_term: int, queues: list[dict]) -> bytes:
    state = state_bytes(queues)
    return NARROW_MARKER + i32(last_index) + i32(last_term) + buffer(state) + u32(zlib.crc32(state))


def wide_snapshot(last_index: int, last_term: int, queues: list[dict]) -> bytes:
    """Section 4.1: Int64 index and term; the CRC covers those 16 bytes, then the state."""
    head = i64(last_index) + i64(last_term)
    state = state_bytes(queues)
    return WIDE_MARKER + head + buffer(state) + u32(zlib.crc32(head + state))


# --- spec 9: compressed sealed segments -----------------------------------------------------

Z_MARKER = bytes.fromhex("1276AD5A")
METHODS = {"zstd": 1, "lz4": 2}
Z_HEADER_LEN = 37


def z_header(first: int, last: int, method: str, original: bytes, crc: int | None = None) -> bytes:
    crc = zlib.crc32(original) if crc is None else crc
    head = Z_MARKER + i32(1) + i64(first) + i64(last) + bytes([METHODS[method]])
    head += i64(len(original)) + u32(crc)
    assert len(head) == Z_HEADER_LEN
    return head


def compress(method: str, original: bytes) -> bytes:
    if method == "zstd":
        import zstandard

        return zstandard.ZstdCompressor(level=3).compress(original)
    import lz4.frame

    return lz4.frame.compress(original)


def decompress(method: str, payload: bytes) -> bytes:
    if method == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(payload)
    import lz4.frame

    return lz4.frame.decompress(payload)


# --- spec 10: receiver cursors --------------------------------------------------------------

CURSOR_MARKER = bytes.fromhex("C3525F01")


def cursor(next_lsn: int) -> bytes:
    body = i32(1) + i64(next_lsn)
    return CURSOR_MARKER + body + u32(zlib.crc32(body))


# --- spec 7: the queue state machine, as a reference model ----------------------------------


class Model:
    """Queues by name: implementation, last id, records by id. Replay rules of spec 7."""

    def __init__(self, snapshot: list[dict] | None = None) -> None:
        self.queues: dict[str, dict] = {}
        if snapshot is None:
            self.queues[""] = {"implementation": 1, "last_id": 0, "records": {}, "config": None}
        else:
            for q in snapshot:
                recs = {r["id"]: (r["key"], bytes.fromhex(r["message_hex"])) for r in q["records"]}
                self.queues[q["queue"]] = {
                    "implementation": q["implementation"],
                    "last_id": q["last_id"],
                    "records": recs,
                    "config": (q["max_queue_size"], q["max_message_size"], q["key_range"]),
                }

    def apply(self, d: dict) -> int | None:
        """Applies one delta (its fields); returns the id an AddRecord gets."""
        q = d["queue"]
        if d["kind"] == "C":
            assert q not in self.queues
            rng = d["key_range"]
            assert d["implementation"] in (1, 2) and (d["implementation"] == 1 or rng)
            self.queues[q] = {
                "implementation": d["implementation"],
                "last_id": 0,
                "records": {},
                "config": (d["max_queue_size"], d["max_message_size"], rng),
            }
        elif d["kind"] == "D":
            assert q in self.queues and q != ""
            del self.queues[q]
        elif d["kind"] == "A":
            queue = self.queues[q]
            queue["last_id"] += 1
            queue["records"][queue["last_id"]] = (d["key"], bytes.fromhex(d["message_hex"]))
            return queue["last_id"]
        else:
            del self.queues[q]["records"][d["record_id"]]
        return None

    def live(self) -> dict[str, dict]:
        """Per queue: implementation, last id and records in dequeue order (key, then id)."""
        out = {}
        for q in sorted(self.queues):
            queue = self.queues[q]
            recs = sorted(queue["records"].items(), key=lambda kv: (kv[1][0], kv[0]))
            out[q] = {
                "implementation": queue["implementation"],
                "last_id": queue["last_id"],
                "records": [{"id": i, "key": k, "message_hex": m.hex()} for i, (k, m) in recs],
            }
        return out

    def snapshot_queues(self) -> list[dict]:
        """The state as snapshot QueueData (records stored in descending id order on purpose:
        the spec says any order)."""
        out = []
        for q in sorted(self.queues):
            queue = self.queues[q]
            max_size, max_msg, rng = queue["config"] or (-1, -1, None)
            recs = sorted(queue["records"].items(), reverse=True)
            out.append(
                {
                    "queue": q,
                    "implementation": queue["implementation"],
                    "last_id": queue["last_id"],
                    "max_queue_size": max_size,
                    "max_message_size": max_msg,
                    "key_range": rng,
                    "records": [{"id": i, "key": k, "message_hex": m.hex()} for i, (k, m) in recs],
                }
            )
        return out


def encode_delta(d: dict) -> bytes:
    if d["kind"] == "C":
        rng = tuple(d["key_range"]) if d["key_range"] else None
        return create(
            d["queue"], d["implementation"], d["max_queue_size"], d["max_message_size"], rng
        )
    if d["kind"] == "D":
        return delete(d["queue"])
    if d["kind"] == "A":
        return add(d["queue"], d["key"], bytes.fromhex(d["message_hex"]))
    return remove(d["queue"], d["record_id"])


def C(q: str, impl: int = 1, rng=None, max_size: int = -1, max_msg: int = -1) -> dict:
    return {
        "kind": "C",
        "queue": q,
        "implementation": impl,
        "max_queue_size": max_size,
        "max_message_size": max_msg,
        "key_range": list(rng) if rng else None,
    }


def D(q: str) -> dict:
    return {"kind": "D", "queue": q}


def A(q: str, key: int, message: bytes) -> dict:
    return {"kind": "A", "queue": q, "key": key, "message_hex": message.hex()}


def R(q: str, record_id: int) -> dict:
    return {"kind": "R", "queue": q, "record_id": record_id}


# The replay log: three segments (ids of later segments count the adds of earlier ones), a
# queue deleted and created again twice (ids restart per incarnation, and a remove names the
# incarnation it was logged in), an array queue recreated as a heap, the default queue.
REPLAY_SEGMENTS: list[list[dict]] = [
    [
        C("jobs"),
        A("", 5, b"d1"),
        A("jobs", 3, b"j1"),
        A("jobs", 1, b"j2"),
        A("", 5, b"d2"),
        R("jobs", 1),
        C("arr:x~", 2, (0, 9), max_size=100, max_msg=64),
        A("arr:x~", 9, b"a1"),
    ],
    [
        A("jobs", 2, b"j3"),
        D("jobs"),
        C("jobs"),
        A("jobs", 7, b"j4"),
        A("jobs", 7, b"j5"),
        R("jobs", 1),
    ],
    [
        A("arr:x~", 0, b"a2"),
        R("", 2),
        D("arr:x~"),
        C("arr:x~"),
        A("arr:x~", -4, b"a3"),
        A("", 1, b"d3"),
        D("jobs"),
        C("jobs", 2, (-1, 1)),
        A("jobs", -1, b"j6"),
    ],
]
# The replay from a snapshot taken after the first segment (its LSNs 0..7), then the rest.
SNAPSHOT_AFTER = 7


def replay_vectors(files: dict[str, bytes], manifest: dict) -> None:
    model = Model()
    entries = []
    lsn = 0
    install: dict[str, str] = {}
    snap_install: dict[str, str] = {}
    snap_queues = None
    for seg in REPLAY_SEGMENTS:
        first = lsn
        recs = []
        for d in seg:
            got = model.apply(d)
            entry = {"lsn": lsn, **d, "hex": encode_delta(d).hex()}
            if got is not None:
                entry["record_id"] = got
            entries.append(entry)
            recs.append((1, encode_delta(d)))
            if lsn == SNAPSHOT_AFTER:
                snap_queues = model.snapshot_queues()
            lsn += 1
        file = f"replay_{first}.log"
        files[file] = segment(recs)
        install[f"data/log/{first:019d}.log"] = file
        if first > SNAPSHOT_AFTER:
            snap_install[f"data/log/{first:019d}.log"] = file
    assert snap_queues is not None
    files["replay_7.snapshot"] = narrow_snapshot(SNAPSHOT_AFTER, 1, snap_queues)
    snap_install["data/tflux.snapshot"] = "replay_7.snapshot"
    live = model.live()
    replay = {
        "what": (
            "a log of deltas in (every record term 1); each AddRecord's expected record id "
            "('record_id' on the add entries) and each live queue's last id and records in "
            "dequeue order out. Ids restart at 1 in every incarnation (a CreateQueue after a "
            "DeleteQueue) and a RemoveRecord names the record of the incarnation it was logged in"
        ),
        "entries": entries,
        "live": live,
    }
    files["replay.json"] = (json.dumps(replay, indent=1) + "\n").encode()
    manifest["replay"] = {
        "what": "replay of three segments from an empty base (no snapshot): see replay.json",
        "install": install,
        "expect": "replay.json",
    }
    manifest["replay_after_snapshot"] = {
        "what": (
            f"the same state from a snapshot at last index {SNAPSHOT_AFTER} (records stored in "
            "descending id order) and the segments after it: ids continue from the snapshot's "
            "last ids; the same live records"
        ),
        "install": snap_install,
        "expect": "replay.json",
        "snapshot": {"last_index": SNAPSHOT_AFTER, "last_term": 1, "queues": snap_queues},
    }


def pattern(n: int, seed: int) -> bytes:
    """Bytes with repeats in them, so that both codecs emit matches, not only literals."""
    word = bytes((seed + 7 * i) % 251 for i in range(13))
    return (word * (n // len(word) + 1))[:n]


# The records of the compressed sealed segment (LSNs 0..3) and of the active one after it.
Z_RECORDS = [
    (1, create("zq", 1)),
    (1, add("zq", -7, pattern(300, 1))),
    (2, add("zq", 0, b"")),
    (2, add("zq", 2**63 - 1, pattern(1029, 2))),
]
AFTER_Z_RECORDS = [(2, remove("zq", 2)), (3, add("zq", 5, b"tail"))]


def compressed_vectors(files: dict[str, bytes], manifest: dict) -> None:
    original = segment(Z_RECORDS)
    last = len(Z_RECORDS) - 1
    after = f"{last + 1:019d}.log"
    files["after_z.log"] = segment(AFTER_Z_RECORDS)
    rows = [
        {"lsn": i, "term": t, "data_hex": d.hex()}
        for i, (t, d) in enumerate(Z_RECORDS + AFTER_Z_RECORDS)
    ]
    for method in ("zstd", "lz4"):
        name = f"{method}.log.z"
        files[name] = z_header(0, last, method, original) + compress(method, original)
        manifest[name] = {
            "what": (
                f"spec 9: sealed segment LSNs 0..{last} compressed with {method} "
                f"(method {METHODS[method]}), beside the active segment after_z.log"
            ),
            "install": {
                "data/log/0000000000000000000.log.z": name,
                f"data/log/{after}": "after_z.log",
            },
            "first_lsn": 0,
            "last_lsn": last,
            "method": METHODS[method],
            "original_len": len(original),
            "original_crc": f"{zlib.crc32(original):08x}",
            "records": rows,
        }
    bad = bytearray(files["zstd.log.z"])
    bad[33:37] = u32(zlib.crc32(original) ^ 0x00000100)
    files["bad_crc.log.z"] = bytes(bad)
    manifest["bad_crc.log.z"] = {
        "what": (
            "zstd.log.z with one bit of its header's original CRC flipped: the payload decodes "
            "to the right length, the CRC check fails; corruption naming the .log.z file at the "
            "CRC field's offset 33"
        ),
        "install": {
            "data/log/0000000000000000000.log.z": "bad_crc.log.z",
            f"data/log/{after}": "after_z.log",
        },
        "error_file": "0000000000000000000.log.z",
        "error_offset": 33,
    }


WIDE_INDEX = 2**32 + 5
WIDE_TERM = 2**31 + 3


def wide_queues() -> list[dict]:
    return [
        {
            "queue": "",
            "implementation": 1,
            "last_id": 2**40,
            "max_queue_size": -1,
            "max_message_size": -1,
            "key_range": None,
            "records": [
                {"id": 2**40, "key": -(2**63), "message_hex": "77696465"},
                {"id": 17, "key": 2**63 - 1, "message_hex": ""},
            ],
        },
        {
            "queue": "w!~",
            "implementation": 2,
            "last_id": 9,
            "max_queue_size": 10,
            "max_message_size": 512,
            "key_range": [-3, 3],
            "records": [
                {"id": 9, "key": 3, "message_hex": pattern(40, 3).hex()},
                {"id": 2, "key": -3, "message_hex": "00ff"},
            ],
        },
    ]


def wide_vectors(files: dict[str, bytes], manifest: dict) -> None:
    queues = wide_queues()
    files["wide.snapshot"] = wide_snapshot(WIDE_INDEX, WIDE_TERM, queues)
    state_len = len(state_bytes(queues))
    manifest["wide.snapshot"] = {
        "what": (
            "spec 4.1: the wide snapshot (marker B6 38 0F CA, Int64 last index 2^32+5 and last "
            "term 2^31+3, CRC over index, term and state); records stored out of id order; a "
            "reader returns them by ascending id"
        ),
        "last_index": WIDE_INDEX,
        "last_term": WIDE_TERM,
        "queues": queues,
    }
    bad = bytearray(files["wide.snapshot"])
    bad[4] ^= 0x01  # the high byte of the last index: only the wide CRC covers it
    files["wide_index_flipped.snapshot"] = bytes(bad)
    manifest["wide_index_flipped.snapshot"] = {
        "what": (
            "wide.snapshot with one bit of its last index flipped: the state's bytes are intact, "
            "so only a CRC that covers the index (4.1) sees it; checksum mismatch at the "
            "checksum field"
        ),
        "error_offset": 24 + state_len,
    }


def cursor_vectors(files: dict[str, bytes], manifest: dict) -> None:
    files["reader.cursor"] = cursor(3)
    # Term 0 and no empty message, as a channel writes them (an empty record in a channel's
    # last segment cannot be told from a torn one).
    messages = [b"m0", b"m1", b"m2", pattern(77, 4), b"m4"]
    files["channel.log"] = segment([(0, m) for m in messages])
    install = {
        "data/log/0000000000000000000.log": "channel.log",
        "data/cursors/reader.cursor": "reader.cursor",
    }
    manifest["reader.cursor"] = {
        "what": (
            "spec 10: receiver 'reader' whose next LSN is 3, in a channel directory whose log "
            "(channel.log, term 0) holds five opaque messages (not deltas)"
        ),
        "install": install,
        "receiver": "reader",
        "next_lsn": 3,
        "messages_hex": [m.hex() for m in messages],
    }
    bad = bytearray(files["reader.cursor"])
    bad[15] ^= 0x01  # the next LSN's low byte: 3 -> 2
    files["bad_crc.cursor"] = bytes(bad)
    manifest["bad_crc.cursor"] = {
        "what": (
            "reader.cursor with its next LSN changed (3 -> 2) and the CRC left: corruption "
            "naming the cursor file, at the checksum field's offset 16"
        ),
        "install": {**install, "data/cursors/reader.cursor": "bad_crc.cursor"},
        "receiver": "reader",
        "error_offset": 16,
    }


def bad_delta_vectors(files: dict[str, bytes], manifest: dict) -> None:
    """Deltas a reader must refuse (spec 2 and 6), each with the offset where the offending
    field starts, counted from the spec's layout: the rules of the bounds-checked reader."""
    q = name("q")  # 2 bytes
    cases = {
        "unknown_marker": (b"X" + q, 0, "a marker that is none of C, D, A, R"),
        "empty": (b"", 0, "no marker at all"),
        "name_length_past_end": (b"D\x0ajob", 1, "QueueName length 10, 3 bytes left"),
        "name_byte_outside_the_range": (
            b"A\x03a b" + i64(1) + i32(0),
            3,
            "QueueName byte 0x20 (a space) outside '!'..'~'",
        ),
        "key_cut_short": (b"A" + q + bytes(4), 3, "AddRecord's Int64 key with 4 bytes left"),
        "negative_message_length": (b"A" + q + i64(1) + i32(-1), 11, "Buffer length -1"),
        "message_length_past_end": (
            b"A" + q + i64(1) + i32(100) + b"abc",
            11,
            "Buffer length 100, 3 bytes left",
        ),
        "bool_not_0_or_1": (
            b"C" + name("jobs") + i32(1) + i32(-1) + i32(-1) + b"\x02",
            18,
            "the key range's Nullable flag 2 (a Bool is 0 or 1)",
        ),
        "key_range_cut_short": (
            b"C" + q + i32(2) + i32(-1) + i32(-1) + b"\x01" + i64(0) + bytes(2),
            24,
            "the key range's max (Int64) with 2 bytes left",
        ),
        "trailing_byte": (b"R" + q + u64(1) + b"\x00", 11, "a byte after a whole RemoveRecord"),
    }
    out = {
        "what": (
            "deltas every reader refuses as corruption (spec 2: lengths checked against the bytes "
            "left, Bool 0 or 1, QueueName bytes '!'..'~'; spec 6: known marker, exact "
            "consumption): hex, and the offset in the delta where the offending field starts"
        )
    }
    for key, (data, offset, why) in cases.items():
        out[key] = {"hex": data.hex(), "error_offset": offset, "why": why}
    files["bad_deltas.json"] = (json.dumps(out, indent=1) + "\n").encode()
    manifest["bad_deltas.json"] = {"what": out["what"]}


# --- issue 43: the rules the core changed (every segment's dialect, the LSN limit) ----------


def crc32_mpeg2(data: bytes) -> int:
    """Spec 11: poly 0x04C11DB7, init 0xFFFFFFFF, no reflection, no final xor."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7 if crc & 0x80000000 else crc << 1) & 0xFFFFFFFF
    return crc


def taskflux_segment(records: list[tuple[int, bytes]]) -> bytes:
    """Spec 11: Int64 term, CRC-32/MPEG-2, no padding; the spec's segment header and end."""
    body = b"".join(RECORD_MARKER + i64(t) + u32(crc32_mpeg2(d)) + buffer(d) for t, d in records)
    return SEGMENT_HEADER + body + END_MARKER


MAX_ENTRY_LSN = 2**63 - 2  # docs/format.md, "LSN limit": the largest LSN an entry can have


def rule_vectors(files: dict[str, bytes], manifest: dict) -> None:
    deltas = [create(f"q{i}", 1) for i in range(6)]
    files["mixed_spec.log"] = segment([(1, d) for d in deltas[:3]])
    files["mixed_taskflux.log"] = taskflux_segment([(1, d) for d in deltas[3:]])
    manifest["mixed_spec.log"] = {
        "what": (
            "spec 11: a log whose first segment (LSN 0-2) is spec and whose last (LSN 3-5) is "
            "taskflux, no metadata file: every reader refuses it as two dialects, naming the "
            "last segment (the first record of every segment says its dialect)"
        ),
        "install": {
            "data/log/0000000000000000000.log": "mixed_spec.log",
            "data/log/0000000000000000003.log": "mixed_taskflux.log",
        },
        "error_file": "0000000000000000003.log",
    }
    manifest["mixed_taskflux.log"] = {"what": "the taskflux half of mixed_spec.log"}
    queues = wide_queues()
    files["index_max.snapshot"] = wide_snapshot(2**63 - 1, WIDE_TERM, queues)
    manifest["index_max.snapshot"] = {
        "what": (
            "wide.snapshot with last index 2^63-1 and a valid CRC: past the largest LSN an "
            f"entry can have ({MAX_ENTRY_LSN}), so corruption of the last-index field"
        ),
        "last_index": 2**63 - 1,
        "error_offset": 4,
    }


# --- issues 46/43: the rest of the dialect rule (undecided segments, the task snapshot) -------

TASK_MARKER = bytes.fromhex("B6380FCB")


def task_snapshot(last_index: int, last_term: int, queues: list[dict], tasks: bytes) -> bytes:
    """Section 12's task layout: the wide header under its own marker, the state Buffer, the
    tasks Buffer, then the CRC of index, term, state bytes and tasks bytes."""
    head = i64(last_index) + i64(last_term)
    state = state_bytes(queues)
    crc = zlib.crc32(head + state + tasks)
    return TASK_MARKER + head + buffer(state) + buffer(tasks) + u32(crc)


def dialect_vectors(files: dict[str, bytes], manifest: dict) -> None:
    deltas = [create(f"u{i}", 1) for i in range(3)]
    undecided = bytearray(segment([(1, d) for d in deltas]))
    undecided[8 + 12 : 8 + 16] = i32(0x7FFFFFF0)  # the first record's spec length, damaged
    files["undecided.log"] = bytes(undecided)
    manifest["undecided.log"] = {
        "what": (
            "spec 11: a lone spec segment whose first record's length field is damaged (neither "
            "framing reads the record, neither length leads to a second record) with two whole "
            "records after it, no metadata file or snapshot: the files cannot decide the "
            "dialect, and a read in either would cut every record, so every reader refuses it "
            "naming the segment (unless a dialect is chosen)"
        ),
        "install": {"data/log/0000000000000000000.log": "undecided.log"},
        "error_file": "0000000000000000000.log",
    }
    second = bytearray(taskflux_segment([(1, d) for d in deltas]))
    second[8 + 20 + 2] ^= 0x01  # a byte of the first record's data: its CRC fails
    files["second_says.log"] = bytes(second)
    manifest["second_says.log"] = {
        "what": (
            "spec 11: a lone taskflux segment whose first record's data is damaged (its CRC "
            "fails) and whose taskflux length leads to a whole taskflux record: that second "
            "record says the dialect, taskflux, for every reader"
        ),
        "install": {"data/log/0000000000000000000.log": "second_says.log"},
        "dialect": "taskflux",
    }
    queues = [
        {
            "queue": "",
            "implementation": 1,
            "last_id": 0,
            "max_queue_size": -1,
            "max_message_size": -1,
            "key_range": None,
            "records": [],
        }
    ]
    files["task.snapshot"] = task_snapshot(2, 1, queues, i32(0))
    manifest["task.snapshot"] = {
        "what": (
            "spec 12: a snapshot in the task layout (marker B6 38 0F CB, no task state) beside "
            "mixed_taskflux.log, a taskflux segment: the task layout exists only in the spec "
            "dialect, so every reader refuses the directory as two dialects, naming the segment"
        ),
        "install": {
            "data/tflux.snapshot": "task.snapshot",
            "data/log/0000000000000000003.log": "mixed_taskflux.log",
        },
        "error_file": "0000000000000000003.log",
    }


def build() -> tuple[dict[str, bytes], dict]:
    files: dict[str, bytes] = {}
    manifest: dict = {}
    compressed_vectors(files, manifest)
    wide_vectors(files, manifest)
    cursor_vectors(files, manifest)
    replay_vectors(files, manifest)
    bad_delta_vectors(files, manifest)
    rule_vectors(files, manifest)
    dialect_vectors(files, manifest)
    files["manifest.json"] = (json.dumps(manifest, indent=1) + "\n").encode()
    return files, manifest


def main() -> None:
    files, _ = build()
    for name, data in files.items():
        (HERE / name).write_bytes(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
