"""tflux.Channel: senders, fan-out receivers with durable cursors, other processes, kill -9.

The cursor file is checked against spec section 10 with ``struct`` and ``zlib`` only.
"""

from __future__ import annotations

import errno
import os
import random
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
import tflux

CURSOR_MARKER = bytes.fromhex("c3525f01")


def cursor_bytes(next_lsn: int) -> bytes:
    body = struct.pack(">iq", 1, next_lsn)
    return CURSOR_MARKER + body + struct.pack(">I", zlib.crc32(body))


def small(path, **kw) -> tflux.Channel:
    kw.setdefault("soft_limit", 512)
    kw.setdefault("hard_limit", 1024)
    kw.setdefault("preallocate", False)
    return tflux.Channel.open(path, **kw)


def run_py(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def drain(rx: tflux.Receiver) -> list[tflux.Message]:
    out = []
    while True:
        batch = rx.recv_many(1000, timeout=0)
        if not len(batch):
            return out
        out.extend(batch[i] for i in range(len(batch)))


# ----- basics -----


def test_send_recv_ack_and_cursor_file(tmp_path):
    with tflux.Channel.open(tmp_path) as ch:
        for sub in ("log", "cursors", "temp"):
            assert (tmp_path / "data" / sub).is_dir()
        tx = ch.sender()
        assert tx.send(b"one") == 0
        assert tx.send_many([b"two", b"three"]) == 1
        rx = ch.receiver("billing")
        assert rx.recv(timeout=0) == tflux.Message(0, b"one")
        batch = rx.recv_many(10, timeout=0)
        assert (batch.first_lsn, batch.payloads()) == (1, [b"two", b"three"])
        assert (rx.position, rx.acked) == (3, 0)
        rx.ack(2)
        assert rx.acked == 2
        assert (tmp_path / "data/cursors/billing.cursor").read_bytes() == cursor_bytes(2)
        assert ch.receivers() == {"billing": 2}
        with pytest.raises(ValueError):
            rx.ack(2)  # only one received message is unacknowledged
        assert rx.recv(timeout=0) is None


def test_resume_at_first_unacknowledged_and_start_only_without_cursor(tmp_path):
    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(50)])
        rx = ch.receiver("a", start="latest")
        assert rx.position == 50
        rx.close()
        ch.drop_receiver("a")
        rx = ch.receiver("a", start=10)
        got = drain(rx)
        assert [m.lsn for m in got] == list(range(10, 50))
        rx.ack(5)
        rx.close()
    with small(tmp_path) as ch:
        rx = ch.receiver("a", start="latest")  # the cursor wins
        assert [m.lsn for m in drain(rx)] == list(range(15, 50))


def test_an_empty_cursor_file_is_an_absent_cursor(tmp_path):
    """Spec section 1: a file that exists at start-up is valid or empty, and empty means nothing
    was written yet. A 0-byte cursor was refused as corrupt ("0 bytes long")."""
    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(20)])
        (tmp_path / "data/cursors").mkdir(parents=True, exist_ok=True)
        cursor = tmp_path / "data/cursors/late.cursor"
        cursor.write_bytes(b"")
        assert ch.receivers() == {}  # no receiver yet: nothing holds collection back
        rx = ch.receiver("late", start=12)  # so start= applies
        assert [m.lsn for m in drain(rx)] == list(range(12, 20))
        rx.ack(3)
        assert cursor.read_bytes() == cursor_bytes(15)
        assert ch.receivers() == {"late": 15}


