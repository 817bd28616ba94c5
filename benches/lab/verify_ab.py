"""Two builds side by side on one cached log: ``tflux.verify`` against one crc32fast stream.

``python benches/lab/verify_ab.py OLD_PYTHON NEW_PYTHON LOG_DIR [ROUNDS] [PER_ROUND]``:
OLD_PYTHON and NEW_PYTHON are interpreters of two venvs (e.g. ``/work/venv-main/bin/python`` and
this worktree's), LOG_DIR a log directory (e.g. ``BASE/data/log`` of a ``bench_restore.py``
log). One child per build stays up; each round (order alternating) times PER_ROUND calls of
``tflux.verify(LOG_DIR)`` and of ``tflux.crc32`` over every segment's bytes up to its end of data
(what verify checks), in wall and CPU time (every thread). Prints medians, bests, the
verify / crc32fast ratio of each build (rates) and NEW / OLD, with the load average. On a
loaded machine the CPU ratio is the steadier figure.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def child(log: str) -> None:
    import tflux

    with tflux.Log.open(log, readonly=True) as opened:
        sizes = [(s.path, s.size) for s in opened.segments]
    parts = []
    for path, size in sizes:
        with open(path, "rb") as f:
            parts.append(f.read(size))
    print(tflux.__file__, flush=True)
    for line in sys.stdin:
        what, n = line.split()
        walls, cpus = [], []
        for _ in range(int(n)):
            t0, c0 = time.perf_counter(), time.process_time()
            if what == "verify":
                assert tflux.verify(log).ok
            else:
                sum(tflux.crc32(b) for b in parts)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        print(" ".join(map(str, walls)), "|", " ".join(map(str, cpus)), flush=True)


def main(old: str, new: str, log: str, rounds: int = 30, per: int = 5) -> None:
    me = os.path.abspath(__file__)
    procs = {
        name: subprocess.Popen(
            [python, me, "--child", log],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        for name, python in (("old", old), ("new", new))
    }
    for name, p in procs.items():
        print(name, p.stdout.readline().strip())
    times = {(n, w): ([], []) for n in procs for w in ("verify", "crc")}
    print("load average before:", os.getloadavg())
    for r in range(rounds):
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            for what in ("verify", "crc"):
                procs[name].stdin.write(f"{what} {per}\n")
                procs[name].stdin.flush()
                walls, cpus = procs[name].stdout.readline().split("|")
                times[(name, what)][0].extend(map(float, walls.split()))
                times[(name, what)][1].extend(map(float, cpus.split()))
    print("load average after:", os.getloadavg())
    med = statistics.median
    for name in procs:
        (vw, vc), (cw, _) = times[(name, "verify")], times[(name, "crc")]
        print(
            f"{name}: verify wall median {med(vw) * 1e3:.2f} ms, best {min(vw) * 1e3:.2f}; "
            f"CPU median {med(vc) * 1e3:.2f} ms; crc32fast median {med(cw) * 1e3:.2f} ms, "
            f"best {min(cw) * 1e3:.2f}; verify / crc32fast median {med(cw) / med(vw):.3f}, "
            f"best {min(cw) / min(vw):.3f}"
        )
    (ow, oc), (nw, nc) = times[("old", "verify")], times[("new", "verify")]
    print(
        f"new / old verify: wall median {med(nw) / med(ow):.3f}, CPU median {med(nc) / med(oc):.3f}"
    )
    for p in procs.values():
        p.stdin.close()
        p.wait()


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main(sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:6]))
