"""Replay with the removes as id ranges (issue 31): step 1's ``summary`` scan gives each queue's
RemoveRecords as merged runs of ids per chunk and incarnation group, the driver places them in
their incarnations and merges them, and the JVM readers drop the removed records in the scan
(log and snapshot), with no removes' scan and no join.

Every test compares with the single-machine restore (``tflux.open(base, readonly=True)``) or,
where the restore refuses the log (a remove of a missing id), with today's path (the removes'
anti-join, ``ranges=False``), and checks which path ran: a test that fell back to the join would
pass whatever the range filter did. Deltas are encoded here by hand (spec 6).
"""

from __future__ import annotations

import random
import struct
import tempfile
from pathlib import Path

import _needs
import pytest
import tflux
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_needs.pyspark()
pytest.importorskip("pyarrow")

import tflux.spark  # noqa: E402
from tflux.spark import rebuild  # noqa: E402
from tflux.spark._removed import _Bitmap  # noqa: E402


@pytest.fixture
def jvm(spark):
    if not tflux.spark.jvm_reader(spark):
        _needs.missing("no JVM reader in this session: the ranges need it")
    return spark


def create(q: str, impl: int = 1) -> bytes:
    return b"C" + bytes([len(q)]) + q.encode() + struct.pack(">iii", impl, -1, -1) + b"\x00"


def add(q: str, key: int, msg: bytes) -> bytes:
    return b"A" + bytes([len(q)]) + q.encode() + struct.pack(">qi", key, len(msg)) + msg


def remove(q: str, rid: int) -> bytes:
    return b"R" + bytes([len(q)]) + q.encode() + struct.pack(">Q", rid)


def delete(q: str) -> bytes:
    return b"D" + bytes([len(q)]) + q.encode()


def write(base: Path, deltas: list[bytes], soft: int = 4 << 10, per_append: int = 50) -> None:
    """``deltas`` in ``base/data/log`` over segments of about ``soft`` bytes."""
    with tflux.Log.open(base / "data" / "log", soft_limit=soft, hard_limit=2 * soft) as log:
        for i in range(0, len(deltas), per_append):
            first = log.append_many(1, deltas[i : i + per_append])
            log.commit(first + len(deltas[i : i + per_append]) - 1)


def restored(base: Path) -> dict[str, list[tuple[int, int, bytes]]]:
    with tflux.open(base, readonly=True) as store:
        out = {
            q.name: [(r.id, r.key, r.payload) for r in store.records(q.name)]
            for q in store.queues()
        }
    return {n: sorted(rs) for n, rs in out.items() if rs}


def collect(df) -> dict[str, list[tuple[int, int, bytes]]]:
    out: dict[str, list] = {}
    for r in df.collect():
        out.setdefault(r.queue, []).append((r.record_id, r.key, bytes(r.message)))
    return {n: sorted(rs) for n, rs in out.items()}


def replayed(spark, base: Path, *, ranges: bool = True, split: str | None = "4k"):
    """Live records through :class:`rebuild._Frames`; with ``ranges``, asserts the range path
    served (removes in the plan, no join); without, asserts today's join served."""
    if split:
        spark.conf.set("spark.sql.files.maxPartitionBytes", split)  # several splits a segment
    try:
        frames = rebuild._Frames(spark, str(base), ranges=ranges)
        df = frames.output(frames.live())
        plan = df._jdf.queryExecution().executedPlan().toString()
        if ranges:
            assert frames.ranges is not None and not frames.join_removes
            assert "Join" not in plan, plan
        elif frames.remove_count:
            assert frames.ranges is None and "Join" in plan
        return collect(df), frames
    finally:
        if split:
            spark.conf.unset("spark.sql.files.maxPartitionBytes")


def removed_ids(frames) -> int:
    """The ids the plan removes: its ranges' and its bitmaps' (issue 45)."""
    total = 0
    for rs in frames.ranges.values():
        if isinstance(rs, _Bitmap):
            total += int.from_bytes(rs.bits, "little").bit_count()
        else:
            total += sum(hi - lo + 1 for lo, hi in rs)
    return total


