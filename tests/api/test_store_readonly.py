"""One writer, many readers: the writer lock (and ``lock_timeout``), read-only stores that refuse
writes and follow a writer through ``refresh``, and dequeue's default timeout.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import tflux
from _store_support import FAST, contents
from tflux import ArgumentError
from tflux.errors import (
    LockedError,
    ReadOnlyError,
)

# --- one writer, read-only ------------------------------------------------------------------------


def test_a_second_writer_in_the_same_process_is_refused_until_the_first_closes(base_dir):
    """One writer per directory when the first does not share (``share=False``); shared
    stores are tests/api/test_share.py's."""
    first = tflux.open(base_dir, share=False, **FAST)
    first.enqueue("", 0, b"x")
    with pytest.raises(LockedError) as exc:
        tflux.open(base_dir, **FAST)
    assert isinstance(exc.value, OSError)
    first.enqueue("", 0, b"y")  # the refused open did not disturb the holder
    first.close()
    with tflux.open(base_dir, **FAST) as second:
        assert [r.payload for r in second.records("")] == [b"x", b"y"]


def test_a_read_only_store_opens_beside_the_writer_and_refuses_writes(base_dir):
    with tflux.open(base_dir, **FAST) as writer:
        writer.create_queue("q")
        writer.enqueue("q", 1, b"x")
        writer.snapshot()
        writer.enqueue("q", 0, b"y")
        with tflux.open(base_dir, readonly=True) as reader:
            assert contents(reader, "q") == [(2, 0, b"y", "q"), (1, 1, b"x", "q")]
            for call in (
                lambda: reader.create_queue("r"),
                lambda: reader.delete_queue("q"),
                lambda: reader.enqueue("q", 0, b"z"),
                lambda: reader.enqueue_many("q", [(0, b"z")]),
                lambda: reader.snapshot(),
            ):
                with pytest.raises(ReadOnlyError):
                    call()
        writer.enqueue("q", 0, b"z")  # the reader never took the lock
    with tflux.open(base_dir, **FAST) as store:
        assert [r.id for r in store.records("q")] == [2, 3, 1]


def test_a_writer_can_open_while_a_read_only_store_is_open(base_dir):
    with tflux.open(base_dir, **FAST) as store:
        store.enqueue("", 0, b"x")
    with tflux.open(base_dir, readonly=True) as reader, tflux.open(base_dir, **FAST) as writer:
        writer.enqueue("", 0, b"y")
        assert [r.id for r in reader.records("")] == [1]


HOLD_LOCK = textwrap.dedent(
    """
    import sys, tflux
    store = tflux.open(sys.argv[1], log_sync_policy="always", share=False)
    store.enqueue("", 0, b"child")
    print("ready", flush=True)
    sys.stdin.readline()
    store.close()
    """
)

TRY_OPEN = textwrap.dedent(
    """
    import sys, tflux
    try:
        tflux.open(sys.argv[1])
    except Exception as e:
        print(type(e).__name__)
    else:
        print("opened")
    """
)


def test_a_second_writer_process_is_refused_while_the_first_holds_the_lock(base_dir):
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(base_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(LockedError):
            tflux.open(base_dir, **FAST)
        with tflux.open(base_dir, readonly=True) as reader:
            assert [r.payload for r in reader.records("")] == [b"child"]
    finally:
        child.kill()  # the lock dies with the process, even on SIGKILL
        child.wait(timeout=10)
    with tflux.open(base_dir, **FAST) as store:
        assert [r.payload for r in store.records("")] == [b"child"]


def test_a_child_process_cannot_open_a_directory_this_process_holds(base_dir):
    with tflux.open(base_dir, share=False, **FAST):
        out = subprocess.run(
            [sys.executable, "-c", TRY_OPEN, str(base_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.stdout.strip() == "LockedError", out.stderr
    out = subprocess.run(
        [sys.executable, "-c", TRY_OPEN, str(base_dir)], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "opened", out.stderr


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
