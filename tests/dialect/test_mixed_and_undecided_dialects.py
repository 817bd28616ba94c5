"""Issue 43, defects 10 and 11: which dialect a directory is in when its segments disagree, or
when none of its files can say.

Detection read only the first record of the log: a last segment of the other dialect was taken
for a torn tail (read-only opens and ``verify`` showed the first segments' records, a writable
open cut it). And a real TaskFlux directory with its metadata removed and one bit flipped in its
first record was read as spec: every entry was cut. Both are now ``DialectError`` from every
reader, naming the file, changing nothing; the undecided one says what each ``--dialect`` does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tflux
from conftest import segment_name
from test_taskflux_dialect import real_dir

FAST = {"log_preallocate_segments": False, "log_sync_policy": "never"}


def snapshot_of_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def tflux_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tflux", *args], capture_output=True, text=True, timeout=120
    )


def mixed_base(tmp_path: Path) -> tuple[Path, Path]:
    """A spec store of 3 records, then the real taskflux segment of a follower as its last one."""
    base = tmp_path / "mixed"
    with tflux.open(base, **FAST) as store:
        for i in range(3):
            store.enqueue("", i, b"spec %d" % i)
    real = real_dir("follower-segmented", tmp_path)
    log = base / "data" / "log"
    last = log / segment_name(3)
    last.write_bytes((real / "data" / "log" / segment_name(52)).read_bytes())
    return base, last


def test_a_last_segment_of_the_other_dialect_is_refused_by_every_reader(tmp_path):
    base, last = mixed_base(tmp_path)
    before = snapshot_of_files(base)
    for kwargs in ({"readonly": True}, {}):
        with pytest.raises(tflux.DialectError, match="two dialects") as e:
            tflux.open(base, **FAST, **kwargs)
        assert Path(e.value.path) == last
    with pytest.raises(tflux.DialectError, match="two dialects"):
        tflux.Log.open(base / "data" / "log", readonly=True)
    run = tflux_cli("verify", str(base))
    assert run.returncode != 0, run.stdout
    assert "two dialects" in run.stdout + run.stderr
    assert snapshot_of_files(base) == before


def test_a_taskflux_directory_that_cannot_say_its_dialect_is_refused_and_nothing_is_cut(tmp_path):
    base = real_dir("leader-single-segment", tmp_path)
    (base / "data" / "tflux.metadata").unlink()
    (base / "data" / "tflux.snapshot").unlink()
    segment = base / "data" / "log" / segment_name(0)
    data = bytearray(segment.read_bytes())
    data[8 + 19] ^= 0x01  # one bit of the first record's length: no framing finds the second
    segment.write_bytes(bytes(data))
    before = snapshot_of_files(base)
    for kwargs in ({"readonly": True}, {}):
        with pytest.raises(tflux.DialectError, match="cannot decide") as e:
            tflux.open(base, **FAST, **kwargs)
        assert Path(e.value.path) == segment
        message = str(e.value)
        assert "--dialect spec" in message and "--dialect taskflux" in message
    run = tflux_cli("verify", str(base))
    assert run.returncode != 0, run.stdout
    assert "cannot decide" in run.stdout + run.stderr
    assert snapshot_of_files(base) == before
    # Choosing reads it: the damaged first record is where the taskflux read stops.
    with tflux.open(base, readonly=True, dialect="taskflux") as store:
        assert store.dialect == "taskflux"


def test_a_damaged_first_record_leaves_the_second_record_to_say_the_dialect(tmp_path):
    """One bit of the first record's payload: the length still leads to the second record,
    which says taskflux, so the directory is read as TaskFlux wrote it (never as spec)."""
    base = real_dir("leader-single-segment", tmp_path)
    (base / "data" / "tflux.metadata").unlink()
    (base / "data" / "tflux.snapshot").unlink()
    segment = base / "data" / "log" / segment_name(0)
    data = bytearray(segment.read_bytes())
    data[8 + 20] ^= 0x01
    segment.write_bytes(bytes(data))
    assert tflux.Layout(base).dialect == "taskflux"
