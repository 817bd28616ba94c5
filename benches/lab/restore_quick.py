"""Quick side-by-side of restore and verify on two cached logs (outside pytest-benchmark).

``python -m benches.lab.restore_quick [ROOT]`` builds (once, kept under ROOT, default
``/tmp/tflux-restore-quick``) a 3M-delta log of 64 B messages and a 1M-delta log of 1 KiB
messages (CreateQueue, then Add, Add, Remove(front), ...), then times
``tflux.open(base, readonly=True)`` and ``tflux.verify`` of the same log, ``ROUNDS`` rounds
each (default 3), printing best, median and the median ratio. ``prof`` mode
(``python -m benches.lab.restore_quick ROOT prof NAME [N]``) only restores NAME (``b64`` or ``k1``)
N times, for ``perf record -g``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import tflux

from benches.suite._queuedata import build_queue_log

LOGS = [("b64", 3_000_000, 64), ("k1", 1_000_000, 1024)]


def ensure(base: Path, deltas: int, payload: int) -> Path:
    if not (base / "built").exists():
        base.mkdir(parents=True, exist_ok=True)
        build_queue_log(base, deltas, payload, removes=True, flush=True)
        (base / "built").write_text("ok")
    return base


def restore(base: Path) -> int:
    with tflux.open(base, readonly=True) as store:
        return store.replayed


def verify(base: Path) -> object:
    return tflux.verify(base / "data" / "log")


def timed(f, base: Path, rounds: int) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        f(base)
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


def main(argv: list[str]) -> None:
    root = Path(argv[0] if argv else "/tmp/tflux-restore-quick")
    if len(argv) > 1 and argv[1] == "prof":
        for _ in range(int(argv[3]) if len(argv) > 3 else 3):
            restore(root / argv[2])
        return
    rounds = int(os.environ.get("ROUNDS", "3"))
    print("load average:", os.getloadavg(), flush=True)
    for name, deltas, payload in LOGS:
        base = ensure(root / name, deltas, payload)
        r, v = timed(restore, base, rounds), timed(verify, base, rounds)
        print(
            f"{name}: {deltas:,} deltas of {payload} B: restore best {r[0]:.3f} s, median "
            f"{r[1]:.3f} s ({deltas / r[1] / 1e6:.2f} M deltas/s); verify best {v[0]:.3f} s, "
            f"median {v[1]:.3f} s; restore / verify (medians) {r[1] / v[1]:.2f}",
            flush=True,
        )
    print("load average:", os.getloadavg())


if __name__ == "__main__":
    main(sys.argv[1:])
