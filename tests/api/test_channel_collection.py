"""What a ``tflux.Channel`` keeps: segments collected once every receiver passed them, cursors that
hold collection back, temp files of killed writers, and the disk watermarks on a small file
system (sends refused before the disk is full; a real ENOSPC).

The cursor file is checked against spec section 10 with ``struct`` and ``zlib`` only.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
import tflux
from _channel_support import drain, small

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
