"""Issue 43 items 12 and 13: where convert and export may write.

``tflux convert SRC SRC/data/log/0000000000000099999.log`` exited 0 and left SRC unopenable (the
copy landed inside the source's log as a segment-named directory): a destination inside the
source, or a source inside the destination, is refused. An existing empty directory is taken as
``git clone`` takes it; a non-empty one is still refused. ``export`` overwrote OUT's Parquet
files silently: it refuses unless ``--force``. Both make the directory they are given as a base
is made (issue 43 item 18): a missing parent is an error naming it, and nothing is created,
unless ``--create`` makes the missing parents too, as ``mkdir -p``.
"""

from __future__ import annotations

import json

import pytest
import tflux
from _cli_support import open_store, run_cli, snapshot_of


def small_base(base):
    with open_store(base) as store:
        store.create_queue("q")
        for i in range(20):
            store.enqueue("q", i, b"x" * i)


def test_a_destination_inside_the_source_is_refused_and_the_source_untouched(tmp_path):
    src = tmp_path / "src"
    small_base(src)
    before = snapshot_of(src)
    inside = src / "data" / "log" / "0000000000000099999.log"
    result = run_cli("convert", src, inside, "--to", "taskflux")
    assert result.returncode == 2 and "is inside the source" in result.stderr
    assert not inside.exists() and snapshot_of(src) == before
    with pytest.raises(tflux.ArgumentError, match="is inside the"):
        tflux.convert(src / "data" / "..", src / "data" / "copy", to="spec")
    (tmp_path / "link").symlink_to(src)
    with pytest.raises(tflux.ArgumentError, match="is inside the"):
        tflux.convert(src, tmp_path / "link" / "copy", to="spec")
    with tflux.open(src, readonly=True) as store:
        assert store.count("q") == 20


def test_a_source_inside_the_destination_is_refused(tmp_path):
    outer = tmp_path / "outer"
    src = outer / "src"
    outer.mkdir()
    small_base(src)
    with pytest.raises(tflux.ArgumentError, match="is inside the"):
        tflux.convert(src, outer, to="spec")


def test_an_existing_empty_directory_is_taken_as_git_clone_takes_it(tmp_path):
    src = tmp_path / "src"
    small_base(src)
    dst = tmp_path / "dst"
    dst.mkdir()
    result = run_cli("convert", src, dst, "--to", "taskflux")
    assert result.returncode == 0, result.stderr
    with tflux.open(dst, readonly=True) as store:
        assert store.dialect == "taskflux" and store.count("q") == 20


def test_export_refuses_to_overwrite_its_files_unless_forced(tmp_path):
    pytest.importorskip("pyarrow.parquet")
    src = tmp_path / "src"
    small_base(src)
    out = tmp_path / "out"
    assert run_cli("export", src, out).returncode == 0
    written = (out / "log.parquet").read_bytes()
    again = run_cli("export", src, out)
    assert again.returncode == 2 and "--force" in again.stderr
    assert (out / "log.parquet").read_bytes() == written
    forced = run_cli("export", src, out, "--force")
    assert forced.returncode == 0, forced.stderr


@pytest.mark.parametrize("verb", ["convert", "export"])
def test_a_missing_parent_of_the_destination_is_named_and_nothing_is_created(tmp_path, verb):
    # Regression: convert failed naming its hidden half-built directory, not the missing
    # parent; export made the whole missing path (a typo became a new tree).
    if verb == "export":
        pytest.importorskip("pyarrow.parquet")
    src = tmp_path / "src"
    small_base(src)
    dst = tmp_path / "typo" / "deeper" / "dst"
    extra = ["--to", "taskflux"] if verb == "convert" else []
    result = run_cli(verb, src, dst, *extra)
    assert result.returncode == 2, result.stderr
    assert f"{tmp_path / 'typo' / 'deeper'} does not exist" in result.stderr
    assert "--create" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"], "nothing created"
    made = run_cli(verb, src, dst, *extra, "--create")
    assert made.returncode == 0, made.stderr
    assert dst.is_dir()


def test_a_missing_parent_named_as_json_is_one_error_object(tmp_path):
    src = tmp_path / "src"
    small_base(src)
    dst = tmp_path / "typo" / "dst"
    result = run_cli("convert", src, dst, "--to", "taskflux", "--json")
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2
    assert f"{tmp_path / 'typo'} does not exist" in doc["error"]
