"""Hostile input: absurd length and count fields (2^31-1, negative) and absurd file sizes.

Each case runs in a child process limited to 1 GiB of address space (``RLIMIT_AS``), so an
allocation sized by an untrusted field would fail loudly (abort or MemoryError) instead of
passing on a large machine. The child reports what happened and its peak memory (``VmHWM``);
the parent requires a clear error (``CorruptionError`` naming the file and offset) or, for a
torn tail of the last segment, a trim, and a peak well below the limit.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest
from _reliability import child_env
from conftest import encode_record, encode_segment, segment_name
from test_crash import record_figures

LIMIT = 1 << 30
I32_MAX = 2**31 - 1
I32_MIN = -(2**31)

CHILD = textwrap.dedent(
    r"""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    import tflux
    what, path = sys.argv[1], sys.argv[2]
    out = {}
    try:
        if what == "store":
            with tflux.open(path, readonly=True) as s:
                out["records"] = len(s.records(""))
        elif what == "log":
            with tflux.Log.open(path) as log:
                out["records"] = len(list(log.entries()))
                out["trimmed"] = log.recovery.truncated
        elif what == "delta":
            tflux.decode_delta(open(path, "rb").read())
        elif what == "snapshot":
            tflux.read_snapshot(path)
        elif what == "metadata":
            tflux.read_metadata(path)
        elif what == "open":
            with tflux.open(path, log_preallocate_segments=False) as s:
                out["records"] = len(s.records(""))
        elif what == "settings":
            out["settings"] = tflux.settings(path)
        elif what == "settings-argument":
            tflux.settings(path, log_sync_policy="x" * 100_000_000)
        out["outcome"] = "ok"
    except BaseException as e:
        out.update(outcome="error", type=type(e).__name__, msg=str(e)[:300], msg_len=len(str(e)),
                   path=getattr(e, "path", None), offset=getattr(e, "offset", None))
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            out["vmhwm_kib"] = int(line.split()[1])
    print(json.dumps(out))
    """
).replace("AS_LIMIT", str(LIMIT))


def run(what: str, path: Path, timeout: float = 120) -> dict:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, what, str(path)],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"outcome": "hang", "timeout": timeout}
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"outcome": "crash", "rc": proc.returncode, "stderr": proc.stderr[-500:]}
    return json.loads(proc.stdout)


def default_queue(records: bytes = b"", count: int = 0, last_id: int = 0) -> bytes:
    # QueueData of the default queue: name, implementation, last id, sizes, no range, records
    return (
        b"\x00"
        + struct.pack(">iQii", 1, last_id, -1, -1)
        + b"\x00"
        + struct.pack(">i", count)
        + records
    )


def snapshot_bytes(state: bytes, *, length: int | None = None) -> bytes:
    n = len(state) if length is None else length
    return (
        bytes.fromhex("B6380FC9")
        + struct.pack(">iii", 5, 1, n)
        + state
        + struct.pack(">I", zlib.crc32(state))
    )


SNAPSHOTS = {
    "state length 2^31-1": snapshot_bytes(b"", length=I32_MAX),
    "state length -1": snapshot_bytes(b"", length=-1),
    "state length -2^31": snapshot_bytes(b"", length=I32_MIN),
    "queue count 2^31-1 (valid checksum)": snapshot_bytes(
        struct.pack(">i", I32_MAX) + default_queue()
    ),
    "queue count -1 (valid checksum)": snapshot_bytes(struct.pack(">i", -1)),
    "record count 2^31-1 (valid checksum)": snapshot_bytes(
        struct.pack(">i", 1) + default_queue(count=I32_MAX)
    ),
    "record data length 2^31-1 (valid checksum)": snapshot_bytes(
        struct.pack(">i", 1)
        + default_queue(struct.pack(">Qqi", 1, 0, I32_MAX) + b"abc", count=1, last_id=1)
    ),
    "record data length -1 (valid checksum)": snapshot_bytes(
        struct.pack(">i", 1) + default_queue(struct.pack(">Qqi", 1, 0, -1), count=1, last_id=1)
    ),
}

DELTAS = {
    "AddRecord message length 2^31-1": b"A\x00" + struct.pack(">qi", 0, I32_MAX) + b"x",
    "AddRecord message length -1": b"A\x00" + struct.pack(">qi", 0, -1),
    "queue name length 255 with 3 bytes": b"D\xff" + b"abc",
}


def segment_with_length(length: int) -> bytes:
    return encode_segment([(1, b"ok")])[:-4] + encode_record(1, b"abcd", length=length)


SEGMENTS = {
    "record length 2^31-1": segment_with_length(I32_MAX),
    "record length -1": segment_with_length(-1),
    "record length -2^31": segment_with_length(I32_MIN),
}  # fmt: skip


def expect_clear_error(out: dict, case: str, path: Path, offset: bool = True) -> None:
    assert out["outcome"] == "error", f"{case}: {out}"
    assert out["type"] == "CorruptionError", f"{case}: {out}"
    assert out["path"] and Path(out["path"]).name == path.name, f"{case}: {out}"
    if offset:
        assert out["offset"] is not None, f"{case}: {out}"
    assert out["vmhwm_kib"] < 256 * 1024, f"{case}: peak {out['vmhwm_kib']} KiB"


FIGURES: dict[str, dict] = {}


@pytest.mark.parametrize("case", list(SNAPSHOTS))
def test_an_absurd_snapshot_field_is_a_clear_error_in_bounded_memory(tmp_path, case):
    path = tmp_path / "tflux.snapshot"
    path.write_bytes(SNAPSHOTS[case])
    out = run("snapshot", path)
    FIGURES[f"snapshot: {case}"] = out
    expect_clear_error(out, case, path)


@pytest.mark.parametrize("case", list(DELTAS))
def test_an_absurd_delta_field_is_a_clear_error_in_bounded_memory(tmp_path, case):
    path = tmp_path / "delta.bin"
    path.write_bytes(DELTAS[case])
    out = run("delta", path)
    FIGURES[f"delta: {case}"] = out
    assert out["outcome"] == "error" and out["type"] == "CorruptionError", out
    assert out["offset"] is not None, out
    assert out["vmhwm_kib"] < 256 * 1024


@pytest.mark.parametrize("case", list(SEGMENTS))
@pytest.mark.parametrize("position", ["sealed", "last"])
def test_an_absurd_record_length_is_an_error_sealed_and_a_trim_last(tmp_path, case, position):
    log = tmp_path / "log"
    log.mkdir()
    bad = log / segment_name(0)
    bad.write_bytes(SEGMENTS[case])
    if position == "sealed":
        (log / segment_name(2)).write_bytes(encode_segment([(1, b"later")]))
    out = run("log", log)
    FIGURES[f"segment {position}: {case}"] = out
    if position == "sealed":
        expect_clear_error(out, case, bad)
        assert out["offset"] == len(encode_segment([(1, b"ok")])) - 4
    else:
        assert out["outcome"] == "ok" and out["records"] == 1 and out["trimmed"], out
        assert out["vmhwm_kib"] < 256 * 1024


def sparse(path: Path, size: int, head: bytes) -> None:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)


def test_a_huge_sparse_sealed_segment_is_read_without_filling_memory(tmp_path):
    # 4 GiB of zeros after one record: more than the address-space limit. The scan stops at the
    # end marker; nothing may map or read the whole file at once.
    log = tmp_path / "log"
    log.mkdir()
    sparse(log / segment_name(0), 4 << 30, encode_segment([(1, b"ok")]))
    (log / segment_name(1)).write_bytes(encode_segment([(1, b"next")]))
    out = run("log", log)
    FIGURES["sparse 4 GiB sealed segment"] = out
    assert out["outcome"] in ("ok", "error"), out
    if out["outcome"] == "error":
        assert out["type"] in ("TfluxIOError", "CorruptionError"), out
    else:
        assert out["records"] == 2


def z_header(original_len: int, first: int = 0, last: int = 0, method: int = 1) -> bytes:
    """A `.log.z` header (spec section 9) with an arbitrary CRC (never reached)."""
    return bytes.fromhex("1276AD5A") + struct.pack(
        ">iqqBqI", 1, first, last, method, original_len, 0
    )


def log_with_z(tmp_path: Path, z: bytes | None = None, sparse_size: int | None = None) -> Path:
    """A log whose sealed segment 0 is the `.log.z` ``z`` (or a sparse file of ``sparse_size``
    bytes after a header declaring 100 bytes), then a plain last segment."""
    log = tmp_path / "log"
    log.mkdir()
    path = log / (segment_name(0) + ".z")
    if sparse_size is not None:
        sparse(path, sparse_size, z_header(100))
    else:
        path.write_bytes(z)
    (log / segment_name(1)).write_bytes(encode_segment([(1, b"next")]))
    return log


def zeros_zstd(total: int) -> bytes:
    """A zstd frame of ``total`` zero bytes, compressed in chunks (never held whole)."""
    import zstandard

    c = zstandard.ZstdCompressor(level=1).compressobj()
    chunk = bytes(1 << 20)
    parts = [c.compress(chunk) for _ in range(total >> 20)]
    return b"".join(parts) + c.flush()


def assert_refused_in_bounded_memory(out: dict, *words: str) -> None:
    assert out["outcome"] == "error", out
    assert out["type"] == "CorruptionError", out
    assert all(w in out["msg"] for w in words), out
    assert out["vmhwm_kib"] < (LIMIT >> 10) // 2, out


def test_a_small_z_declaring_more_than_a_segment_can_hold_is_refused_before_decoding(tmp_path):
    """Issue 30, item 4: 98 KB declaring 3 GiB decoded to its declared length first."""
    log = log_with_z(tmp_path, z_header(3 << 30) + zeros_zstd(64 << 20))
    out = run("log", log)
    FIGURES["z declaring 3 GiB"] = out
    assert_refused_in_bounded_memory(out, "original length", "0000000000000000000.log.z")


def test_a_sparse_huge_z_is_refused_by_its_length_before_it_is_read(tmp_path):
    """A 64 GiB sparse `.z` got a read-only open OOM-killed (the file was read into a vector
    of its length)."""
    log = log_with_z(tmp_path, sparse_size=64 << 30)
    out = run("log", log)
    FIGURES["sparse 64 GiB z"] = out
    assert_refused_in_bounded_memory(out, "more than any compression")


def test_a_z_decoding_past_the_address_space_fails_the_read_not_the_process(tmp_path):
    """Within what the format allows (1.5 GiB declared, a real payload of zeros) but beyond
    what the process may allocate: an error, never an abort. (This held before the fix too:
    std's `read_to_end` reserves fallibly, and the decoder relies on it: this guards that.)"""
    log = log_with_z(tmp_path, z_header(3 << 29) + zeros_zstd(3 << 29))
    out = run("log", log)
    FIGURES["z decoding past the limit"] = out
    assert out["outcome"] == "error", out
    assert out["type"] in ("CorruptionError", "TfluxIOError"), out
    assert "memory" in out["msg"] or "map" in out["msg"], out


# Regression: metadata::read used to read the whole file before checking its length (a 2 GiB
# file allocated 2 GiB); found by this campaign, fixed in 6f252f8.
def test_a_huge_metadata_file_is_a_clear_error_in_bounded_memory(tmp_path):
    path = tmp_path / "tflux.metadata"
    sparse(path, 2 << 30, bytes.fromhex("5A6EA012") + struct.pack(">iii", 1, 1, -1))
    out = run("metadata", path)
    FIGURES["sparse 2 GiB metadata"] = out
    expect_clear_error(out, "huge metadata", path)


# Issue 10, defect 7: a special file in place of the metadata, the snapshot or the settings file
# was read until memory ran out (/dev/zero), blocked open() forever (a FIFO) or was silently
# ignored (a settings directory or FIFO). Each is now refused at once, naming the file.
SPECIAL_FILES = ["fifo", "dev-zero", "directory"]


def make_special(path: Path, kind: str) -> None:
    import os

    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", SPECIAL_FILES)
@pytest.mark.parametrize("name", ["tflux.metadata", "tflux.snapshot"])
def test_a_special_file_as_metadata_or_snapshot_is_refused_at_once(tmp_path, name, kind):
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / name
    make_special(path, kind)
    reader = "metadata" if name == "tflux.metadata" else "snapshot"
    for what, target in [(reader, path), ("open", tmp_path)]:
        out = run(what, target, timeout=20)
        FIGURES[f"{name} as {kind} ({what})"] = out
        expect_clear_error(out, f"{name} as {kind} ({what})", path, offset=False)
        assert "not a regular file" in out["msg"], out


@pytest.mark.parametrize("kind", SPECIAL_FILES)
def test_a_special_file_as_settings_is_refused_at_once(tmp_path, kind):
    path = tmp_path / "taskflux.settings.json"
    make_special(path, kind)
    for what in ["settings", "open"]:
        out = run(what, tmp_path, timeout=20)
        FIGURES[f"settings as {kind} ({what})"] = out
        assert out["outcome"] == "error" and out["type"] == "SettingsError", out
        assert str(path) in out["msg"] and "not a regular file" in out["msg"], out
        assert out["vmhwm_kib"] < 256 * 1024, out


# Issue 10, defect 13: a bad key or value was quoted whole (a 100 MB settings file gave a 100 MB
# message and a 1 GB peak). Files are capped at 1 MiB; messages quote a short prefix.
def test_a_huge_settings_file_is_refused_by_size_in_bounded_memory(tmp_path):
    path = tmp_path / "taskflux.settings.json"
    path.write_bytes(b'{"LogSyncPolicy": "' + b"x" * 100_000_000 + b'"}')
    out = run("settings", tmp_path)
    FIGURES["100 MB settings file"] = out
    assert out["outcome"] == "error" and out["type"] == "SettingsError", out
    assert str(path) in out["msg"] and "1048576" in out["msg"], out
    assert out["vmhwm_kib"] < 256 * 1024, out


@pytest.mark.parametrize(
    "text",
    [
        '{"LogSyncPolicy": "' + "x" * 1_000_000 + '"}',
        '{"' + "k" * 1_000_000 + '": 1}',
        '{"LogFileSoftLimit": "' + "9" * 1_000_000 + '"}',
    ],
    ids=["long value", "long unknown key", "long wrong-type value"],
)
def test_a_bad_setting_is_quoted_by_a_short_prefix(tmp_path, text):
    import tflux

    (tmp_path / "taskflux.settings.json").write_text(text)
    with pytest.raises(tflux.SettingsError) as info:
        tflux.settings(tmp_path)
    length = len(str(info.value))
    assert length < 1000, str(info.value)[:200]


def test_a_huge_settings_argument_is_quoted_by_a_short_prefix(tmp_path):
    out = run("settings-argument", tmp_path)
    FIGURES["100 MB settings argument"] = out
    assert out["outcome"] == "error" and out["type"] == "SettingsError", out
    assert "LogSyncPolicy" in out["msg"] and out["msg_len"] < 1000, out
    assert out["vmhwm_kib"] < 768 * 1024, out


def test_zz_record_hostile_figures():
    record_figures("hostile_input", FIGURES)


# Regression: Queue::add wrapped last_id to 0 after 2^64-1 (ids reused, every later snapshot
# refused); found by the replay_model fuzz target, fixed in 6f252f8.
def test_a_snapshot_at_the_largest_id_refuses_the_next_enqueue(tmp_path):
    import tflux

    top = 2**64 - 1
    (tmp_path / "data").mkdir()
    tflux.write_snapshot(
        tmp_path / "data" / "tflux.snapshot",
        0,
        1,
        [tflux.SnapshotQueue("", last_id=top, records=[(top, 0, b"newest")])],
    )
    with tflux.open(tmp_path) as store:
        with pytest.raises(tflux.TfluxError):
            store.enqueue("", 0, b"one too many")
        assert store.snapshot() in (True, False)


# Rayon's global thread pool starts on first use; when it cannot start its threads (here: tflux
# imported, then the address space limited, then a log opened) rayon panicked, and the panic
# crossed into Python as a PanicException. The scans now run on the calling thread instead
# (`Parallelism::available`).
#
# The limit is the address space in use plus 1.5 MiB (too little for a thread's 2 MiB stack),
# set after the same calls ran once on one core (TFLUX_THREADS=1, which leaves the pool
# unstarted), so the allocators already hold the memory the calls need. A fixed 1 GiB limit sat
# below what mimalloc reserves at start-up, so whether the calls' own buffers could still be
# mapped depended on the machine: CI once saw the active segment's read buffer refused. Should
# the kernel still refuse memory, the call may fail, but only with a typed error that says so:
# never a panic, never an abort.
def test_a_log_opened_under_a_later_address_space_limit_raises_no_panic(tmp_path):
    code = textwrap.dedent(
        """
        import os, resource, sys
        import tflux
        os.environ["TFLUX_THREADS"] = "1"
        with tflux.Log.open(sys.argv[1] + "-warm") as log:
            log.append(1, b"x")
        tflux.verify(sys.argv[1] + "-warm")
        del os.environ["TFLUX_THREADS"]
        with open("/proc/self/status") as status:
            kib = next(int(l.split()[1]) for l in status if l.startswith("VmSize:"))
        limit = kib * 1024 + (3 << 19)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            with tflux.Log.open(sys.argv[1]) as log:
                log.append(1, b"x")
            tflux.verify(sys.argv[1])
            print("ok")
        except tflux.TfluxError as e:
            print(type(e).__name__, e)
        except BaseException as e:
            print("panic", type(e).__name__, e)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "log")],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    out = done.stdout.strip()
    assert done.returncode == 0, (out, done.stderr[-2000:])
    if out != "ok":
        # Refused memory, reported as such (and naming the segment), is the only other outcome.
        assert out.startswith("TfluxIOError"), (out, done.stderr[-2000:])
        assert "memory" in out.lower() and ".log" in out, out
