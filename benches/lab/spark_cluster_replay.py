"""``tflux.spark.replay(...).count()`` on a standalone cluster on this machine (a master and two
workers of one core each, started from the pyspark package on 127.0.0.1 as
``tests/spark/test_spark_cluster.py`` starts them), beside the local restore of the same base
and a ``local[2]`` session, in one run (medians; every round times the restore, then the
cluster and ``local[2]`` in alternating order).

    TFLUX_BENCH_BASE=DIR python -m benches.lab.spark_cluster_replay [ROUNDS]

DIR is a kept base (e.g. the one ``TFLUX_BENCH_SHAPE=priority python -m
benches.lab.spark_replay_ratio`` built). The ``local[2]`` session is
``benches.lab.spark_replay_ratio``'s (its own process, the same configuration as there);
``TFLUX_BENCH_LOCAL=0`` leaves it out. The daemons are stopped by PID at the end.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tflux
import tflux.spark


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise RuntimeError(f"{text!r} not in {path}")


def main() -> None:
    import pyspark
    from pyspark.sql import SparkSession

    base = os.environ["TFLUX_BENCH_BASE"]
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    home = Path(pyspark.__file__).parent
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1")
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark_class = str(home / "bin" / "spark-class")
    root = Path(tempfile.mkdtemp(prefix="tflux-bench-cluster-"))
    port = free_port()
    daemons: list[subprocess.Popen] = []
    local2: subprocess.Popen | None = None
    try:
        if os.environ.get("TFLUX_BENCH_LOCAL", "1") != "0":
            # Warmed up before the cluster starts, so its JIT does not run beside the daemons'.
            local2 = subprocess.Popen(
                [sys.executable, "-m", "benches.lab.spark_replay_ratio", "--child", base,
                 "local[2]"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            )  # fmt: skip
            assert local2.stdout.readline().strip() == "ready"
        log = root / "master.log"
        with open(log, "w") as out:
            daemons.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        wait_for(log, "I have been elected leader", daemons[-1])
        for n in range(2):
            work = root / f"work{n}"
            work.mkdir()
            log = root / f"worker{n}.log"
            with open(log, "w") as out:
                daemons.append(subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker",
                     f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores", "1",
                     "--memory", "2g", "--work-dir", str(work), "--webui-port", str(free_port())],
                    cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                ))  # fmt: skip
            wait_for(log, "Successfully registered with master", daemons[-1])
        os.environ.update(env)
        spark = (
            SparkSession.builder.master(f"spark://127.0.0.1:{port}")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "8")
            .config("spark.driver.memory", "2g")
            .config("spark.executor.memory", "1500m")
            .config("spark.jars", tflux.spark.build_jar())
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        with tflux.open(base, readonly=True) as store:
            live = sum(q.count for q in store.queues())
        assert tflux.spark.replay(spark, base).count() == live  # warm-up
        print(f"live={live} load={os.getloadavg()[0]:.1f}", flush=True)
        times: dict[str, list[float]] = {"local restore": [], "replay cluster": []}
        if local2 is not None:
            times["replay local[2]"] = []

        def on_cluster() -> None:
            t = time.perf_counter()
            assert tflux.spark.replay(spark, base).count() == live
            times["replay cluster"].append(time.perf_counter() - t)

        def on_local2() -> None:
            assert local2 is not None and local2.stdin is not None
            local2.stdin.write("go\n")
            local2.stdin.flush()
            secs, n, *_ = local2.stdout.readline().split()
            assert int(n) == live, (n, live)
            times["replay local[2]"].append(float(secs))

        for r in range(rounds):
            t = time.perf_counter()
            with tflux.open(base, readonly=True) as store:
                assert sum(q.count for q in store.queues()) == live
            times["local restore"].append(time.perf_counter() - t)
            order = [on_cluster] + ([on_local2] if local2 is not None else [])
            for run in order if r % 2 == 0 else order[::-1]:
                run()
        local = statistics.median(times["local restore"])
        cluster = statistics.median(times["replay cluster"])
        print(f"local restore {local:.3f}s")
        print(
            f"replay on master + 2 workers (1 core each): {cluster:.3f}s = {cluster / local:.1f}x"
        )
        if local2 is not None:
            one = statistics.median(times["replay local[2]"])
            ratios = [
                a / b
                for a, b in zip(times["replay cluster"], times["replay local[2]"], strict=True)
            ]
            print(f"replay local[2]: {one:.3f}s = {one / local:.1f}x")
            print(
                "cluster/local[2] per round: "
                + " ".join(f"{x:.2f}" for x in ratios)
                + f" (median {statistics.median(ratios):.2f})"
            )
        print(f"load after={os.getloadavg()[0]:.1f}")
        spark.stop()
    finally:
        if local2 is not None and local2.stdin is not None:
            local2.stdin.close()
            try:
                local2.wait(timeout=60)
            except subprocess.TimeoutExpired:
                local2.kill()
        for proc in reversed(daemons):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
