"""``tflux serve``: the owner in a process of its own (issue 29). Each test runs the verb as a
user would, ``python -m tflux.cli serve``, and checks the directory through ``tflux.open`` in
this process: a client while it serves, the owner again after it stopped.
"""

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
from _owner import readline


def _serve(base, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    environ.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "tflux.cli", "serve", str(base), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )


def _first_line(proc: subprocess.Popen) -> str:
    """The line the verb prints once it serves (fails the test if it never comes)."""
    return readline(proc)


def _stop(proc: subprocess.Popen, signum: int = signal.SIGTERM) -> tuple[int, str, str]:
    proc.send_signal(signum)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert "Traceback" not in stderr, stderr
    return proc.returncode, stdout, stderr


def test_serve_owns_the_base_and_every_open_beside_it_is_its_client(tmp_path):
    base = tmp_path / "base"
    proc = _serve(base, "--queue", "jobs", "--json")
    try:
        line = json.loads(_first_line(proc))
        assert line["pid"] == proc.pid
        assert "jobs" in line["queues"]
        assert line["dialect"] == "spec"
        with tflux.open(base) as client:
            assert not client.is_owner
            assert client.owner_pid == proc.pid
            client.enqueue_many("jobs", [(i, b"r%d" % i) for i in range(100)])
            for _ in range(40):
                client.ack(client.dequeue("jobs", timeout=5))
            assert client.count("jobs") == 60
    finally:
        code, stdout, stderr = _stop(proc)
    assert code == 0, stderr
    assert stdout == ""  # --json: the one line only
    with tflux.open(base) as store:  # the directory is free again: this open owns it
        assert store.is_owner
        assert store.count("jobs") == 60


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_serve_stops_cleanly_on_ctrl_c_and_on_hangup(tmp_path, signum):
    base = tmp_path / "base"
    proc = _serve(base)
    line = _first_line(proc)
    assert line.startswith(f"serving {base}")
    assert f"as process {proc.pid}" in line
    code, stdout, stderr = _stop(proc, signum)
    assert code == 0, stderr
    assert f"stopped by {signal.Signals(signum).name}" in stdout
    with tflux.open(base) as store:
        assert store.is_owner


def test_a_second_serve_of_a_served_base_exits_2_and_names_the_owner(tmp_path):
    base = tmp_path / "base"
    proc = _serve(base, "--queue", "jobs")
    try:
        _first_line(proc)
        second = run_cli("serve", base, "--queue", "other")
        assert second.returncode == 2
        assert f"already served by process {proc.pid}" in second.stderr
        with tflux.open(base) as client:  # the refused serve created nothing
            assert [q.name for q in client.queues()] == ["", "jobs"]
    finally:
        code, _, stderr = _stop(proc)
    assert code == 0, stderr


def test_records_a_client_holds_when_serve_stops_go_back_to_their_queue(tmp_path):
    base = tmp_path / "base"
    proc = _serve(base, "--queue", "jobs", env={"TFLUX_OWNER_DRAIN": "0.5"})
    try:
        _first_line(proc)
        client = tflux.open(base)
        client.enqueue("jobs", 1, b"held")
        held = client.dequeue("jobs", timeout=5)
        assert held is not None
    finally:
        started = time.monotonic()
        code, _, stderr = _stop(proc)
    assert code == 0, stderr
    assert time.monotonic() - started < 30  # the drain is bounded, not the client's goodwill
    client.close()
    with tflux.open(base) as store:
        assert store.count("jobs") == 1  # delivered again, as after a crash


def test_a_client_takes_over_when_serve_is_killed(tmp_path):
    """kill -9 of the serving process: no acknowledged write is lost, and a client becomes the
    owner by itself on its next call (retrying the one that raced the death)."""
    base = tmp_path / "base"
    proc = _serve(base, "--queue", "jobs")
    _first_line(proc)
    with tflux.open(base) as client:
        client.enqueue_many("jobs", [(i, b"before") for i in range(10)])
        proc.kill()
        proc.communicate(timeout=60)
        for _attempt in range(50):
            try:
                client.enqueue("jobs", 99, b"after")
                break
            except tflux.OwnerLostError:
                time.sleep(0.05)
        else:
            pytest.fail("no client took over from the killed owner")
        assert client.is_owner
        assert client.count("jobs") == 11


def test_serve_creates_only_the_last_component_of_base_unless_told(tmp_path):
    """Issue 43, defect 18: a typo in BASE made a whole new path (and queue); as mkdir does,
    only BASE itself is created, and --create makes the missing parents too (as mkdir -p)."""
    base = tmp_path / "nonexistent" / "x" / "y"
    result = run_cli("serve", base)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--create" in result.stderr + result.stdout
    assert not (tmp_path / "nonexistent").exists()
    proc = _serve(base, "--create", "--json")
    try:
        assert json.loads(_first_line(proc))["base"] == str(base)
    finally:
        code, _, stderr = _stop(proc)
    assert code == 0, stderr
    assert (base / "data" / "log").is_dir()
