"""Issue 43 leftover: an automatic snapshot that fails after a roll-over refuses later writes
(the write that rolled over stands). Before, a passing cause (a full disk that was cleaned, no
descriptor left for a moment) wedged the store until it was reopened; now each write at least
a second after the failure tries the snapshot again, and writes resume once it is written.
The refusal names the snapshot, its file and errno, and says how it ends.

The failure is injected as in ``test_disk_full.py``: ``RLIMIT_FSIZE`` in a child process (which
ignores SIGXFSZ, so a write past the limit fails with EFBIG); only the soft limit is lowered,
so the child can lift it again.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import tflux
from _cli_support import run_cli
from _reliability import child_env

SETTINGS = {
    "log_preallocate_segments": False,
    "log_file_soft_limit": 512,
    "log_file_hard_limit": 1024,
    "snapshot_creation_segments_threshold": 2,
}

CHILD = textwrap.dedent(
    r"""
    import json, logging, resource, signal, sys, time
    import tflux
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    base, limit, lift = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "lift"
    settings = json.loads(sys.argv[4])
    store = tflux.open(base, **settings)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

    def err(e):
        return {"type": type(e).__name__, "msg": str(e), "errno": getattr(e, "errno", None),
                "path": getattr(e, "path", None)}

    out = {"acked": [], "first_error": None}
    for i in range(100000):
        payload = b"r%06d-" % i + b"x" * 90
        try:
            out["acked"].append(store.enqueue("", 1, payload))
        except Exception as e:
            out["first_error"] = err(e)
            break
    try:  # within the pause: refused at once, with the same cause
        store.enqueue("", 1, b"at once")
        out["at_once"] = None
    except Exception as e:
        out["at_once"] = err(e)
    if lift:
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        time.sleep(1.2)
        try:
            out["acked"].append(store.enqueue("", 1, b"after the limit was lifted"))
            out["after"] = "ok"
        except Exception as e:
            out["after"] = err(e)
    store.close()
    print(json.dumps(out))
    """
)


def run_child(base: Path, lift: bool) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(base), "3000", "lift" if lift else "keep",
         json.dumps(SETTINGS)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def check_refusal(out: dict, base: Path) -> None:
    first = out["first_error"]
    assert first is not None, "the snapshot never failed"
    assert first["type"] == "TfluxIOError", first
    assert first["errno"] == errno.EFBIG, first
    # The file that could not be written (the snapshot's temp file) and how the refusal ends.
    assert first["path"] and first["path"].startswith(str(base / "data")), first
    assert "automatic snapshot" in first["msg"], first["msg"]
    assert "tries the snapshot again" in first["msg"], first["msg"]
    assert "reopen" in first["msg"], first["msg"]
    assert out["at_once"] is not None, "a write right after the failure was accepted"
    assert out["at_once"]["errno"] == errno.EFBIG, out["at_once"]


def test_writes_refused_after_a_failed_snapshot_resume_once_it_can_be_written(tmp_path):
    base = tmp_path / "base"
    out, stderr = run_child(base, lift=True)
    check_refusal(out, base)
    # Before: refused until reopened ("writes are refused after an earlier I/O error").
    assert out["after"] == "ok", out["after"]
    assert "snapshot after a roll-over failed" in stderr, stderr  # ERROR, once
    assert "resume" in stderr, stderr  # WARNING: the retry wrote it
    with tflux.open(base, **SETTINGS) as store:
        assert sorted(r.id for r in store.records("")) == sorted(out["acked"])
        assert store.restored_snapshot_index is not None


def test_verify_and_repair_accept_a_base_whose_automatic_snapshot_failed(tmp_path):
    base = tmp_path / "base"
    out, _ = run_child(base, lift=False)
    check_refusal(out, base)
    # The old snapshot (none here) and the whole log: a healthy base, nothing to cut.
    verified = run_cli("verify", base, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    repaired = run_cli("repair", base, "--yes", "--json")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    with tflux.open(base, **SETTINGS) as store:
        assert sorted(r.id for r in store.records("")) == sorted(out["acked"])
        store.enqueue("", 0, b"after reopening")
