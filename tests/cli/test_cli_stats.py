"""``tflux stats`` and the live view of ``replay``/``inspect`` (issue 44): with an owner in
another process, the figures are the owner's (the records it holds in flight are in flight,
not ready); without one, the files are read read-only and the output says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import tflux
from _cli_support import run_cli
from _owner import owner_process, readline

# The owner's setup: 3 records to "jobs", one of them taken (in flight).
OWNED = """
store.create_queue("jobs", exist_ok=True)
store.enqueue_many("jobs", [(1, b"a"), (2, b"b"), (3, b"c")])
assert store.dequeue("jobs", timeout=0).payload == b"a"
"""


@pytest.fixture
def owned(tmp_path):
    """A base whose owner (another process) holds 2 ready records and 1 in flight."""
    base = tmp_path / "base"
    with owner_process(base, OWNED, 'log_sync_policy="never"') as proc:
        yield base, proc.pid


def _jobs(doc: dict) -> dict:
    return next(q for q in doc["queues"] if q["name"] == "jobs")


def test_stats_asks_the_owner_for_its_live_figures(owned):
    base, pid = owned
    result = run_cli("stats", base, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["owner"] == {"pid": pid, "answered": True, "error": None}
    jobs = _jobs(doc)
    assert (jobs["ready"], jobs["in_flight"], jobs["delayed"], jobs["enqueued"]) == (2, 1, 0, 3)
    assert set(jobs) == {"name", *tflux.QueueStats._fields}
    text = run_cli("stats", base, "--queue", "jobs")
    assert text.returncode == 0, text.stderr
    assert f"process {pid} owns the base" in text.stdout
    with tflux.open(base) as client:  # the verb's client left: this one is a client too
        assert not client.is_owner and client.owner_pid == pid


def test_replay_and_inspect_of_a_live_base_do_not_count_in_flight_records_as_ready(owned):
    base, pid = owned
    result = run_cli("replay", base, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["owner"]["pid"] == pid
    jobs = _jobs(doc)
    assert (jobs["count"], jobs["in_flight"]) == (2, 1)
    text = run_cli("replay", base)
    assert f"process {pid} owns the base and holds its records in flight" in text.stdout
    inspected = run_cli("inspect", base, "--json")
    assert json.loads(inspected.stdout)["owner"]["pid"] == pid
    assert f"process {pid} owns the base" in run_cli("inspect", base).stdout


def test_replay_of_a_live_base_counts_a_delayed_record_that_came_due_as_ready(tmp_path):
    # Regression: the owner's list of queues (what replay asks it for) left a delayed record
    # that came due out of the ready count until a read of that one queue made it ready.
    base = tmp_path / "base"
    setup = 'store.create_queue("jobs")\nstore.enqueue("jobs", 1, b"soon", delay=0.3)'
    with owner_process(base, setup, 'log_sync_policy="never"'):
        time.sleep(0.5)
        result = run_cli("replay", base, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["owner"]["answered"] is True
    assert (_jobs(doc)["count"], _jobs(doc)["in_flight"]) == (1, 0)


def test_without_an_owner_stats_reads_the_files_and_says_so(tmp_path):
    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(1, b"a"), (2, b"b")])
        store.enqueue("jobs", 3, b"later", delay=600)
        store.dequeue("jobs", timeout=0)  # in flight when the owner closes: ready again
    result = run_cli("stats", base, "--json", "--queue", "jobs")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["owner"] is None
    [jobs] = doc["queues"]
    assert (jobs["name"], jobs["ready"], jobs["delayed"], jobs["in_flight"]) == ("jobs", 2, 1, 0)
    text = run_cli("stats", base)
    assert "no owner; read from the files (read-only)" in text.stdout
    assert json.loads(run_cli("replay", base, "--json").stdout)["owner"] is None
    with tflux.open(base) as store:  # stats took no lock and left no owner behind
        assert store.is_owner


def test_stats_json_of_an_unknown_queue_is_one_error_object(tmp_path):
    base = tmp_path / "base"
    tflux.open(base).close()
    result = run_cli("stats", base, "--queue", "nope", "--json")
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and "nope" in doc["error"]


def test_stats_watch_repeats_until_ctrl_c_and_follows_a_serve_owner(tmp_path):
    base = tmp_path / "base"
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    serve = subprocess.Popen(
        [sys.executable, "-m", "tflux.cli", "serve", str(base), "--queue", "jobs", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )
    watch = None
    try:
        assert json.loads(readline(serve))["pid"] == serve.pid
        with tflux.open(base) as client:
            client.enqueue_many("jobs", [(1, b"a"), (2, b"b")])
            held = client.dequeue("jobs", timeout=5)  # this client holds it in flight
            args = ["stats", str(base), "--json", "--queue", "jobs", "--watch", "0.05"]
            watch = subprocess.Popen(
                [sys.executable, "-m", "tflux.cli", *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=environ,
            )
            first, second = json.loads(readline(watch)), json.loads(readline(watch))
            for doc in (first, second):
                assert doc["owner"]["pid"] == serve.pid
                [jobs] = doc["queues"]
                assert (jobs["ready"], jobs["in_flight"]) == (1, 1)
            client.ack(held)
            watch.send_signal(signal.SIGINT)
            _, stderr = watch.communicate(timeout=60)
            assert watch.returncode == 0, stderr
            assert "Traceback" not in stderr
    finally:
        if watch is not None and watch.poll() is None:
            watch.kill()
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=60)
    assert serve.returncode == 0


def test_owner_holds_is_the_cores_answer_and_the_cli_asks_it(owned, tmp_path):
    base, _ = owned
    assert tflux.owner_holds(base), "another process owns it"
    free = tmp_path / "free"
    tflux.open(free).close()
    assert not tflux.owner_holds(free)
    with tflux.open(free) as store:
        assert store.is_owner and tflux.owner_holds(free), "this process owns it"
    assert not tflux.owner_holds(free)
    missing = tmp_path / "missing"
    assert not tflux.owner_holds(missing) and not missing.exists()
    import tflux.cli.stats as stats_verb  # the verb restates no lock rule of its own

    assert stats_verb.owner_holds is tflux.owner_holds