def test_bad_arguments(tmp_path):
    with tflux.Channel.open(tmp_path) as ch:
        for name in ["", "a/b", "a b", "x" * 249, ".."]:
            with pytest.raises(ValueError):
                ch.receiver(name)
        with pytest.raises(ValueError):
            ch.receiver("a", start="middle")
        with pytest.raises(IndexError):
            ch.receiver("a", start=5)  # past the next LSN
        with pytest.raises(ValueError):
            ch.sender().send(b"")
        with pytest.raises(ValueError):
            ch.receiver("b").recv(timeout=-1)
    with pytest.raises(ValueError):
        tflux.Channel.open(tmp_path, sync="sometimes")
    # "batch" is another name for "interval", as Log.open takes it (issue 30 item 23).
    with tflux.Channel.open(tmp_path, sync="batch") as ch:
        ch.sender().send(b"x")
    with pytest.raises(ValueError):
        tflux.Channel.open(tmp_path, compress_sealed="gzip")


def test_same_name_is_locked_and_dropping_needs_it_free(tmp_path):
    with tflux.Channel.open(tmp_path) as ch:
        rx = ch.receiver("a")
        with pytest.raises(tflux.LockedError):
            ch.receiver("a")
        with pytest.raises(tflux.LockedError):
            ch.drop_receiver("a")
        rx.close()
        with pytest.raises(tflux.ClosedError):
            rx.recv(timeout=0)
        assert ch.drop_receiver("a") is True
        assert ch.drop_receiver("a") is False
        assert ch.receivers() == {}


def test_closing_the_channel_frees_the_names_of_receivers_still_referenced(tmp_path):
    with tflux.Channel.open(tmp_path) as ch:
        ch.sender().send(b"one")
        rx = ch.receiver("a")
    assert rx.closed
    with pytest.raises(tflux.ClosedError):
        rx.recv(timeout=0)
    with tflux.Channel.open(tmp_path) as ch:  # `rx` is still alive: its name must be free
        assert ch.receiver("a").recv(timeout=0) == tflux.Message(0, b"one")


