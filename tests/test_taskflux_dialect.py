"""Directories TaskFlux's own C# storage code wrote (spec section 11, the taskflux dialect).

They are another project's data, read from ``../shared/taskflux-csharp`` beside the checkout (or
``$TFLUX_TASKFLUX_DATA``) and copied into a temporary directory before anything opens them; the
tests skip, saying why, where they are absent. This version detects the dialect and refuses the
directory, so that nothing reads TaskFlux's records as damage: every open, verify and dump of
them fails with :class:`tflux.DialectError` and leaves every byte as it was. (Before, a writable
open of one without its metadata file cut the whole log to nothing and said it was an empty
store.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tflux
from conftest import encode_segment

ROOT = Path(__file__).resolve().parent.parent
TASKFLUX_DATA = Path(
    os.environ.get("TFLUX_TASKFLUX_DATA") or ROOT.parent / "shared" / "taskflux-csharp"
)
FIXTURES = [
    "leader-single-segment",
    "follower-segmented",
    "snapshot-compacted",
    "snapshot-ahead-of-log",
    "torn-tail-truncated",
    "torn-tail-bad-crc",
    "after-taskflux-repair",
]


def real_dir(name: str, tmp_path: Path) -> Path:
    """A writable copy of the real directory ``name`` (CI's ``../shared`` is read-only)."""
    source = TASKFLUX_DATA / name
    if not source.is_dir():
        pytest.skip(
            f"TaskFlux's data directories are not at {TASKFLUX_DATA} (set TFLUX_TASKFLUX_DATA)"
        )
    base = tmp_path / name
    shutil.copytree(source, base)
    return base


def contents(base: Path) -> dict[str, str]:
    """Every file and directory under ``base`` with a hash of its bytes."""
    out = {}
    for p in sorted(base.rglob("*")):
        key = str(p.relative_to(base))
        out[key] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tflux", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", FIXTURES)
def test_every_open_of_a_real_directory_is_refused_and_changes_nothing(name, tmp_path):
    base = real_dir(name, tmp_path)
    before = contents(base)
    for readonly in (True, False):
        with pytest.raises(tflux.DialectError, match="taskflux dialect") as raised:
            tflux.open(base, readonly=readonly)
        assert raised.value.path is not None and Path(raised.value.path).is_relative_to(base)
    with pytest.raises(tflux.DialectError):
        tflux.verify_base(base)
    assert contents(base) == before


@pytest.mark.parametrize("name", [n for n in FIXTURES if n != "snapshot-ahead-of-log"])
def test_a_real_log_directory_alone_is_refused_by_its_first_record(name, tmp_path):
    """The log without its base: its first record (Int64 term, CRC-32/MPEG-2) says taskflux.
    (``snapshot-ahead-of-log`` has no record in its log: only its snapshot and metadata speak.)
    """
    base = real_dir(name, tmp_path)
    log_dir = base / "data" / "log"
    before = contents(base)
    for readonly in (True, False):
        with pytest.raises(tflux.DialectError, match="Int64 term"):
            tflux.Log.open(log_dir, readonly=readonly)
    with pytest.raises(tflux.DialectError):
        tflux.verify(log_dir)
    assert contents(base) == before


def test_without_its_metadata_file_a_real_directory_never_opens_as_an_empty_store(tmp_path):
    """The regression: the log's 53 entries were cut to nothing (no copy) and the store opened
    empty; ``tflux verify`` then said OK."""
    base = real_dir("leader-single-segment", tmp_path)
    (base / "data" / "tflux.metadata").unlink()
    before = contents(base)
    with pytest.raises(tflux.DialectError, match="first record"):
        tflux.open(base)
    assert contents(base) == before
    assert not (base / "data" / "temp").exists()


@pytest.mark.parametrize("verb", ["verify", "dump", "inspect", "replay"])
def test_the_cli_refuses_a_real_directory_with_a_reason_and_a_failing_exit(verb, tmp_path):
    base = real_dir("follower-segmented", tmp_path)
    before = contents(base)
    done = cli(verb, str(base))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "taskflux dialect" in done.stderr
    assert "Traceback" not in done.stderr
    assert contents(base) == before


def test_files_of_two_dialects_in_one_directory_are_an_error_naming_both(tmp_path):
    base = real_dir("snapshot-compacted", tmp_path)
    spec_metadata = tmp_path / "spec" / "data" / "tflux.metadata"
    spec_metadata.parent.mkdir(parents=True)
    tflux.write_metadata(spec_metadata, 3, 2)
    shutil.copyfile(spec_metadata, base / "data" / "tflux.metadata")
    before = contents(base)
    with pytest.raises(tflux.DialectError, match="two dialects") as raised:
        tflux.open(base)
    message = str(raised.value)
    assert "tflux.metadata" in message and ("tflux.snapshot" in message or ".log" in message)
    assert contents(base) == before


def test_a_spec_directory_written_by_hand_is_not_mistaken_for_taskflux(tmp_path):
    """The independent encoder's spec records (zlib CRC, Int32 term, padding) open as spec."""
    log_dir = tmp_path / "data" / "log"
    log_dir.mkdir(parents=True)
    (log_dir / "0000000000000000000.log").write_bytes(
        encode_segment([(1, b"C\x01q\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff\xff\xff\x00")])
    )
    with tflux.Log.open(log_dir, readonly=True) as log:
        assert log.last_index == 0
