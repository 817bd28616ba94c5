"""Issue 29's review (share/): regression tests for the defects a review of the first version
found. Each failed on a383374; the comment above each says what went wrong there."""

from __future__ import annotations

import gc
import itertools
import pickle
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tflux
from tflux._tflux import PROTOCOL_VERSION

HOLDER = r"""
import sys, time, tflux
s = tflux.open(sys.argv[1])
r = s.dequeue("q", timeout=5)
print("holding", flush=True)
time.sleep(60)
"""
OWNER = r"""
import sys, time, tflux
s = tflux.open(sys.argv[1]); s.create_queue("q", exist_ok=True); s.enqueue("q", 1, b"x")
print("up", flush=True); time.sleep(3600)
"""


def spawn(code: str, base: Path, first: str) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", code, str(base)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == first
    return p


def rss_mib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return 0


def hello() -> bytes:
    body = b"TFLX" + struct.pack("<IQ", PROTOCOL_VERSION, 7)
    return struct.pack("<I", len(body)) + body


# 1. server.rs:461 `r.count(18, ...)`: an ACK_MANY item is at least 4+len(queue)+8+1 bytes,
# so an ack without a receipt on a queue named in < 5 bytes is refused as a malformed frame;
# the owner drops the connection, the session ends, and what the client holds is nacked
# and delivered again (to the owner here) while the client still holds it.
def test_ack_by_id_on_a_short_queue_name_is_not_malformed_and_voids_nothing(tmp_path):
    base = tmp_path / "b"
    with tflux.open(base) as owner, tflux.open(base) as client:
        owner.create_queue("q")
        client.enqueue("q", 1, b"a")
        client.enqueue("q", 2, b"b")
        held = client.dequeue("q", timeout=1)
        second = client.dequeue("q", timeout=1)
        client.ack(tflux.Record(second.id, 2, b"b", "q"))  # no receipt: was "malformed frame"
        time.sleep(0.2)
        assert owner.dequeue("q", timeout=0) is None, "the client's record was delivered again"
        client.ack(held)
        assert owner.count("q") == 0


# 2. client.rs:136-138: any failure to open one more pooled connection (here the owner's
# 1024-connection cap, server.rs:200) marks the whole client lost though the owner is alive;
# the old Client is dropped, its session ends and its deliveries are nacked: the record the
# client holds is delivered again to another thread of the same process.
def test_a_refused_extra_connection_does_not_void_the_clients_deliveries(tmp_path):
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )
    base = tmp_path / "b"
    owner = spawn(OWNER, base, "up")
    try:
        client = tflux.open(base)
        rec = client.dequeue("q", timeout=1)
        held = []
        for _ in range(1023):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(base / "data" / "tflux.sock"))
            held.append(s)
        # Until the owner has accepted all of them (a loaded machine takes its time): then one
        # more connection is refused at once (an error frame and the end), not served.
        deadline = time.monotonic() + 60
        while True:
            probe = socket.socket(socket.AF_UNIX)
            probe.settimeout(0.2)
            probe.connect(str(base / "data" / "tflux.sock"))
            try:
                full = probe.recv(1) != b"" or True
            except TimeoutError:
                full = False
            probe.close()
            if full or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        second: list = []

        def take() -> None:
            try:
                second.append(client.dequeue("q", timeout=1.5))
            except tflux.TfluxError as e:
                second.append(e)

        t = threading.Thread(target=take)
        t.start()
        time.sleep(0.3)
        # The dequeue and the count each need a connection, and the owner has room for no
        # second one: one of them is refused (usually the count, while the dequeue waits).
        # That is fine; but it must not void anything.
        try:
            client.count("q")
            count_refused = False
        except tflux.TfluxError:
            count_refused = True
        t.join()
        for s in held:
            s.close()
        dequeue_refused = isinstance(second[0], tflux.TfluxError)
        assert count_refused or dequeue_refused, "no call needed a connection past the cap"
        assert not isinstance(second[0], tflux.Record), f"delivered twice: {rec} and {second}"
        client.ack(rec)  # still this client's delivery
    finally:
        owner.kill()