def test_recv_waits_and_close_raises_closed(tmp_path):
    with tflux.Channel.open(tmp_path, sync="never") as ch:
        rx = ch.receiver("a")
        got = []
        t = threading.Thread(target=lambda: got.append(rx.recv(timeout=30)))
        t.start()
        time.sleep(0.05)
        ch.sender().send(b"late")
        t.join(10)
        assert got == [tflux.Message(0, b"late")]
        errors = []

        def wait():
            try:
                rx.recv()
            except tflux.ClosedError as e:
                errors.append(e)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.05)
    t.join(10)
    assert len(errors) == 1


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_ctrl_c_interrupts_recv(tmp_path, inherited):
    # A child started with SIGINT ignored (a background job of a shell without job control, or
    # a CI runner) inherits the ignore and Python then installs no KeyboardInterrupt handler:
    # the child sets Python's own handler first, as an interactive interpreter has it, so the
    # test checks recv and not how its parent was started.
    code = (
        "import signal, sys, tflux\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "rx = tflux.Channel.open(sys.argv[1]).receiver('a')\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    rx.recv()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    ignore = inherited == "ignored"
    p = run_py(code, str(tmp_path), preexec_fn=ignore_sigint if ignore else None)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    # Generous: a CI machine under load (or a niced run) can starve the child for seconds; a
    # recv that ignores Ctrl-C still fails here, only later.
    out, err = p.communicate(timeout=120)
    assert "interrupted" in out, err


def test_disk_full_error_is_an_io_error_with_enospc(tmp_path):
    with tflux.Channel.open(tmp_path, disk_high_ratio=0.0001, disk_low_ratio=0.0001) as ch:
        with pytest.raises(tflux.DiskFullError) as info:
            ch.sender().send(b"x")
        assert isinstance(info.value, tflux.TfluxIOError)
        assert info.value.errno == errno.ENOSPC
        assert ch.next_lsn == 0  # nothing written
        assert ch.disk_full


def test_message_batch_is_columnar(tmp_path):
    with tflux.Channel.open(tmp_path, sync="never") as ch:
        ch.sender().send_many([b"a", b"bc", b"def"])
        batch = ch.receiver("r").recv_many(10, timeout=0)
        assert len(batch) == 3
        assert batch.data == b"abcdef"
        assert struct.unpack("=4i", batch.offsets) == (0, 1, 3, 6)
        assert batch[-1] == tflux.Message(2, b"def")
        with pytest.raises(IndexError):
            batch[3]


# ----- fan-out -----


def test_fan_out_three_threads_while_sending(tmp_path):
    n = 3000
    with small(tmp_path, sync="never") as ch:
        rxs = [ch.receiver(f"r{i}") for i in range(3)]
        results: dict[int, list] = {i: [] for i in range(3)}

        def consume(i):
            rx = rxs[i]
            while len(results[i]) < n:
                batch = rx.recv_many(97, timeout=20)
                assert len(batch), "timed out"
                results[i].extend(batch[k] for k in range(len(batch)))
                rx.ack(len(batch))

        threads = [threading.Thread(target=consume, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        tx = ch.sender()
        for i in range(0, n, 10):
            tx.send_many([b"%06d" % k for k in range(i, i + 10)])
        for t in threads:
            t.join(60)
        for i in range(3):
            assert [(m.lsn, m.data) for m in results[i]] == [(k, b"%06d" % k) for k in range(n)]
        assert ch.receivers() == {"r0": n, "r1": n, "r2": n}


RECEIVER_PROCESS = """
import sys, tflux
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ch = tflux.Channel.open(path, readonly=True)
rx = ch.receiver(name)
print('ready', flush=True)
seen = 0
while seen < n:
    b = rx.recv_many(500, timeout=30)
    if not len(b):
        print('timeout', seen, flush=True); sys.exit(1)
    for i in range(len(b)):
        m = b[i]
        if m.lsn != seen or m.data != b'%06d' % seen:
            print('bad', m.lsn, seen, flush=True); sys.exit(1)
        seen += 1
    rx.ack(len(b))
print('done', seen, flush=True)
"""


def test_fan_out_three_processes_across_roll_over(tmp_path):
    n = 2000
    ch = small(tmp_path, sync="never")
    procs = [run_py(RECEIVER_PROCESS, str(tmp_path), f"p{i}", str(n)) for i in range(3)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    tx = ch.sender()
    for i in range(0, n, 20):
        tx.send_many([b"%06d" % k for k in range(i, i + 20)])
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and f"done {n}" in out, (out, err)
    assert ch.receivers() == {"p0": n, "p1": n, "p2": n}
    # Every receiver acknowledged everything: only the active segment is left.
    ch.collect()
    assert ch.start_lsn > 0
    ch.close()


def test_receiver_name_locked_across_processes(tmp_path):
    tflux.Channel.open(tmp_path).close()
    code = (
        "import sys, tflux, time\n"
        "rx = tflux.Channel.open(sys.argv[1], readonly=True).receiver('a')\n"
        "print('ready', flush=True); time.sleep(30)\n"
    )
    p = run_py(code, str(tmp_path))
    try:
        assert p.stdout.readline().strip() == "ready"
        with tflux.Channel.open(tmp_path) as ch:
            with pytest.raises(tflux.LockedError):
                ch.receiver("a")
    finally:
        p.kill()
        p.wait()
    with tflux.Channel.open(tmp_path) as ch:
        ch.receiver("a")  # the kernel released the dead owner's lock


# ----- collection -----


def test_collection_keeps_unacknowledged_segments(tmp_path):
    with small(tmp_path, sync="never") as ch:
        tx = ch.sender()
        fast, slow = ch.receiver("fast"), ch.receiver("slow")
        for i in range(200):
            tx.send(b"%06d" % i)
        assert len(drain(fast)) == 200
        fast.ack(200)
        assert ch.collect() == 0  # slow has acknowledged nothing
        got = drain(slow)
        slow.ack(120)
        assert ch.collect() > 0
        assert ch.start_lsn <= 120
        slow.close()
        slow = ch.receiver("slow")
        assert drain(slow)[0].lsn == 120
        del got


def test_the_longest_receiver_name_the_spec_allows_works_for_the_receivers_life(tmp_path):
    """Issue 30, item 6: names of 236-248 bytes hit ENAMETOOLONG on the cursor's temporary
    file; a 235-byte name acked 99 times, then every ack failed (the sequence number grew)."""
    name = "n" * 248
    with small(tmp_path, sync="never") as ch:
        ch.sender().send_many([b"m%d" % i for i in range(300)])
        rx = ch.receiver(name)
        for _ in range(150):
            assert rx.recv(timeout=0) is not None
            rx.ack(1)
        assert ch.receivers() == {name: 150}
        rx.close()
    with small(tmp_path) as ch:
        assert ch.receiver(name).position == 150


def test_a_channel_and_a_store_each_refuse_the_others_directory(tmp_path):
    """Issue 30, item 2: Channel.open accepted a store's base and a receiver created
    data/cursors in it; verify then took the base for a channel, skipped the snapshot and replay
    checks and said OK. Each open refuses the other's directory, and both at once is corrupt."""
    store_base, channel_base = tmp_path / "store", tmp_path / "channel"
    with tflux.open(store_base) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
        store.snapshot()
    with small(channel_base) as ch:
        ch.sender().send(b"message")
    assert tflux.base_kind(store_base) == "store"
    assert tflux.base_kind(channel_base) == "channel"
    assert tflux.base_kind(tmp_path / "new") is None
    with pytest.raises(tflux.ArgumentError, match="store's base directory"):
        tflux.Channel.open(store_base)
    with pytest.raises(tflux.ArgumentError, match="channel directory"):
        tflux.open(channel_base)
    assert not (store_base / "data" / "cursors").exists()
    # What the old bug left behind: cursors beside a snapshot. Nothing reads it as either.
    (store_base / "data" / "cursors").mkdir()
    with pytest.raises(tflux.CorruptionError, match="never both"):
        tflux.base_kind(store_base)
    with pytest.raises(tflux.CorruptionError, match="never both"):
        tflux.open(store_base, readonly=True)
    done = subprocess.run(
        [sys.executable, "-m", "tflux", "verify", str(store_base)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "never both" in done.stderr, (done.stdout, done.stderr)


def dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_temp_files_of_killed_writers_are_removed_at_the_next_writable_open(tmp_path):
    """Issue 30, item 9 (its second half): a receiver killed mid-ack leaves its cursor's
    temporary file in data/cursors/temp, and nothing ever removed them (12-25 per 50 kill
    trials). A writable open removes those whose writer is dead, never a live writer's."""
    with small(tmp_path) as ch:
        ch.receiver("r").close()
    temp = tmp_path / "data" / "cursors" / "temp"
    temp.mkdir(exist_ok=True)
    dead = temp / f"r.cursor.{dead_pid()}.7.tmp"
    mine = temp / f"r.cursor.{os.getpid()}.8.tmp"
    other = temp / "not-ours.tmp"
    for p in (dead, mine, other):
        p.write_bytes(b"half a cursor")
    with small(tmp_path, readonly=True):
        assert dead.exists()  # a read-only open removes nothing
    with small(tmp_path) as ch:
        assert ch.receivers() == {"r": 0}
    assert not dead.exists() and mine.exists() and other.exists()
    # The store's data/temp (snapshots and metadata written by atomic replacement) likewise.
    base = tmp_path / "store"
    with tflux.open(base) as store:
        store.snapshot()
    leftover = base / "data" / "temp" / f"tflux.snapshot.{dead_pid()}.3.tmp"
    leftover.write_bytes(b"half a snapshot")
    with tflux.open(base, readonly=True):
        pass
    assert leftover.exists()
    with tflux.open(base):
        pass
    assert not leftover.exists()


def segment_names(base) -> list[str]:
    return sorted(p.name for p in (base / "data" / "log").iterdir())


@pytest.mark.parametrize("damage", ["dangling symlink", "flipped byte"])
def test_an_unreadable_cursor_holds_back_collection_and_never_stops_sends(tmp_path, damage):
    """Issue 30, items 1 and 7: a dangling cursor symlink read as "no receiver", so collect()
    deleted the receiver's unacknowledged messages; a damaged cursor of an idle receiver made
    the collection after each roll-over fail, which stopped every send."""
    with small(tmp_path, sync="never") as ch:
        tx = ch.sender()
        fast, idle = ch.receiver("fast"), ch.receiver("idle")
        idle.close()
        tx.send_many([b"%06d" % i for i in range(100)])
        cursor = tmp_path / "data/cursors/idle.cursor"
        if damage == "dangling symlink":
            cursor.unlink()
            cursor.symlink_to(tmp_path / "nowhere.cursor")
        else:
            buf = bytearray(cursor.read_bytes())
            buf[12] ^= 0x40
            cursor.write_bytes(bytes(buf))
        before = segment_names(tmp_path)
        assert len(drain(fast)) == 100
        fast.ack(100)
        for i in range(100, 300):  # many roll-overs: each collects, none may stop a send
            tx.send(b"%06d" % i)
        with pytest.raises(tflux.CorruptionError, match=r"idle\.cursor"):
            ch.collect()
        with pytest.raises(tflux.CorruptionError, match=r"idle\.cursor"):
            ch.receivers()
        with pytest.raises(tflux.CorruptionError, match=r"idle\.cursor"):
            ch.receiver("idle")
        assert set(before) <= set(segment_names(tmp_path))  # nothing collected
    with small(tmp_path, sync="never") as ch:  # and again after a reopen
        ch.sender().send_many([b"after reopen"] * 50)
        everything = ch.receiver("audit", start="earliest")
        assert [m.lsn for m in drain(everything)] == list(range(350))


# ----- kill -9 -----

SENDER_PROCESS = """
import sys, tflux
path = sys.argv[1]
ch = tflux.Channel.open(path, soft_limit=2048, hard_limit=4096, preallocate=False)
tx = ch.sender()
i = ch.next_lsn  # message k is sent at LSN k (a send the kill cut short may have landed)
while True:
    lsn = tx.send_many([b'%08d' % k for k in range(i, i + 3)])
    print(lsn, i, flush=True)
    i += 3
"""

ACKER_PROCESS = """
import sys, tflux
path = sys.argv[1]
rx = tflux.Channel.open(path, readonly=True).receiver('k')
print('start', rx.acked, flush=True)
while True:
    b = rx.recv_many(7, timeout=5)
    if not len(b):
        print('idle', flush=True); break
    rx.ack(len(b))
    print('acked', rx.acked, flush=True)
"""


def acker_lines(out: str) -> list[tuple[str, int]]:
    """The acker's ``start N`` and ``acked N`` lines. Only the last line may be cut short (the
    kill can land while the process prints it); it is dropped, as if the kill came before."""
    lines = out.splitlines()
    parsed = []
    for i, line in enumerate(lines):
        match = re.fullmatch(r"(start|acked) (\d+)|idle", line)
        if match is None:
            assert i == len(lines) - 1, f"a malformed line before the last: {line!r} in {lines}"
            break
        if match.group(1):
            parsed.append((match.group(1), int(match.group(2))))
    return parsed


def test_an_acker_line_cut_short_by_the_kill_is_dropped_only_at_the_end():
    assert acker_lines("start 3\nacked 10\nacked") == [("start", 3), ("acked", 10)]
    assert acker_lines("start 3\nacked 10\nidle\n") == [("start", 3), ("acked", 10)]
    assert acker_lines("sta") == []
    with pytest.raises(AssertionError):
        acker_lines("start 3\nacked\nacked 10\n")


def rest_of_output(p: subprocess.Popen) -> str:
    """What an ended child printed after the lines already read with ``p.stdout.readline()``.

    Not ``communicate()``: it reads the pipe's descriptor directly and so misses the lines
    that ``readline`` had already pulled into the file object's buffer. A fast acker could
    print several ``acked`` lines before the first ``readline``, and losing them made the
    kill trials see a later cursor than any line they had read (1386 against 1211 + 7)."""
    out = p.stdout.read()
    p.stderr.read()
    p.wait()
    return out


def test_rest_of_output_keeps_the_lines_readline_buffered():
    p = run_py("print('one'); print('two'); print('three')")
    p.wait()  # all three lines are in the pipe before the first readline
    assert p.stdout.readline() == "one\n"
    assert rest_of_output(p) == "two\nthree\n"


def kill_trials(tmp_path: Path, trials: int) -> None:
    rng = random.Random(1234)
    sent = 0  # number of messages acknowledged by some send_many call (they are 0..sent-1)
    acked = 0
    for _ in range(trials):
        sender = run_py(SENDER_PROCESS, str(tmp_path))
        # Random moments from its first acknowledged send on (not from the process's start: a
        # loaded machine may take longer than the sleep to start Python).
        first = sender.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.2))
        os.kill(sender.pid, signal.SIGKILL)
        out = rest_of_output(sender)
        assert first, "the sender never sent"
        for line in (first + out).splitlines():
            parts = line.split()
            if len(parts) == 2:
                lsn, first = int(parts[0]), int(parts[1])
                assert lsn == first
                sent = max(sent, first + 3)
        # A receiver in another process, killed at a random moment too.
        acker = run_py(ACKER_PROCESS, str(tmp_path))
        started = acker.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(acker.pid, signal.SIGKILL)
        out = rest_of_output(acker)
        lines = acker_lines(started + out)
        if lines and lines[0][0] == "start":
            start = lines[0][1]
            # Resumes exactly at the first unacknowledged message: nothing acknowledged is
            # redelivered, nothing is skipped (an ack the kill cut short may have landed).
            assert acked <= start <= acked + 7
            acked = start
            for word, value in lines[1:]:
                if word == "acked":
                    acked = value
    # Every acknowledged send is in the log, in order, once. Collection may have deleted
    # segments that the only receiver acknowledged (that is its job), never one it had not.
    with tflux.Channel.open(tmp_path, readonly=True) as ro:
        cursor = ro.receivers().get("k", 0)  # first LSN receiver k has not acknowledged
        rx = ro.receiver("check", start="earliest")
        got = drain(rx)
    lsns = [m.lsn for m in got]
    assert acked <= cursor
    assert lsns and lsns[0] <= cursor, (lsns[:1], cursor)
    assert lsns == list(range(lsns[0], lsns[0] + len(lsns)))
    assert lsns[-1] + 1 >= sent
    assert [m.data for m in got] == [b"%08d" % lsn for lsn in lsns]


def test_kill9_sender_and_receiver(tmp_path):
    kill_trials(tmp_path, 12)


@pytest.mark.slow
def test_kill9_sender_and_receiver_slow(tmp_path):
    kill_trials(tmp_path, 120)


# ----- disk watermarks on a small file system -----


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MiB tmpfs (root only; skipped elsewhere)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.disk_watermarks
def test_sends_refused_before_the_file_system_is_full(small_fs):
    ch = tflux.Channel.open(small_fs / "ch", soft_limit=64 << 10, hard_limit=128 << 10)
    tx, rx = ch.sender(), ch.receiver("r")
    sent = 0
    with pytest.raises(tflux.DiskFullError) as info:
        for _ in range(10_000):
            tx.send_many([b"x" * 1000] * 10)
            sent += 10
    # The watermark refused the send, not the file system: nothing was cut short, and sending
    # resumes by itself once receivers acknowledge: the refused send is above the cleaning
    # ratio too, so it collects first (no explicit collect()).
    assert "refused" in str(info.value) and info.value.errno == errno.ENOSPC
    assert ch.next_lsn == sent
    assert ch.disk_full
    with pytest.raises(tflux.DiskFullError):
        tx.send(b"still nothing acknowledged")
    assert ch.start_lsn == 0
    while True:
        batch = rx.recv_many(1000, timeout=0)
        if not len(batch):
            break
        rx.ack(len(batch))
    assert tx.send(b"after") == sent
    assert not ch.disk_full
    assert ch.start_lsn > 0
    ch.close()


def test_a_real_enospc_stops_sends_until_reopened_and_receivers_keep_reading(small_fs):
    """Watermarks off: the file system itself fills. The failed send is all or nothing, later
    sends are refused even once space is free again (fail-stop), receivers read on, and a reopen
    sends again."""
    path = small_fs / "ch"
    opts = dict(
        soft_limit=64 << 10,
        hard_limit=128 << 10,
        disk_high_ratio=None,
        disk_low_ratio=None,
        disk_clean_ratio=None,
    )
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"b" * (256 << 10))  # freed after the failure, so acks can be written
    ch = tflux.Channel.open(path, **opts)
    tx, rx = ch.sender(), ch.receiver("r")

    def batch(first: int) -> list[bytes]:
        return [b"%08d" % k + b"x" * 992 for k in range(first, first + 10)]

    sent = 0
    with pytest.raises(tflux.TfluxIOError) as info:
        for _ in range(10_000):
            tx.send_many(batch(sent))
            sent += 10
    assert info.value.errno == errno.ENOSPC
    ballast.unlink()
    with pytest.raises(tflux.TfluxIOError):
        tx.send(b"space is free again, but sends stay refused until reopened")
    got = drain(rx)
    assert [m.lsn for m in got] == list(range(sent))  # none of the failed batch
    assert all(m.data[:8] == b"%08d" % m.lsn for m in got)
    rx.ack(sent)
    ch.receiver("late")  # new receivers open too
    rx.close()
    ch.close()
    with tflux.Channel.open(path, **opts) as ch:
        assert ch.next_lsn == sent
        assert ch.receivers()["r"] == sent
        assert ch.sender().send_many(batch(sent)) == sent
        assert [m.lsn for m in drain(ch.receiver("r"))] == list(range(sent, sent + 10))


@pytest.mark.disk_watermarks
def test_store_refuses_writes_before_the_file_system_is_full(small_fs):
    base = small_fs / "store"
    with tflux.open(base, log_file_soft_limit=64 << 10, log_file_hard_limit=128 << 10) as store:
        n = 0
        with pytest.raises(tflux.DiskFullError):
            for _ in range(10_000):
                store.enqueue_many("", [(1, b"y" * 1000)] * 10)
                n += 10
        assert store.count("") == n  # every acknowledged enqueue is there, reads work
    with tflux.open(base, readonly=True) as store:
        assert store.count("") == n


# ----- command line -----


def test_inspect_shows_receivers_and_lag(tmp_path):
    import json

    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(30)])
        a, b = ch.receiver("alpha"), ch.receiver("beta")
        drain(a)
        a.ack(30)
        drain(b)
        b.ack(12)
    done = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "inspect", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    assert doc["receivers"] == [
        {"name": "alpha", "acked": 30, "lag": 0},
        {"name": "beta", "acked": 12, "lag": 18},
    ]
    text = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "inspect", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert "beta" in text.stdout and "18" in text.stdout


def test_dump_prints_a_channel_raw(tmp_path):
    import json

    with tflux.Channel.open(tmp_path) as ch:
        ch.sender().send_many([b"hello", b"world"])
    done = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "dump", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["data"] == b"hello".hex()


def test_verify_checks_a_collected_channel(tmp_path):
    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(200)])
        ch.sender().send(b"last")
        rx = ch.receiver("r")
        drain(rx)
        rx.ack(201)
        assert ch.collect() > 0
    done = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "verify", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_inspect_reads_a_collected_channel_as_healthy(tmp_path):
    # Regression: inspect checked a channel like a queue base, so a channel whose oldest segments
    # were collected was reported as "a gap between the snapshot and the log" and exited 1.
    import json

    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(200)])
        ch.sender().send(b"last")
        rx = ch.receiver("r")
        drain(rx)
        rx.ack(201)
        assert ch.collect() > 0
    done = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "inspect", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["problems"] == []
    assert doc["receivers"] == [{"name": "r", "acked": 201, "lag": 0}]


