"""``tflux convert`` / :func:`tflux.convert`: a whole base directory written again in the other
dialect (spec section 11). Same logical content both ways (entries, terms, queues, records,
snapshot, metadata); the source never changes; a failure leaves no destination."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tflux
from _task_vectors import task_layout_snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_taskflux_dialect import FIXTURES, contents, queues_of, real_dir


def restore(base: Path) -> dict:
    with tflux.open(base, readonly=True) as store:
        return {"dialect": store.dialect, "queues": queues_of(store), "term": store.term}


def entries(base: Path) -> list[tuple[int, int, bytes]]:
    with tflux.Log.open(base / "data" / "log", readonly=True) as log:
        return [(e.lsn, e.term, bytes(e.data)) for e in log.entries()]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tflux", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", FIXTURES)
def test_every_real_directory_converts_to_spec_and_back_to_the_same_bytes(name, tmp_path):
    src = real_dir(name, tmp_path)
    before = contents(src)
    want = restore(src)
    spec = tmp_path / "spec"
    report = tflux.convert(src, spec, to="spec")
    assert (report.from_dialect, report.to_dialect) == ("taskflux", "spec")
    assert contents(src) == before  # the source is only read
    got = restore(spec)
    assert got["dialect"] == "spec" and got["queues"] == want["queues"]
    assert got["term"] == want["term"]
    assert entries(spec) == entries(src)
    assert tflux.verify_base(spec).ok
    back = tmp_path / "back"
    again = tflux.convert(spec, back, to="taskflux")
    assert again.entries == report.entries
    # The log and metadata come back byte for byte (TaskFlux's own bytes); a torn tail is
    # not converted, so those logs come back without it.
    for segment in sorted((src / "data" / "log").iterdir()):
        original = segment.read_bytes()
        converted = (back / "data" / "log" / segment.name).read_bytes()
        if report.torn_tail is None:
            assert converted == original.rstrip(b"\0") + b"\0\0\0\0" or converted == original
        else:
            assert original.startswith(converted[:-4])
    assert (back / "data" / "tflux.metadata").read_bytes() == (
        src / "data" / "tflux.metadata"
    ).read_bytes()
    assert restore(back) == want


def test_a_torn_source_tail_is_named_and_not_converted(tmp_path):
    src = real_dir("torn-tail-bad-crc", tmp_path)
    report = tflux.convert(src, tmp_path / "out", to="spec")
    assert report.torn_tail is not None and report.torn_tail[1] == 2647
    assert report.entries == 52


def test_a_failure_leaves_no_destination_and_no_half_built_copy(tmp_path):
    src = real_dir("follower-segmented", tmp_path)
    before = contents(src)

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tflux.convert(src, tmp_path / "out", to="spec", progress=stop)
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["follower-segmented"]
    assert contents(src) == before
    # A corrupt sealed segment in the source: nothing written either.
    seg = sorted((src / "data" / "log").iterdir())[1]
    data = bytearray(seg.read_bytes())
    data[40] ^= 0xFF
    seg.write_bytes(bytes(data))
    with pytest.raises(tflux.CorruptionError):
        tflux.convert(src, tmp_path / "out", to="spec")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["follower-segmented"]


WRITE_FAILS = r"""
import json, resource, signal, sys
import tflux
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
try:
    tflux.convert(sys.argv[1], sys.argv[2], to="taskflux")
except OSError as e:
    print(json.dumps({"type": type(e).__name__, "errno": e.errno, "msg": str(e)}))
"""


def test_a_write_that_fails_midway_is_named_and_leaves_nothing(tmp_path):
    # Segments are written by a second thread, 4 MiB at a time: a file-size limit of 1 MiB
    # (no test-only hook: the kernel's own EFBIG) fails the first buffer of the first segment
    # with more than 1 MiB of records, while the encoder is already filling the next.
    import errno

    src = tmp_path / "src"
    with tflux.open(src, log_sync_policy="never", snapshot_creation_segments_threshold=0) as s:
        s.create_queue("q")
        s.enqueue_many("q", [(k, bytes([k % 251]) * 1024) for k in range(9000)])
    before = contents(src)
    done = subprocess.run(
        [sys.executable, "-c", WRITE_FAILS, str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    failure = json.loads(done.stdout)
    assert failure["type"] == "TfluxIOError" and failure["errno"] == errno.EFBIG
    assert "write segment" in failure["msg"] and ".log" in failure["msg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    assert contents(src) == before


DIES_MIDWAY = r"""
import os, signal, sys
import tflux

def die(done, total):
    os.kill(os.getpid(), signal.SIGKILL)

