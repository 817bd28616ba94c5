"""A store after a crash: kill -9 of a writer child at any moment, a torn last record, leftovers in
the temp directory; a closed store; a log continued past LSN 2^31 - 1 that still snapshots and
restores.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import tflux
from _store_support import (
    FAST,
    SNAPSHOT_MARKER,
    SnapQueue,
    contents,
    encode_snapshot,
    files_of,
    info,
    log_dir_of,
    read_snapshot_file,
)
from conftest import (
    parse_segment,
    segment_files,
)
from test_state import add

# --- crashes ------------------------------------------------------------------------------------

CRASHER = textwrap.dedent(
    """
    import sys, tflux
    policy = sys.argv[2]
    store = tflux.open(
        sys.argv[1], log_sync_policy=policy, log_sync_interval_ms=5, log_file_soft_limit=256,
        log_file_hard_limit=1024, log_preallocate_segments=True,
        snapshot_creation_segments_threshold=2,
    )
    if "q" not in [q.name for q in store.queues()]:
        store.create_queue("q", implementation="array", key_range=(0, 3))
    i = 0
    while True:
        i += 1
        rid = store.enqueue("q", i % 4, b"%d" % i)
        print("E", rid, i, flush=True)
        if i % 3 == 0:
            r = store.dequeue("q", timeout=0)
            store.ack(r)
            print("A", r.id, flush=True)
        if i % 17 == 0:
            store.snapshot()
    """
)


@pytest.mark.parametrize("policy", ["always", "interval"])
def test_acknowledged_writes_survive_kill_9_at_any_moment(base_dir, policy):
    # Each round kills the writer after a different number of acknowledged calls; the survivor
    # state must hold every acknowledged enqueue and ack, with ids continuing without reuse.
    enqueued: dict[int, int] = {}  # id -> key
    acked: set[int] = set()
    for stop_after in (5, 40, 23, 90, 61):
        child = subprocess.Popen(
            [sys.executable, "-c", CRASHER, str(base_dir), policy],
            stdout=subprocess.PIPE,
            text=True,
        )
        lines = []
        try:
            while len(lines) < stop_after:
                line = child.stdout.readline()
                assert line, "the writer died on its own"
                lines.append(line.split())
        finally:
            child.kill()
            child.wait(timeout=10)
        # whatever the child printed before it died was acknowledged too; a line the kill cut
        # short (no newline yet) names nothing for certain and is left out
        complete = child.stdout.read().split("\n")[:-1]
        lines.extend(line.split() for line in complete if line.strip())
        child.stdout.close()
        for kind, *rest in lines:
            if kind == "E":
                rid, i = int(rest[0]), int(rest[1])
                assert rid not in enqueued, f"id {rid} handed out twice"
                enqueued[rid] = i % 4
            else:
                acked.add(int(rest[0]))
        with tflux.open(base_dir, **FAST) as store:
            recs = store.records("q")
            ids = {r.id for r in recs}
            assert not ids & acked, "an acknowledged ack was lost"
            missing = set(enqueued) - acked - ids
            # Only the record being acked when the kill came may be gone unseen: it is the
            # one the child dequeued right after printing an enqueue of a multiple of 3.
            if missing:
                kind, *rest = lines[-1]
                assert kind == "E" and int(rest[1]) % 3 == 0, f"lost enqueues {missing}"
                assert len(missing) == 1, f"lost enqueues {missing}"
                acked |= missing
            assert info(store, "q").last_id >= max(enqueued)
            assert all(r.key == enqueued.get(r.id, r.key) for r in recs)
            assert [(r.key, r.id) for r in recs] == sorted((r.key, r.id) for r in recs)
            # enqueued after the last line but before the kill: new ids, now part of the state
            for r in recs:
                if r.id not in enqueued:
                    assert r.id > max(enqueued)
                    enqueued[r.id] = r.key


def test_a_torn_last_record_is_cut_and_its_id_is_handed_out_again(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue_many("", [(0, b"first"), (0, b"second"), (0, b"third")])
    (seg,) = segment_files(log_dir_of(base_dir))
    path = log_dir_of(base_dir) / seg
    buf = path.read_bytes()
    parsed = parse_segment(buf)
    assert [d for _, d in parsed.records] == [
        add("", 0, p) for p in (b"first", b"second", b"third")
    ]
    path.write_bytes(buf[: parsed.end - 3])  # cut inside the third record's data
    with tflux.open(base_dir, **FAST) as store:
        assert [r.payload for r in store.records("")] == [b"first", b"second"]
        assert info(store, "").last_id == 2
        # the torn record was never acknowledged: its id is free
        assert store.enqueue("", 0, b"again") == 3
    with tflux.open(base_dir, **FAST) as store:
        assert contents(store, "") == [
            (1, 0, b"first", ""),
            (2, 0, b"second", ""),
            (3, 0, b"again", ""),
        ]


def test_a_closed_store_refuses_every_call(base_dir):
    store = tflux.open(base_dir, **FAST)
    store.close()
    for call in (
        lambda: store.enqueue("", 0, b""),
        lambda: store.dequeue("", timeout=0),
        lambda: store.create_queue("q"),
        lambda: store.queues(),
        lambda: store.snapshot(),
    ):
        with pytest.raises(tflux.ClosedError):
            call()
    store.close()  # closing twice is harmless


def test_a_read_only_open_never_cuts_a_torn_tail(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue_many("", [(0, b"first"), (0, b"second")])
    (seg,) = segment_files(log_dir_of(base_dir))
    path = log_dir_of(base_dir) / seg
    buf = path.read_bytes()
    torn = buf[: parse_segment(buf).end - 2]
    path.write_bytes(torn)
    before = files_of(base_dir)
    with tflux.open(base_dir, readonly=True) as reader:
        assert [r.payload for r in reader.records("")] == [b"first"]
    assert files_of(base_dir) == before


def test_leftovers_in_the_temp_directory_do_not_disturb_an_open(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue("", 0, b"x")
        store.snapshot()
        store.enqueue("", 0, b"y")
    (base_dir / "data" / "temp" / "tflux.snapshot").write_bytes(b"half a snapshot")
    (base_dir / "data" / "temp" / "tflux.snapshot.tmp").write_bytes(SNAPSHOT_MARKER)
    with tflux.open(base_dir, **FAST) as store:
        assert [r.payload for r in store.records("")] == [b"x", b"y"]
        assert store.restored_snapshot_index == 0
        store.enqueue("", 0, b"z")
        assert store.snapshot() is True
    assert read_snapshot_file(base_dir)[0] == 2


def test_a_store_keeps_snapshotting_past_lsn_int32_max(base_dir):
    """Issue 10, defect 9: past LSN 2**31-1 snapshots are written wide (spec 4.1), not refused."""
    data = base_dir / "data"
    data.mkdir()
    old = encode_snapshot(2**31 - 1, 1, [SnapQueue("", last_id=1, records=[(1, 0, b"s")])])
    (data / "tflux.snapshot").write_bytes(old)
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == 2**31 - 1
        assert store.enqueue("", 0, b"n") == 2  # record id; its LSN is 2**31
        assert store.snapshot() is True
        assert store.enqueue("", 0, b"m") == 3
    assert read_snapshot_file(base_dir)[:2] == (2**31, 1)
    assert read_snapshot_file(base_dir)[2][""].records == [(1, 0, b"s"), (2, 0, b"n")]
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == 2**31
        assert [r.payload for r in store.records("")] == [b"s", b"n", b"m"]
        assert store.snapshot() is True
    assert read_snapshot_file(base_dir)[:2] == (2**31 + 1, 1)


def test_a_log_continued_far_past_int32_snapshots_reopens_and_restores(base_dir):
    """The log continues at a high LSN (a follower's insert_range); the store snapshots."""
    high = 2**40
    (base_dir / "data").mkdir()
    tflux.write_snapshot(
        base_dir / "data" / "tflux.snapshot", high - 1, 1, [tflux.SnapshotQueue("")]
    )
    assert read_snapshot_file(base_dir)[:2] == (high - 1, 1)
    log_dir_of(base_dir).mkdir()
    with tflux.Log.open(log_dir_of(base_dir), preallocate=False) as log:
        log.insert_range(high, [(1, add("", 3, b"a")), (1, add("", 1, b"b"))])
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == high - 1
        assert [r.payload for r in store.records("")] == [b"b", b"a"]
        store.enqueue("", 2, b"c")  # at LSN high + 2
        assert store.snapshot() is True
    assert read_snapshot_file(base_dir)[:2] == (high + 2, 1)
    with tflux.open(base_dir, **FAST) as store:
        assert store.restored_snapshot_index == high + 2
        assert [store.dequeue("", 0).payload for _ in range(3)] == [b"b", b"c", b"a"]
