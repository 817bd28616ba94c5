"""Every Python example of the README runs as written (issue 30, item 19), twice in the same
directory (a user runs an example again): each in a child process whose working directory is a
fresh temporary one, so its relative paths ("path/to/base", "events") land there. The Spark
example has its own test on a real cluster (tests/spark/test_spark_cluster.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tflux

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"^```python\n(.*?)^```$", (ROOT / "README.md").read_text(), re.M | re.S)
EXAMPLES = [code for code in BLOCKS if "pyspark" not in code]


def test_the_readme_has_its_examples():
    assert len(EXAMPLES) >= 4 and len(BLOCKS) == len(EXAMPLES) + 1


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"block{k}" for k in range(len(EXAMPLES))])
def test_a_readme_example_runs_as_written_and_again(tmp_path, code):
    for run in ("first", "second"):
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{run} run:\n{code}\n{done.stderr[-2000:]}"


def test_create_queue_exist_ok_takes_the_same_queue_and_refuses_another(tmp_path):
    with tflux.open(tmp_path) as store:
        store.create_queue("jobs", max_size=10)
        store.create_queue("jobs", max_size=10, exist_ok=True)  # same settings: nothing written
        with pytest.raises(tflux.QueueExistsError):
            store.create_queue("jobs", exist_ok=True)  # other settings
        with pytest.raises(tflux.QueueExistsError):
            store.create_queue("jobs", max_size=10)
        assert store.log_bounds[1] == 0  # one CreateQueue logged
