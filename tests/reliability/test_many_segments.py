"""Issue 30, item 9: one file descriptor per segment. Under the usual soft limit of 1,024 open
files a log of 1,500 segments could not be opened (writable, read-only, by ``verify``) and a
channel with a backlog of about 1,000 segments stopped sending. Sealed segments now hold a
descriptor only within a budget (a quarter of the soft limit); past it they are read through
their maps. Each scenario runs in a child whose soft limit is lowered to 64 (a budget of 16)
over logs of 300 segments."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import tflux
from _reliability import child_env

SEGMENTS = 300
LIMIT = 64

CHILD = textwrap.dedent(
    r"""
    import json, resource, sys
    import tflux
    from tflux.cli import cli
    from click.testing import CliRunner

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[3]), hard))
    what, path = sys.argv[1], sys.argv[2]
    out = {}
    if what == "log":
        for readonly in (True, False):
            with tflux.Log.open(path, readonly=readonly) as log:
                out[f"entries readonly={readonly}"] = [e.data.hex() for e in log.entries()]
        with tflux.Log.open(path) as log:
            # Reads at random across every segment, then appends past a roll-over.
            out["random"] = [log.read(lsn, max_bytes=0)[0].data.hex() for lsn in (5, 250, 0, 299)]
            last = log.append(1, b"more" * 2000)
            log.commit(last)
            out["appended"] = log.last_index
        out["verify"] = tflux.verify(path).ok
    elif what == "store":
        with tflux.open(path) as store:
            out["count"] = store.count("q")
            store.enqueue("q", 1, b"after")
            out["first"] = bytes(store.dequeue("q", timeout=0).payload).hex()
        out["cli verify"] = CliRunner().invoke(cli, ["verify", path]).exit_code
    elif what == "channel":
        with tflux.Channel.open(path, soft_limit=4096, preallocate=False) as ch:
            sender = ch.sender()
            for i in range(SEGMENTS := int(sys.argv[4])):
                sender.send(bytes([i % 251]) * 3000)  # about one segment each
            receiver = ch.receiver("slow")
            got = receiver.recv_many(5, timeout=0)
            out["received"] = [got.first_lsn + i for i in range(len(got))]
            out["payload"] = got[4].data.hex()
            out["next_lsn"] = ch.next_lsn
    print(json.dumps(out))
    """
)


def run(what: str, path: Path, *extra: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, what, str(path), str(LIMIT), *extra],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def big_log(path: Path) -> list[str]:
    want = []
    with tflux.Log.open(path, soft_limit=4096, preallocate=False, sync="never") as log:
        for i in range(SEGMENTS):
            data = bytes([i % 251]) * 5000  # one record per segment
            log.commit(log.append(1, data))
            want.append(data.hex())
    assert len(list(path.iterdir())) >= SEGMENTS
    return want


def test_a_log_of_many_segments_opens_reads_appends_and_verifies_under_a_low_fd_limit(tmp_path):
    log = tmp_path / "log"
    want = big_log(log)
    out = run("log", log)
    assert out["entries readonly=True"] == want
    assert out["entries readonly=False"] == want
    assert out["random"] == [want[5], want[250], want[0], want[299]]
    assert out["appended"] == SEGMENTS and out["verify"] is True


def test_a_store_of_many_segments_restores_and_verifies_under_a_low_fd_limit(tmp_path):
    base = tmp_path / "base"
    opts = dict(
        log_file_soft_limit=4096, log_sync_policy="never", snapshot_creation_segments_threshold=0
    )
    with tflux.open(base, **opts) as store:
        store.create_queue("q")
        for i in range(SEGMENTS):
            store.enqueue("q", i, bytes([i % 251]) * 5000)
    assert len(list((base / "data" / "log").iterdir())) >= SEGMENTS
    out = run("store", base)
    assert out["count"] == SEGMENTS
    assert out["first"] == (bytes([0]) * 5000).hex()
    assert out["cli verify"] == 0


def test_a_channel_with_a_backlog_of_many_segments_keeps_sending_under_a_low_fd_limit(tmp_path):
    out = run("channel", tmp_path / "ch", str(SEGMENTS))
    assert out["next_lsn"] == SEGMENTS
    assert out["received"] == [0, 1, 2, 3, 4]
    assert out["payload"] == (bytes([4]) * 3000).hex()
