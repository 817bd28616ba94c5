"""The JVM reader's per-record cost in replay's two scans, alone (issue 45): one thread, no
Spark job, so that a change to the reader's record loop shows as ns per record rather than in
the noise of a job on a shared machine.

    python -m benches.lab.jvm_reader_cost BASE [SEGMENTS] [ROUNDS] [summary|live|both|frames|all]

Compiles ``benches/lab/JvmReaderCost.java`` (a main in the reader's package) against the
reader's jar (:func:`tflux.spark.build_jar`, built from this checkout's sources) and pyspark's
jars into a temporary directory, then runs it with ``java -cp``: over the first SEGMENTS
(default 10) segment files of ``BASE/data/log``, ``TFLUX_BENCH_WARMUP`` (default 3) rounds of
JIT warm-up, then ROUNDS (default 5) timed rounds of each scan: the ``summary`` option's scan
(all its columns, ``summaryRuns``/``summaryBits`` as replay passes them) and the live scan
(``replayPlan``, no columns, filters ``kind = add_record`` and ``inc IN (...)``, as replay's
``count()``); ``both`` (the default) runs these two. ``frames`` runs instead two walks over
the framing alone, no delta decoded (``frames``: markers, terms, lengths, padding; ``crc``: and
the checksums), the floor under both scans; ``all`` runs the four. Prints per scan its rows,
the thread's CPU time (median and minimum) and the median's ns per record.

The live scan needs replay's plan (its removed bitmap): the first run on a base derives it
from one ``tflux.spark.rebuild._Frames`` on ``local[1]`` (a Spark job, once) and keeps it in
``TFLUX_BENCH_PLAN`` (default ``/tmp/tflux-plan-<base name>.txt``). ``TFLUX_BENCH_JAVA_OPTS``
is passed to the JVM, for example ``-XX:StartFlightRecording=filename=/tmp/r.jfr,settings=profile``
(then ``python -m benches.lab.spark_replay_profile --jfr-top /tmp/r.jfr``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import tflux.spark
from tflux.spark import _jvm

HERE = Path(__file__).parent


def _plan(base: str, path: Path) -> None:
    """Replay's plan text for ``base`` and its final incarnations, into ``path``."""
    from pyspark.sql import SparkSession
    from tflux.spark import rebuild

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars", tflux.spark.build_jar())
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    tflux.spark.register(spark)
    try:
        frames = rebuild._Frames(spark, base, ranges=True)
        if frames.plan is None:
            raise SystemExit(f"{base}: replay made no plan for the reader")
        incs = ",".join(str(int(i)) for i in frames.final_incs)
        path.write_text(frames.plan + "\nincs " + incs + "\n")
    finally:
        spark.stop()


def main() -> None:
    args = sys.argv[1:]
    base = args[0]
    segments = int(args[1]) if len(args) > 1 else 10
    rounds = int(args[2]) if len(args) > 2 else 5
    which = args[3] if len(args) > 3 else "both"
    warmup = os.environ.get("TFLUX_BENCH_WARMUP", "3")
    plan = Path(
        os.environ.get("TFLUX_BENCH_PLAN")
        or os.path.join(tempfile.gettempdir(), f"tflux-plan-{Path(base).name}.txt")
    )
    if which in ("live", "both", "all") and not plan.exists():
        _plan(base, plan)
    jar = tflux.spark.build_jar()
    jars = str(_jvm._spark_home() / "jars" / "*")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                *("javac", "--release", "17", "-nowarn", "-d", tmp),
                *("-cp", f"{jar}:{jars}", str(HERE / "JvmReaderCost.java")),
            ],
            check=True,
        )
        opts = shlex.split(os.environ.get("TFLUX_BENCH_JAVA_OPTS", ""))
        subprocess.run(
            [
                *("java", *opts, "-cp", f"{tmp}:{jar}:{jars}", "io.tflux.spark.JvmReaderCost"),
                *(os.path.join(base, "data", "log"), str(segments), warmup, str(rounds)),
                *(str(plan) if which in ("live", "both", "all") else "-", which),
            ],
            check=True,
        )


if __name__ == "__main__":
    main()
