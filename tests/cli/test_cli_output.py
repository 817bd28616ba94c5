"""What the command line prints: error lines on stderr only, tables that never cut a number on a
narrow terminal, ``--json`` for verify, repair, demo, export and dump, and a reader that went
away (a closed pipe) ending the command with exit 0 (issue 15, defects 2, 8 and 9).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tflux
from _cli_support import run, run_on_terminal, small_store
from tflux._store import settings_for_reading

# ---------------------------------------------------------------------------------------------
# defect 8: error lines go to stderr


def test_verify_inspect_and_repair_print_error_lines_on_stderr_only(tmp_path):
    base = small_store(tmp_path)
    snapshot = base / "data" / "tflux.snapshot"
    raw = bytearray(snapshot.read_bytes())
    raw[20] ^= 1
    snapshot.write_bytes(bytes(raw))
    for args in (["verify", base], ["inspect", base], ["repair", base, "--yes"]):
        result = run(*args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert "error:" not in result.stdout, args
        assert any(
            line.startswith("error:") and "tflux.snapshot" in line
            for line in result.stderr.splitlines()
        ), args


# ---------------------------------------------------------------------------------------------
# defect 2: tables never cut numbers on a narrow terminal

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def tty_run(*args: str | Path, columns: int = 80) -> tuple[int, str]:
    """``python -m tflux ARGS`` with stdout on a pseudo-terminal ``columns`` wide (and
    ``COLUMNS`` set, as a shell does); returns the exit code and the text shown."""
    code, _, shown = run_on_terminal(*args, columns=columns, on="stdout")
    return code, ANSI.sub("", shown).replace("\r", "")


def numbers_in(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w,.])\d[\d,]*(?![\w,])", text))


def long_named_store(base: Path) -> list[tflux.QueueInfo]:
    with tflux.open(base, log_sync_policy="never") as store:
        for name in ("thumbnails_for_the_gallery", "emails_to_send_tomorrow"):
            store.create_queue(name, max_size=1_000_000, max_message_size=65_536)
            store.enqueue_many(name, [(i, b"x") for i in range(12_345)])
            for _ in range(3):
                store.dequeue(name, timeout=0)
        return store.queues()


@pytest.mark.parametrize("columns", [80, 60])
def test_replay_never_cuts_a_number_on_a_narrow_terminal(tmp_path, columns):
    queues = long_named_store(tmp_path / "base")
    code, text = tty_run("replay", tmp_path / "base", columns=columns)
    assert code == 0, text
    assert "\u2026" not in text  # rich's ellipsis: something was cut
    shown = numbers_in(text)
    for q in queues:
        # Back after the restore: in-flight records are ready again.
        assert f"{q.count + q.in_flight:,}" in shown, (q, text)
        assert f"{q.last_id:,}" in shown, (q, text)
    table = text[text.index("queue") :]
    assert all(len(line) <= columns for line in table.splitlines()), table


def test_the_demo_table_keeps_every_number_whole_at_80_columns(tmp_path):
    code, text = tty_run("demo", "--records", "20000", "--dir", tmp_path / "d", columns=80)
    assert code == 0, text
    assert "\u2026" not in text
    with tflux.open(tmp_path / "d", readonly=True) as store:
        queues = store.queues()
    shown = numbers_in(text)
    for q in queues:
        assert f"{q.last_id:,}" in shown, (q, text)
        assert f"{q.count:,}" in shown, (q, text)  # ready after restore


def test_inspect_and_verify_tables_fit_80_columns(tmp_path):
    long_named_store(tmp_path / "base")
    for args in (["inspect", tmp_path / "base"], ["verify", tmp_path / "base", "-v"]):
        code, text = tty_run(*args, columns=80)
        assert code == 0, text
        assert "\u2026" not in text, text


def test_at_60_columns_names_stay_whole_optional_columns_go_and_prose_wraps_at_spaces(tmp_path):
    """Issue 30, item 22: at 60 columns queue names were cut mid-word while optional columns
    stayed, a segment's file name was folded, and the terminal wrapped prose mid-number."""
    base = tmp_path / "base"
    queues = long_named_store(base)
    with tflux.open(base) as store:
        store.snapshot()
    code, text = tty_run("inspect", base, columns=60)
    assert code == 0, text
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines), text
    for q in queues:
        assert any(q.name in line for line in lines), (q.name, text)  # on one line, whole
    assert any("0000000000000000000.log" in line for line in lines), text
    assert "not shown at this width" in text
    # The prose lines' numbers (read at 200 columns, where nothing wraps) are whole at 60.
    _, wide = tty_run("inspect", base, columns=200)
    prose = [line for line in wide.splitlines() if line.startswith(("snapshot", "log "))]
    assert len(prose) == 2, wide
    assert numbers_in("\n".join(prose)) <= numbers_in(text), (prose, text)


