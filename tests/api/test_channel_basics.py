"""``tflux.Channel``: send, receive and acknowledge, durable cursors, receiver names and their
locks, closing, Ctrl-C, timeouts, and the README's channel example.

The cursor file is checked against spec section 10 with ``struct`` and ``zlib`` only.
"""

from __future__ import annotations

import errno
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tflux
from _channel_support import cursor_bytes, drain, ignore_sigint, run_py, small

# ----- basics -----


def test_send_recv_ack_and_cursor_file(tmp_path):
    with tflux.Channel.open(tmp_path) as ch:
        for sub in ("log", "cursors", "temp"):
            assert (tmp_path / "data" / sub).is_dir()
        tx = ch.sender()
        assert tx.send(b"one") == 0
        assert tx.send_many([b"two", b"three"]) == 1
        rx = ch.receiver("billing")
        assert rx.recv(timeout=0) == tflux.Message(0, b"one")
        batch = rx.recv_many(10, timeout=0)
        assert (batch.first_lsn, batch.payloads()) == (1, [b"two", b"three"])
        assert (rx.position, rx.acked) == (3, 0)
        rx.ack(2)
        assert rx.acked == 2
        assert (tmp_path / "data/cursors/billing.cursor").read_bytes() == cursor_bytes(2)
        assert ch.receivers() == {"billing": 2}
        with pytest.raises(ValueError):
            rx.ack(2)  # only one received message is unacknowledged
        assert rx.recv(timeout=0) is None


def test_resume_at_first_unacknowledged_and_start_only_without_cursor(tmp_path):
    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(50)])
        rx = ch.receiver("a", start="latest")
        assert rx.position == 50
        rx.close()
        ch.drop_receiver("a")
        rx = ch.receiver("a", start=10)
        got = drain(rx)
        assert [m.lsn for m in got] == list(range(10, 50))
        rx.ack(5)
        rx.close()
    with small(tmp_path) as ch:
        rx = ch.receiver("a", start="latest")  # the cursor wins
        assert [m.lsn for m in drain(rx)] == list(range(15, 50))


def test_an_empty_cursor_file_is_an_absent_cursor(tmp_path):
    """Spec section 1: a file that exists at start-up is valid or empty, and empty means nothing
    was written yet. A 0-byte cursor was refused as corrupt ("0 bytes long")."""
    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(20)])
        (tmp_path / "data/cursors").mkdir(parents=True, exist_ok=True)
        cursor = tmp_path / "data/cursors/late.cursor"
        cursor.write_bytes(b"")
        assert ch.receivers() == {}  # no receiver yet: nothing holds collection back
        rx = ch.receiver("late", start=12)  # so start= applies
        assert [m.lsn for m in drain(rx)] == list(range(12, 20))
        rx.ack(3)
        assert cursor.read_bytes() == cursor_bytes(15)
        assert ch.receivers() == {"late": 15}


def test_bad_arguments(tmp_path):
    with tflux.Channel.open(tmp_path) as ch:
        for name in ["", "a/b", "a b", "x" * 249, ".."]:
            with pytest.raises(ValueError):
                ch.receiver(name)
        with pytest.raises(ValueError):
            ch.receiver("a", start="middle")
        with pytest.raises(IndexError):
            ch.receiver("a", start=5)  # past the next LSN
        with pytest.raises(ValueError):
            ch.sender().send(b"")
        with pytest.raises(ValueError):
            ch.receiver("b").recv(timeout=-1)
    with pytest.raises(ValueError):
        tflux.Channel.open(tmp_path, sync="sometimes")
    # "batch" is another name for "interval", as Log.open takes it (issue 30 item 23).
    with tflux.Channel.open(tmp_path, sync="batch") as ch:
        ch.sender().send(b"x")
    with pytest.raises(ValueError):
        tflux.Channel.open(tmp_path, compress_sealed="gzip")


def test_same_name_is_locked_and_dropping_needs_it_free(tmp_path):
    with tflux.Channel.open(tmp_path) as ch:
        rx = ch.receiver("a")
        with pytest.raises(tflux.LockedError):
            ch.receiver("a")
        with pytest.raises(tflux.LockedError):
            ch.drop_receiver("a")
        rx.close()
        with pytest.raises(tflux.ClosedError):
            rx.recv(timeout=0)
        assert ch.drop_receiver("a") is True
        assert ch.drop_receiver("a") is False
        assert ch.receivers() == {}


def test_closing_the_channel_frees_the_names_of_receivers_still_referenced(tmp_path):
    with tflux.Channel.open(tmp_path) as ch:
        ch.sender().send(b"one")
        rx = ch.receiver("a")
    assert rx.closed
    with pytest.raises(tflux.ClosedError):
        rx.recv(timeout=0)
    with tflux.Channel.open(tmp_path) as ch:  # `rx` is still alive: its name must be free
        assert ch.receiver("a").recv(timeout=0) == tflux.Message(0, b"one")


