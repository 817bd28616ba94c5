"""Channels beside what a user would pick instead, side by side in one run.

- durable sends (fsync before the call returns): ``Sender.send`` and ``Sender.send_many`` beside
  persist-queue's ``SQLiteAckQueue.put`` and a pure-Python append + ``os.fsync`` (one message,
  and batches of 100 per fsync);
- receive throughput of 64-byte messages from cached segments with ``recv_many`` (1 receiver, and
  3 receivers in threads at once) beside ``recv`` one by one;
- send-to-receive latency across processes (a read-only channel in a child process), p50/p99.

Run: ``python -m benches.suite.bench_channel [--quick]``; ``test_smoke`` runs it small under pytest.
"""

from __future__ import annotations

import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tflux

MSG = b"x" * 64


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def durable_sends(root: Path, n: int, rounds: int = 10) -> dict[str, float]:
    """Messages per second, every call durable before it returns.

    The disk's flush latency drifts (other work shares it), so the contenders take turns: each
    round makes ``n // rounds`` calls of each, and a rate is its messages over its summed time.
    """
    batch = [MSG] * 100
    rec = struct.pack(">I", len(MSG)) + MSG
    # label -> (messages per call, the call)
    contenders: dict[str, tuple[int, Callable[[], object]]] = {}
    closing: list = []
    ch1 = tflux.Channel.open(root / "ch1", sync="always")
    ch2 = tflux.Channel.open(root / "ch2", sync="always")
    closing += [ch1, ch2]
    tx1, tx2 = ch1.sender(), ch2.sender()
    contenders["tflux send"] = (1, lambda: tx1.send(MSG))
    contenders["tflux send_many(100)"] = (100, lambda: tx2.send_many(batch))
    for label, per in (("python append+fsync", 1), ("python append+fsync (100)", 100)):
        f = open(root / f"py{per}.log", "ab")  # closed below
        closing.append(f)

        def append(f=f, data=rec * per) -> None:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

        contenders[label] = (per, append)
    try:
        from persistqueue import SQLiteAckQueue
    except ImportError:  # the bench extra is not installed
        pass
    else:
        q = SQLiteAckQueue(str(root / "sqlite"), auto_commit=True, multithreading=True)
        contenders["persist-queue SQLiteAckQueue.put"] = (1, lambda: q.put(MSG))
    spent = dict.fromkeys(contenders, 0.0)
    calls = max(1, n // rounds)
    for _ in range(rounds):
        for label, (_, call) in contenders.items():
            t = time.perf_counter()
            for _ in range(calls):
                call()
            spent[label] += time.perf_counter() - t
    for c in closing:
        c.close()
    return {
        label: _rate(per * calls * rounds, spent[label]) for label, (per, _) in contenders.items()
    }


def receive(root: Path, n: int) -> dict[str, float]:
    """Messages per second read from cached segments."""
    out: dict[str, float] = {}
    path = root / "recv"
    with tflux.Channel.open(path, sync="never") as ch:
        tx = ch.sender()
        chunk = [MSG] * 10_000
        for _ in range(n // len(chunk)):
            tx.send_many(chunk)
        total = ch.next_lsn
        # Warm the page cache once.
        rx = ch.receiver("warm")
        while len(rx.recv_many(1 << 16, timeout=0)):
            pass

        def drain(name: str, counts: list[int]) -> None:
            r = ch.receiver(name)
            got = 0
            while got < total:
                got += len(r.recv_many(1 << 16, timeout=0))
            counts.append(got)

        counts: list[int] = []
        t = time.perf_counter()
        drain("one", counts)
        out["recv_many, 1 receiver"] = _rate(sum(counts), time.perf_counter() - t)
        counts = []
        threads = [threading.Thread(target=drain, args=(f"r{i}", counts)) for i in range(3)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        out["recv_many, 3 receivers (total)"] = _rate(sum(counts), time.perf_counter() - t)
        r = ch.receiver("single")
        m = min(total, 200_000)
        t = time.perf_counter()
        for _ in range(m):
            r.recv(timeout=0)
        out["recv one by one, 1 receiver"] = _rate(m, time.perf_counter() - t)
    return out


CHILD = """
import struct, sys, time, tflux
rx = tflux.Channel.open(sys.argv[1], readonly=True).receiver("lat", start="latest")
n = int(sys.argv[2])
print("ready", flush=True)
delays = []
while len(delays) < n:
    m = rx.recv(timeout=30)
    if m is None:
        break
    delays.append(time.monotonic_ns() - struct.unpack(">q", m.data[:8])[0])
print(" ".join(map(str, delays)), flush=True)
"""


def latency(root: Path, n: int) -> dict[str, float]:
    """Send-to-receive delay across processes, in microseconds."""
    path = root / "lat"
    with tflux.Channel.open(path, sync="never") as ch:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(n)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        tx = ch.sender()
        for _ in range(n):
            tx.send(struct.pack(">q", time.monotonic_ns()) + MSG)
            time.sleep(0.002)
        delays = [int(x) / 1000 for x in child.stdout.readline().split()]
        child.wait(30)
    assert len(delays) == n
    q = statistics.quantiles(delays, n=100)
    return {"p50 us": q[49], "p99 us": q[98]}


def main(quick: bool = False) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("TFLUX_BENCH_DIR")) as d:
        root = Path(d)
        results = {
            "durable sends (msgs/s)": durable_sends(root, 50 if quick else 500),
            "receive 64 B (msgs/s)": receive(root, 20_000 if quick else 2_000_000),
            "cross-process latency": latency(root, 20 if quick else 500),
        }
    return results


def test_smoke():
    results = main(quick=True)
    assert results["durable sends (msgs/s)"]["tflux send"] > 0
    assert results["cross-process latency"]["p99 us"] > 0


if __name__ == "__main__":
    before = os.getloadavg()
    res = main(quick="--quick" in sys.argv)
    after = os.getloadavg()
    print(
        f"load average (1, 5, 15 min) before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f},"
        f" after {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}, {os.cpu_count()} cores"
    )
    for group, figures in res.items():
        print(f"\n{group}")
        for k, v in figures.items():
            print(f"  {k:40s} {v:>14,.0f}")
