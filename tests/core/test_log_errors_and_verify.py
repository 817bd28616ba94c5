"""``tflux.Log``'s error types (their attributes and pickling) and ``tflux.verify`` of a log.

Expected values come from the spec (section 3 and 3.1), the implementer's documented semantics and
the hand encoder in conftest.py.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import tflux
from _log_support import open_log
from conftest import (
    END_MARKER,
    encode_segment,
    record_offsets,
    segment_name,
)

# --- errors --------------------------------------------------------------------------------------


def test_error_classes_refine_the_builtin_exceptions():
    assert issubclass(tflux.CorruptionError, tflux.TfluxError)
    assert issubclass(tflux.CorruptionError, ValueError)
    assert issubclass(tflux.TfluxIOError, OSError)
    assert issubclass(tflux.LockedError, tflux.TfluxIOError)
    assert issubclass(tflux.ReadOnlyError, PermissionError)
    assert issubclass(tflux.ReadOnlyError, tflux.TfluxError)
    assert issubclass(tflux.ClosedError, ValueError)
    assert issubclass(tflux.ClosedError, tflux.TfluxError)


def test_a_corruption_error_pickles_with_its_path_and_offset():
    err = tflux.CorruptionError("bad checksum", "/x/data/log/0000000000000000000.log", 48)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is tflux.CorruptionError
    assert (str(back), back.path, back.offset) == (str(err), err.path, 48)


def test_a_raised_corruption_error_pickles_with_its_location(log_dir):
    records = [(1, b"one"), (1, b"two"), (1, b"three")]
    buf = bytearray(encode_segment(records))
    bad = record_offsets(records)[1]
    buf[bad + 16] ^= 0xFF  # data byte of the second record
    (log_dir / segment_name(0)).write_bytes(bytes(buf))
    (log_dir / segment_name(3)).write_bytes(encode_segment([(1, b"four")]))
    with pytest.raises(tflux.CorruptionError) as info:
        open_log(log_dir)
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is tflux.CorruptionError
    assert back.offset == info.value.offset == bad
    assert back.path == info.value.path
    assert Path(back.path).resolve() == (log_dir / segment_name(0)).resolve()
    assert str(back) == str(info.value)


def test_a_raised_locked_error_pickles(log_dir):
    with open_log(log_dir):
        with pytest.raises(tflux.LockedError) as info:
            open_log(log_dir)
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is tflux.LockedError
    assert back.path == info.value.path
    assert str(back) == str(info.value)


# --- verify --------------------------------------------------------------------------------------


def test_verify_accepts_the_base_directory_or_the_log_directory(base_dir, log_dir):
    with open_log(log_dir, soft_limit=64, hard_limit=100) as log:
        for i in range(7):
            log.append(1, bytes([i]) * 16)
        sizes = sum(s.size for s in log.segments)
    for path in (base_dir, log_dir, str(log_dir)):
        report = tflux.verify(path)
        assert report.ok
        assert Path(report.path).resolve() == log_dir.resolve()
        assert report.records == 7
        assert report.bytes == sizes
        assert [s.start_lsn for s in report.segments] == [0, 3, 6]
        assert [s.count for s in report.segments] == [3, 3, 1]
        assert not [p for p in report.problems if p.fatal]


def test_verify_of_a_freshly_closed_log_finds_nothing_and_writes_nothing(log_dir):
    with open_log(log_dir, preallocate=True, soft_limit=4096, hard_limit=8192) as log:
        log.append(1, b"a")
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in log_dir.iterdir()}
    report = tflux.verify(log_dir)
    assert report.ok
    assert report.problems == []
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in log_dir.iterdir()}
    assert after == before
    assert END_MARKER == (log_dir / segment_name(0)).read_bytes()[28:32]