tflux.convert(sys.argv[1], sys.argv[2], to="taskflux", progress=die)
"""


def test_a_killed_conversions_leftover_is_removed_by_the_next_and_a_live_ones_is_not(tmp_path):
    import fcntl
    import os

    src = real_dir("follower-segmented", tmp_path)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", DIES_MIDWAY, str(src), str(out)], timeout=120)
    assert done.returncode == -9
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".out.converting-")]
    assert len(leftovers) == 1 and (leftovers[0] / "data" / "log").is_dir()
    # Beside it: a live conversion's copy (its lock held), a symlink and a look-alike name.
    live = tmp_path / ".out.converting-1-2"
    live.mkdir()
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    (tmp_path / ".out.converting-3-4").symlink_to(live)
    (tmp_path / ".out.converting-x").mkdir()
    try:
        report = tflux.convert(src, out, to="taskflux")
    finally:
        os.close(held)
    assert report.leftovers_removed == [str(leftovers[0])]
    assert not leftovers[0].exists()
    assert live.is_dir() and (tmp_path / ".out.converting-3-4").is_symlink()
    assert (tmp_path / ".out.converting-x").is_dir()
    assert restore(out) == {**restore(src), "dialect": "taskflux"}


def test_an_existing_destination_is_refused_and_left_alone(tmp_path):
    src = real_dir("leader-single-segment", tmp_path)
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "keep").write_text("mine")
    with pytest.raises(tflux.ArgumentError, match="never overwrites"):
        tflux.convert(src, dst, to="spec")
    assert (dst / "keep").read_text() == "mine"
    done = cli("convert", str(src), str(dst), "--to", "spec")
    assert done.returncode == 2 and "never overwrites" in done.stderr


def test_the_cli_converts_with_json_and_says_the_dialects(tmp_path):
    src = real_dir("snapshot-compacted", tmp_path)
    done = cli("convert", str(src), str(tmp_path / "spec"), "--to", "spec", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["from"], doc["to"], doc["entries"], doc["snapshot"]) == (
        "taskflux",
        "spec",
        6,
        True,
    )
    done = cli("verify", "--json", str(tmp_path / "spec"))
    assert done.returncode == 0 and json.loads(done.stdout)["dialect"] == "spec"
    done = cli("convert", str(src), str(tmp_path / "x"), "--to", "spec", "--dialect", "spec")
    assert done.returncode == 2 and "dialect" in done.stderr
    assert not (tmp_path / "x").exists()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "take", "snap"]), st.integers(-5, 5), st.binary(max_size=200)
        ),
        min_size=1,
        max_size=60,
    ),
    soft=st.sampled_from([512, 4096, 1 << 20]),
)
def test_spec_to_taskflux_to_spec_keeps_the_same_logical_content(tmp_path_factory, ops, soft):
    root = tmp_path_factory.mktemp("convert")
    src = root / "src"
    with tflux.open(src, log_file_soft_limit=soft, log_file_hard_limit=soft * 4) as store:
        store.create_queue("q")
        for op, key, payload in ops:
            if op == "add":
                store.enqueue("q", key, payload)
            elif op == "take":
                got = store.dequeue("q", timeout=0)
                if got is not None:
                    store.ack(got)
            else:
                store.snapshot()
    want = restore(src)
    tflux.convert(src, root / "tf", to="taskflux")
    tflux.convert(root / "tf", root / "back", to="spec")
    assert restore(root / "tf") == {**want, "dialect": "taskflux"}
    assert restore(root / "back") == want
    assert entries(root / "back") == entries(src) == entries(root / "tf")
    a, b = src / "data" / "tflux.snapshot", root / "back" / "data" / "tflux.snapshot"
    assert a.exists() == b.exists() and (not a.exists() or a.read_bytes() == b.read_bytes())
    # An absent metadata file is the defaults; the taskflux copy writes them (so that it says
    # its dialect), and they come back as a file holding the same values.
    meta = [tflux.read_metadata(p / "data" / "tflux.metadata") for p in (src, root / "back")]
    assert meta[0] == meta[1]


TASK_VECTORS = json.loads(
    (Path(__file__).parents[1] / "data" / "task" / "task_deltas.json").read_text()
)


def test_converting_a_base_with_task_queue_deltas_to_taskflux_names_the_first_and_writes_nothing(
    tmp_path,
):
    # Spec section 12: TaskFlux has four deltas; the first one it cannot hold is named by LSN
    # and kind, and no destination (nor half-built copy) is left.
    src = tmp_path / "src"
    with tflux.open(src) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 1, b"plain")
    with tflux.Log.open(src / "data" / "log") as log:
        first = log.append(1, bytes.fromhex(TASK_VECTORS["add_later"]["hex"]))
        log.append(1, bytes.fromhex(TASK_VECTORS["failed"]["hex"]))
    with pytest.raises(tflux.ArgumentError, match=rf"AddLater delta at LSN {first}\b"):
        tflux.convert(src, tmp_path / "tf", to="taskflux")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    done = cli("convert", str(src), str(tmp_path / "tf"), "--to", "taskflux")
    assert done.returncode == 2 and f"AddLater delta at LSN {first}" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    # The spec dialect holds them: the same base converts to spec (a copy) as before.
    tflux.convert(src, tmp_path / "spec", to="spec")
    assert entries(tmp_path / "spec") == entries(src)


def test_converting_a_snapshot_with_task_queue_state_to_taskflux_refuses_and_writes_nothing(
    tmp_path,
):
    # A task-layout snapshot (spec section 12) holds rules, delays or counts TaskFlux cannot:
    # refused naming the queue, never converted without them.
    src = tmp_path / "src"
    with tflux.open(src) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 1, b"plain")
        store.snapshot()
    task_layout_snapshot(src / "data" / "tflux.snapshot")
    with pytest.raises(tflux.ArgumentError, match="task-queue state of queue 'jobs'"):
        tflux.convert(src, tmp_path / "tf", to="taskflux")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    # Spec to spec keeps the task state: the same snapshot bytes.
    tflux.convert(src, tmp_path / "spec", to="spec")
    assert (tmp_path / "spec" / "data" / "tflux.snapshot").read_bytes() == (
        src / "data" / "tflux.snapshot"
    ).read_bytes()
