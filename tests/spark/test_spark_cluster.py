"""The README's Spark example on a real standalone cluster: a master and a worker started from the
pyspark package on 127.0.0.1 (the worker in its own working directory), the driver in another
process, the JVM reader's jar shipped through ``spark.jars``. Both daemons are stopped by PID.
Skipped where Java is missing. It takes about a minute (two daemons, a driver and executors) and
runs in the default suite, so CI starts a real cluster on every run.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import _needs

pyspark = _needs.pyspark()

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readme_spark_example() -> tuple[str, str]:
    """The README's Spark example and what it says the example prints."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Spark") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    code = code[: code.index("```\n")]
    printed = section[section.index("```text\n") + len("```text\n") :]
    return code, printed[: printed.index("```\n")]


def wait_for_line(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {path}:\n{path.read_text(errors='replace')[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()  # the daemon's own PID (spark-class execs java)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def test_the_readme_spark_example_runs_on_a_standalone_cluster(tmp_path, spark_jar):
    env = dict(
        os.environ,
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    port = free_port()
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    dirs = {name: tmp_path / name for name in ("master", "worker", "work", "driver")}
    for d in dirs.values():
        d.mkdir()
    daemons = []
    try:
        master_log = dirs["master"] / "out.log"
        with open(master_log, "w") as out:
            master = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                cwd=dirs["master"], env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        daemons.append(master)
        wait_for_line(master_log, "I have been elected leader", master, 120)
        worker_log = dirs["worker"] / "out.log"
        with open(worker_log, "w") as out:
            worker = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                 "--host", "127.0.0.1", "--cores", "2", "--memory", "1g",
                 "--work-dir", str(dirs["work"]), "--webui-port", str(free_port())],
                cwd=dirs["worker"], env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        daemons.append(worker)
        wait_for_line(worker_log, "Successfully registered with master", worker, 120)

        code, printed = readme_spark_example()
        assert '.master("local[2]")' in code
        code = code.replace('.master("local[2]")', f'.master("spark://127.0.0.1:{port}")')
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=dirs["driver"], env=env,
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-5000:]
        assert result.stdout.split("\n") == printed.split("\n"), result.stdout
        # The executors ran in the worker's directory, and fetched the JVM reader's jar there.
        app_dirs = list(dirs["work"].glob("app-*"))
        assert app_dirs, list(dirs["work"].iterdir())
        if spark_jar:
            assert list(dirs["work"].rglob(Path(spark_jar).name))
    finally:
        for proc in reversed(daemons):
            stop(proc)
    assert all(p.poll() is not None for p in daemons)
