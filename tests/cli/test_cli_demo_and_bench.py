"""``tflux demo`` and ``tflux bench``: the verbs that make their own data.

Driven as a user drives it: a subprocess, its output and exit code.

The demo writes a base directory through the store that restores and verifies, names only what
exists and suggests commands that print something (issue 15, defect 10).
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest
import tflux
from _cli_support import (
    json_lines,
    known_records,
    parse_delta,
    run,
    run_cli,
    segment_files,
    snapshot_of,
    write_log,
)

# --------------------------------------------------------------------------------------------
# demo


def demo_counts(stdout: str) -> dict[str, int]:
    """The numbers of deltas the demo says it wrote, by kind."""
    counts = {}
    for kind in ("CreateQueue", "AddRecord", "RemoveRecord"):
        match = re.search(rf"([\d,]+) {kind}", stdout)
        assert match, stdout
        counts[kind] = int(match.group(1).replace(",", ""))
    return counts


def test_demo_writes_a_base_directory_through_the_store_that_restores_and_verifies(tmp_path):
    base = tmp_path / "sample"
    result = run_cli("demo", "--records", 20000, "--dir", base)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "20,000" in result.stdout
    assert str(base) in result.stdout
    assert "LogSyncPolicy=never" in result.stdout
    assert "OK" in result.stdout and "error" not in result.stdout

    # What the demo says it wrote is what the directory holds, checked through other verbs.
    counts = demo_counts(result.stdout)
    assert sum(counts.values()) == 20000
    assert counts["CreateQueue"] == 3 and counts["RemoveRecord"] > 0
    replayed = run_cli("replay", base, "--json")
    assert replayed.returncode == 0, replayed.stderr
    queues = {q["name"]: q for q in json.loads(replayed.stdout)["queues"]}
    assert set(queues) == {"", "emails", "reports", "thumbnails"}
    assert queues["thumbnails"]["implementation"] == "array"
    assert queues["thumbnails"]["key_range"] == [0, 99]
    assert queues["emails"]["implementation"] == "heap"
    assert sum(q["last_id"] for q in queues.values()) == counts["AddRecord"]
    assert sum(q["count"] for q in queues.values()) == counts["AddRecord"] - counts["RemoveRecord"]

    # A manual snapshot, then an automatic one: the file holds the later one, the log after it.
    match = re.search(r"manual at LSN ([\d,]+); 1 automatic one at LSN ([\d,]+)", result.stdout)
    assert match, result.stdout
    manual, automatic = (int(g.replace(",", "")) for g in match.groups())
    snapshot = tflux.read_snapshot(base / "data" / "tflux.snapshot")
    assert manual < automatic == snapshot.last_index < 19999
    segments = segment_files(base / "data" / "log")
    assert len(segments) >= 3
    assert int(segments[0].name[:19]) <= snapshot.last_index + 1
    for segment in segments:
        assert segment.name in result.stdout

    rows = json_lines(run_cli("dump", base, "--raw", "--json").stdout)
    assert rows[-1]["lsn"] == 19999  # exactly --records deltas
    assert [row["lsn"] for row in rows] == list(range(rows[0]["lsn"], 20000))
    kinds = {parse_delta(bytes.fromhex(row["data"]))["kind"] for row in rows}
    assert kinds == {"add_record", "remove_record"}
    assert run_cli("verify", base, "--replay").returncode == 0


def test_demo_deletes_its_temporary_directory_unless_kept(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {"TMPDIR": str(scratch)}

    assert run_cli("demo", "--records", 3000, env=env).returncode == 0
    assert list(scratch.iterdir()) == []

    kept = run_cli("demo", "--records", 3000, "--keep", env=env)
    assert kept.returncode == 0
    (left,) = scratch.iterdir()
    assert str(left) in kept.stdout
    assert run_cli("verify", left, "--replay").returncode == 0


def test_demo_refuses_a_directory_that_already_holds_a_log(tmp_path):
    write_log(tmp_path, known_records())
    before = snapshot_of(tmp_path)
    result = run_cli("demo", "--records", 100, "--dir", tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error:")
    assert snapshot_of(tmp_path) == before


def test_a_demo_dir_with_a_missing_parent_is_refused_unless_create_as_the_error_says(tmp_path):
    # Regression: the error told the user to pass --create, which demo did not have.
    base = tmp_path / "missing" / "demo"
    refused = run_cli("demo", "--records", 100, "--dir", base)
    assert refused.returncode == 2
    assert "--create" in refused.stderr
    assert not (tmp_path / "missing").exists()
    made = run_cli("demo", "--records", 100, "--dir", base, "--create")
    assert made.returncode == 0, made.stderr
    assert Path(tflux.Layout(base).log).is_dir()


def test_the_demos_settings_file_is_as_private_as_every_other_file_of_its_base(tmp_path):
    # Regression: the demo wrote its settings file 0644 (the umask's default) inside a 0700
    # base, where every file tflux makes is its owner's only.
    base = tmp_path / "demo"
    result = run_cli("demo", "--records", 100, "--dir", base)
    assert result.returncode == 0, result.stderr
    settings = Path(tflux.Layout(base).settings)
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    shared = [str(p) for p in base.rglob("*") if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert shared == []


# --------------------------------------------------------------------------------------------
# bench


def test_bench_tiny_prints_the_three_headline_ratios(tmp_path):
    result = run_cli("bench", "--size", "tiny", "--dir", tmp_path)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for headline in ("verify-scan vs crc32fast", "restore vs pure Python", "durable enqueue vs"):
        line = next(line for line in text.splitlines() if line.startswith(headline))
        assert re.search(r"\d+(\.\d+)?x", line), line
    try:
        import persistqueue  # noqa: F401
    except ImportError:
        assert "durable enqueue vs raw fdatasync" in text and "not installed" in text
    else:
        assert "durable enqueue vs persist-queue" in text
    assert list(tmp_path.iterdir()) == []  # its temporary data is gone


def test_bench_json_has_a_ratio_and_both_rates_per_headline(tmp_path):
    result = run_cli("bench", "--size", "tiny", "--json", "--dir", tmp_path)
    assert result.returncode == 0, result.stderr
    ratios = json.loads(result.stdout)["ratios"]
    assert [r["name"].split(" vs ")[0] for r in ratios] == [
        "verify-scan",
        "restore",
        "durable enqueue",
    ]
    for r in ratios:
        assert r["tflux_rate"] > 0 and r["baseline_rate"] > 0
        assert r["ratio"] == pytest.approx(r["tflux_rate"] / r["baseline_rate"])


def test_bench_full_points_to_make_bench():
    result = run_cli("bench", "--full")
    assert result.returncode == 0
    assert "make bench" in result.stdout and "docs/benchmarks.md" in result.stdout


# ---------------------------------------------------------------------------------------------
# defect 10: the demo names only what exists and suggests commands that print something


def test_the_demo_names_its_temporary_directory_once_and_says_it_is_deleted():
    result = run("demo", "--records", "3000")
    assert result.returncode == 0, result.stderr
    (where,) = set(re.findall(r"\S*tflux-demo-[^\s/]+", result.stdout))
    lines = [line for line in result.stdout.splitlines() if where in line]
    assert len(lines) == 1 and "deleted" in lines[0], lines
    assert not Path(where).exists()


def test_the_demo_claims_no_check_of_a_metadata_file_it_did_not_write(tmp_path):
    base = tmp_path / "sample"
    result = run("demo", "--records", "3000", "--dir", base)
    assert result.returncode == 0, result.stderr
    assert not (base / "data" / "tflux.metadata").exists()
    (verify_line,) = [line for line in result.stdout.splitlines() if line.startswith("verify")]
    assert "metadata," not in verify_line and "metadata checksum" not in verify_line


def test_the_commands_the_demo_suggests_print_something(tmp_path):
    base = tmp_path / "sample"
    result = run("demo", "--records", "3000", "--dir", base)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("try:")]
    commands = [c.split() for c in line.removeprefix("try:").split("|")]
    assert {c[1] for c in commands} == {"inspect", "replay", "dump"}
    for command in commands:
        assert command[0] == "tflux"
        done = run(*command[1:])
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.strip(), command
    dump = next(c for c in commands if c[1] == "dump")
    assert len(run(*dump[1:]).stdout.splitlines()) == 10
