"""The suite's own stores and channels have the disk watermarks off (tests/_watermarks.py), so that
a host disk above tflux's defaults fails no test of something else; what a test sets itself, and
the tests marked ``disk_watermarks``, keep their ratios."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tflux


def ratio(base, **kw) -> float:
    with tflux.open(base, **kw) as store:
        return store.settings["DiskFullRatio"]


def test_a_store_a_test_opens_has_the_watermark_off(tmp_path):
    assert ratio(tmp_path / "a") == 1.0
    assert ratio(tmp_path / "a", readonly=True) == 1.0
    # What the library says its defaults are does not change.
    assert tflux.settings(tmp_path / "a")["DiskFullRatio"] < 1.0


def test_a_ratio_the_test_sets_is_kept(tmp_path):
    assert ratio(tmp_path / "a", disk_full_ratio=0.5) == 0.5
    base = tmp_path / "b"
    base.mkdir()
    (base / "taskflux.settings.json").write_text('{"DiskFullRatio": 0.7}')
    assert ratio(base) == 0.7
    assert ratio(base, readonly=True) == 0.7
    assert ratio(base, disk_full_ratio=0.6) == 0.6


@pytest.mark.disk_watermarks
def test_a_marked_test_keeps_the_defaults(tmp_path):
    assert ratio(tmp_path) == tflux.settings(tmp_path)["DiskFullRatio"] < 1.0


def test_a_child_process_of_a_test_has_the_watermark_off_too(tmp_path):
    code = (
        "import sys, tflux\nwith tflux.open(sys.argv[1]) as s: print(s.settings['DiskFullRatio'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert (done.stdout.strip(), done.stderr) == ("1.0", "")


def test_a_channel_keeps_the_ratios_the_test_gives(tmp_path):
    with tflux.Channel.open(tmp_path, disk_high_ratio=0.0001, disk_low_ratio=0.0001) as ch:
        with pytest.raises(tflux.DiskFullError):
            ch.sender().send(b"refused: any disk is above 0.01%")
