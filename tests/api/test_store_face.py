"""The user's side of ``tflux.Store`` (issue 15): read-only stores that follow a writer, Python
reprs and pickling, arguments as Python passes them, one exception tree, count/peek/iteration,
waiting for the writer lock, leases and dead-lettering.

Expected values come from the issue and docs/format.md ("Deliveries: leases and dead-letter"),
never from the code's own output.
"""

from __future__ import annotations

import array
import ast
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import tflux
from tflux import ArgumentError, LockedError, ReadOnlyError, TfluxError

FAST = {"log_preallocate_segments": False, "log_sync_policy": "never"}
STUB = Path(tflux.__file__).with_name("_tflux.pyi")


def stub_method_doc(cls: str, method: str) -> str:
    tree = ast.parse(STUB.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return ast.get_docstring(item) or ""
    raise AssertionError(f"{cls}.{method} not in the stub")


# --- defect 5: dequeue's default, read-only stores --------------------------------------------


def test_the_stub_says_that_dequeue_waits_forever_by_default():
    doc = stub_method_doc("Store", "dequeue").lower()
    assert "forever" in doc and "timeout=0" in doc


def test_a_read_only_store_refuses_dequeue_and_nack(base_dir):
    with tflux.open(base_dir, **FAST) as writer:
        writer.enqueue("", 0, b"x")
        with tflux.open(base_dir, readonly=True) as reader:
            with pytest.raises(ReadOnlyError):
                reader.dequeue("", timeout=0)
            rec = writer.dequeue("", timeout=0)
            with pytest.raises(ReadOnlyError):
                reader.nack(rec)
            # Nothing was taken out of the reader's view of the queue.
            assert reader.count("") == 1
        writer.ack(rec)


WRITER = textwrap.dedent(
    """
    import sys, tflux
    base, action = sys.argv[1], sys.argv[2]
    settings = {"log_preallocate_segments": False, "log_sync_policy": "always",
                "log_file_soft_limit": 300, "log_file_hard_limit": 300,
                "snapshot_creation_segments_threshold": 0}
    with tflux.open(base, **settings) as store:
        if action == "create":
            store.create_queue("jobs")
        elif action == "add":
            store.enqueue_many("jobs", [(k, b"v%d" % k) for k in range(int(sys.argv[3]))])
        elif action == "take":
            store.ack(store.dequeue("jobs", timeout=0))
        elif action == "compact":
            store.snapshot()
    """
)


def writer(base: Path, *args: object) -> None:
    subprocess.run(
        [sys.executable, "-c", WRITER, str(base), *map(str, args)], check=True, timeout=60
    )


def test_refresh_catches_up_with_a_writer_in_another_process(base_dir):
    writer(base_dir, "create")
    writer(base_dir, "add", 3)
    with tflux.open(base_dir, readonly=True) as reader:
        assert reader.count("jobs") == 3
        writer(base_dir, "add", 2)
        writer(base_dir, "take")
        assert reader.count("jobs") == 3  # nothing moves until asked
        assert reader.refresh() == 2 + 1  # two AddRecord and one RemoveRecord
        assert [(r.key, r.payload) for r in reader.records("jobs")] == [
            (0, b"v0"),
            (1, b"v1"),
            (1, b"v1"),
            (2, b"v2"),
        ]
        assert reader.refresh() == 0


def test_refresh_reloads_when_the_writer_compacted_what_the_reader_had_not_seen(base_dir):
    writer(base_dir, "create")
    with tflux.open(base_dir, readonly=True) as reader:
        assert reader.count("jobs") == 0
        # Small segments: the snapshot lets compaction delete segments the reader never read.
        writer(base_dir, "add", 20)
        writer(base_dir, "compact")
        writer(base_dir, "take")
        reader.refresh()
        assert [r.key for r in reader.records("jobs")] == list(range(1, 20))
    with tflux.open(base_dir, readonly=True) as fresh:
        assert [r.key for r in fresh.records("jobs")] == list(range(1, 20))


def test_refresh_on_a_writable_store_is_an_argument_error(base_dir):
    with tflux.open(base_dir, **FAST) as store, pytest.raises(ArgumentError):
        store.refresh()


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


def test_open_needs_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError):
        tflux.open()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        tflux.open(None)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


# --- count, peek, iteration -------------------------------------------------------------------


