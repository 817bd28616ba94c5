"""Segment names and listings as the core decides them (spec sections 3 and 9): the Python side
(`tflux._layout`, the CLI, the Spark sources) asks the core instead of matching names itself."""

from __future__ import annotations

import tflux
from tflux._layout import is_segment_name, segment_names
from tflux._tflux import segment_files, segment_first_lsn


def test_only_nineteen_digits_and_log_or_log_z_name_a_segment():
    assert segment_first_lsn("0000000000000000042.log") == 42
    assert segment_first_lsn("0000000000000000042.log.z") == 42
    for name in ("42.log", "0000000000000000042.log.gz", "0000000000000000042.LOG", "x.log.z"):
        assert segment_first_lsn(name) is None, name
        assert not is_segment_name(name)
    assert is_segment_name("9223372036854775807.log")
    assert not is_segment_name("9999999999999999999.log")  # past Int64


def test_the_listing_is_in_lsn_order_with_the_z_of_a_twin_and_no_other_names(tmp_path):
    for name in ("0000000000000000010.log", "0000000000000000003.log", "0000000000000000010.log.z"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a segment")
    (tmp_path / "0000000000000000007.log.tmp").write_bytes(b"")
    assert segment_names(tmp_path) == ["0000000000000000003.log", "0000000000000000010.log.z"]
    assert segment_files(tmp_path) == [
        str(tmp_path / "0000000000000000003.log"),
        str(tmp_path / "0000000000000000010.log.z"),
    ]


def test_a_missing_log_directory_has_no_segments(tmp_path):
    assert segment_names(tmp_path / "absent") == []


def test_a_store_s_segments_are_listed_as_the_log_holds_them(tmp_path):
    with tflux.open(tmp_path, share=False, log_file_soft_limit=4096) as store:
        store.enqueue_many("", [(0, b"x" * 100)] * 200)
    log_dir = tmp_path / "data" / "log"
    with tflux.Log.open(log_dir, readonly=True) as log:
        held = [s.path for s in log.segments]
    assert len(held) > 1 and segment_files(log_dir) == held
