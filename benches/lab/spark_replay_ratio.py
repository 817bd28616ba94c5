"""``tflux.spark.replay(...).count()`` beside the local restore (``tflux.open(base,
readonly=True)``) of the same base, with 1 and 2 executor cores, in one run (medians).

    python -m benches.lab.spark_replay_ratio [RECORDS] [ROUNDS]

The store: RECORDS enqueues of 64 B over one busy queue (80%) and three others, a third of them
acked, a snapshot at half way. The JVM reader serves the scans (its jar is built first).

Each master (``local[1]``, ``local[2]``) runs in its own fresh session in its own process; after
a warm-up, the rounds are interleaved: every round times the local restore and one
``replay(...).count()`` in each session, in alternating order (so a load that drifts during the
run weighs on both alike). Printed: the medians, each session's ratio to the restore, and the
``local[1]``/``local[2]`` ratio of every round (above 1: two cores were faster) and the median
CPU time (user + system, every thread) the session's JVM spent per replay.

``TFLUX_BENCH_BASE=DIR`` keeps the store in DIR (built there when absent) instead of a temporary
one. ``TFLUX_BENCH_BASELINE=PYTHONPATH`` adds two sessions importing tflux from PYTHONPATH
(e.g. another checkout's ``python/`` with the same native module), interleaved with the others,
for an A/B of replay itself. ``TFLUX_BENCH_WARMUP=N`` runs N warm-up replays per session (default
1): a fresh JVM spends about as much CPU compiling Spark's planner (JIT) as the tasks use during
its first ten replays, on the core a ``local[1]`` session leaves free.
``TFLUX_BENCH_SHAPE=removes`` builds another base instead: RECORDS deltas written to the log
directly, AddRecords of 40 B over four queues in batches of 10,000, each batch's records removed
by RemoveRecords in the next batch (half the log is removes; 10,000 records stay live).
``TFLUX_BENCH_SHAPE=priority`` builds a priority queue's workload instead (issue 45): RECORDS
deltas of ``benches.suite._queuedata.build_queue_log(..., payload=64, removes=True)``: Add, Add,
Remove, each Remove acking the record a consumer takes next (smallest key first, keys over 4,096
values), so the acked ids are scattered, never runs.

``TFLUX_BENCH_BASE=DIR1,DIR2`` (kept bases, all existing) times each base in the same run: a
session per base and master, every round timing each base's restore and replays (e.g. the 16M
and 64M priority bases, for replay's growth with the log). ``TFLUX_BENCH_MASTERS=local[2]``
runs only the masters named (comma-separated). Also printed: the restore's CPU time (user +
system, every thread of this process; on a loaded machine the ratio of the replay's CPU to it
is steadier than the wall times'), the peak resident memory of each session's JVM, which in
``local[N]`` is the driver (``VmHWM`` after its last replay: the reader's mapped segments count
in it), and the peak use of its heap's old generation.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import tflux
import tflux.spark

MASTERS = tuple(os.environ.get("TFLUX_BENCH_MASTERS", "local[1],local[2]").split(","))


def build(base: str, records: int) -> int:
    rng = random.Random(1)
    # No fsync per write: the bytes are the same, and the default policy (a sync before every
    # ack returns) made an 8M-record base take over 18 minutes to build instead of about 4.
    with tflux.open(base, log_sync_policy="never") as store:
        for q in ("a", "b", "c"):
            store.create_queue(q)
        names = ["busy"] * 8 + ["a", "b"]
        store.create_queue("busy")
        for i in range(0, records, 10_000):
            for q in set(names):
                n = names.count(q) * 1000
                store.enqueue_many(q, [(rng.randint(0, 9), b"x" * 64) for _ in range(n)])
            for q in set(names):
                for _ in range(names.count(q) * 330):
                    store.ack(store.dequeue(q))
            if i == records // 2 // 10_000 * 10_000:
                store.snapshot()
        return sum(q.count for q in store.queues())


def child(base: str, master: str) -> None:
    """A session that times one ``replay(...).count()`` per line read from stdin."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "2g")
        # The whole heap from the start: with G1's default small initial heap the decoded
        # snapshot (kept for the next query) keeps the old generation near the marking
        # threshold, and local[2] spent 0.5-0.8 s of CPU per replay in concurrent marking
        # that local[1] did not (docs/benchmarks.md, session 8).
        .config("spark.driver.extraJavaOptions", "-Xms2g")
        .config("spark.jars", tflux.spark.build_jar())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tflux.spark.register(spark)
    for _ in range(int(os.environ.get("TFLUX_BENCH_WARMUP", "1"))):  # warm up
        tflux.spark.replay(spark, base).count()
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    print("ready", flush=True)
    for _ in sys.stdin:
        c, t = _cpu(jvm), time.perf_counter()
        n = tflux.spark.replay(spark, base).count()
        secs, cpu = time.perf_counter() - t, _cpu(jvm) - c
        heap = _heap_peak(spark)
        print(f"{secs:.6f} {n} {cpu:.3f} {_peak_rss(jvm)} {heap}", flush=True)
    spark.stop()


