"""The suite's own stores and channels have the disk watermarks off (tests/_watermarks.py), so that
a host disk above tflux's defaults fails no test of something else; what a test sets itself, and
the tests marked ``disk_watermarks``, keep their ratios."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import _watermarks
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


def test_the_child_hook_starts_in_an_interpreter_that_imported_nothing_yet():
    """The hook's finder sees every import of the child, from the first: one that imports
    something itself recursed forever where the interpreter had not imported ``importlib.util``
    at start-up (a user's clean venv), and the child died before running ("Could not import
    runpy module"). ``-S`` starts without ``site``, so nothing but the hook imports first."""
    code = (
        "import sys\n"
        "assert 'importlib.util' not in sys.modules, 'the check needs a bare interpreter'\n"
        f"sys.path.insert(0, {str(_watermarks.CHILD_SITE)!r})\n"
        "import sitecustomize\n"
        "import fractions, runpy\n"
        "print(sum(type(f).__name__ == 'SwitchOffOnImport' for f in sys.meta_path))\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert (done.stdout.strip(), done.stderr) == ("1", "")


def test_a_child_in_a_fresh_venv_runs_a_module_with_the_watermark_off(tmp_path):
    """As a user's clean venv starts a test's child: ``-m`` (runpy) first, then tflux, found
    through ``PYTHONPATH`` beside the hook; nothing of the machine's own site-packages."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False, system_site_packages=False)
    package_root = Path(tflux.__file__).resolve().parent.parent
    (tmp_path / "child.py").write_text(
        "import sys, tflux\nwith tflux.open(sys.argv[1]) as s: print(s.settings['DiskFullRatio'])\n"
    )
    path = [str(_watermarks.CHILD_SITE), str(package_root), str(tmp_path)]
    done = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "child", str(tmp_path / "base")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.stdout.strip(), done.stderr) == ("1.0", "")


def test_a_channel_keeps_the_ratios_the_test_gives(tmp_path):
    with tflux.Channel.open(tmp_path, disk_high_ratio=0.0001, disk_low_ratio=0.0001) as ch:
        with pytest.raises(tflux.DiskFullError):
            ch.sender().send(b"refused: any disk is above 0.01%")
