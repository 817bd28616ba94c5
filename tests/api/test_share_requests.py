"""One request type for the store (issue 42): a client's call is the owner's call, carried
out by the same ``Store::execute``, and its errors are raised as the same Python exceptions
with the same fields (one table from error kind to class, for local and remote errors)."""

from __future__ import annotations

import socket
import struct

import pytest
import tflux
from tflux._tflux import PROTOCOL_VERSION


def _fields(e: BaseException) -> tuple:
    names = ("message", "path", "offset", "errno", "queue", "policy", "lsn")
    return (type(e), str(e), *(getattr(e, n, None) for n in names))


def _raised(call) -> BaseException:
    with pytest.raises(tflux.TfluxError) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.count("nosuch"), id="no such queue"),
        pytest.param(lambda s: s.enqueue("small", 1, b"x" * 9), id="policy"),
        pytest.param(lambda s: s.create_queue("small", max_message_size=4), id="queue exists"),
        pytest.param(lambda s: s.ack(tflux.Record(1, 1, b"", "small")), id="not in flight"),
        pytest.param(lambda s: s.delete_queue(""), id="argument"),
        pytest.param(lambda s: s.enqueue("arr", 99, b"x"), id="key range"),
    ],
)
def test_a_clients_error_is_the_owners_exception_with_the_same_fields(tmp_path, call):
    with tflux.open(tmp_path / "b") as owner, tflux.open(tmp_path / "b") as client:
        assert owner.is_owner and not client.is_owner
        owner.create_queue("small", max_message_size=8)
        owner.create_queue("arr", implementation="array", key_range=(0, 9))
        local, remote = _raised(lambda: call(owner)), _raised(lambda: call(client))
        assert _fields(remote) == _fields(local)


def test_every_operation_gives_a_client_what_it_gives_the_owner(tmp_path):
    with tflux.open(tmp_path / "b") as owner, tflux.open(tmp_path / "b") as client:
        for store in (owner, client):
            name = "o" if store is owner else "c"
            store.create_queue(name, exist_ok=True)
            store.create_queue(name, exist_ok=True)
            assert store.enqueue_many(name, [(2, b"b"), (1, bytearray(b"a"))]) == [1, 2]
            assert store.enqueue(name, 3, memoryview(b"c")) == 3
            assert store.count(name) == 3
            assert store.peek(name) == tflux.Record(2, 1, b"a", name)
            assert [r.id for r in store.iter_records(name)] == [2, 1, 3]
            assert store.wait(name, timeout=0)
            first = store.dequeue(name, timeout=0, lease=30)
            second = store.dequeue(name, timeout=0)
            store.nack(first)
            store.ack_many([second])
            assert [r.payload for r in store.records(name)] == [b"a", b"c"]
        counts = {q.name: q.count for q in client.queues()}
        assert counts == {q.name: q.count for q in owner.queues()}
        assert counts["o"] == counts["c"] == 2
        assert client.log_bounds == owner.log_bounds
        assert client.term == owner.term
        assert client.snapshot() in (True, False)
        client.delete_queue("o")
        assert "o" not in {q.name for q in owner.queues()}


def test_a_hello_of_another_build_is_refused_naming_both_versions(tmp_path):
    with tflux.open(tmp_path / "b"):
        other = PROTOCOL_VERSION ^ 1
        body = b"TFLX" + struct.pack("<IQ", other, 1)
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(tmp_path / "b" / "data" / "tflux.sock"))
            s.sendall(struct.pack("<I", len(body)) + body)
            reply = s.recv(1 << 16)
        assert f"version {PROTOCOL_VERSION} of the protocol, the client {other}".encode() in reply
