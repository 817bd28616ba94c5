"""The delta codec (spec sections 2 and 6): golden vectors, round trips, corruption and
validation; and the suite's check that it tests the installed package.

Expected bytes come from the golden vectors in ``tests/data`` and from the reference encoder of
``_codec_reference.py``, written from the spec with ``struct`` and ``zlib`` only; tflux output is
never its own reference.
"""

from __future__ import annotations

import pickle
import struct

import pytest
import tflux
from _codec_reference import (
    INT32_MAX,
    NO_LIMIT,
    UINT64_MAX,
    delta_from_vector,
    golden_deltas,
    int32s,
    int64s,
    limit,
    names,
    ranges,
    ref_add,
    ref_create,
    ref_delete,
    ref_remove,
    sizes,
)
from hypothesis import given
from hypothesis import strategies as st
from tflux import (
    CorruptionError,
    Delta,
    decode_delta,
    encode_delta,
)


def test_the_installed_package_is_tested():
    # The source tree has no native module; an import from it would fail or test stale code.
    assert "site-packages" in tflux.__file__, tflux.__file__


# ---------------------------------------------------------------- deltas: golden vectors


@pytest.mark.parametrize("label", sorted(golden_deltas()))
def test_golden_delta_encodes_to_its_exact_bytes(label):
    v = golden_deltas()[label]
    expected = bytes.fromhex(v["hex"])
    delta = delta_from_vector(v)
    assert delta.encode() == expected
    assert encode_delta(delta) == expected


@pytest.mark.parametrize("label", sorted(golden_deltas()))
def test_golden_delta_decodes_to_its_fields(label):
    v = golden_deltas()[label]
    d = decode_delta(bytes.fromhex(v["hex"]))
    assert d.queue == v["queue"]
    kinds = {"C": "create_queue", "D": "delete_queue", "A": "add_record", "R": "remove_record"}
    assert d.kind == kinds[v["kind"]]
    fields = {
        "implementation": v.get("implementation"),
        "max_queue_size": limit(v["max_queue_size"]) if "max_queue_size" in v else None,
        "max_message_size": limit(v["max_message_size"]) if "max_message_size" in v else None,
        "key_range": tuple(v["key_range"]) if v.get("key_range") is not None else None,
        "key": v.get("key"),
        "message": bytes.fromhex(v["message_hex"]) if "message_hex" in v else None,
        "record_id": v.get("record_id"),
    }
    assert {f: getattr(d, f) for f in fields} == fields
    assert d == delta_from_vector(v)


def test_reference_encoder_agrees_with_the_golden_deltas():
    refs = {
        "C": lambda v: ref_create(
            v["queue"],
            v["implementation"],
            v["max_queue_size"],
            v["max_message_size"],
            v["key_range"] and tuple(v["key_range"]),
        ),
        "D": lambda v: ref_delete(v["queue"]),
        "A": lambda v: ref_add(v["queue"], v["key"], bytes.fromhex(v["message_hex"])),
        "R": lambda v: ref_remove(v["queue"], v["record_id"]),
    }
    for v in golden_deltas().values():
        assert refs[v["kind"]](v) == bytes.fromhex(v["hex"])


# ---------------------------------------------------------------- deltas: round trips


@given(names, int32s, sizes, sizes, ranges)
def test_create_queue_round_trips(queue, implementation, mqs, mms, key_range):
    d = Delta.create_queue(queue, implementation, mqs, mms, key_range)
    data = d.encode()
    assert data == ref_create(
        queue,
        implementation,
        NO_LIMIT if mqs is None else mqs,
        NO_LIMIT if mms is None else mms,
        key_range,
    )
    back = decode_delta(data)
    assert back == d
    assert (back.queue, back.implementation, back.max_queue_size) == (queue, implementation, mqs)
    assert (back.max_message_size, back.key_range) == (mms, key_range)


@given(names, int64s, st.binary(max_size=2000))
def test_add_record_round_trips(queue, key, message):
    d = Delta.add_record(queue, key, message)
    assert d.encode() == ref_add(queue, key, message)
    back = decode_delta(d.encode())
    assert (back.kind, back.queue, back.key, back.message) == ("add_record", queue, key, message)
    assert back.record_id is None and back.implementation is None


@given(names, st.integers(0, UINT64_MAX))
def test_remove_and_delete_round_trip(queue, record_id):
    rm = Delta.remove_record(queue, record_id)
    assert rm.encode() == ref_remove(queue, record_id)
    assert decode_delta(rm.encode()).record_id == record_id
    dq = Delta.delete_queue(queue)
    assert dq.encode() == ref_delete(queue)
    assert decode_delta(dq.encode()) == dq


@given(st.binary(max_size=80))
def test_arbitrary_bytes_decode_or_raise_corruption(data):
    try:
        d = decode_delta(data)
    except CorruptionError as e:
        assert isinstance(e.offset, int) and 0 <= e.offset <= len(data)
        assert e.path is None
    else:
        assert d.encode() == data  # a delta consumes its bytes exactly


