"""What the ``test_cli_*.py`` modules share: the two ways of running the command line (``run_cli``:
the ``tflux`` entry point; ``run``: ``python -m tflux``, never a traceback), and logs and base
directories with known contents, whose offsets and delta bytes are computed here from the spec
(sections 3 and 6) with ``struct``, not taken from the CLI.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import tflux

SEGMENT_SUFFIX = ".log"
GOLDEN = Path(__file__).parent.parent / "data"
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
EMPTY_SEGMENT = bytes.fromhex("1276AD550000000100000000")  # header, then the end marker
VERBS = [
    "demo", "replay", "inspect", "dump", "verify", "repair", "bench", "compress", "export",
    "convert", "serve", "stats",
]  # fmt: skip
DIALECT_VERBS = [
    "replay", "inspect", "dump", "verify", "repair", "compress", "export", "convert", "serve",
    "stats",
]  # fmt: skip


def run_cli(
    *args: str | Path, env: dict[str, str] | None = None, stdin=subprocess.DEVNULL
) -> subprocess.CompletedProcess:
    """Run ``python -m tflux.cli ARGS``; never a traceback, whatever the exit code."""
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    environ.update(env or {})
    result = subprocess.run(
        [sys.executable, "-m", "tflux.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
        stdin=stdin,
        timeout=300,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout
    return result


def record_size(data: bytes) -> int:
    """Bytes a record occupies in a segment (spec section 3): header, data, padding to 4."""
    return 16 + len(data) + (-len(data)) % 4


def known_records() -> list[tuple[int, bytes]]:
    """Terms rising, lengths covering every padding class, empty and binary data."""
    records = [(1, b""), (1, b"a"), (1, b"ab"), (1, b"abc"), (1, b"abcd"), (2, bytes(range(256)))]
    records += [(2, b"\x00\xff" * 17), (3, "h\u00e9llo w\u00f6rld".encode())]
    records += [(3 + i // 10, bytes([i]) * (i * 7 % 61)) for i in range(40)]
    return records


def write_log(
    base: Path,
    records: list[tuple[int, bytes]],
    *,
    soft_limit: int = 16 << 20,
    preallocate: bool = True,
) -> Path:
    """Append and commit ``records`` one by one into ``base/data/log``; returns the log dir."""
    log_dir = base / "data" / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    with tflux.Log.open(
        log_dir,
        soft_limit=soft_limit,
        hard_limit=max(soft_limit, 32 << 20),
        preallocate=preallocate,
        sync="never",
    ) as log:
        for term, data in records:
            log.commit(log.append(term, data))
    return log_dir


def golden_log(base: Path, segments: dict[str, bytes]) -> Path:
    """``base/data/log`` holding the given segment files (name -> bytes)."""
    log_dir = base / "data" / "log"
    log_dir.mkdir(parents=True)
    for name, raw in segments.items():
        (log_dir / name).write_bytes(raw)
    return log_dir


def segment_files(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.name.endswith(SEGMENT_SUFFIX))


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def flip(path: Path, offset: int) -> bytes:
    """Flip one bit of the byte at ``offset``; returns the file's new bytes."""
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))
    return bytes(raw)


def snapshot_of(base: Path) -> dict[str, bytes]:
    """Every file under ``base`` (relative path -> bytes), to prove a command changed nothing."""
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def open_store(base: Path, **settings) -> tflux.Store:
    settings.setdefault("log_sync_policy", "never")
    settings.setdefault("snapshot_creation_segments_threshold", 0)
    return tflux.open(base, **settings)


def store_with_segments(base: Path, adds: int = 150) -> list[tuple[int, bytes]]:
    """A base directory of several 4 KiB segments: CreateQueue "q", then ``adds`` AddRecords.

    Returns the log's (term, data) in LSN order, read back for computing offsets.
    """
    with open_store(base, log_file_soft_limit=4096, log_file_hard_limit=8192) as store:
        store.create_queue("q")
        for i in range(adds):
            store.enqueue("q", i % 7, bytes([65 + i % 26]) * 100)
    with tflux.Log.open(base / "data" / "log", readonly=True) as log:
        return [(e.term, e.data) for e in log.entries()]


