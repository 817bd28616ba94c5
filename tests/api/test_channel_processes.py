"""``tflux.Channel`` across threads and processes: fan-out receivers while a sender sends and rolls
over, receiver names locked across processes, and kill -9 of senders and receivers (every
acknowledged message stays acknowledged, none is lost).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import tflux
from _channel_support import RECEIVER_PROCESS, drain, run_py, small

# ----- fan-out -----


def test_fan_out_three_threads_while_sending(tmp_path):
    n = 3000
    with small(tmp_path, sync="never") as ch:
        rxs = [ch.receiver(f"r{i}") for i in range(3)]
        results: dict[int, list] = {i: [] for i in range(3)}

        def consume(i):
            rx = rxs[i]
            while len(results[i]) < n:
                batch = rx.recv_many(97, timeout=20)
                assert len(batch), "timed out"
                results[i].extend(batch[k] for k in range(len(batch)))
                rx.ack(len(batch))

        threads = [threading.Thread(target=consume, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        tx = ch.sender()
        for i in range(0, n, 10):
            tx.send_many([b"%06d" % k for k in range(i, i + 10)])
        for t in threads:
            t.join(60)
        for i in range(3):
            assert [(m.lsn, m.data) for m in results[i]] == [(k, b"%06d" % k) for k in range(n)]
        assert ch.receivers() == {"r0": n, "r1": n, "r2": n}


def test_fan_out_three_processes_across_roll_over(tmp_path):
    n = 2000
    ch = small(tmp_path, sync="never")
    procs = [run_py(RECEIVER_PROCESS, str(tmp_path), f"p{i}", str(n)) for i in range(3)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    tx = ch.sender()
    for i in range(0, n, 20):
        tx.send_many([b"%06d" % k for k in range(i, i + 20)])
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and f"done {n}" in out, (out, err)
    assert ch.receivers() == {"p0": n, "p1": n, "p2": n}
    # Every receiver acknowledged everything: only the active segment is left.
    ch.collect()
    assert ch.start_lsn > 0
    ch.close()


def test_receiver_name_locked_across_processes(tmp_path):
    tflux.Channel.open(tmp_path).close()
    code = (
        "import sys, tflux, time\n"
        "rx = tflux.Channel.open(sys.argv[1], readonly=True).receiver('a')\n"
        "print('ready', flush=True); time.sleep(30)\n"
    )
    p = run_py(code, str(tmp_path))
    try:
        assert p.stdout.readline().strip() == "ready"
        with tflux.Channel.open(tmp_path) as ch:
            with pytest.raises(tflux.LockedError):
                ch.receiver("a")
    finally:
        p.kill()
        p.wait()
    with tflux.Channel.open(tmp_path) as ch:
        ch.receiver("a")  # the kernel released the dead owner's lock


# ----- kill -9 -----

SENDER_PROCESS = """
import sys, tflux
path = sys.argv[1]
ch = tflux.Channel.open(path, soft_limit=2048, hard_limit=4096, preallocate=False)
tx = ch.sender()
i = ch.next_lsn  # message k is sent at LSN k (a send the kill cut short may have landed)
while True:
    lsn = tx.send_many([b'%08d' % k for k in range(i, i + 3)])
    print(lsn, i, flush=True)
    i += 3
"""

ACKER_PROCESS = """
import sys, tflux
path = sys.argv[1]
rx = tflux.Channel.open(path, readonly=True).receiver('k')
print('start', rx.acked, flush=True)
while True:
    b = rx.recv_many(7, timeout=5)
    if not len(b):
        print('idle', flush=True); break
    rx.ack(len(b))
    print('acked', rx.acked, flush=True)
