"""The ``tflux`` command line on a channel's directory: inspect (receivers and lag), dump, verify
and compress, also after collection.
"""

from __future__ import annotations

import os
import subprocess
import sys

import tflux
from _channel_support import RECEIVER_PROCESS, drain, run_py, small

# ----- command line -----


def test_inspect_shows_receivers_and_lag(tmp_path):
    import json

    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(30)])
        a, b = ch.receiver("alpha"), ch.receiver("beta")
        drain(a)
        a.ack(30)
        drain(b)
        b.ack(12)
    done = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "inspect", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    assert doc["receivers"] == [
        {"name": "alpha", "acked": 30, "lag": 0},
        {"name": "beta", "acked": 12, "lag": 18},
    ]
    text = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "inspect", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert "beta" in text.stdout and "18" in text.stdout


def test_dump_prints_a_channel_raw(tmp_path):
    import json

    with tflux.Channel.open(tmp_path) as ch:
        ch.sender().send_many([b"hello", b"world"])
    done = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "dump", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["data"] == b"hello".hex()


def test_verify_checks_a_collected_channel(tmp_path):
    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(200)])
        ch.sender().send(b"last")
        rx = ch.receiver("r")
        drain(rx)
        rx.ack(201)
        assert ch.collect() > 0
    done = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "verify", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_inspect_reads_a_collected_channel_as_healthy(tmp_path):
    # Regression: inspect checked a channel like a queue base, so a channel whose oldest segments
    # were collected was reported as "a gap between the snapshot and the log" and exited 1.
    import json

    with small(tmp_path) as ch:
        ch.sender().send_many([b"m%d" % i for i in range(200)])
        ch.sender().send(b"last")
        rx = ch.receiver("r")
        drain(rx)
        rx.ack(201)
        assert ch.collect() > 0
    done = subprocess.run(
        [sys.executable, "-m", "tflux.cli", "inspect", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["problems"] == []
    assert doc["receivers"] == [{"name": "r", "acked": 201, "lag": 0}]


def test_compress_sealed_channel_is_read_by_another_process(tmp_path):
    n = 300
    with small(tmp_path, compress_sealed="lz4", sync="never") as ch:
        tx = ch.sender()
        for i in range(n):
            tx.send(b"%06d" % i)
        assert list((tmp_path / "data/log").glob("*.log.z"))
        p = run_py(RECEIVER_PROCESS, str(tmp_path), "z", str(n))
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and f"done {n}" in out, (out, err)


def test_inspect_of_a_channel_shows_no_store_files_or_store_settings(tmp_path):
    """Issue 43 item 15: inspect on a channel said "metadata ...: unreadable (see below)" with
    nothing below and listed a store's settings, which a channel never reads."""
    import json

    with small(tmp_path) as ch:
        ch.sender().send_many([b"a", b"b"])
    run = [sys.executable, "-m", "tflux.cli", "inspect", str(tmp_path)]
    text = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "unreadable" not in text.stdout and "see below" not in text.stdout
    assert "LogSyncPolicy" not in text.stdout and "SnapshotCreation" not in text.stdout
    assert "channel" in text.stdout
    doc = json.loads(subprocess.run([*run, "--json"], capture_output=True, timeout=120).stdout)
    assert doc["kind"] == "channel" and doc["problems"] == []
    assert doc["settings"] is None and doc["metadata"] is None and doc["snapshot"] is None
