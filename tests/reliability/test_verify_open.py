"""`tflux verify` and `tflux.open` agree on every damaged base directory.

Issue 10: the CLI re-implemented the store's checks and drifted (an absent metadata file skipped
the term check, a replay failure or a segment-named directory still said OK). Now both call the
core's checks. The property: over a generated store with random damage (truncation, byte flips,
removed, renamed or duplicated segments, bad metadata or snapshot, special files under a
segment's name), `tflux verify BASE` exits 0 if and only if a read-only `tflux.open(BASE)`
succeeds and restores the state.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
import tflux
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tflux.cli import cli

EXAMPLES = int(os.environ.get("TFLUX_VERIFY_OPEN_EXAMPLES", "300"))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A store with several sealed segments, a snapshot, metadata and an active segment."""
    base = tmp_path_factory.mktemp("pristine")
    with tflux.open(
        base,
        log_file_soft_limit=1024,
        log_file_hard_limit=4096,
        log_preallocate_segments=False,
        snapshot_creation_segments_threshold=0,
    ) as store:
        store.create_queue("jobs")
        store.create_queue("keyed", implementation="array", key_range=(0, 9))
        store.enqueue_many("jobs", [(k % 5, b"job-%d" % k * 10) for k in range(20)])
        for _ in range(5):
            store.ack(store.dequeue("jobs", timeout=0))
        store.snapshot()
        for k in range(10):
            store.enqueue("keyed", k, b"k" * 40)
        for _ in range(15):
            store.enqueue("jobs", 1, b"late" * 20)
        for _ in range(3):
            store.ack(store.dequeue("jobs", timeout=0))
    tflux.write_metadata(base / "data" / "tflux.metadata", 1)
    assert len(segments(base)) >= 3
    return base


def segments(base: Path) -> list[Path]:
    return sorted((base / "data" / "log").glob("*.log"))


def seg_name(lsn: int) -> str:
    return f"{lsn:019d}.log"


# One damage: (kind, a file choice in [0, 1), a position in [0, 1), a byte mask).
DAMAGE = st.tuples(
    st.sampled_from(
        [
            "truncate",
            "flip",
            "remove",
            "rename_up",
            "rename_down",
            "duplicate",
            "metadata",
            "snapshot",
            "directory",
            "fifo",
            "dev_null",
            "dev_zero",
            "empty",
        ]
    ),
    st.floats(0, 0.999),
    st.floats(0, 0.999),
    st.integers(1, 255),
)


def damage(base: Path, kind: str, which: float, where: float, mask: int) -> None:
    segs = segments(base)
    data = base / "data"
    if kind == "metadata":
        target = data / "tflux.metadata"
    elif kind == "snapshot":
        target = data / "tflux.snapshot"
    elif not segs:
        return
    else:
        target = segs[int(which * len(segs))]
    lsn = int(target.name[:19]) if target.name.endswith(".log") else 0
    if target.is_symlink() or (target.exists() and not target.is_file()):  # damaged already
        if kind == "remove":
            target.rmdir() if target.is_dir() and not target.is_symlink() else target.unlink()
        return
    if kind in ("metadata", "snapshot", "flip"):
        if not target.is_file() or target.stat().st_size == 0:
            return
        raw = bytearray(target.read_bytes())
        raw[int(where * len(raw))] ^= mask
        target.write_bytes(bytes(raw))
    elif kind == "truncate":
        raw = target.read_bytes()
        target.write_bytes(raw[: int(where * len(raw))])
    elif kind == "empty":
        target.write_bytes(b"")
    elif kind == "remove":
        target.unlink()
    elif kind in ("rename_up", "rename_down"):
        new = lsn + 1 + int(where * 5) if kind == "rename_up" else max(0, lsn - 1 - int(where * 5))
        dest = target.with_name(seg_name(new))
        if not dest.exists():
            target.rename(dest)
    elif kind == "duplicate":
        dest = target.with_name(seg_name(lsn + 1 + int(where * 50)))
        if not dest.exists():
            shutil.copyfile(target, dest)
    else:  # a special file under the segment's name
        target.unlink()
        if kind == "directory":
            target.mkdir()
        elif kind == "fifo":
            os.mkfifo(target)
        else:
            os.symlink("/dev/null" if kind == "dev_null" else "/dev/zero", target)


def opens_and_restores(base: Path) -> bool:
    try:
        with tflux.open(base, readonly=True) as store:
            store.queues()
    except tflux.TfluxError:
        return False
    return True


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(damages=st.lists(DAMAGE, min_size=1, max_size=3))
# Found by this test before issue 10's fix: with every segment gone the store opens (the
# snapshot restores, the log restarts after it), the CLI said "no log segments found".
@example(damages=[("remove", 0.0, 0.0, 1)] * 3)
def test_verify_exits_0_exactly_when_a_readonly_open_succeeds(pristine, tmp_path, damages):
    base = tmp_path / uuid.uuid4().hex
    shutil.copytree(pristine, base, symlinks=True)
    for d in damages:
        damage(base, *d)
    result = CliRunner().invoke(cli, ["verify", str(base)])
    assert result.exit_code in (0, 1, 2), result.output
    opened = opens_and_restores(base)
    assert (result.exit_code == 0) == opened, (damages, result.output)
    shutil.rmtree(base)


def test_the_pristine_store_verifies_and_opens(pristine):
    result = CliRunner().invoke(cli, ["verify", str(pristine)])
    assert result.exit_code == 0, result.output
    assert opens_and_restores(pristine)


def test_verify_base_reports_its_scan_as_it_goes_and_raises_what_the_callback_raised(tmp_path):
    """Issue 30, item 21: verify's bar sat at 0 for the whole check (the core reported
    nothing) and its total was twice the log. ``progress`` now counts the segment files'
    bytes as the scan reads them, up to exactly their total."""
    base = tmp_path / "base"
    opts = dict(
        log_file_soft_limit=64 << 10,
        log_sync_policy="never",
        snapshot_creation_segments_threshold=0,
    )
    with tflux.open(base, **opts) as store:
        store.create_queue("q")
        for k in range(3000):
            store.enqueue("q", k, bytes(200))
    log = base / "data" / "log"
    total = sum(p.stat().st_size for p in log.iterdir())
    assert len(list(log.iterdir())) > 5
    for replay in (False, True):
        seen: list[int] = []
        report = tflux.verify_base(base, replay=replay, progress=seen.append)
        assert report.ok and seen, seen
        assert seen == sorted(seen) and seen[-1] == total, (seen, total)

    def stop(done: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tflux.verify_base(base, progress=stop)
