"""The metadata codec (spec section 5): the golden files, round trips, corruption and atomic
writes; and what every codec does alike: corruption errors that survive pickling, lists where
tuples are expected, a missing directory as an ``OSError``.

Expected bytes come from the golden vectors in ``tests/data`` and from the reference encoder of
``_codec_reference.py``, written from the spec with ``struct`` and ``zlib`` only; tflux output is
never its own reference.
"""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest
import tflux
from _codec_reference import DATA_DIR, INT32_MAX, ref_metadata
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tflux import (
    CorruptionError,
    Delta,
    Metadata,
    SnapshotQueue,
    decode_delta,
    read_metadata,
    write_metadata,
    write_snapshot,
)

# ---------------------------------------------------------------- metadata


@pytest.mark.parametrize(
    ("name", "term", "vote"), [("tflux.metadata", 7, 2), ("tflux.metadata.novote", 1, None)]
)
def test_golden_metadata_reads_and_writes_byte_identically(tmp_path, name, term, vote):
    golden = (DATA_DIR / name).read_bytes()
    assert ref_metadata(term, -1 if vote is None else vote) == golden
    m = read_metadata(DATA_DIR / name)
    assert (m.term, m.voted_for) == (term, vote)
    assert m == Metadata(term, vote)
    path = tmp_path / "tflux.metadata"
    write_metadata(path, term, vote)
    assert path.read_bytes() == golden
    if vote is None:
        write_metadata(path, term, -1)  # -1 means no vote as well
        assert path.read_bytes() == golden


def test_absent_or_empty_metadata_is_term_one_without_vote(tmp_path):
    path = tmp_path / "tflux.metadata"
    assert read_metadata(path) == Metadata(1, None)
    path.write_bytes(b"")
    assert read_metadata(path) == Metadata(1)


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, INT32_MAX), st.none() | st.integers(0, INT32_MAX))
def test_metadata_round_trips(tmp_path, term, vote):
    path = tmp_path / "tflux.metadata"
    write_metadata(path, term, vote)
    assert path.read_bytes() == ref_metadata(term, -1 if vote is None else vote)
    assert read_metadata(path) == Metadata(term, vote)


def metadata_error(tmp_path: Path, data: bytes) -> CorruptionError:
    path = tmp_path / "tflux.metadata"
    path.write_bytes(data)
    with pytest.raises(CorruptionError) as info:
        read_metadata(path)
    assert info.value.path == str(path)
    return info.value


def test_metadata_corruption_names_the_field(tmp_path):
    golden = (DATA_DIR / "tflux.metadata").read_bytes()
    for cut in range(1, 20):
        assert metadata_error(tmp_path, golden[:cut]).offset == cut
    assert metadata_error(tmp_path, golden + b"\x00").offset == 20
    for i in range(20):
        bad = bytearray(golden)
        bad[i] ^= 0x10
        expected = 0 if i < 4 else 4 if i < 8 else 16  # marker, version, then the checksum
        assert metadata_error(tmp_path, bytes(bad)).offset == expected, i
    assert metadata_error(tmp_path, ref_metadata(1, -1, version=2)).offset == 4
    assert metadata_error(tmp_path, ref_metadata(-1, -1)).offset == 8
    assert metadata_error(tmp_path, ref_metadata(1, -2)).offset == 12


@pytest.mark.parametrize(
    ("term", "vote"), [(-1, None), (2**31, None), (1, -2), (1, 2**31), (1, -(2**40))]
)
def test_invalid_metadata_values_are_value_errors(tmp_path, term, vote):
    path = tmp_path / "tflux.metadata"
    with pytest.raises(ValueError):
        write_metadata(path, term, vote)
    with pytest.raises(ValueError):
        Metadata(term, vote)
    assert not path.exists()


def test_metadata_write_replaces_the_old_file_and_leaves_no_temp_file(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    path = data / "tflux.metadata"
    write_metadata(path, 3, 1)
    write_metadata(path, 4, None)
    assert read_metadata(path) == Metadata(4, None)
    assert sorted(os.listdir(data)) == ["temp", "tflux.metadata"]
    assert os.listdir(data / "temp") == []


def test_metadata_values_pickle_hash_and_repr():
    m = Metadata(7, 2)
    assert pickle.loads(pickle.dumps(m)) == m
    assert hash(m) == hash(Metadata(7, 2))
    assert Metadata(1, -1) == Metadata(1, None)
    assert repr(m) == "Metadata(term=7, voted_for=2)"
    assert repr(Metadata(1)) == "Metadata(term=1, voted_for=None)"


def test_corruption_errors_from_codecs_survive_pickling(tmp_path):
    with pytest.raises(CorruptionError) as info:
        decode_delta(b"Z")
    e = pickle.loads(pickle.dumps(info.value))
    assert (e.offset, e.path, str(e)) == (0, None, str(info.value))


def test_lists_are_accepted_where_tuples_are_expected():
    d = Delta.create_queue("q", 2, key_range=[-5, 5])
    assert d.key_range == (-5, 5)
    q = SnapshotQueue("", last_id=2, records=[[2, 1, b"b"], (1, 0, b"a")])
    assert q.records == [(1, 0, b"a"), (2, 1, b"b")]


def test_writing_into_a_missing_directory_is_an_os_error(tmp_path):
    missing = tmp_path / "nope" / "tflux.metadata"
    with pytest.raises(tflux.TfluxIOError) as info:
        write_metadata(missing, 1)
    assert info.value.errno == errno.ENOENT
    with pytest.raises(OSError) as info:
        write_snapshot(tmp_path / "nope" / "tflux.snapshot", 1, 1, [SnapshotQueue("")])
    assert info.value.errno == errno.ENOENT
    assert not (tmp_path / "nope").exists()
