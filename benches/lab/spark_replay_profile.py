"""Where one ``tflux.spark.replay(...).count()`` spends its time (issue 45): per Spark stage
(tasks, the executors' run and CPU time, from the session's event log) and between jobs on the
driver (step 1's summary scan and its collect, the plan, the live scan).

    python -m benches.lab.spark_replay_profile BASE [ROUNDS]

One ``local[2]`` session (``TFLUX_BENCH_MASTERS`` names another master), warmed up by
``TFLUX_BENCH_WARMUP`` replays (default 2), then ROUNDS (default 3) replays, each printed as:
the wall time of ``_Frames`` (step 1: the summary scan and collect, the driver's merge, the
plan's text) and of ``live().count()`` (the live scan), the JVM's CPU time over each, and every
stage the round ran (from the event log: its tasks, the sum of their run and CPU times, the sum
of their deserialization times, and its wall time from submission to completion). With
``TFLUX_BENCH_JFR=FILE`` the JVM also records a flight recording into FILE (``jfr print
--events jdk.ExecutionSample FILE`` has the samples; ``--jfr-top FILE`` prints the hottest
frames of its tflux and Spark methods).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import tflux
import tflux.spark

from benches.lab.spark_replay_ratio import _cpu


def _stages(log_dir: str) -> dict[int, dict]:
    """Per stage id of the event log in ``log_dir``: tasks, run/CPU/deserialize times (s), wall."""
    out: dict[int, dict] = collections.defaultdict(
        lambda: {"tasks": 0, "run": 0.0, "cpu": 0.0, "deser": 0.0, "wall": 0.0, "name": ""}
    )
    for path in glob.glob(os.path.join(log_dir, "**", "*"), recursive=True):
        if os.path.isdir(path) or "appstatus" in os.path.basename(path):
            continue
        with open(path) as f:
            for line in f:
                ev = json.loads(line)
                kind = ev.get("Event")
                if kind == "SparkListenerTaskEnd":
                    m = ev.get("Task Metrics") or {}
                    s = out[ev["Stage ID"]]
                    s["tasks"] += 1
                    s["run"] += m.get("Executor Run Time", 0) / 1e3
                    s["cpu"] += m.get("Executor CPU Time", 0) / 1e9
                    s["deser"] += m.get("Executor Deserialize Time", 0) / 1e3
                elif kind == "SparkListenerStageCompleted":
                    info = ev["Stage Info"]
                    s = out[info["Stage ID"]]
                    s["wall"] = (info["Completion Time"] - info["Submission Time"]) / 1e3
                    s["name"] = info["Stage Name"].split(" at ")[0]
    return out


def _timeline(log_dir: str, t0: float) -> list[tuple[float, str]]:
    """The event log's job, stage and SQL execution events after epoch time ``t0`` (s), as
    (seconds after t0, what)."""
    out = []
    for path in glob.glob(os.path.join(log_dir, "**", "*"), recursive=True):
        if os.path.isdir(path) or "appstatus" in os.path.basename(path):
            continue
        with open(path) as f:
            for line in f:
                ev = json.loads(line)
                kind = ev.get("Event", "")
                at, what = None, None
                if kind == "SparkListenerJobStart":
                    at, what = ev["Submission Time"], f"job {ev['Job ID']} start"
                elif kind == "SparkListenerJobEnd":
                    at, what = ev["Completion Time"], f"job {ev['Job ID']} end"
                elif kind == "SparkListenerStageCompleted":
                    info = ev["Stage Info"]
                    sid = info["Stage ID"]
                    if info.get("Submission Time", 0) / 1e3 >= t0:
                        out.append((info["Submission Time"] / 1e3 - t0, f"stage {sid} submitted"))
                    at, what = info.get("Completion Time"), f"stage {sid} completed"
                elif kind.endswith("SQLExecutionStart"):
                    at, what = ev["time"], f"sql {ev['executionId']} start"
                elif kind.endswith("SQLExecutionEnd"):
                    at, what = ev["time"], f"sql {ev['executionId']} end"
                if at is not None and at / 1e3 >= t0:
                    out.append((at / 1e3 - t0, what))
    return sorted(out)


def _threads(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) per thread of process ``pid`` so far, by thread id and name."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        out[f"{tid} {name}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _by_name(before: dict[str, float], after: dict[str, float], total: float) -> str:
    """The CPU each kind of thread spent between two :func:`_threads` (threads that ended
    meanwhile: the rest of the process's ``total``)."""
    spent: collections.Counter = collections.Counter()
    for key, secs in after.items():
        name = key.split(" ", 1)[1]
        for prefix in ("Executor task", "C2 Compiler", "C1 Compiler", "GC Thread", "G1 "):
            if name.startswith(prefix):
                name = prefix
        spent[name] += secs - before.get(key, 0.0)
    spent["(ended threads)"] = total - sum(spent.values())
    return ", ".join(f"{n} {s:.2f}" for n, s in spent.most_common() if abs(s) >= 0.02)


def jfr_top(path: str, n: int = 40) -> None:
    """The hottest top frames (and tflux frames anywhere in the stack) of a flight recording."""
    text = subprocess.run(
        ["jfr", "print", "--json", "--events", "jdk.ExecutionSample", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    events = json.loads(text)["recording"]["events"]
    top: collections.Counter = collections.Counter()
    ours: collections.Counter = collections.Counter()
    for ev in events:
        frames = ev["values"]["stackTrace"]["frames"]
        if not frames:
            continue
        name = lambda fr: fr["method"]["type"]["name"] + "." + fr["method"]["name"]  # noqa: E731
        top[name(frames[0])] += 1
        seen = set()
        for fr in frames:
            nm = name(fr)
            if nm.startswith("io.tflux") and nm not in seen:
                seen.add(nm)
                ours[nm] += 1
    total = sum(top.values())
    print(f"{total} samples; top frames:")
    for nm, c in top.most_common(n):
        print(f"  {c / total:6.1%} {nm}")
    print("tflux frames anywhere on the stack:")
    for nm, c in ours.most_common(n):
        print(f"  {c / total:6.1%} {nm}")


def main() -> None:
    if sys.argv[1:2] == ["--jfr-top"]:
        jfr_top(sys.argv[2])
        return
    base = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    master = os.environ.get("TFLUX_BENCH_MASTERS", "local[2]")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from tflux.spark.rebuild import _Frames

    events = tempfile.mkdtemp(prefix="tflux-replay-events-")
    java = "-Xms2g"
    if os.environ.get("TFLUX_BENCH_JFR"):
        java += (
            f" -XX:StartFlightRecording=filename={os.environ['TFLUX_BENCH_JFR']},settings=profile"
        )
    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", java)
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", events)
        .config("spark.eventLog.compress", "false")
        .config("spark.eventLog.rolling.enabled", "false")
        .config("spark.jars", tflux.spark.build_jar())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tflux.spark.register(spark)
    for _ in range(int(os.environ.get("TFLUX_BENCH_WARMUP", "2"))):
        tflux.spark.replay(spark, base).count()
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    print(f"load={os.getloadavg()[0]:.1f}")
    for _ in range(rounds):
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
        before = set(_stages(events))
        epoch = time.time()
        h0, c0, t0 = _threads(jvm), _cpu(jvm), time.perf_counter()
        frames = _Frames(spark, base)
        h1, c1, t1 = _threads(jvm), _cpu(jvm), time.perf_counter()
        n = frames.output(frames.live()).count()
        h2, c2, t2 = _threads(jvm), _cpu(jvm), time.perf_counter()
        plan = len(frames.plan or "")
        print(
            f"records {n}: frames (step 1) {t1 - t0:.3f}s (JVM CPU {c1 - c0:.2f}s),"
            f" live count {t2 - t1:.3f}s (JVM CPU {c2 - c1:.2f}s), plan {plan / 1e6:.2f} MB"
        )
        for at, what in _timeline(events, epoch):
            print(f"  {at:7.3f} {what}")
        print(f"  {t1 - t0:7.3f} frames built; {t2 - t0:7.3f} count returned")
        print(f"  step 1 threads: {_by_name(h0, h1, c1 - c0)}")
        print(f"  live threads: {_by_name(h1, h2, c2 - c1)}")
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
        stages = _stages(events)
        for sid in sorted(set(stages) - before):
            s = stages[sid]
            print(
                f"  stage {sid} {s['name']}: {s['tasks']} tasks, run {s['run']:.2f}s,"
                f" CPU {s['cpu']:.2f}s, deserialize {s['deser']:.2f}s, wall {s['wall']:.3f}s"
            )
    print(f"load after={os.getloadavg()[0]:.1f}")
    spark.stop()


if __name__ == "__main__":
    main()