def test_compress_sealed_channel_is_read_by_another_process(tmp_path):
    n = 300
    with small(tmp_path, compress_sealed="lz4", sync="never") as ch:
        tx = ch.sender()
        for i in range(n):
            tx.send(b"%06d" % i)
        assert list((tmp_path / "data/log").glob("*.log.z"))
        p = run_py(RECEIVER_PROCESS, str(tmp_path), "z", str(n))
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and f"done {n}" in out, (out, err)


# ----- waiting -----


def test_recv_timeout_returns_none_and_closing_the_receiver_wakes_it(tmp_path):
    with tflux.Channel.open(tmp_path, sync="never") as ch:
        rx = ch.receiver("a")
        started = time.monotonic()
        assert rx.recv(timeout=0.05) is None
        assert time.monotonic() - started >= 0.05
        assert len(rx.recv_many(10, timeout=0.01)) == 0
        errors = []

        def wait():
            try:
                rx.recv()
            except tflux.ClosedError as e:
                errors.append(e)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.05)
        rx.close()  # from another thread than the waiting one
        t.join(20)
        assert not t.is_alive() and len(errors) == 1
        ch.receiver("a")  # the name is free again


ACKING_RECEIVER_PROCESS = """
import sys, tflux
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rx = tflux.Channel.open(path, readonly=True).receiver(name)
print('ready', flush=True)
seen = 0
while seen < n:
    b = rx.recv_many(37, timeout=30)
    if not len(b):
        print('timeout', seen, flush=True); sys.exit(1)
    for i in range(len(b)):
        m = b[i]
        if m.lsn != seen or m.data != b'%06d' % seen:
            print('bad', m.lsn, seen, flush=True); sys.exit(1)
        seen += 1
    rx.ack(len(b))
print('done', seen, flush=True)
"""