def test_recv_waits_and_close_raises_closed(tmp_path):
    with tflux.Channel.open(tmp_path, sync="never") as ch:
        rx = ch.receiver("a")
        got = []
        t = threading.Thread(target=lambda: got.append(rx.recv(timeout=30)))
        t.start()
        time.sleep(0.05)
        ch.sender().send(b"late")
        t.join(10)
        assert got == [tflux.Message(0, b"late")]
        errors = []

        def wait():
            try:
                rx.recv()
            except tflux.ClosedError as e:
                errors.append(e)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.05)
    t.join(10)
    assert len(errors) == 1


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_ctrl_c_interrupts_recv(tmp_path, inherited):
    # A child started with SIGINT ignored (a background job of a shell without job control, or
    # a CI runner) inherits the ignore and Python then installs no KeyboardInterrupt handler:
    # the child sets Python's own handler first, as an interactive interpreter has it, so the
    # test checks recv and not how its parent was started.
    code = (
        "import signal, sys, tflux\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "rx = tflux.Channel.open(sys.argv[1]).receiver('a')\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    rx.recv()\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    ignore = inherited == "ignored"
    p = run_py(code, str(tmp_path), preexec_fn=ignore_sigint if ignore else None)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    # Generous: a CI machine under load (or a niced run) can starve the child for seconds; a
    # recv that ignores Ctrl-C still fails here, only later.
    out, err = p.communicate(timeout=120)
    assert "interrupted" in out, err


def test_disk_full_error_is_an_io_error_with_enospc(tmp_path):
    with tflux.Channel.open(tmp_path, disk_high_ratio=0.0001, disk_low_ratio=0.0001) as ch:
        with pytest.raises(tflux.DiskFullError) as info:
            ch.sender().send(b"x")
        assert isinstance(info.value, tflux.TfluxIOError)
        assert info.value.errno == errno.ENOSPC
        assert ch.next_lsn == 0  # nothing written
        assert ch.disk_full


def test_message_batch_is_columnar(tmp_path):
    with tflux.Channel.open(tmp_path, sync="never") as ch:
        ch.sender().send_many([b"a", b"bc", b"def"])
        batch = ch.receiver("r").recv_many(10, timeout=0)
        assert len(batch) == 3
        assert batch.data == b"abcdef"
        assert struct.unpack("=4i", batch.offsets) == (0, 1, 3, 6)
        assert batch[-1] == tflux.Message(2, b"def")
        with pytest.raises(IndexError):
            batch[3]


# ----- waiting -----


def test_recv_timeout_returns_none_and_closing_the_receiver_wakes_it(tmp_path):
    with tflux.Channel.open(tmp_path, sync="never") as ch:
        rx = ch.receiver("a")
        started = time.monotonic()
        assert rx.recv(timeout=0.05) is None
        assert time.monotonic() - started >= 0.05
        assert len(rx.recv_many(10, timeout=0.01)) == 0
        errors = []

        def wait():
            try:
                rx.recv()
            except tflux.ClosedError as e:
                errors.append(e)

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.05)
        rx.close()  # from another thread than the waiting one
        t.join(20)
        assert not t.is_alive() and len(errors) == 1
        ch.receiver("a")  # the name is free again


ACKING_RECEIVER_PROCESS = """
import sys, tflux
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rx = tflux.Channel.open(path, readonly=True).receiver(name)
print('ready', flush=True)
seen = 0
while seen < n:
    b = rx.recv_many(37, timeout=30)
    if not len(b):
        print('timeout', seen, flush=True); sys.exit(1)
    for i in range(len(b)):
        m = b[i]
        if m.lsn != seen or m.data != b'%06d' % seen:
            print('bad', m.lsn, seen, flush=True); sys.exit(1)
        seen += 1
    rx.ack(len(b))
print('done', seen, flush=True)
"""


@pytest.mark.parametrize("method", ["zstd", "lz4"])
def test_readonly_receiver_survives_roll_over_retention_and_compression_while_sending(
    tmp_path, method
):
    """A receiver in another process reads while the writer rolls over, compresses the sealed
    segments and deletes them under retention (its own cursor is all that holds them)."""
    n = 1500
    ch = small(tmp_path, sync="never", compress_sealed=method, retention_ms=0)
    p = run_py(ACKING_RECEIVER_PROCESS, str(tmp_path), "far", str(n))
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    tx = ch.sender()
    for i in range(0, n, 5):
        tx.send_many([b"%06d" % k for k in range(i, i + 5)])
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and f"done {n}" in out, (out, err)
    assert ch.receivers() == {"far": n}
    tx.send_many([b"%06d" % k for k in range(n, n + 200)])  # rolls over: collects
    assert ch.start_lsn > 0
    assert list((tmp_path / "data/log").glob("*.log.z")) or ch.start_lsn >= n
    ch.close()


# ----- documentation -----


def test_the_readme_channel_example_runs_as_written(tmp_path):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## Channels") :]
    start = section.index("```python\n") + len("```python\n")
    code = section[start : section.index("```\n", start)]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    with tflux.Channel.open(tmp_path / "events", readonly=True) as ch:
        # What the example says: billing acknowledged all three, audit starts at the first.
        assert ch.receivers() == {"audit": 0, "billing": 3}
        assert ch.next_lsn == 4  # and one more sent from "another process" at the end