# 3. server.rs:535-551 / 159-171: a session's in_flight entry is removed only by an ack/nack
# of the same session with the same receipt. A lease that expired (redelivered, acked under a
# new receipt) or an ack from another client (the documented pickle hand-off) leaves a stale
# entry forever: memory grows per delivery, and every graceful close drains the full 10 s.
@pytest.mark.parametrize("variant", ["lease-expired", "acked-by-another-client"])
def test_close_does_not_wait_for_deliveries_that_are_settled(tmp_path, variant):
    base = tmp_path / "b"
    owner = tflux.open(base)
    owner.create_queue("q")
    a, b = tflux.open(base), tflux.open(base)
    a.enqueue("q", 1, b"x")
    if variant == "lease-expired":
        a.dequeue("q", timeout=1, lease=0.2)
        time.sleep(0.4)
        a.ack(a.dequeue("q", timeout=1))
    else:
        b.ack(pickle.loads(pickle.dumps(a.dequeue("q", timeout=1))))
    assert [q.in_flight for q in owner.queues() if q.name == "q"] == [0]
    t = time.monotonic()
    owner.close()
    took = time.monotonic() - t
    a.close()
    b.close()
    assert took < 2, f"nothing in flight, yet close() took {took:.1f} s"


# 4. PyStore::drop -> SharedStore::drop (mod.rs:518) -> Server::stop -> drain (10 s) runs
# with the GIL held: every Python thread of the owner process freezes.
def test_dropping_an_owner_does_not_freeze_the_interpreter(tmp_path):
    base = tmp_path / "b"
    owner = tflux.open(base)
    owner.create_queue("q")
    owner.enqueue("q", 1, b"x")
    holder = spawn(HOLDER, base, "holding")
    ticks: list[float] = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.05)

    th = threading.Thread(target=tick)
    th.start()
    time.sleep(0.3)
    del owner
    gc.collect()
    time.sleep(0.3)
    stop.set()
    th.join()
    holder.kill()
    pause = max(b - a for a, b in itertools.pairwise(ticks))
    assert pause < 2, f"another Python thread was frozen for {pause:.1f} s"


# 5. wire.rs:284-299: the 10 s frame deadline is checked only when a read times out (TICK =
# 200 ms), so a peer trickling a byte every 100 ms holds a frame open forever; and
# wire.rs:328-333 commits 1 MiB (zero-filled) per connection for 5 bytes sent.
def _frame_started(base: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(base / "data" / "tflux.sock"))
    s.sendall(hello())
    s.recv(100)
    s.sendall(struct.pack("<I", 1 << 20) + b"\x04")
    return s


def test_a_trickling_peer_is_dropped_at_the_frame_deadline(tmp_path):
    base = tmp_path / "b"
    owner = spawn(OWNER, base, "up")
    try:
        s = _frame_started(base)
        t0 = time.monotonic()
        with pytest.raises(OSError):  # EPIPE/ECONNRESET once the owner drops it
            while time.monotonic() - t0 < 20:
                s.send(b"x")
                time.sleep(0.1)
    finally:
        owner.kill()


def test_a_peer_that_sent_five_bytes_costs_the_owner_little(tmp_path):
    """What a started frame costs beyond its connection: the bytes that arrived (it was 1 MiB
    of zero-filled body per peer)."""
    base = tmp_path / "b"
    owner = spawn(OWNER, base, "up")
    try:
        conns = []
        for _ in range(300):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(base / "data" / "tflux.sock"))
            s.sendall(hello())
            s.recv(100)
            conns.append(s)
        time.sleep(1)
        before = rss_mib(owner.pid)
        for s in conns:
            s.sendall(struct.pack("<I", 1 << 20) + b"\x04")
        time.sleep(1)
        grown = rss_mib(owner.pid) - before
        for s in conns:
            s.close()
        assert grown < 40, f"300 peers that sent 5 bytes each cost the owner {grown} MiB"
    finally:
        owner.kill()
