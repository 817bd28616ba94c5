"""Two builds of tflux side by side on one cached log: restore (and verify) time, wall and CPU.

``python -m benches.lab.restore_ab OLD NEW BASE [ROUNDS] [MODE ...]``: OLD and NEW are directories
holding a ``tflux`` package (e.g. copies of ``python/tflux`` after ``maturin develop -r`` of each
build); BASE a base directory (e.g. one ``benches.lab.restore_quick`` built). Each round runs one
child per build (order alternating between rounds), each child times 3 of MODE (``restore``:
``tflux.open(BASE, readonly=True)``; ``verify``: ``tflux.verify`` of its log) and reports its
median wall and CPU (user + system, every thread) time; the medians over the rounds and the
OLD / NEW ratios are printed with the load average. On a loaded machine the CPU ratio is the
steadier one. ``calling thread cpu`` is the CPU time of the thread that called (a restore's
applying thread: its critical path, whatever the pool does beside it).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time


def child(mode: str, base: str, n: int) -> None:
    import tflux

    walls, cpus, threads = [], [], []
    for _ in range(n):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        h0 = resource.getrusage(resource.RUSAGE_THREAD)
        if mode == "restore":
            with tflux.open(base, readonly=True) as store:
                store.replayed  # noqa: B018
        else:
            tflux.verify(os.path.join(base, "data", "log"))
        walls.append(time.perf_counter() - t0)
        h1 = resource.getrusage(resource.RUSAGE_THREAD)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpus.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        threads.append(h1.ru_utime + h1.ru_stime - h0.ru_utime - h0.ru_stime)
    print(statistics.median(walls), statistics.median(cpus), statistics.median(threads))


def main(argv: list[str]) -> None:
    if argv[0] == "--child":
        child(argv[1], argv[2], 3)
        return
    builds = {"old": argv[0], "new": argv[1]}
    base = argv[2]
    rounds = int(argv[3]) if len(argv) > 3 else 3
    modes = argv[4:] or ["restore"]
    seen: dict[tuple[str, str], list[tuple[float, float]]] = {}
    print("load average:", os.getloadavg(), flush=True)
    for r in range(rounds):
        order = list(builds.items()) if r % 2 == 0 else list(reversed(builds.items()))
        for mode in modes:
            for name, path in order:
                env = dict(os.environ, PYTHONPATH=path)
                cmd = [sys.executable, "-m", "benches.lab.restore_ab", "--child", mode, base]
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                wall, cpu, thread = map(float, out.stdout.split())
                seen.setdefault((mode, name), []).append((wall, cpu, thread))
    for mode in modes:
        for i, what in enumerate(("wall", "cpu", "calling thread cpu")):
            old = statistics.median(x[i] for x in seen[(mode, "old")])
            new = statistics.median(x[i] for x in seen[(mode, "new")])
            print(f"{mode} {what}: old {old:.4f} s, new {new:.4f} s, old / new {old / new:.2f}x")
    print("load average:", os.getloadavg())


if __name__ == "__main__":
    main(sys.argv[1:])
