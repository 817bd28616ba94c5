"""Receive throughput of one build, for an A/B of two builds of the channel's follower.

    python -m benches.lab.receive_ab [MESSAGES] [ROUNDS]

Sends MESSAGES (default 2,000,000) 64-byte messages into a fresh channel (``sync="never"``,
so the segments are in the page cache), then reads all of them ROUNDS times (default 15), each
time with a new receiver from the earliest message, ``recv_many(100_000, timeout=0)`` in a loop.
Prints the minimum and the median. Run it with each build's interpreter in turn, several times
interleaved (the figures of one run drift by 20-30% on a shared machine):

    for i in 1 2 3; do venv-a/bin/python -m benches.lab.receive_ab; \
        venv-b/bin/python -m benches.lab.receive_ab; done
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time

import tflux


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    root = tempfile.mkdtemp(prefix="tflux-receive-ab-")
    try:
        with tflux.Channel.open(root, sync="never") as channel:
            sender = channel.sender()
            batch = [b"x" * 64] * 10_000
            for _ in range(n // len(batch)):
                sender.send_many(batch)
            times = []
            for r in range(rounds):
                receiver = channel.receiver(f"r{r}", start="earliest")
                start = time.perf_counter()
                got = 0
                while got < n // len(batch) * len(batch):
                    got += len(receiver.recv_many(100_000, timeout=0))
                times.append(time.perf_counter() - start)
                receiver.close()
        print(
            f"{tflux.__file__}: {min(times) * 1e3:.0f} ms min, "
            f"{statistics.median(times) * 1e3:.0f} ms median over {rounds} rounds of {got:,}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
