"""``tflux.locate`` (the core's ``base::locate``): what a path is, for the CLI and the Spark
reader; ``tflux.open_segments``: a read-only log over chosen segments, naming the real files
(issue 42 part 2: the symlink view it replaces broke relative paths and rewrote errors with
``str.replace``). The Spark reader's resolution is called directly (no Spark started)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import tflux
from tflux.spark import _paths


def write_base(base: Path) -> list[str]:
    """A store's base of several segments; returns the segment file names."""
    with tflux.open(
        base, log_sync_policy="never", log_file_soft_limit=4096, log_file_hard_limit=8192
    ) as store:
        store.create_queue("q")
        for i in range(150):
            store.enqueue("q", i % 7, bytes([65 + i % 26]) * 100)
        store.snapshot()
        for i in range(150):
            store.enqueue("q", i % 7, bytes([65 + i % 26]) * 100)
    return sorted(os.listdir(base / "data" / "log"))


@pytest.fixture
def base(tmp_path) -> Path:
    base = tmp_path / "b"
    names = write_base(base)
    assert len(names) >= 4
    (tmp_path / "link").symlink_to(base)
    return base


def test_every_form_of_a_base_is_located_as_that_base(base, monkeypatch):
    log = base / "data" / "log"
    monkeypatch.chdir(base.parent)
    for path in [base, "b", "./b/", "link"]:
        found = tflux.locate(path)
        assert found.kind == "base"
        assert Path(found.base).resolve() == base.resolve()
        assert Path(found.log).resolve() == log.resolve()
        assert found.snapshot is not None and found.segments is None
        assert found.dialect == "spec"
    assert tflux.locate("link").base == str(base.parent / "link")  # a link keeps its name
    monkeypatch.chdir(log)
    for path in [".", "../log", str(log)]:
        found = tflux.locate(path)
        assert (found.kind, found.base, found.log) == ("log", str(base), str(log))
    assert tflux.locate("../..").kind == "base"


def test_a_segment_is_located_by_any_path_and_opens_alone(base, monkeypatch):
    log = base / "data" / "log"
    name = sorted(os.listdir(log))[1]
    monkeypatch.chdir(log)
    for path in [name, f"./{name}", str(log / name), f"../../../b/data/log/{name}"]:
        found = tflux.locate(path)
        assert found.kind == "segment"
        assert found.segments == [int(name[:19])]
        assert Path(found.base).resolve() == base.resolve()
        with found.open_log() as opened:
            (seg,) = opened.segments
            assert Path(seg.path).resolve() == (log / name).resolve()
            assert opened.start_index == int(name[:19])


def test_a_bare_log_a_snapshot_and_a_missing_path(base, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(base / "data" / "log", bare)
    found = tflux.locate(bare)
    assert (found.kind, found.base, found.log, found.snapshot) == (
        "bare_log",
        None,
        str(bare),
        None,
    )
    snap = tflux.locate(base / "data" / "tflux.snapshot")
    assert (snap.kind, snap.base, snap.log) == ("snapshot", str(base), str(base / "data" / "log"))
    lone = tmp_path / "node1.snapshot"
    shutil.copy(base / "data" / "tflux.snapshot", lone)
    assert (tflux.locate(lone).kind, tflux.locate(lone).base) == ("snapshot", None)
    with pytest.raises(tflux.TfluxIOError):
        tflux.locate(tmp_path / "nosuch")
    with pytest.raises(tflux.DialectError):
        tflux.locate(base, dialect="taskflux")


def test_open_segments_reads_the_chosen_segments_and_names_the_real_files(base, tmp_path):
    log = base / "data" / "log"
    names = sorted(os.listdir(log))
    firsts = [int(n[:19]) for n in names]
    with tflux.open_segments(log, firsts[1:3]) as two:
        assert [s.name for s in two.segments] == names[1:3]
        assert two.start_index == firsts[1] and two.last_index == firsts[3] - 1
    raw = bytearray((log / names[1]).read_bytes())
    raw[8 + 16 + 40] ^= 0xFF
    (log / names[1]).write_bytes(bytes(raw))
    with tflux.open_segments(log, [firsts[1]]) as one:  # read as a last segment: up to the damage
        assert one.recovery.truncated and one.recovery.cut_path == str(log / names[1])
    with pytest.raises(tflux.CorruptionError) as refused:
        tflux.open_segments(log, firsts[1:3])
    assert refused.value.path == str(log / names[1]) and "tflux-view" not in str(refused.value)
    with pytest.raises(tflux.TfluxIOError):
        tflux.open_segments(log, [firsts[-1] + 10_000])


def test_the_spark_resolver_names_one_source_per_base_whatever_the_form(base, monkeypatch):
    """The Spark reader's path resolution, called directly: the core's answer."""
    monkeypatch.chdir(base / "data" / "log")
    sources = [_paths.resolve(p) for p in [".", "../..", str(base), "../tflux.snapshot"]]
    for (src,) in sources:
        assert Path(src.base).resolve() == base.resolve()
        assert Path(src.log_dir).resolve() == (base / "data" / "log").resolve()
        assert Path(src.snapshot).resolve() == (base / "data" / "tflux.snapshot").resolve()
        assert src.dialect == "spec"
    assert len(_paths.resolve(f"{base},{base}/data/log")) == 1
    linked = _paths.resolve(str(base.parent / "link"))
    assert linked[0].base == str(base.parent / "link")
    with pytest.raises(ValueError, match="one segment file"):
        _paths.resolve(sorted(os.listdir("."))[0])


def test_the_spark_view_reads_a_damaged_middle_segment_up_to_its_damage(base):
    log = base / "data" / "log"
    names = sorted(os.listdir(log))
    raw = bytearray((log / names[1]).read_bytes())
    raw[8 + 16 + 40] ^= 0xFF
    (log / names[1]).write_bytes(bytes(raw))
    with _paths.open_view(str(log), [names[1]]) as view:
        assert view.recovery.cut_path == str(log / names[1])
        assert view.last_index < int(names[2][:19]) - 1
    with pytest.raises(tflux.CorruptionError) as refused, _paths.open_view(str(log), names[1:3]):
        pass
    assert refused.value.path == str(log / names[1])