def test_at_40_columns_settings_keep_key_and_value_together_and_segments_keep_first_lsn(
    tmp_path,
):
    """Issue 43, item 19: at 40 columns inspect's settings wrapped keys and values apart and
    the segment table dropped "first LSN"."""
    base = tmp_path / "base"
    with tflux.open(
        base,
        log_sync_policy="never",
        log_file_soft_limit=4096,
        log_file_hard_limit=8192,
        log_preallocate_segments=False,
        snapshot_creation_segments_threshold=0,
    ) as store:
        store.create_queue("q")
        for i in range(300):
            store.enqueue("q", i, b"m" * 40)
    segments = tflux.verify(base / "data" / "log").segments
    assert len(segments) > 2
    code, text = tty_run("inspect", base, columns=40)
    assert code == 0, text
    lines = text.splitlines()
    assert all(len(line) <= 40 for line in lines), text
    for key, value in settings_for_reading(base)[0].items():
        shown = json.dumps(value)
        if len(key) + len(shown) + 3 > 40:
            continue  # too long for one line: on the next one (DeadLetter's object)
        assert any(line.split()[:2] == [key, shown] for line in lines if line.strip()), (
            key,
            text,
        )
    for seg in segments:
        at = next(i for i, line in enumerate(lines) if line.strip() == seg.name)
        assert f"first LSN {seg.start_lsn:,}" in lines[at + 1], text
    assert "\u2026" not in text


# ---------------------------------------------------------------------------------------------
# defect 9: --json for verify, repair, demo, export; dump --json carries whole messages


def damaged_store(base: Path) -> tuple[Path, int]:
    """A store with several sealed segments, one bit flipped in the first record's data of the
    second segment; returns that segment and the byte offset of the bad record."""
    with tflux.open(
        base,
        log_sync_policy="never",
        log_file_soft_limit=4096,
        log_file_hard_limit=8192,
        log_preallocate_segments=False,
        snapshot_creation_segments_threshold=0,
    ) as store:
        store.create_queue("q")
        for i in range(200):
            store.enqueue("q", i, b"m" * 40)
    segments = sorted((base / "data" / "log").glob("*.log"))
    assert len(segments) > 2
    victim = segments[1]
    raw = bytearray(victim.read_bytes())
    raw[8 + 16 + 2] ^= 1  # the first record's data (spec section 3: header 8, record header 16)
    victim.write_bytes(bytes(raw))
    return victim, 8


def test_verify_json_reports_ok_and_problems_with_file_and_offset(tmp_path):
    clean = small_store(tmp_path / "clean")
    result = run("verify", clean, "--json")
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["replayed"] == 1  # the one enqueue after the snapshot
    assert sum(q["count"] for q in report["queues"]) == 21

    victim, offset = damaged_store(tmp_path / "bad")
    result = run("verify", tmp_path / "bad", "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    fatal = [p for p in report["problems"] if p["fatal"]]
    assert fatal and fatal[0]["path"].endswith(victim.name) and fatal[0]["offset"] == offset


def test_repair_json_is_a_dry_run_without_yes_and_reports_the_repair_with_it(tmp_path):
    victim, offset = damaged_store(tmp_path / "bad")
    before = sorted(p.name for p in victim.parent.iterdir())
    dry = run("repair", tmp_path / "bad", "--json")
    assert dry.returncode == 1
    plan = json.loads(dry.stdout)
    assert plan["repaired"] is False and plan["plan"]["cut_path"].endswith(victim.name)
    assert plan["plan"]["cut_offset"] == offset
    assert sorted(p.name for p in victim.parent.iterdir()) == before  # nothing changed

    done = run("repair", tmp_path / "bad", "--json", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["repaired"] is True and report["ok"] is True
    assert report["recovery"]["cut_offset"] == offset
    assert report["after"]["ok"] is True
    assert all(Path(m).exists() for m in report["recovery"]["moved"])


def test_demo_json_describes_what_it_wrote_and_restored(tmp_path):
    result = run("demo", "--records", "3000", "--dir", tmp_path / "d", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["mismatches"] == []
    assert report["wrote"]["deltas"] == 3000
    with tflux.open(tmp_path / "d", readonly=True) as store:
        ready = {q.name: q.count for q in store.queues()}
    assert {q["name"]: q["ready_after_restore"] for q in report["queues"]} == ready
    assert report["verify"]["ok"] is True


def test_export_json_names_the_files_and_row_counts(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    base = small_store(tmp_path / "base")
    result = run("export", base, tmp_path / "out", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for part in ("log", "snapshot"):
        assert pq.read_table(report[part]["path"]).num_rows == report[part]["rows"]


def test_dump_json_carries_the_whole_message(tmp_path):
    message = bytes(range(256)) * 3  # longer than any preview, every byte value
    with tflux.open(tmp_path / "base", log_sync_policy="never") as store:
        store.enqueue("", 7, message)
    rows = [
        json.loads(line)
        for line in run("dump", tmp_path / "base", "--json").stdout.split("\n")
        if line
    ]
    (add,) = [r for r in rows if r["kind"] == "add_record"]
    assert base64.b64decode(add["message_b64"]) == message
    assert add["message_length"] == len(message)
    full = run("dump", tmp_path / "base", "--full").stdout
    assert "..." not in full and "\\xff" in full


@pytest.mark.parametrize("verb", ["verify", "inspect", "dump", "replay"])
def test_a_reader_that_went_away_ends_the_command_with_exit_0(tmp_path, verb):
    """Issue 30, item 18: ``tflux verify BASE | head -1`` exited 1, the "corrupt" code (rich's
    broken-pipe handler). Here the pipe's read end is closed before the command writes."""
    base = tmp_path / "base"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(1, b"x")] * 50)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tflux.cli", verb, str(base)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")