def offset_of(log_dir: Path, lsn: int, records: list[tuple[int, bytes]]) -> tuple[Path, int]:
    """The segment holding ``lsn`` and the byte offset of its record (spec section 3 framing)."""
    segments = segment_files(log_dir)
    starts = [int(p.name[:19]) for p in segments]
    index = max(i for i, start in enumerate(starts) if start <= lsn)
    offset = 8 + sum(record_size(data) for _, data in records[starts[index] : lsn])
    return segments[index], offset


# Independent decoder of the deltas (spec section 6), for checking what the CLI prints.


def parse_delta(data: bytes) -> dict:
    """One delta's fields; asserts it consumes its bytes exactly."""
    kind, name_length = chr(data[0]), data[1]
    name, rest = data[2 : 2 + name_length], data[2 + name_length :]
    assert all(0x21 <= c <= 0x7E for c in name)
    fields: dict = {"queue": name.decode()}
    if kind == "C":
        implementation, max_size, max_message, has_range = struct.unpack_from(">iiiB", rest)
        fields.update(kind="create_queue", implementation=implementation)
        fields.update(max_size=max_size, max_message_size=max_message)
        if has_range:
            fields["key_range"] = list(struct.unpack_from(">qq", rest, 13))
        assert len(rest) == 13 + 16 * has_range
    elif kind == "A":
        key, length = struct.unpack_from(">qi", rest)
        assert len(rest) == 12 + length
        fields.update(kind="add_record", key=key, message=rest[12:])
    elif kind == "R":
        (record_id,) = struct.unpack(">Q", rest)
        fields.update(kind="remove_record", record_id=record_id)
    elif kind == "D":
        assert rest == b""
        fields.update(kind="delete_queue")
    else:
        raise AssertionError(f"unexpected delta kind {kind!r}")
    return fields


def sealed_log_with_known_offsets(tmp_path: Path) -> tuple[Path, list[tuple[int, bytes]]]:
    records = [(1 + i // 20, bytes([65 + i % 26]) * (500 + i % 5)) for i in range(60)]
    log_dir = write_log(tmp_path, records, soft_limit=4096)
    assert len(segment_files(log_dir)) >= 3
    return log_dir, records


ROOT = Path(__file__).resolve().parents[2]


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m tflux ARGS`` with stdin closed; never a traceback, whatever the exit code."""
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    environ.update(env or {})
    result = subprocess.run(
        [sys.executable, "-m", "tflux", *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout
    return result


def small_store(base: Path, adds: int = 20) -> Path:
    """A base directory with two queues, a snapshot and a few records after it."""
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(i % 3, b"job %d" % i) for i in range(adds)])
        store.snapshot()
        store.enqueue("", 1, b"after the snapshot")
    return base


def run_on_terminal(
    *args: str | Path, columns: int = 80, on: str = "stdout"
) -> tuple[int, str, str]:
    """``python -m tflux ARGS`` with one stream (``on``: ``"stdout"`` or ``"stderr"``) on a
    pseudo-terminal ``columns`` wide (and ``COLUMNS`` set, as a shell does); stdout otherwise
    goes to a pipe, stderr otherwise nowhere. Returns the exit code, stdout as piped ("" when on
    the terminal) and what the terminal was shown (escapes kept)."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    environ.update(COLUMNS=str(columns), LINES="50", TERM="xterm-256color")
    child = subprocess.Popen(
        [sys.executable, "-m", "tflux", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=slave if on == "stdout" else subprocess.PIPE,
        stderr=slave if on == "stderr" else subprocess.DEVNULL,
        env=environ,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    stdout = child.stdout.read().decode() if child.stdout else ""
    code = child.wait(timeout=300)
    shown = b"".join(chunks).decode("utf-8", "replace")
    assert "Traceback" not in shown, shown
    return code, stdout, shown
