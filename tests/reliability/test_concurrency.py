"""Readers scanning while a writer appends, truncates, rolls over and compacts.

- Across processes: a writer process drives a raw ``tflux.Log`` with tiny segments (roll-over
  every few appends), truncating uncommitted tails and rewriting them with a new generation,
  committing and compacting; a reader process with two threads loops over
  ``Log.open(readonly=True)`` + a full scan and ``tflux.verify``. Every entry is self-describing
  (its LSN, generation and a hash of both), so a reader can tell a torn or misplaced record.
  A second writer is refused (``LockedError``) while the first runs.
- In one process: a store writer thread enqueues, acks and snapshots (tiny limits) while reader
  threads call ``records()``/``queues()``, open the store read-only and scan its log read-only,
  decoding every delta.

Requirements: no process dies (no SIGBUS), every entry a reader returns is whole and where it
belongs, entries form a contiguous run of LSNs (a consistent prefix), and errors, when a reader
races a compaction that deletes files under it, are typed (``TfluxError``), never a panic.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import tflux
from _reliability import child_env, key_of, payload_of, token_of
from test_crash import record_figures

WRITER = textwrap.dedent(
    r"""
    import hashlib, random, sys, time
    import tflux
    path, seconds = sys.argv[1], float(sys.argv[2])
    big = len(sys.argv) > 3  # 4 KiB entries, never committed: cuts reach into sealed segments
    rng = random.Random(5)
    def entry(lsn, gen):
        head = b"%d:%d:" % (lsn, gen)
        digest = hashlib.sha256(head).digest()
        return head + (digest * 128 if big else digest[: 1 + lsn % 29])
    limits = (4096, 16384) if big else (128, 512)
    log = tflux.Log.open(path, soft_limit=limits[0], hard_limit=limits[1], sync="never")
    print("READY", flush=True)
    gen, ops = 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ops += 1
        r = rng.random()
        if big:
            if log.last_index > 40 or (log.last_index > 0 and r < 0.3):
                log.truncate_after(rng.randint(-1, log.last_index - 1))
                gen += 1
            else:
                first = log.last_index + 1
                log.append_many(1, [entry(first + i, gen) for i in range(rng.randint(1, 4))])
            continue
        if r < 0.6:
            first = log.last_index + 1
            log.append_many(1, [entry(first + i, gen) for i in range(rng.randint(1, 6))])
        elif r < 0.75 and log.last_index > log.commit_index + 1:
            # Any uncommitted tail: cuts reach into sealed segments that readers have mapped.
            cut = rng.randint(log.commit_index, log.last_index - 1)
            log.truncate_after(cut)
            gen += 1
        elif r < 0.9:
            log.commit(rng.randint(log.commit_index, log.last_index))
        else:
            log.compact(log.commit_index)
    print("OPS", ops, log.start_index, log.last_index, flush=True)
    """
)

READER = textwrap.dedent(
    r"""
    import hashlib, json, sys, threading, time
    import tflux
    path, seconds = sys.argv[1], float(sys.argv[2])
    stats = {"scans": 0, "entries": 0, "verifies": 0, "typed_errors": 0, "bad": [], "errors": {}}
    errors = {}
    lock = threading.Lock()
    def ok(e):
        head, _, digest = e.data.partition(b":")
        if not head.isdigit():
            return False
        lsn = int(head)
        gen, _, digest = digest.partition(b":")
        h = hashlib.sha256(b"%d:%s:" % (lsn, gen)).digest()
        return lsn == e.lsn and digest in (h[: 1 + lsn % 29], h * 128)
    def work():
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                with tflux.Log.open(path, readonly=True) as log:
                    start = log.start_index
                    got = list(log.entries())
                bad = [e.lsn for e in got if not ok(e)]
                lsns = [e.lsn for e in got]
                contiguous = lsns == list(range(start, start + len(lsns)))
                with lock:
                    stats["scans"] += 1
                    stats["entries"] += len(got)
                    if bad or not contiguous:
                        stats["bad"].append([bad[:5], contiguous])
            except tflux.TfluxError as e:
                with lock:
                    stats["typed_errors"] += 1
                    name = type(e).__name__
                    stats["errors"][name] = stats["errors"].get(name, 0) + 1
                    errors[name] = str(e)[:200]
            except BaseException as e:
                with lock:
                    stats["bad"].append(repr(e)[:300])
            try:
                rep = tflux.verify(path)
                with lock:
                    stats["verifies"] += 1
                    fatal = [p for p in rep.problems if p.fatal]
                    if fatal:
                        stats["verify_fatal"] = stats.get("verify_fatal", 0) + 1
                        errors["verify"] = fatal[0].message[:200]
            except tflux.TfluxError as e:  # verify racing the writer, counted apart
                with lock:
                    stats["verify_errors"] = stats.get("verify_errors", 0) + 1
                    errors["verify " + type(e).__name__] = str(e)[:200]
            except BaseException as e:
                with lock:
                    stats["bad"].append(repr(e)[:300])
    threads = [threading.Thread(target=work) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    stats["error_examples"] = errors
    print(json.dumps(stats))
    """
)


def cross_process(tmp_path, seconds: float, big: bool = False) -> dict:
    path = tmp_path / "log"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(seconds), *(["big"] if big else [])],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert writer.stdout.readline().strip() == "READY"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    with pytest.raises(tflux.LockedError):
        tflux.Log.open(path)
    r_out, _ = reader.communicate(timeout=seconds + 60)
    w_out, _ = writer.communicate(timeout=seconds + 60)
    assert writer.returncode == 0, f"writer died: {writer.returncode}"
    assert reader.returncode == 0, f"reader died: {reader.returncode} (SIGBUS={-signal.SIGBUS})"
    stats = json.loads(r_out)
    stats["writer_ops"] = int(w_out.split()[1])
    return stats


def in_process(tmp_path, seconds: float) -> dict:
    base = tmp_path / "store"
    settings = {
        "log_file_soft_limit": 256,
        "log_file_hard_limit": 1024,
        "snapshot_creation_segments_threshold": 2,
    }
    store = tflux.open(base, **settings)
    stop = threading.Event()
    stats = collections.Counter()
    bad: list[str] = []
    errors: dict[str, str] = {}

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            token = f"c.{n}.1.0"
            store.enqueue("", key_of(token), payload_of(token))
            if n % 3 == 0:
                r = store.dequeue("", timeout=0)
                if r is not None:
                    store.ack(r)
            if n % 50 == 0:
                store.snapshot()
            stats["writes"] += 1

    def check_records(records) -> None:
        for r in records:
            if token_of(r.payload) is None:
                bad.append(f"damaged record {r.id}")

    def store_reader() -> None:
        while not stop.is_set():
            check_records(store.records(""))
            store.queues()
            stats["store_reads"] += 1

    def readonly_reader() -> None:
        while not stop.is_set():
            try:
                with tflux.open(base, readonly=True, **settings) as ro:
                    check_records(ro.records(""))
                with tflux.Log.open(base / "data" / "log", readonly=True) as log:
                    start = log.start_index
                    lsns = []
                    for e in log.entries():
                        tflux.decode_delta(e.data)
                        lsns.append(e.lsn)
                    if lsns != list(range(start, start + len(lsns))):
                        bad.append(f"non-contiguous LSNs from {start}")
                stats["readonly_scans"] += 1
            except tflux.TfluxError as e:
                stats["typed_errors"] += 1
                stats["error_" + type(e).__name__] += 1
                errors[type(e).__name__] = str(e)[:200]

    threads = [threading.Thread(target=f) for f in (writer, store_reader, readonly_reader)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    store.close()
    out = dict(stats)
    out["bad"] = bad[:10]
    out["error_examples"] = errors
    return out


# --- a reader's view survives the writer's cuts (deterministic) ---------------------------------

OLD = [b"old0", b"old1", b"old2", b"old3"]  # 20-byte records at offsets 8, 28, 48, 68


def cut_and_refill(writer: tflux.Log) -> None:
    """truncate_after(0), then new entries 1 (24 bytes) and 2 (4 bytes): the new entry 2 starts at
    the offset of the old entry 3 and ends where it ended, so only its LSN tells them apart."""
    writer.truncate_after(0)
    writer.append_many(1, [b"new1" + bytes(20), b"new2"])
    assert [e.data for e in writer.entries()] == [b"old0", b"new1" + bytes(20), b"new2"]


def open_writer(path, **kwargs) -> tflux.Log:
    kwargs.setdefault("soft_limit", 1 << 20)
    kwargs.setdefault("hard_limit", 1 << 21)
    return tflux.Log.open(path, **kwargs)


@pytest.mark.parametrize("preallocate", [False, True], ids=["sparse", "preallocated"])
def test_a_reader_never_returns_a_new_entry_at_an_old_lsn(tmp_path, preallocate):
    path = tmp_path / "log"
    with open_writer(path, preallocate=preallocate) as writer:
        writer.append_many(1, OLD)
        with tflux.Log.open(path, readonly=True) as reader:
            assert reader.last_index == 3
            cut_and_refill(writer)
            # The reader keeps the view it opened: LSN 3 is the old entry 3 (never the new
            # entry 2 that now sits at the same offset), and so is the rest of it.
            assert [(e.lsn, e.data) for e in reader.read(3)] == [(3, b"old3")]
            assert [(e.lsn, e.data) for e in reader.entries()] == list(enumerate(OLD))
        with tflux.Log.open(path, readonly=True) as again:
            assert [e.data for e in again.entries()] == [b"old0", b"new1" + bytes(20), b"new2"]


READ_LSN_3 = textwrap.dedent(
    r"""
    import sys, tflux
    with tflux.Log.open(sys.argv[1], readonly=True) as log:
        print("READY", log.last_index, flush=True)
        sys.stdin.readline()
        try:
            print(repr([(e.lsn, e.data) for e in log.read(3)]), flush=True)
        except tflux.TfluxError as e:
            print(type(e).__name__, flush=True)
    """
)


def test_a_reader_process_never_returns_a_new_entry_at_an_old_lsn(tmp_path):
    path = tmp_path / "log"
    with open_writer(path, preallocate=False) as writer:
        writer.append_many(1, OLD)
        child = subprocess.Popen(
            [sys.executable, "-c", READ_LSN_3, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        assert child.stdout.readline().split() == ["READY", "3"]
        cut_and_refill(writer)
        out, _ = child.communicate("go\n", timeout=60)
    assert child.returncode == 0
    assert out.strip() == repr([(3, b"old3")])


def test_a_reader_keeps_its_view_when_a_cut_reaches_into_mapped_sealed_segments(tmp_path):
    path = tmp_path / "log"
    old = [bytes([65 + i]) * 16 for i in range(7)]  # 32-byte records: LSNs 0-2 | 3-5 | 6
    with open_writer(path, soft_limit=64, hard_limit=100, preallocate=False) as writer:
        writer.append_many(1, old[:3])
        writer.append_many(1, old[3:6])
        writer.append(1, old[6])
        layout = [(s.start_lsn, s.sealed) for s in writer.segments]
        assert layout == [(0, True), (3, True), (6, False)]
        with tflux.Log.open(path, readonly=True) as reader:
            assert [e.data for e in reader.read(0, max_bytes=0)] == old[:1]  # maps segment 0
            writer.truncate_after(0)
            writer.append_many(1, [b"x" * 48, b"y"])  # new entry 2 at the old entry 2's offset
            writer.append_many(2, [b"z" * 16] * 4)
            assert [e.lsn for e in reader.read(1)] == list(range(1, 7))
            assert [(e.lsn, e.data) for e in reader.entries()] == list(enumerate(old))


def test_a_segment_cut_under_a_reader_in_place_is_a_stale_read_not_corruption(tmp_path):
    # What an in-place cut (an older writer, another tool) looks like to a reader: the file it
    # indexed is shorter now. The log is healthy; the reader must reopen.
    path = tmp_path / "log"
    with open_writer(path, preallocate=False) as writer:
        writer.append_many(1, OLD)
    seg = next(path.iterdir())
    with tflux.Log.open(path, readonly=True) as reader:
        os.truncate(seg, 48)  # keeps the header and entries 0 and 1
        with pytest.raises(tflux.StaleReadError) as caught:
            reader.read(3)
        assert caught.value.path == str(seg)
        assert isinstance(caught.value, tflux.TfluxError)
        assert not isinstance(caught.value, tflux.CorruptionError)
        back = pickle.loads(pickle.dumps(caught.value))
        assert (type(back), back.path, back.offset) == (tflux.StaleReadError, str(seg), 68)
    with tflux.Log.open(path, readonly=True) as again:  # the retry sees what is there now
        assert [e.data for e in again.entries()] == [b"old0", b"old1"]


def test_a_record_damaged_in_place_under_a_reader_is_still_corruption(tmp_path):
    path = tmp_path / "log"
    with open_writer(path, preallocate=False) as writer:
        writer.append_many(1, OLD)
    seg = next(path.iterdir())
    with tflux.Log.open(path, readonly=True) as reader:
        with open(seg, "r+b") as f:
            f.seek(68 + 16)
            f.write(b"OLD3")  # same inode, same length, bad checksum
        with pytest.raises(tflux.CorruptionError) as caught:
            reader.read(3)
        assert (caught.value.path, caught.value.offset) == (str(seg), 68)


def assert_healthy_log_reads(stats: dict) -> None:
    """No torn or misplaced entry, and no reader told a healthy log is corrupt: racing the
    writer is a retryable StaleReadError."""
    assert stats["bad"] == []
    assert stats["errors"].keys() <= {"StaleReadError"}, stats["error_examples"]


def test_a_reader_process_scans_a_log_under_a_busy_writer_process(tmp_path):
    stats = cross_process(tmp_path, 4.0)
    record_figures("concurrency_processes_ci", stats)
    assert_healthy_log_reads(stats)
    assert stats["scans"] > 10


def test_reader_threads_beside_a_store_writer_see_whole_records(tmp_path):
    stats = in_process(tmp_path, 4.0)
    record_figures("concurrency_threads_ci", stats)
    assert stats["bad"] == []
    assert not [k for k in stats if k.startswith("error_Corruption")], stats["error_examples"]
    assert stats.get("readonly_scans", 0) > 5 and stats.get("writes", 0) > 50


def test_a_reader_never_returns_a_record_cut_by_a_concurrent_truncate(tmp_path):
    # 4 KiB entries, never committed, so truncate_after keeps cutting into sealed segments that
    # the reader has mapped. With in-place cuts this returned torn entries (6 per 30 s) and
    # "checksum mismatch" on a healthy log; copy-on-truncate leaves the reader's files alone.
    stats = cross_process(tmp_path, 3.0, big=True)
    record_figures("concurrency_truncate_race_ci", stats)
    assert_healthy_log_reads(stats)
    assert stats["scans"] > 10


@pytest.mark.slow
def test_a_reader_never_returns_a_record_cut_by_a_concurrent_truncate_for_30_s(tmp_path):
    stats = cross_process(tmp_path, 30.0, big=True)
    record_figures("concurrency_truncate_race_slow", stats)
    assert_healthy_log_reads(stats)


@pytest.mark.slow
def test_concurrent_readers_for_a_minute(tmp_path):
    stats = cross_process(tmp_path / "p", 60.0)
    record_figures("concurrency_processes_slow", stats)
    assert_healthy_log_reads(stats)
    stats = in_process(tmp_path / "t", 60.0)
    record_figures("concurrency_threads_slow", stats)
    assert stats["bad"] == []
    assert not [k for k in stats if k.startswith("error_Corruption")], stats["error_examples"]