@pytest.mark.parametrize("method", ["zstd", "lz4"])
def test_readonly_receiver_survives_roll_over_retention_and_compression_while_sending(
    tmp_path, method
):
    """A receiver in another process reads while the writer rolls over, compresses the sealed
    segments and deletes them under retention (its own cursor is all that holds them)."""
    n = 1500
    ch = small(tmp_path, sync="never", compress_sealed=method, retention_ms=0)
    p = run_py(ACKING_RECEIVER_PROCESS, str(tmp_path), "far", str(n))
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    tx = ch.sender()
    for i in range(0, n, 5):
        tx.send_many([b"%06d" % k for k in range(i, i + 5)])
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and f"done {n}" in out, (out, err)
    assert ch.receivers() == {"far": n}
    tx.send_many([b"%06d" % k for k in range(n, n + 200)])  # rolls over: collects
    assert ch.start_lsn > 0
    assert list((tmp_path / "data/log").glob("*.log.z")) or ch.start_lsn >= n
    ch.close()


# ----- documentation -----


def test_the_readme_channel_example_runs_as_written(tmp_path):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Channels") :]
    start = section.index("```python\n") + len("```python\n")
    code = section[start : section.index("```\n", start)]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    with tflux.Channel.open(tmp_path / "events", readonly=True) as ch:
        # What the example says: billing acknowledged all three, audit starts at the first.
        assert ch.receivers() == {"audit": 0, "billing": 3}
        assert ch.next_lsn == 4  # and one more sent from "another process" at the end
