"""Hypothesis fuzzing of the Python API with arbitrary bytes (the cargo-fuzz targets in
rust/core/fuzz cover the decoders in Rust; this covers the bindings around them).

Whatever the bytes, a call either succeeds or raises a ``TfluxError`` subclass: never a
``PanicException`` (which derives from ``BaseException``), never another exception type.
"""

from __future__ import annotations

import struct
import tempfile
import zlib
from pathlib import Path

import tflux
from conftest import HEADER, segment_name
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def only_tflux_errors(call):
    try:
        return call()
    except tflux.TfluxError:
        return None
    except BaseException as e:  # a panic would land here
        raise AssertionError(f"{type(e).__module__}.{type(e).__name__}: {e}") from e


def snapshot_like(state: bytes, index: int = 3) -> bytes:
    # a well-framed snapshot around arbitrary state bytes, so fuzzing reaches the state parser
    return (
        bytes.fromhex("B6380FC9")
        + struct.pack(">iii", index, 1, len(state))
        + state
        + struct.pack(">I", zlib.crc32(state))
    )


@FUZZ
@given(st.binary(max_size=300), st.booleans())
def test_arbitrary_snapshot_bytes_read_or_raise_a_tflux_error(data, framed):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "tflux.snapshot"
        path.write_bytes(snapshot_like(data) if framed else data)
        only_tflux_errors(lambda: tflux.read_snapshot(path))
        only_tflux_errors(lambda: tflux.read_snapshot_batch(path))


@FUZZ
@given(st.binary(max_size=40))
def test_arbitrary_metadata_bytes_read_or_raise_a_tflux_error(data):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "tflux.metadata"
        path.write_bytes(data)
        only_tflux_errors(lambda: tflux.read_metadata(path))


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_deltas_apply_or_raise_a_tflux_error(data):
    state = tflux.QueueState()
    only_tflux_errors(lambda: state.apply(data, 1))


@FUZZ
@given(st.binary(max_size=300), st.binary(max_size=120), st.booleans())
def test_a_store_over_arbitrary_files_opens_or_raises_a_tflux_error(segment, state, with_snap):
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        log = base / "data" / "log"
        log.mkdir(parents=True)
        (log / segment_name(0)).write_bytes(HEADER + segment)
        if with_snap:
            (base / "data" / "tflux.snapshot").write_bytes(snapshot_like(state, index=0))

        def open_and_read():
            with tflux.open(base, log_preallocate_segments=False) as store:
                for q in store.queues():
                    store.records(q.name)
                store.enqueue("", 0, b"still writable")

        only_tflux_errors(open_and_read)
        only_tflux_errors(lambda: tflux.verify(log))
