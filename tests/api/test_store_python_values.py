"""``tflux.Store`` as Python sees it (issue 15): reprs that are Python syntax, pickling, buffers
and generators as arguments, and one exception tree for bad arguments.
"""

from __future__ import annotations

import array
import ast
import os
import pickle

import pytest
import tflux
from _store_support import FAST
from tflux import ArgumentError, TfluxError

# --- defect 6: reprs, pickling, payloads ------------------------------------------------------


def test_record_repr_is_python_syntax(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 3, b"a\x04'")
        rec = store.dequeue("jobs", timeout=0)
        text = repr(rec)
        assert text.startswith("Record(") and 'payload=b"a\\x04\'"' in text
        assert "queue='jobs'" in text
        # The fields as Python would read them back.
        fields = dict(
            kv.split("=", 1) for kv in text[len("Record(") : -1].replace(", ", "\0").split("\0")
        )
        assert ast.literal_eval(fields["payload"]) == b"a\x04'"
        assert ast.literal_eval(fields["queue"]) == "jobs"
        store.ack(rec)


def test_queue_info_survives_pickling(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("arr", implementation="array", max_size=5, key_range=(-1, 9))
        store.enqueue("arr", 2, b"x")
        info = next(q for q in store.queues() if q.name == "arr")
    back = pickle.loads(pickle.dumps(info))
    assert back == info
    assert (back.implementation, back.count, back.max_size, back.key_range) == (
        "array",
        1,
        5,
        (-1, 9),
    )
    assert "name='arr'" in repr(back)


def test_enqueue_many_takes_buffers_and_generators(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        payloads = [memoryview(b"mv"), bytearray(b"ba"), array.array("B", b"ar"), b"by"]
        ids = store.enqueue_many("", ((k, p) for k, p in enumerate(payloads)))
        assert ids == [1, 2, 3, 4]
        store.enqueue("", 9, memoryview(b"xyz")[1:])
        assert [r.payload for r in store.records("")] == [b"mv", b"ba", b"ar", b"by", b"yz"]
        with pytest.raises(TypeError):
            store.enqueue_many("", [(0, "text")])
        assert store.count("") == 5  # all or nothing


# --- defect 7: one exception tree -------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.create_queue("bad name"), id="queue name with a space"),
        pytest.param(lambda s: s.create_queue(""), id="the default queue again"),
        pytest.param(lambda s: s.delete_queue(""), id="delete the default queue"),
        pytest.param(lambda s: s.create_queue("q", implementation="list"), id="implementation"),
        pytest.param(lambda s: s.create_queue("q", implementation="array"), id="array no range"),
        pytest.param(lambda s: s.create_queue("q", max_size=-2), id="negative size"),
        pytest.param(lambda s: s.create_queue("q", max_size=2**70), id="huge size"),
        pytest.param(lambda s: s.enqueue("", 2**63, b""), id="key 2**63"),
        pytest.param(lambda s: s.enqueue("", -(2**63) - 1, b""), id="key below int64"),
        pytest.param(lambda s: s.enqueue_many("", [(0, b""), (2**64, b"")]), id="key in a batch"),
        pytest.param(lambda s: s.dequeue("", timeout=-1), id="negative timeout"),
    ],
)
def test_bad_arguments_raise_tflux_errors(base_dir, call):
    with tflux.open(base_dir, **FAST) as store:
        with pytest.raises(TfluxError) as exc:
            call(store)
        assert isinstance(exc.value, ValueError)  # and still what `except ValueError` catches
        assert "implementation 1" not in str(exc.value)
        assert "implementation 2" not in str(exc.value)
        assert store.count("") == 0


def test_a_key_that_does_not_fit_names_the_field(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        with pytest.raises(ArgumentError, match=r"^key must be .*9223372036854775808\)$"):
            store.enqueue("", 2**63, b"")
        with pytest.raises(ArgumentError, match=r"items\[1\] key"):
            store.enqueue_many("", [(0, b""), (2**64, b"")])


def test_an_array_queue_without_a_key_range_is_refused_by_the_core_rule(base_dir):
    # The bindings do not restate the rule: the core's QueueConfig::validate answers, in words a
    # user reads (no on-disk implementation code), and nothing is logged.
    with tflux.open(base_dir, **FAST) as store:
        with pytest.raises(ArgumentError, match=r'^an "array" queue needs a key range'):
            store.create_queue("q", implementation="array")
        assert [q.name for q in store.queues()] == [""]
        store.create_queue("q", implementation="array", key_range=(0, 3))
        assert [(q.name, q.implementation) for q in store.queues()][1] == ("q", "array")


def test_open_needs_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError):
        tflux.open()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        tflux.open(None)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []
