"""Golden vectors of the taskflux dialect (spec section 11): ``tests/data/taskflux``, written by
``make_vectors.py`` from the bytes section 11 lists (``struct`` and a bitwise CRC-32/MPEG-2, no
tflux code). tflux must read them and write the same bytes; the Rust tests
(``rust/core/tests/golden.rs``) and the JVM reader (``tests/spark/test_spark_jvm.py``) read the same
files.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import tflux
from hypothesis import given, settings
from hypothesis import strategies as st

VECTORS = Path(__file__).resolve().parents[1] / "data" / "taskflux"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())


def records(vector: str) -> list[tuple[int, int, bytes]]:
    return [
        (r["lsn"], r["term"], bytes.fromhex(r["data_hex"])) for r in MANIFEST[vector]["records"]
    ]


def copy(vector: str, log_dir: Path, lsn: int = 0) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    dest = log_dir / f"{lsn:019d}.log"
    shutil.copyfile(VECTORS / vector, dest)
    return dest


def entries(log: tflux.Log) -> list[tuple[int, int, bytes]]:
    return [(e.lsn, e.term, bytes(e.data)) for e in log.entries()]


def test_the_committed_vectors_are_what_the_independent_encoder_writes():
    spec = importlib.util.spec_from_file_location("make_vectors", VECTORS / "make_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files, manifest = module.build()
    for name, data in files.items():
        assert (VECTORS / name).read_bytes() == data, name
    assert manifest == MANIFEST


@pytest.mark.parametrize("vector", ["0000000000000000000.log", "large_term.log"])
@pytest.mark.parametrize("readonly", [True, False])
def test_each_record_vector_reads_back_every_record(vector, readonly, tmp_path):
    copy(vector, tmp_path / "log")
    with tflux.Log.open(tmp_path / "log", readonly=readonly) as log:
        assert log.dialect == "taskflux"
        assert entries(log) == records(vector)
        assert log.recovery.truncated is False


@pytest.mark.parametrize("preallocate", [False, True])
def test_appending_the_vector_records_writes_the_vector_bytes(preallocate, tmp_path):
    with tflux.Log.open(tmp_path / "log", dialect="taskflux", preallocate=preallocate) as log:
        for _, term, data in records("0000000000000000000.log"):
            log.append(term, data)
    written = (tmp_path / "log" / "0000000000000000000.log").read_bytes()
    want = (VECTORS / "0000000000000000000.log").read_bytes()
    assert written[: len(want)] == want
    assert written[len(want) :].count(0) == len(written) - len(want)


@pytest.mark.parametrize(
    "vector", ["torn_tail.log", "bad_crc_tail.log", "after_taskflux_repair.log"]
)
def test_a_damaged_last_segment_vector_is_cut_at_the_manifest_offset(vector, tmp_path):
    path = copy(vector, tmp_path / "log")
    cut = MANIFEST[vector].get("cut_at_offset", MANIFEST[vector].get("bad_record_offset"))
    # Told the dialect: the first record says it anyway, and the two must agree.
    with tflux.Log.open(tmp_path / "log", dialect="taskflux") as log:
        assert entries(log) == records(vector)
        assert log.recovery.truncated and log.recovery.cut_offset == cut
        moved = log.recovery.moved
    after = path.read_bytes()
    assert after[cut : cut + 4] == b"\0\0\0\0" and not any(after[cut:])
    assert [Path(m).parent.name for m in moved] == ["temporary"]
    # And it goes on: an append lands where the damage was.
    with tflux.Log.open(tmp_path / "log") as log:
        lsn = log.append(5, b"after the cut")
        assert entries(log)[-1] == (lsn, 5, b"after the cut")


def test_a_damaged_vector_as_a_sealed_segment_is_a_corruption_error(tmp_path):
    log_dir = tmp_path / "log"
    copy("bad_crc_tail.log", log_dir)
    copy("0000000000000000000.log", log_dir, lsn=2)
    offset = MANIFEST["bad_crc_tail.log"]["bad_record_offset"]
    with pytest.raises(tflux.CorruptionError) as raised:
        tflux.Log.open(log_dir, readonly=True)
    assert raised.value.offset == offset and raised.value.path.endswith("0000000000000000000.log")


def test_metadata_vectors_read_and_write_back_byte_for_byte(tmp_path):
    for vector, want in [("tflux.metadata", (7, 2)), ("tflux.metadata.novote", (1, None))]:
        m = tflux.read_metadata(VECTORS / vector)
        assert (m.term, m.voted_for) == want
        out = tmp_path / "data" / vector
        out.parent.mkdir(exist_ok=True)
        tflux.write_metadata(out, *want, dialect="taskflux")
        assert out.read_bytes() == (VECTORS / vector).read_bytes()
    assert (tmp_path / "data" / "temporary").is_dir()
    with pytest.raises(tflux.DialectError):
        tflux.read_metadata(VECTORS / "tflux.metadata", dialect="spec")


def test_the_snapshot_vector_holds_the_spec_vectors_state_and_writes_back(tmp_path):
    snap = tflux.read_snapshot(VECTORS / "tflux.snapshot")
    spec = tflux.read_snapshot(VECTORS.parent / "tflux.snapshot")
    assert snap == spec and (snap.last_index, snap.last_term) == (41, 3)
    out = tmp_path / "tflux.snapshot"
    tflux.write_snapshot(out, snap.last_index, snap.last_term, snap.queues, dialect="taskflux")
    # The vector stores records out of id order on purpose; tflux writes them by id. Same
    # header, same length, a state the plain reader checks, the same snapshot read back.
    from _taskflux_bytes import read_snapshot as plain_snapshot

    written, vector = out.read_bytes(), (VECTORS / "tflux.snapshot").read_bytes()
    assert written[:24] == vector[:24] and len(written) == len(vector)
    assert plain_snapshot(out)[:2] == (41, 3)
    assert tflux.read_snapshot(out) == snap
    with pytest.raises(tflux.DialectError):
        tflux.read_snapshot(VECTORS / "tflux.snapshot", dialect="spec")


def test_crc32_mpeg2_matches_the_manifest_check_values():
    crc = MANIFEST["crc"]
    for text, key in [(b"123456789", "123456789"), (b"", "empty"), (b"hello", "hello")]:
        assert f"{tflux.crc32_mpeg2(text):08x}" == crc[key]
    assert tflux.crc32_mpeg2(b"123456789") == 0x0376E6E7


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 5), st.binary(max_size=300)), min_size=1, max_size=30).map(
        lambda xs: sorted(xs, key=lambda x: x[0])
    ),
    st.sampled_from([256, 1024, 1 << 20]),
)
def test_random_taskflux_logs_read_back_and_pass_the_plain_checks(tmp_path_factory, recs, limit):
    """Whatever tflux writes in the taskflux dialect, the independent plain reader reads the
    same entries, and detection (no dialect given) finds taskflux."""
    from _taskflux_bytes import read_log

    log_dir = tmp_path_factory.mktemp("log")
    with tflux.Log.open(
        log_dir, dialect="taskflux", soft_limit=limit, hard_limit=limit * 2, preallocate=False
    ) as log:
        for term, data in recs:
            log.append(term, data)
    want = [(i, t, d) for i, (t, d) in enumerate(recs)]
    assert read_log(log_dir) == want
    with tflux.Log.open(log_dir, readonly=True) as log:
        assert log.dialect == "taskflux" and entries(log) == want