def _heap_peak(spark) -> int:
    """The JVM's peak use of its old generation so far, in bytes (what outlives a young
    collection: the decoded plan, bitmaps, collected rows; the young generation fills to its
    size whatever the replay keeps)."""
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    return sum(
        pool.getPeakUsage().getUsed()
        for pool in management.getMemoryPoolMXBeans()
        if "Old Gen" in pool.getName()
    )


def _peak_rss(pid: int) -> int:
    """Peak resident memory of process ``pid`` so far, in bytes (Linux ``VmHWM``)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of process ``pid`` so far (Linux)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def build_removes(base: str, deltas: int) -> int:
    """The ``removes`` shape (see the module docstring); returns the live records."""
    queues = [b"jobs", b"mail", b"img", b"grid"]
    ids = dict.fromkeys(queues, 0)
    with tflux.Log.open(os.path.join(base, "data", "log")) as log:
        for q in queues:
            config = bytes.fromhex("00000001ffffffffffffffff00")  # heap, no limits
            log.append(1, b"C" + bytes([len(q)]) + q + config)
        pending: list[tuple[bytes, int]] = []
        done = j = 0
        while done < deltas:
            batch, adds = [], []
            for _ in range(10_000):
                q = queues[j % 4]
                j += 1
                ids[q] += 1
                adds.append((q, ids[q]))
                message = b"%08d" % j + b"y" * 32
                key = (j % 10).to_bytes(8, "big")
                batch.append(b"A" + bytes([len(q)]) + q + key + b"\0\0\0\x28" + message)
            for q, i in pending:
                batch.append(b"R" + bytes([len(q)]) + q + i.to_bytes(8, "big"))
            pending = adds
            first = log.append_many(1, batch)
            log.commit(first + len(batch) - 1)
            done += len(batch)
    return len(pending)


def restore_once(base: str, live: int) -> tuple[float, float]:
    """The local restore's wall time and CPU time (every thread of this process)."""
    c, t = time.process_time(), time.perf_counter()
    with tflux.open(base, readonly=True) as store:
        assert sum(q.count for q in store.queues()) == live
    return time.perf_counter() - t, time.process_time() - c


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3])
        return
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    kept = os.environ.get("TFLUX_BENCH_BASE")
    root = None if kept else tempfile.mkdtemp(prefix="tflux-bench-replay-")
    bases = kept.split(",") if kept else [os.path.join(root, "base")]
    sessions: dict[str, subprocess.Popen] = {}
    base_of: dict[str, str] = {}
    try:
        lives = {}
        for base in bases:
            if os.path.exists(base):
                with tflux.open(base, readonly=True) as store:
                    lives[base] = sum(q.count for q in store.queues())
            elif len(bases) > 1:
                raise SystemExit(f"{base}: several bases must all exist (build each alone)")
            else:
                lives[base] = build_shape(base, records)
        variants = [("", None)]
        if os.environ.get("TFLUX_BENCH_BASELINE"):
            variants.append(("baseline ", os.environ["TFLUX_BENCH_BASELINE"]))
        for label, pythonpath in variants:
            env = dict(os.environ)
            if pythonpath:
                paths = [pythonpath, env.get("PYTHONPATH")]
                env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
            for base in bases:
                for master in MASTERS:
                    name = label + master + (f" {base}" if len(bases) > 1 else "")
                    base_of[name] = base
                    sessions[name] = subprocess.Popen(
                        [sys.executable, "-m", "benches.lab.spark_replay_ratio", "--child", base,
                         master],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                    )  # fmt: skip
        for name, proc in sessions.items():  # warm-ups one at a time
            assert proc.stdout.readline().strip() == "ready", name
        print(f"records={records} live={lives} load={os.getloadavg()[0]:.1f}")
        restores = {base: f"local restore {base}" if len(bases) > 1 else "local restore"
                    for base in bases}  # fmt: skip
        times: dict[str, list[float]] = {name: [] for name in [*restores.values(), *sessions]}
        cpus: dict[str, list[float]] = {name: [] for name in times}
        peaks: dict[str, tuple[int, int]] = {}
        order = list(sessions)
        for r in range(rounds):
            for base, label in restores.items():
                secs, cpu = restore_once(base, lives[base])
                times[label].append(secs)
                cpus[label].append(cpu)
            for name in order if r % 2 == 0 else order[::-1]:
                sessions[name].stdin.write("go\n")
                sessions[name].stdin.flush()
                secs, n, cpu, jvm_peak, heap = sessions[name].stdout.readline().split()
                assert int(n) == lives[base_of[name]], (name, n, lives)
                times[name].append(float(secs))
                cpus[name].append(float(cpu))
                peaks[name] = (int(jvm_peak), int(heap))
        for base, label in restores.items():
            local = statistics.median(times[label])
            local_cpu = statistics.median(cpus[label])
            print(f"{label} {local:.3f}s (CPU {local_cpu:.2f}s)")
            for name in sessions:
                if base_of[name] != base:
                    continue
                secs = statistics.median(times[name])
                cpu = statistics.median(cpus[name])
                jvm_peak, heap = peaks[name]
                print(
                    f"replay {name}: {secs:.3f}s = {secs / local:.1f}x the local restore"
                    f" (the JVM's CPU: {cpu:.2f}s = {cpu / local_cpu:.1f}x the restore's;"
                    f" the JVM's peak RSS {jvm_peak / 2**20:.0f} MiB with mapped segments, peak"
                    f" old generation {heap / 2**20:.0f} MiB)"
                )
        for label, _ in variants:
            if len(MASTERS) < 2:
                break
            for base in bases:
                suffix = f" {base}" if len(bases) > 1 else ""
                one = times[label + MASTERS[0] + suffix]
                two = times[label + MASTERS[1] + suffix]
                ratios = [a / b for a, b in zip(one, two, strict=True)]
                wins = sum(x > 1 for x in ratios)
                print(
                    f"{label}{MASTERS[0]}/{MASTERS[1]}{suffix} per round: "
                    + " ".join(f"{x:.2f}" for x in ratios)
                    + f" (median {statistics.median(ratios):.2f}; {MASTERS[1]} faster in"
                    f" {wins}/{rounds})"
                )
        print(f"load after={os.getloadavg()[0]:.1f}")
    finally:
        for proc in sessions.values():
            if proc.stdin:
                proc.stdin.close()
        for proc in sessions.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if root:
            shutil.rmtree(root, ignore_errors=True)


def build_shape(base: str, records: int) -> int:
    """Builds the base of ``TFLUX_BENCH_SHAPE`` (see the module docstring); returns its live
    records."""
    shape = os.environ.get("TFLUX_BENCH_SHAPE")
    if shape == "removes":
        return build_removes(base, records)
    if shape == "priority":
        from pathlib import Path

        from benches.suite._queuedata import build_queue_log

        return build_queue_log(Path(base), records, 64, removes=True).live
    return build(base, records)


if __name__ == "__main__":
    main()