def test_fifo_acks_are_one_range_per_queue_and_replay_equals_the_restore(jvm, tmp_path):
    deltas = [create("jobs")]
    acked = 0
    for i in range(1, 1201):
        deltas.append(add("jobs", i % 5, b"m%d" % i))
        deltas.append(add("", i % 3, b"d%d" % i))
        if i % 3 == 0:  # every third step acks the oldest two of jobs, the oldest of ""
            deltas += [remove("jobs", acked + 1), remove("jobs", acked + 2), remove("", i // 3)]
            acked += 2
    deltas.append(add("jobs", 1, b"last"))
    base = tmp_path / "fifo"
    write(base, deltas)
    got, frames = replayed(jvm, base)
    assert got == restored(base)
    assert [r[0] for r in got["jobs"]] == list(range(801, 1202))
    assert [r[0] for r in got[""]] == list(range(401, 1201))
    # FIFO acks merge across the whole log into one range per queue.
    assert sorted(map(len, frames.ranges.values())) == [1, 1]
    assert removed_ids(frames) == 800 + 400
    # A scan with the plan and no column (count) reads its records: the removed adds are gone.
    scan = jvm.read.format("tflux").option("replayPlan", frames.plan)
    assert scan.load(str(base / "data" / "log")).count() == len(deltas) - 1200


def test_acks_out_of_order_and_spanning_segments(jvm, tmp_path):
    rng = random.Random(5)
    deltas = [create("a"), create("b")]
    ids = {"a": 0, "b": 0}
    for _ in range(1500):
        q = rng.choice("ab")
        ids[q] += 1
        deltas.append(add(q, rng.randint(0, 9), rng.randbytes(rng.randint(0, 30))))
    # Acks of a random 80% of each queue's records, in random order, spread over later
    # segments between more adds.
    acks = [(q, i) for q in "ab" for i in range(1, ids[q] + 1) if rng.random() < 0.8]
    rng.shuffle(acks)
    for n, (q, i) in enumerate(acks):
        deltas.append(remove(q, i))
        if n % 7 == 0:
            ids["a"] += 1
            deltas.append(add("a", 3, b"late%d" % n))
    base = tmp_path / "shuffled"
    write(base, deltas, soft=2 << 10)
    assert len(list((base / "data" / "log").iterdir())) > 10
    got, frames = replayed(jvm, base, split="2k")
    want = restored(base)
    assert got == want
    assert removed_ids(frames) == len(acks)
    assert sum(map(len, want.values())) == sum(ids.values()) - len(acks)


def test_removes_belong_to_the_incarnation_they_were_logged_in(jvm, tmp_path):
    """Ids restart at 1 after a delete + create: the first incarnation's ranges (1..30
    removed) must not remove the second's records 1..30."""
    deltas = [create("q")]
    deltas += [add("q", 1, b"old%d" % i) for i in range(1, 41)]
    deltas += [remove("q", i) for i in range(1, 31)]
    deltas += [delete("q"), create("q")]
    deltas += [add("q", 2, b"new%d" % i) for i in range(1, 41)]
    deltas += [remove("q", i) for i in range(1, 41, 3)]
    deltas += [create("gone"), add("gone", 0, b"x"), remove("gone", 1), add("gone", 0, b"y")]
    base = tmp_path / "recreated"
    write(base, deltas, soft=1 << 10, per_append=7)
    got, frames = replayed(jvm, base, split="1k")
    want = restored(base)
    assert got == want
    assert [r[0] for r in want["q"]] == [i for i in range(1, 41) if i % 3 != 1]
    assert want["gone"] == [(2, 0, b"y")]
    # Only the final incarnations' ranges travel.
    assert removed_ids(frames) == len(range(1, 41, 3)) + 1


def test_snapshot_records_removed_in_the_log_are_dropped_by_the_snapshot_reader(jvm, tmp_path):
    base = tmp_path / "snap"
    rng = random.Random(9)
    with tflux.open(
        base,
        log_file_soft_limit=8 << 10,
        log_file_hard_limit=16 << 10,
        snapshot_creation_segments_threshold=0,
        log_sync_policy="never",
    ) as store:
        store.create_queue("jobs")
        store.create_queue("grid", implementation="array", key_range=(0, 9))
        for q in ("jobs", "grid", ""):
            store.enqueue_many(q, [(rng.randint(0, 9), rng.randbytes(12)) for _ in range(400)])
        assert store.snapshot()
        for q in ("jobs", "grid", ""):
            taken = [store.dequeue(q, timeout=0) for _ in range(rng.randint(100, 300))]
            rng.shuffle(taken)  # acked out of order
            for rec in taken[: len(taken) * 3 // 4]:
                store.ack(rec)
            for rec in taken[len(taken) * 3 // 4 :]:
                store.nack(rec)
            store.enqueue_many(q, [(1, b"after")] * 20)
            store.ack(store.dequeue(q, timeout=0))
    got, frames = replayed(jvm, base)
    want = restored(base)
    assert got == want
    assert len(frames.ranges) == 3 and all(frames.ranges.values())


def log_with(bad: str) -> list[bytes]:
    deltas = [create("q")]
    deltas += [add("q", i % 4, b"r%d" % i) for i in range(1, 301)]
    deltas += [remove("q", i) for i in range(1, 101)]
    if bad == "twice":
        deltas += [remove("q", 50)]  # LSN 401
    elif bad == "missing":
        deltas += [remove("q", 900)]  # never added
    else:  # removed before it is added: the anti-join drops it too
        deltas += [remove("q", 301)]
    deltas += [add("q", 0, b"r301"), remove("q", 200), add("q", 1, b"r302")]
    return deltas


@pytest.mark.parametrize("bad", ["twice", "missing", "before-its-add"])
def test_invalid_removes_raise_with_validate_and_match_the_join_without(jvm, tmp_path, bad):
    base = tmp_path / bad
    write(base, log_with(bad), soft=2 << 10)
    with pytest.raises(tflux.ReplayError) as local:
        tflux.open(base, readonly=True)
    assert local.value.lsn == 401
    # The same error at the same LSN (a remove before its add too: check() orders each remove
    # after its add, as the restore does).
    with pytest.raises(tflux.ReplayError) as distributed:
        tflux.spark.replay(jvm, str(base), validate=True)
    assert distributed.value.lsn == 401
    # Without validate: what today's anti-join gives (a duplicate merges, a missing id is
    # ignored, an id removed before its add is not live).
    got, _ = replayed(jvm, base)
    joined, _ = replayed(jvm, base, ranges=False)
    assert got == joined
    ids = [r[0] for r in got["q"]]
    assert 50 not in ids and 200 not in ids and 101 in ids
    assert (301 in ids) == (bad != "before-its-add")
    assert tflux.spark.replay(jvm, str(base)).count() == len(ids)


def test_a_chunk_with_too_many_runs_falls_back_to_the_join(jvm, tmp_path, monkeypatch):
    deltas = [create("q")] + [add("q", 0, b"%d" % i) for i in range(1, 401)]
    deltas += [remove("q", i) for i in range(1, 401, 2)]  # 200 runs of one id
    base = tmp_path / "runs"
    write(base, deltas, soft=64 << 10)
    want = restored(base)
    got, _ = replayed(jvm, base)
    assert got == want
    monkeypatch.setattr(rebuild, "SUMMARY_RUNS", 50)
    logs = [(str(base / "data" / "log"), 0)]
    rows = rebuild.summaries(jvm, logs, ranges=True).collect()
    over = [r for r in rows if r.rm_lsn is not None and r.rm_lo is None]
    assert over and sum(r.rm_count for r in over) == 200
    frames = rebuild._Frames(jvm, str(base))
    assert frames.ranges is None and frames.join_removes
    assert collect(frames.output(frames.live())) == want


def test_more_merged_ranges_than_the_plan_takes_become_a_bitmap_and_past_its_bits_the_join(
    jvm, tmp_path, monkeypatch
):
    deltas = [create("q")] + [add("q", 0, b"%d" % i) for i in range(1, 201)]
    deltas += [remove("q", i) for i in range(1, 201, 2)]
    base = tmp_path / "many"
    write(base, deltas)
    monkeypatch.setattr(rebuild, "RANGE_PLAN_RANGES", 99)
    monkeypatch.setattr(rebuild, "PLAN_BITS", 200)  # ids 0..200 of q's one incarnation: 201
    got, frames = replayed(jvm, base, ranges=False)  # asserts the join served
    frames = rebuild._Frames(jvm, str(base))
    assert frames.ranges is None and frames.join_removes
    assert got == restored(base)
    monkeypatch.setattr(rebuild, "PLAN_BITS", 201)
    got, frames = replayed(jvm, base)
    assert got == restored(base)
    [bitmap] = frames.ranges.values()
    assert isinstance(bitmap, _Bitmap) and removed_ids(frames) == 100
    monkeypatch.setattr(rebuild, "RANGE_PLAN_RANGES", 100)
    got, frames = replayed(jvm, base)
    assert got == restored(base) and max(map(len, frames.ranges.values())) == 100


def test_summary_ranges_hold_every_remove_once_and_count_duplicates(jvm, tmp_path):
    rng = random.Random(3)
    deltas = [create("a")] + [add("a", 0, b"") for _ in range(500)]
    ids = list(range(1, 501))
    rng.shuffle(ids)
    removes = ids[:350] + ids[:5]  # five ids removed twice
    rng.shuffle(removes)
    deltas += [remove("a", i) for i in removes]
    base = tmp_path / "dups"
    write(base, deltas, soft=1 << 10)
    jvm.conf.set("spark.sql.files.maxPartitionBytes", "1k")
    try:
        rows = rebuild.summaries(jvm, [(str(base / "data" / "log"), 0)], ranges=True).collect()
    finally:
        jvm.conf.unset("spark.sql.files.maxPartitionBytes")
    ranges = [r for r in rows if r.rm_lsn is not None]
    assert all(r.rm_lo is not None for r in ranges)
    assert sum(r.rm_count for r in ranges) == len(removes)
    covered = [i for r in ranges for i in range(r.rm_lo, r.rm_hi + 1)]
    # Within a chunk the runs are merged; across chunks a duplicate shows as an overlap.
    assert set(covered) == set(ids[:350])
    assert (
        sum(r.rm_count - (r.rm_hi - r.rm_lo + 1) for r in ranges) + len(covered) - len(set(covered))
        == 5
    )


# --- random small logs: replay (ranges in the scan) == the restore, every queue ------------

NAMES = ["", "jobs", "mail"]


@st.composite
def small_logs(draw):
    """Valid logs (the restore accepts them): adds, acks of any live record (any order),
    deletes and re-creates."""
    deltas = [create("jobs"), create("mail")]
    live: dict[str, list[int]] = {n: [] for n in NAMES}
    last = dict.fromkeys(NAMES, 0)
    alive = dict.fromkeys(NAMES, True)
    for _ in range(draw(st.integers(20, 400))):
        q = draw(st.sampled_from(NAMES))
        op = draw(st.integers(0, 99))
        if not alive[q]:
            deltas.append(create(q))
            alive[q], last[q], live[q] = True, 0, []
        elif q and op < 2:
            deltas.append(delete(q))
            alive[q] = False
        elif op < 55 or not live[q]:
            n = draw(st.integers(1, 8))
            for _ in range(n):
                last[q] += 1
                live[q].append(last[q])
                deltas.append(add(q, draw(st.integers(0, 3)), b"%s%d" % (q.encode(), last[q])))
        else:
            rid = live[q].pop(draw(st.integers(0, len(live[q]) - 1)))
            deltas.append(remove(q, rid))
    return deltas, draw(st.sampled_from([512, 2048, 8192])), draw(st.sampled_from([1, 9, 50]))


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=small_logs())
def test_replay_of_random_small_logs_equals_the_restore_of_every_queue(jvm, case):
    deltas, soft, per_append = case
    with tempfile.TemporaryDirectory(prefix="tflux-ranges-") as tmp:
        base = Path(tmp) / "base"
        write(base, deltas, soft=soft, per_append=per_append)
        want = restored(base)
        frames = rebuild._Frames(jvm, str(base))
        got = collect(frames.output(frames.live()))
        assert got == want
        if frames.remove_count:
            assert frames.ranges is not None and not frames.join_removes


# --- removed bitmaps (issue 45): acks in any order, no join -------------------------------


def priority_log(adds: int, seed: int = 11) -> tuple[list[bytes], set[int]]:
    """A priority queue's workload (as ``benches.suite._queuedata.build_queue_log``): Add, Add,
    Remove, each Remove acking the smallest (key, id) live: the acked ids are scattered."""
    import heapq

    rng = random.Random(seed)
    deltas, heap, acked = [create("pq")], [], set()
    for i in range(1, adds + 1):
        key = rng.randrange(4096)
        deltas.append(add("pq", key, b"%d" % i))
        heapq.heappush(heap, (key, i))
        if i % 2 == 0:
            _, rid = heapq.heappop(heap)
            deltas.append(remove("pq", rid))
            acked.add(rid)
    return deltas, acked


def test_scattered_acks_come_from_the_summary_as_one_bitmap_per_group(jvm, tmp_path, monkeypatch):
    """Past Summary.BITS_AFTER_RUNS (1,024) runs a group's ids are a bitmap row (``rm_bits``),
    so a chunk whose acks are scattered no longer overflows its runs (here 50)."""
    deltas, acked = priority_log(6000)
    base = tmp_path / "scattered"
    write(base, deltas, soft=4 << 20, per_append=500)
    monkeypatch.setattr(rebuild, "SUMMARY_RUNS", 50)
    rows = rebuild.summaries(jvm, [(str(base / "data" / "log"), 0)], ranges=True).collect()
    ranges = [r for r in rows if r.rm_lsn is not None]
    assert all(r.rm_lo is not None for r in ranges), "no overflow row"
    [bitmap] = [r for r in ranges if r.rm_bits is not None]
    assert bitmap.rm_lo % 64 == 0 and bitmap.rm_count == len(acked) == 3000
    bits = int.from_bytes(bitmap.rm_bits, "little")
    assert {
        bitmap.rm_lo + i for i in range(bitmap.rm_hi - bitmap.rm_lo + 1) if bits >> i & 1
    } == acked
    # Too few bits for the chunk's bitmap: the overflow row, and replay joins.
    rows = rebuild.summaries(jvm, [(str(base / "data" / "log"), 0)], ranges=True, bits=64)
    over = [r for r in rows.collect() if r.rm_lsn is not None]
    assert [(r.rm_lo, r.rm_bits, r.rm_count) for r in over] == [(None, None, 3000)]


@pytest.mark.parametrize("split", ["256k", None])
def test_priority_acks_replay_through_a_bitmap_with_no_join(jvm, tmp_path, monkeypatch, split):
    """The shape of issue 45 in small: every chunk holds more scattered runs than it may (here
    1,000: the 16M-delta log's chunks overflowed theirs), which sent replay to the join."""
    deltas, acked = priority_log(20_000)
    deltas += [create("gone"), add("gone", 1, b"g"), remove("gone", 1), delete("gone")]
    deltas += [create("gone"), add("gone", 1, b"h")]
    base = tmp_path / "priority"
    write(base, deltas, soft=512 << 10, per_append=500)
    want = restored(base)
    assert len(want["pq"]) == 20_000 - len(acked)
    monkeypatch.setattr(rebuild, "SUMMARY_RUNS", 1000)
    got, frames = replayed(jvm, base, split=split)
    assert got == want
    assert any(isinstance(r, _Bitmap) for r in frames.ranges.values())
    assert removed_ids(frames) == len(acked)  # gone's first incarnation is not a final one
    assert want["gone"] == [(1, 1, b"h")]
    assert tflux.spark.replay(jvm, str(base)).count() == sum(map(len, want.values()))


@pytest.mark.parametrize("split", ["600k", None])
def test_the_bitmaps_of_an_incarnation_fold_into_one_on_the_executors(jvm, tmp_path, split):
    """Every chunk of scattered acks is a bitmap about as long as the queue's ids (at 64M deltas
    the driver collected 774 MB of them); the summary folds the bitmaps of consecutive chunks of
    one incarnation into one before the driver collects them (``BitsFold.java``): here two
    bitmaps, one per incarnation of ``pq``, from eight segments (each a partition with
    ``split``, so that Spark merges partial folds), holding exactly each one's acked ids."""
    first, acked1 = priority_log(40_000)
    second, acked2 = priority_log(40_000, seed=12)
    base = tmp_path / "folded"
    write(base, [*first, delete("pq"), *second], soft=512 << 10, per_append=500)
    log_dir = base / "data" / "log"
    assert len(list(log_dir.iterdir())) >= 6
    if split:
        jvm.conf.set("spark.sql.files.maxPartitionBytes", split)
    try:
        rows = rebuild.summaries(jvm, [(str(log_dir), 0)], ranges=True).collect()
    finally:
        jvm.conf.unset("spark.sql.files.maxPartitionBytes")
    bitmaps = sorted((r for r in rows if r.rm_bits is not None), key=lambda r: r.rm_lsn)
    assert [r.queue for r in bitmaps] == ["pq", "pq"]
    assert bitmaps[0].rm_lsn < len(first) < bitmaps[1].rm_lsn
    for r, acked in zip(bitmaps, (acked1, acked2), strict=True):
        bits = int.from_bytes(r.rm_bits, "little")
        ids = {r.rm_lo + i for i in range(bits.bit_length()) if bits >> i & 1}
        assert r.rm_hi == r.rm_lo + 8 * len(r.rm_bits) - 1
        # A chunk with too few runs for a bitmap (an incarnation's last, here) gives ranges.
        same = [x for x in rows if x.rm_bits is None and x.rm_lsn is not None]
        same = [x for x in same if (x.rm_lsn < len(first)) == (r.rm_lsn < len(first))]
        assert len(same) < 1000 and r.rm_count + sum(x.rm_count for x in same) == len(acked)
        assert ids.union(*(range(x.rm_lo, x.rm_hi + 1) for x in same)) == acked
    got, frames = replayed(jvm, base, split=split)
    assert got == restored(base)
    assert removed_ids(frames) == len(acked2)  # the first incarnation is not a final one


@pytest.mark.parametrize(
    "scenario",
    [
        test_acks_out_of_order_and_spanning_segments,
        test_removes_belong_to_the_incarnation_they_were_logged_in,
        test_snapshot_records_removed_in_the_log_are_dropped_by_the_snapshot_reader,
    ],
    ids=["out-of-order", "recreated", "snapshot"],
)
def test_the_same_replays_with_every_incarnation_as_a_bitmap(jvm, tmp_path, monkeypatch, scenario):
    """With no range fitting the plan, every final incarnation's removes travel as a bitmap
    (the readers' other rule of ``ReplayIds.Queue.removed``): the same live records."""
    monkeypatch.setattr(rebuild, "RANGE_PLAN_RANGES", 0)
    made = []
    real = rebuild.replay_plan
    monkeypatch.setattr(rebuild, "replay_plan", lambda *a: made.append(real(*a)) or made[-1])
    scenario(jvm, tmp_path)
    assert made and all("\nr " not in plan for plan in made)
    assert any("\nb " in plan for plan in made)


def test_random_small_logs_replay_with_every_incarnation_as_a_bitmap(jvm, monkeypatch):
    monkeypatch.setattr(rebuild, "RANGE_PLAN_RANGES", 0)
    test_replay_of_random_small_logs_equals_the_restore_of_every_queue(jvm)


@pytest.mark.parametrize("bad", ["twice", "missing", "before-its-add"])
def test_invalid_removes_through_a_bitmap_match_the_join(jvm, tmp_path, monkeypatch, bad):
    base = tmp_path / bad
    write(base, log_with(bad), soft=2 << 10)
    joined, _ = replayed(jvm, base, ranges=False)
    monkeypatch.setattr(rebuild, "RANGE_PLAN_RANGES", 0)
    got, frames = replayed(jvm, base)
    assert all(isinstance(r, _Bitmap) for r in frames.ranges.values())
    assert got == joined
    with pytest.raises(tflux.ReplayError) as distributed:
        tflux.spark.replay(jvm, str(base), validate=True)
    assert distributed.value.lsn == 401


def test_a_bitmap_starts_at_the_first_removed_id_and_holds_only_ids_the_incarnation_can():
    """An incarnation's bitmap covers its ids from the first removed one (a snapshot may leave a
    large last id and few records), and no id past the ones it can hold (a remove of an id never
    added removes nothing): here 151 bits, not a billion."""
    from tflux.spark._removed import _merge_ranges, _Removed

    g = 1_000_000_000  # a multiple of 64
    removed = _Removed()
    removed.by_name[("b", "q")] += [(10, g, g + 2), (11, 2 * g, 2 * g)]
    removed.bits[("b", "q")] += [(12, g + 64, b"\x01" + bytes(7)), (13, g + 128, b"\xff" * 8)]
    removed.covered = 3 + 1 + 1 + 64
    inc_rows = [("b", "q", 0, -1, 2**63 - 1, 0, g - 10)]
    span = g + 150  # the snapshot's last id g - 10, then 160 adds
    out = _merge_ranges(removed, inc_rows, [0], removed.covered, 0, {0: span}, 151)
    assert out is not None, "a bitmap from id 0 would need a billion bits"
    bitmap = out[0]
    assert isinstance(bitmap, _Bitmap) and bitmap.base == g
    bits = int.from_bytes(bitmap.bits, "little")
    ids = {bitmap.base + i for i in range(len(bitmap.bits) * 8) if bits >> i & 1}
    assert ids == {g, g + 1, g + 2, g + 64, *range(g + 128, span + 1)}
    assert _merge_ranges(removed, inc_rows, [0], removed.covered, 0, {0: span}, 150) is None


@pytest.mark.parametrize("dialect", ["spec", "taskflux"])
def test_priority_acks_in_either_dialect_and_compressed_segments_replay_through_a_bitmap(
    jvm, tmp_path, monkeypatch, dialect
):
    deltas, acked = priority_log(12_000, seed=dialect == "spec")
    base = tmp_path / dialect
    log_dir = base / "data" / "log"
    with tflux.Log.open(
        log_dir, soft_limit=256 << 10, hard_limit=512 << 10, dialect=dialect
    ) as log:
        for i in range(0, len(deltas), 500):
            first = log.append_many(1, deltas[i : i + 500])
            log.commit(first + len(deltas[i : i + 500]) - 1)
        if dialect == "spec":  # compressed segments exist only in the spec dialect (spec 9)
            log.compress()
    names = [p.name for p in log_dir.iterdir()]
    assert any(n.endswith(".z") for n in names) == (dialect == "spec") and len(names) > 2
    want = restored(base)
    assert len(want["pq"]) == 12_000 - len(acked)
    monkeypatch.setattr(rebuild, "SUMMARY_RUNS", 1000)
    got, frames = replayed(jvm, base, split=None)
    assert got == want
    assert any(isinstance(r, _Bitmap) for r in frames.ranges.values())


def test_a_replay_with_bitmaps_costs_the_driver_few_py4j_round_trips(jvm, tmp_path):
    """Issue 45: the driver built step 1's fold one column expression at a time, about 1,700
    py4j round trips per replay (0.3-0.45 s of a 2.2 s replay, and the JVM's py4j thread and JIT
    besides). Step 1 is now one call (``ReplaySummary.java``), and registering again or asking
    again whether the JVM reader is loaded costs nothing. Counted, not timed: every py4j command
    the driver sends while it builds and counts a replay whose removes come as a bitmap."""
    deltas, acked = priority_log(20_000)
    write(tmp_path, deltas, soft=512 << 10, per_append=500)
    tflux.spark.replay(jvm, str(tmp_path)).count()  # the first: registers and asks once
    client = jvm.sparkContext._gateway._gateway_client
    sent = []
    send = client.send_command

    def counted(command, *args, **kwargs):
        sent.append(command)
        return send(command, *args, **kwargs)

    client.send_command = counted
    try:
        frames = rebuild._Frames(jvm, str(tmp_path))
        assert isinstance(frames.ranges, dict) and frames.join_removes is False
        assert any(isinstance(r, _Bitmap) for r in frames.ranges.values()), "no bitmap path"
        assert frames.output(frames.live()).count() == 20_000 - len(acked)
    finally:
        del client.send_command
    assert len(sent) <= 600, f"{len(sent)} py4j round trips for one replay"