# ---------------------------------------------------------------- deltas: corruption


@pytest.mark.parametrize("label", sorted(golden_deltas()))
def test_every_truncated_delta_raises_corruption(label):
    data = bytes.fromhex(golden_deltas()[label]["hex"])
    for cut in range(len(data)):
        with pytest.raises(CorruptionError) as info:
            decode_delta(data[:cut])
        assert 0 <= info.value.offset <= cut
        assert "past the end" in str(info.value)


@pytest.mark.parametrize("label", sorted(golden_deltas()))
def test_flipped_delta_bytes_never_crash(label):
    data = bytes.fromhex(golden_deltas()[label]["hex"])
    for i in range(len(data)):
        for flip in (0x01, 0x20, 0x80, 0xFF):
            bad = bytearray(data)
            bad[i] ^= flip
            try:
                decode_delta(bytes(bad))
            except CorruptionError as e:
                assert 0 <= e.offset <= len(bad)


@pytest.mark.parametrize(
    ("data", "offset", "reason"),
    [
        (b"", 0, "delta marker runs past the end (0 bytes left)"),
        (b"Z", 0, "unknown delta marker 0x5A"),
        (b"D\x03a b", 3, "queue name byte 0x20 at offset 3 is not in '!'..'~'"),
        (b"D\x09jobs", 1, "queue name length 9 runs past the end (4 bytes left)"),
        (
            b"A\x00" + bytes(8) + struct.pack(">i", INT32_MAX) + b"hello",
            10,
            "message length 2147483647 runs past the end (5 bytes left)",
        ),
        (b"A\x00" + bytes(8) + struct.pack(">i", -1), 10, "message length -1 is negative"),
        (b"R\x00" + bytes(8) + b"abc", 10, "3 trailing bytes after RemoveRecord"),
        (b"D\x00\x00", 2, "1 trailing bytes after DeleteQueue"),
        (b"C\x00" + bytes(12) + b"\x02", 14, "key range flag 0x02 is not a Bool (0 or 1)"),
    ],
)
def test_delta_errors_name_the_field_and_offset(data, offset, reason):
    with pytest.raises(CorruptionError) as info:
        decode_delta(data)
    assert info.value.offset == offset
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------- deltas: validation


@pytest.mark.parametrize("queue", ["a b", "x" * 256, "caf\u00e9", "tab\t", "\x7f"])
def test_bad_queue_names_are_refused(queue):
    for make in (
        lambda: Delta.create_queue(queue),
        lambda: Delta.delete_queue(queue),
        lambda: Delta.add_record(queue, 1, b""),
        lambda: Delta.remove_record(queue, 1),
    ):
        with pytest.raises(ValueError, match="queue name"):
            make()


def test_longest_and_empty_names_are_accepted():
    assert Delta.delete_queue("~" * 255).encode() == ref_delete("~" * 255)
    assert Delta.delete_queue("").queue == ""


@pytest.mark.parametrize(
    "make",
    [
        lambda: Delta.create_queue("q", max_queue_size=-1),
        lambda: Delta.create_queue("q", max_message_size=2**31),
        lambda: Delta.create_queue("q", implementation=2**31),
        lambda: Delta.create_queue("q", key_range=(0, 2**63)),
        lambda: Delta.create_queue("q", key_range=(1, 2, 3)),
        lambda: Delta.add_record("q", 2**63, b""),
        lambda: Delta.remove_record("q", -1),
        lambda: Delta.remove_record("q", 2**64),
    ],
)
def test_values_that_do_not_fit_are_value_errors(make):
    with pytest.raises(ValueError):
        make()


def test_deltas_pickle_hash_and_repr():
    d = Delta.create_queue("q:x", 2, 100, 4096, (-5, 5))
    assert pickle.loads(pickle.dumps(d)) == d
    assert hash(d) == hash(decode_delta(d.encode()))
    assert d != Delta.create_queue("q:x", 2, 100, 4096, (-5, 6))
    assert d != "not a delta"
    assert repr(d) == (
        "Delta.create_queue('q:x', implementation=2, max_queue_size=100, "
        "max_message_size=4096, key_range=(-5, 5))"
    )
    assert repr(Delta.add_record("", -3, b"hi")) == "Delta.add_record('', key=-3, message=b'hi')"
    assert repr(Delta.remove_record("j", 7)) == "Delta.remove_record('j', record_id=7)"
    assert repr(Delta.delete_queue("j")) == "Delta.delete_queue('j')"


def test_decode_accepts_bytearray_and_memoryview():
    data = bytes.fromhex(golden_deltas()["remove"]["hex"])
    assert decode_delta(bytearray(data)) == decode_delta(data)
    assert Delta.add_record("q", 1, bytearray(b"ab")).message == b"ab"