"""


def acker_lines(out: str) -> list[tuple[str, int]]:
    """The acker's ``start N`` and ``acked N`` lines. Only the last line may be cut short (the
    kill can land while the process prints it); it is dropped, as if the kill came before."""
    lines = out.splitlines()
    parsed = []
    for i, line in enumerate(lines):
        match = re.fullmatch(r"(start|acked) (\d+)|idle", line)
        if match is None:
            assert i == len(lines) - 1, f"a malformed line before the last: {line!r} in {lines}"
            break
        if match.group(1):
            parsed.append((match.group(1), int(match.group(2))))
    return parsed


def test_an_acker_line_cut_short_by_the_kill_is_dropped_only_at_the_end():
    assert acker_lines("start 3\nacked 10\nacked") == [("start", 3), ("acked", 10)]
    assert acker_lines("start 3\nacked 10\nidle\n") == [("start", 3), ("acked", 10)]
    assert acker_lines("sta") == []
    with pytest.raises(AssertionError):
        acker_lines("start 3\nacked\nacked 10\n")


def rest_of_output(p: subprocess.Popen) -> str:
    """What an ended child printed after the lines already read with ``p.stdout.readline()``.

    Not ``communicate()``: it reads the pipe's descriptor directly and so misses the lines
    that ``readline`` had already pulled into the file object's buffer. A fast acker could
    print several ``acked`` lines before the first ``readline``, and losing them made the
    kill trials see a later cursor than any line they had read (1386 against 1211 + 7)."""
    out = p.stdout.read()
    p.stderr.read()
    p.wait()
    return out


def test_rest_of_output_keeps_the_lines_readline_buffered():
    p = run_py("print('one'); print('two'); print('three')")
    p.wait()  # all three lines are in the pipe before the first readline
    assert p.stdout.readline() == "one\n"
    assert rest_of_output(p) == "two\nthree\n"


def kill_trials(tmp_path: Path, trials: int) -> None:
    rng = random.Random(1234)
    sent = 0  # number of messages acknowledged by some send_many call (they are 0..sent-1)
    acked = 0
    for _ in range(trials):
        sender = run_py(SENDER_PROCESS, str(tmp_path))
        # Random moments from its first acknowledged send on (not from the process's start: a
        # loaded machine may take longer than the sleep to start Python).
        first = sender.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.2))
        os.kill(sender.pid, signal.SIGKILL)
        out = rest_of_output(sender)
        assert first, "the sender never sent"
        for line in (first + out).splitlines():
            parts = line.split()
            if len(parts) == 2:
                lsn, first = int(parts[0]), int(parts[1])
                assert lsn == first
                sent = max(sent, first + 3)
        # A receiver in another process, killed at a random moment too.
        acker = run_py(ACKER_PROCESS, str(tmp_path))
        started = acker.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(acker.pid, signal.SIGKILL)
        out = rest_of_output(acker)
        lines = acker_lines(started + out)
        if lines and lines[0][0] == "start":
            start = lines[0][1]
            # Resumes exactly at the first unacknowledged message: nothing acknowledged is
            # redelivered, nothing is skipped (an ack the kill cut short may have landed).
            assert acked <= start <= acked + 7
            acked = start
            for word, value in lines[1:]:
                if word == "acked":
                    acked = value
    # Every acknowledged send is in the log, in order, once. Collection may have deleted
    # segments that the only receiver acknowledged (that is its job), never one it had not.
    with tflux.Channel.open(tmp_path, readonly=True) as ro:
        cursor = ro.receivers().get("k", 0)  # first LSN receiver k has not acknowledged
        rx = ro.receiver("check", start="earliest")
        got = drain(rx)
    lsns = [m.lsn for m in got]
    assert acked <= cursor
    assert lsns and lsns[0] <= cursor, (lsns[:1], cursor)
    assert lsns == list(range(lsns[0], lsns[0] + len(lsns)))
    assert lsns[-1] + 1 >= sent
    assert [m.data for m in got] == [b"%08d" % lsn for lsn in lsns]


def test_kill9_sender_and_receiver(tmp_path):
    kill_trials(tmp_path, 12)


@pytest.mark.slow
def test_kill9_sender_and_receiver_slow(tmp_path):
    kill_trials(tmp_path, 120)
