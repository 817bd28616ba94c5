"""One client process against an owner that does nothing else (issue 29): records per second and
CPU per record of the client and of the owner, for a dequeue + ack client and an enqueue client.

Not a test (pytest collects ``bench_*.py`` only): run it by hand, in the venv whose tflux it
measures (compare two builds by running it in each)::

    python benches/lab/one_client_cost.py [--seconds N]

The owner is this process (it opens the store first, fills a backlog and only holds it); the
client is a ``python -c`` child that measures its own calls and ``getrusage``. The owner's CPU is
this process's ``getrusage`` over the child's run (its loop and syncer threads), divided by the
child's records.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import sys, time, resource, tflux
store = tflux.open(sys.argv[1]); mode = sys.argv[2]; seconds = float(sys.argv[3])
n = 0; t0 = time.perf_counter(); r0 = resource.getrusage(resource.RUSAGE_SELF)
while time.perf_counter() - t0 < seconds:
    if mode == "consumer":
        store.ack(store.dequeue("q", 0.05))
    else:
        store.enqueue("q", 0, b"x" * 64)
    n += 1
r1 = resource.getrusage(resource.RUSAGE_SELF); dt = time.perf_counter() - t0
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(n / dt, cpu / n * 1e6, (r1.ru_nvcsw - r0.ru_nvcsw) / n)
"""


def cpu(r: resource.struct_rusage) -> float:
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    import tflux

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="tflux-one-client-"))
    base = root / "b"
    store = tflux.open(base)
    try:
        store.create_queue("q")
        for _ in range(20):
            store.enqueue_many("q", [(0, b"x" * 64)] * 5000)
        print(f"{'client':24s} {'records/s':>10s} {'client us/rec':>14s} {'owner us/rec':>13s}"
              f" {'client switches/rec':>20s}")  # fmt: skip
        for mode, label in (("consumer", "dequeue + ack"), ("producer", "enqueue")):
            before = cpu(resource.getrusage(resource.RUSAGE_SELF))
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(base), mode, str(args.seconds)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            owner = cpu(resource.getrusage(resource.RUSAGE_SELF)) - before
            rate, client_us, switches = map(float, out)
            owner_us = owner / (rate * args.seconds) * 1e6
            print(f"{label:24s} {rate:10,.0f} {client_us:14.1f} {owner_us:13.1f} {switches:20.2f}")
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