def test_count_peek_and_iteration_follow_dequeue_order(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("q")
        assert store.count("q") == 0 and store.peek("q") is None
        assert list(store.iter_records("q")) == []
        store.enqueue_many("q", [(5, b"a"), (1, b"b"), (5, b"c"), (1, b"d")])
        assert store.count("q") == 4
        assert store.peek("q") == tflux.Record(2, 1, b"b", "q")
        assert store.peek("q") == store.peek("q")  # peeking takes nothing
        it = store.iter_records("q")
        assert it.__length_hint__() == 4
        assert [(r.id, r.key) for r in it] == [(2, 1), (4, 1), (1, 5), (3, 5)]
        first = store.dequeue("q", timeout=0)
        assert first.id == 2 and store.count("q") == 3
        # A record removed behind the front (ack of an in-flight record) is not peeked.
        second = store.dequeue("q", timeout=0)
        store.nack(first)
        assert store.peek("q").id == 2
        store.ack(second)
        assert [r.id for r in store.iter_records("q")] == [2, 1, 3]
        with pytest.raises(tflux.QueueNotFoundError):
            store.count("nope")
        with pytest.raises(tflux.QueueNotFoundError):
            store.peek("nope")


# --- lock_timeout -----------------------------------------------------------------------------

HOLD = textwrap.dedent(
    """
    import sys, tflux
    store = tflux.open(sys.argv[1], log_sync_policy="never", share=False)
    print("held", flush=True)
    sys.stdin.readline()
    store.close()
    print("released", flush=True)
    sys.stdin.readline()
    """
)


def test_lock_timeout_waits_for_the_writer_lock(base_dir):
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(base_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(LockedError):
            tflux.open(base_dir, lock_timeout=0.05, **FAST)
        opened: list[object] = []

        def waiter() -> None:
            with tflux.open(base_dir, lock_timeout=float("inf"), **FAST) as store:
                opened.append(store.count(""))

        t = threading.Thread(target=waiter)
        t.start()
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "released"
        t.join(timeout=60)
        assert opened == [0]
    finally:
        child.kill()
        child.wait(timeout=10)


def test_lock_timeout_must_be_a_duration(base_dir):
    with pytest.raises(ArgumentError):
        tflux.open(base_dir, lock_timeout=-1)


# --- leases (visibility timeout) --------------------------------------------------------------


def test_a_leased_record_that_is_never_settled_comes_back_by_itself(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"a")
        hung = store.dequeue("q", timeout=0, lease=0.05)
        assert hung.payload == b"a"
        assert store.count("q") == 0
        # A waiting dequeue wakes when the lease runs out: the record is ready again.
        again = store.dequeue("q", timeout=60)
        assert (again.id, again.payload) == (hung.id, b"a")
        store.ack(again)
        with pytest.raises(tflux.NotInFlightError):
            store.ack(hung)  # the first delivery ended with its lease
        # An expired lease puts the record back where it was: before later records.
        store.enqueue_many("q", [(0, b"c"), (0, b"d")])
        first = store.dequeue("q", timeout=0, lease=0.01)
        second = store.dequeue("q", timeout=0, lease=3600)
        assert (first.payload, second.payload) == (b"c", b"d")
        store.nack(store.dequeue("q", timeout=60))  # waits for c's lease to run out
        store.nack(second)
        assert [r.payload for r in store.iter_records("q")] == [b"c", b"d"]


def test_a_late_ack_or_nack_never_settles_a_later_delivery_of_the_record(base_dir):
    """Issue 30, item 14: A's lease ran out, B got the record, A's late nack put B's delivery
    back, C got it while B worked, and B's ack acked C's delivery. Each delivery has its own
    receipt now, and a settlement with another's is refused."""
    import pickle

    with tflux.open(base_dir, **FAST) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"job")
        a = store.dequeue("q", timeout=0, lease=0.05)
        b = store.dequeue("q", timeout=60)  # after A's lease ran out
        assert (b.id, b.payload) == (a.id, b"job")
        for late in (store.nack, store.ack):
            with pytest.raises(tflux.NotInFlightError):
                late(a)
        assert store.dequeue("q", timeout=0) is None  # B's delivery was not put back
        copy_of_b = pickle.loads(pickle.dumps(b))  # a copy settles the same delivery
        store.nack(copy_of_b)
        with pytest.raises(tflux.NotInFlightError):
            store.ack(b)  # that delivery ended with the nack
        c = store.dequeue("q", timeout=0)
        store.ack_many([c])
        assert store.count("q") == 0


def test_a_record_settled_within_its_lease_stays_settled(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue("", 0, b"x")
        rec = store.dequeue("", timeout=0, lease=3600)
        store.ack(rec)
        assert store.count("") == 0 and store.dequeue("", timeout=0) is None
        store.enqueue("", 0, b"y")
        rec = store.dequeue("", timeout=0, lease=3600)
        store.nack(rec)  # back at once, lease or not
        assert store.peek("") == rec


@pytest.mark.parametrize("lease", [-1, float("nan")])
def test_a_bad_lease_is_an_argument_error(base_dir, lease):
    with tflux.open(base_dir, **FAST) as store, pytest.raises(ArgumentError, match="lease") as e:
        store.dequeue("", timeout=0, lease=lease)
    # The message alone (issue 30 item 23: it read "ArgumentError: lease must be ...").
    assert str(e.value).startswith("lease must be"), str(e.value)


LEASE_AND_DIE = textwrap.dedent(
    """
    import os, sys, tflux
    store = tflux.open(sys.argv[1], log_sync_policy="always")
    store.create_queue("q")
    store.enqueue("q", 0, b"job")
    rec = store.dequeue("q", timeout=0, lease=3600)
    print(rec.payload.decode(), flush=True)
    os._exit(0)  # neither ack nor nack nor close
    """
)


def test_an_unsettled_leased_record_is_ready_after_a_restart(base_dir):
    out = subprocess.run(
        [sys.executable, "-c", LEASE_AND_DIE, str(base_dir)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "job"
    with tflux.open(base_dir, **FAST) as store:
        assert store.count("q") == 1  # long lease or not: leases are not logged
        assert store.dequeue("q", timeout=0).payload == b"job"


# --- dead-letter ------------------------------------------------------------------------------


def test_the_nth_failed_delivery_moves_the_record_to_the_dead_letter_queue(base_dir):
    rules = {"dead_letter": {"jobs": ("jobs-dead", 3)}}
    with tflux.open(base_dir, **FAST, **rules) as store:
        store.create_queue("jobs")
        store.create_queue("jobs-dead")
        store.enqueue("jobs", 5, b"poison")
        store.nack(store.dequeue("jobs", timeout=0))
        store.dequeue("jobs", timeout=0, lease=0.01)  # an expired lease counts too
        rec = store.dequeue("jobs", timeout=60)
        assert rec.payload == b"poison"
        assert store.count("jobs-dead") == 0
        store.enqueue("jobs", 9, b"fine")
        store.nack(rec)  # the third failure
        assert [r.payload for r in store.records("jobs")] == [b"fine"]
        assert [(r.key, r.payload) for r in store.records("jobs-dead")] == [(5, b"poison")]
        with pytest.raises(tflux.NotInFlightError):
            store.ack(rec)
    # The move was logged (AddRecord there, RemoveRecord here): it survives a restart without
    # the rule.
    with tflux.open(base_dir, **FAST) as store:
        assert [r.payload for r in store.records("jobs")] == [b"fine"]
        assert [r.payload for r in store.records("jobs-dead")] == [b"poison"]


def test_a_missing_dead_letter_queue_is_created_by_the_first_move(base_dir):
    """Issue 30, item 15: a rule naming a missing queue was silently ignored, so a poison
    record went back to its queue after every failure, forever. The move creates the queue (a
    heap without limits) in the same logged batch."""
    with tflux.open(base_dir, dead_letter={"jobs": ("jobs-dead", 2)}, **FAST) as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 4, b"poison")
        store.nack(store.dequeue("jobs", timeout=0))
        assert store.count("jobs") == 1 and "jobs-dead" not in [q.name for q in store.queues()]
        store.nack(store.dequeue("jobs", timeout=0))  # the second failure: moved
        assert store.count("jobs") == 0
        assert [(r.key, r.payload) for r in store.records("jobs-dead")] == [(4, b"poison")]
        dead = next(q for q in store.queues() if q.name == "jobs-dead")
        assert dead.implementation == "heap"
    with tflux.open(base_dir, **FAST) as store:  # logged: it survives a restart without the rule
        assert [r.payload for r in store.records("jobs-dead")] == [b"poison"]


def test_a_dead_letter_queue_that_refuses_the_record_leaves_it_in_its_queue(base_dir):
    with tflux.open(base_dir, dead_letter={"jobs": ("small", 1)}, **FAST) as store:
        store.create_queue("jobs")
        store.create_queue("small", max_message_size=1)
        store.enqueue("jobs", 0, b"too long for small")
        store.nack(store.dequeue("jobs", timeout=0))
        assert [r.payload for r in store.records("jobs")] == [b"too long for small"]
        assert store.count("small") == 0


def test_the_dead_letter_rule_comes_from_the_settings_file(base_dir):
    (base_dir / "taskflux.settings.json").write_text(
        '{"DeadLetter": {"jobs": {"Queue": "dlq", "MaxNacks": 1}}}'
    )
    with tflux.open(base_dir, **FAST) as store:
        assert store.settings["DeadLetter"] == {"jobs": {"Queue": "dlq", "MaxNacks": 1}}
        store.create_queue("jobs")
        store.create_queue("dlq")
        store.enqueue("jobs", 0, b"x")
    with tflux.open(base_dir, **FAST) as store:  # the rule holds after a restart
        store.nack(store.dequeue("jobs", timeout=0))
        assert store.count("jobs") == 0 and store.count("dlq") == 1


@pytest.mark.parametrize(
    "rules", [{"jobs": ("dlq", 0)}, {"jobs": ("jobs", 2)}, {"jobs": "dlq"}, ["jobs"]]
)
def test_bad_dead_letter_rules_are_settings_errors(base_dir, rules):
    with pytest.raises(tflux.SettingsError, match="DeadLetter"):
        tflux.open(base_dir, dead_letter=rules, **FAST)
