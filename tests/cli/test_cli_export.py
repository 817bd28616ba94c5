"""``tflux export``: the log and the snapshot as Parquet; errors and exit codes those of every other
verb, pyarrow optional (issue 15, defect 1).

Driven as a user drives it: a subprocess, its output and exit code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tflux
from _cli_support import ROOT, run, run_cli, small_store

# --- tflux export ----------------------------------------------------------------------------


def test_export_writes_the_log_and_the_snapshot_as_parquet(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(3, b"a"), (1, b"b")])
        store.snapshot()  # snapshot holds a and b
        store.enqueue("jobs", 2, b"c")
        store.ack(store.dequeue("jobs", timeout=0))  # removes b (key 1)
    result = run_cli("export", base, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    log = pq.read_table(tmp_path / "out" / "log.parquet").to_pylist()
    # After the snapshot the log was compacted only up to the snapshot: the rows that remain
    # after it are exactly the add of c and the remove of b (record id 2).
    tail = [(r["kind"], r["queue"], r["key"], r["record_id"], r["message"]) for r in log][-2:]
    assert tail == [("add_record", "jobs", 2, None, b"c"), ("remove_record", "jobs", None, 2, None)]
    snap = pq.read_table(tmp_path / "out" / "snapshot.parquet").to_pylist()
    assert sorted((r["queue"], r["record_id"], r["key"], r["message"]) for r in snap) == [
        ("jobs", 1, 3, b"a"),
        ("jobs", 2, 1, b"b"),
    ]
    assert "log rows" in result.stdout and "snapshot rows" in result.stdout


def test_export_writes_every_task_queue_vector_with_its_columns(tmp_path):
    # Spec section 12's deltas (the golden vectors) in log.parquet: kind, due, kept_ids, rules.
    import json

    from _task_vectors import column_rows

    pq = pytest.importorskip("pyarrow.parquet")
    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
    with tflux.Log.open(base / "data" / "log") as log:
        first = log.last_index + 1
        log.append_many(1, [data for data, _ in column_rows()])
    result = run_cli("export", base, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    table = pq.read_table(tmp_path / "out" / "log.parquet")
    assert table.schema.field("kept_ids").type.value_type == "int64"
    columns = ["kind", "queue", "key", "record_id", "message", "due", "kept_ids", "rules"]
    rows = [r for r in table.to_pylist() if r["lsn"] >= first]
    for row, (_, want) in zip(rows, column_rows(), strict=True):
        got = {c: row[c] for c in columns}
        got["rules"] = None if got["rules"] is None else json.loads(got["rules"])
        assert got == {**dict.fromkeys(columns), **want}


def test_export_never_writes_through_a_planted_symlink(tmp_path):
    """Issue 30, item 11: OUT/.log.parquet.tmp was opened by name, so a symlink planted there
    overwrote a file outside OUT; a symlink at the final name is replaced, not written through."""
    pq = pytest.importorskip("pyarrow.parquet")
    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
        store.enqueue("jobs", 1, b"a")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"not yours")
    (out / ".log.parquet.tmp").symlink_to(victim)
    (out / "snapshot.parquet").symlink_to(victim)
    refused = run_cli("export", base, out)  # an existing OUT file: only with --force
    assert refused.returncode == 2 and "--force" in refused.stderr
    result = run_cli("export", base, out, "--force")
    assert result.returncode == 0, result.stderr
    assert victim.read_bytes() == b"not yours"
    assert not (out / "snapshot.parquet").is_symlink()
    assert len(pq.read_table(out / "log.parquet")) == 2


def test_export_of_a_corrupt_log_names_the_file_and_exits_1(tmp_path):
    pytest.importorskip("pyarrow.parquet")
    log_dir = tmp_path / "base" / "data" / "log"
    with tflux.Log.open(log_dir, sync="never", soft_limit=64, hard_limit=64) as log:
        for i in range(6):
            log.append(1, b"D\x01" + bytes([ord("a") + i]))
            log.commit(log.last_index)
        first = log.segments[0].path
    raw = bytearray(Path(first).read_bytes())
    raw[8 + 16] ^= 0x01  # a data byte of the first record of a sealed segment
    Path(first).write_bytes(raw)
    result = run_cli("export", tmp_path / "base", tmp_path / "out")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert Path(first).name in result.stderr


# ---------------------------------------------------------------------------------------------
# defect 1: export's errors and exit codes are those of every other verb; pyarrow is optional


def _bad_paths(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_bytes(b"not a directory")
    random_log = tmp_path / "random" / "data" / "log"
    random_log.mkdir(parents=True)
    (random_log / ("0" * 19 + ".log")).write_bytes(os.urandom(64))
    return {
        "missing": tmp_path / "missing",
        "empty": tmp_path / "empty",
        "file": tmp_path / "a_file",
        "random": tmp_path / "random",
    }


@pytest.mark.parametrize("which", ["missing", "empty", "file", "random"])
def test_export_fails_like_verify_and_dump_on_bad_paths(tmp_path, which):
    path = _bad_paths(tmp_path)[which]
    results = {verb: run(verb, path) for verb in ("verify", "dump")}
    results["export"] = run("export", path, tmp_path / "out")
    codes = {verb: r.returncode for verb, r in results.items()}
    assert len(set(codes.values())) == 1, codes
    assert codes["export"] != 0
    line = results["export"].stderr.splitlines()[-1]
    assert line.startswith("error:")
    assert str(path.name) in line
    assert not (tmp_path / "out" / "log.parquet").exists()
    # No Rust type names leak into messages.
    assert "BadMarker" not in line and "Error(" not in line


def test_export_without_pyarrow_says_which_extra_to_install(tmp_path):
    blocker = tmp_path / "no_pyarrow"
    blocker.mkdir()
    (blocker / "pyarrow.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pyarrow'\", name='pyarrow')\n"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    base = small_store(tmp_path / "base")
    result = run("export", base, tmp_path / "out", env=env)
    assert result.returncode == 2  # a usage problem, not "corrupt data"
    (line,) = result.stderr.splitlines()
    assert line.startswith("error:") and "pyarrow" in line and "tflux[parquet]" in line
    # A path that does not exist is reported as such first, as by every other verb.
    missing = run("export", tmp_path / "missing", tmp_path / "out", env=env)
    assert missing.returncode == 2
    assert "no such directory" in missing.stderr


@pytest.mark.parametrize("missing", ["pyarrow", "pyspark"])
def test_arrow_views_and_spark_without_their_extra_say_which_to_install(tmp_path, missing):
    """Issue 30, item 23: ``to_arrow()`` and ``tflux.spark.register`` raised a bare import
    error without pyarrow or pyspark; they say which extra to install, as ``export`` does."""
    code = (
        "import sys, tflux, tflux.spark\n"
        f"sys.modules[{missing!r}] = None  # as if not installed\n"
        "log = tflux.Log.open(sys.argv[1])\n"
        "log.append(1, b'x')\n"
        "try:\n"
        "    log.read_batch(0, 1).to_arrow() if sys.argv[2] == 'pyarrow' "
        "else tflux.spark.register(None)\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "log"), missing],
        capture_output=True,
        text=True,
        timeout=120,
    )
    extra = "tflux[arrow]" if missing == "pyarrow" else "tflux[spark]"
    assert missing in done.stdout and extra in done.stdout, (done.stdout, done.stderr)


def test_the_parquet_extra_installs_pyarrow_alone():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for name in ("parquet", "arrow"):
        names = [re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0] for req in extras[name]]
        assert names == ["pyarrow"], extras[name]


def test_export_writes_what_the_store_holds(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    base = small_store(tmp_path / "base", adds=20)
    result = run("export", base, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    log = pq.read_table(tmp_path / "out" / "log.parquet")
    snap = pq.read_table(tmp_path / "out" / "snapshot.parquet")
    assert log.column("message").to_pylist()[-1] == b"after the snapshot"
    assert log.num_rows == 22  # CreateQueue, 20 adds, then the enqueue after the snapshot
    assert snap.num_rows == 20


def test_export_terms_are_int64_in_the_log_and_the_snapshot(tmp_path):
    """Issue 43, defect 22: ``log.parquet`` stored ``term`` as int32 while ``snapshot.parquet``'s
    ``last_term`` is int64; both are int64 now (docs/format.md, "Parquet export")."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.enqueue("", 1, b"a")
        store.snapshot()
        store.enqueue("", 2, b"b")
    for raw in ([], ["--raw"]):
        out = tmp_path / f"out{len(raw)}"
        result = run_cli("export", base, out, *raw)
        assert result.returncode == 0, result.stderr
        log = pq.read_table(out / "log.parquet")
        snap = pq.read_table(out / "snapshot.parquet")
        assert log.schema.field("term").type == pa.int64()
        assert snap.schema.field("last_term").type == pa.int64()
        assert log.column("term").to_pylist()[-1] == snap.column("last_term").to_pylist()[0]
