"""The command line as a new user meets it (issue 15): every verb run as a subprocess, the
package's own files (README, CHANGELOG, pyproject) read as a user reads them.

``run`` drives ``python -m tflux`` (the package's ``__main__``), so each test also checks that
entry point; ``tty_run`` drives it under a pseudo-terminal of a given width.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tflux

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m tflux ARGS`` with stdin closed; never a traceback, whatever the exit code."""
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    environ.update(env or {})
    result = subprocess.run(
        [sys.executable, "-m", "tflux", *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout
    return result


def small_store(base: Path, adds: int = 20) -> Path:
    """A base directory with two queues, a snapshot and a few records after it."""
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(i % 3, b"job %d" % i) for i in range(adds)])
        store.snapshot()
        store.enqueue("", 1, b"after the snapshot")
    return base


# ---------------------------------------------------------------------------------------------
# defect 4: python -m tflux


def test_python_dash_m_tflux_is_the_tflux_command(tmp_path):
    result = run("--version")
    assert result.returncode == 0
    assert tflux.__version__ in result.stdout
    assert run("replay", small_store(tmp_path)).returncode == 0


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
# defect 11: the README's example runs; the CHANGELOG names the package's version


def _readme_queue_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## The embedded durable queue") :]
    return section[section.index("```python\n") + len("```python\n") : section.index("```\n", 10)]


def test_the_readme_queue_example_runs_as_written(tmp_path):
    code = _readme_queue_example().replace('"path/to/base"', repr(str(tmp_path / "base")))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_the_changelog_has_a_section_for_the_package_version():
    headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings, "no version headings"
    assert headings[0] == tflux.__version__, headings


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


# ---------------------------------------------------------------------------------------------
# defect 3: settings -- the real file named, warn and go on for a look, typed values, one
# sync vocabulary

READ_ONLY_VERBS = ("inspect", "replay", "dump", "verify")


@pytest.mark.parametrize("content", ['{"LogFileSoftLimt": 1}', "not json", "[1, 2]"], ids=str)
def test_read_only_verbs_warn_about_a_bad_settings_file_naming_it_and_go_on(tmp_path, content):
    base = small_store(tmp_path / "base")
    settings_file = base / "taskflux.settings.json"
    settings_file.write_text(content)
    for verb in READ_ONLY_VERBS:
        result = run(verb, base)
        assert result.returncode == 0, (verb, result.stdout, result.stderr)
        warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1, (verb, result.stderr)
        assert str(settings_file) in warnings[0], (verb, warnings)
        assert "tflux-settings-" not in result.stderr + result.stdout  # no temporary copy
        assert result.stdout.strip(), verb
    # A writer still refuses the file, naming it.
    with pytest.raises(tflux.SettingsError, match=re.escape(str(settings_file))):
        tflux.open(base)


def test_inspect_names_the_real_settings_file(tmp_path):
    base = small_store(tmp_path / "base")
    (base / "taskflux.settings.json").write_text('{"LogFileSoftLimit": 10, "LogFileHardLimit": 5}')
    result = run("inspect", base, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert str(base / "taskflux.settings.json") in report["settings_warning"]
    assert report["settings"]["LogFileSoftLimit"] == 16 << 20  # the defaults are in force
    assert str(base / "taskflux.settings.json") in result.stderr


def test_repair_goes_on_past_a_bad_settings_file(tmp_path):
    base = small_store(tmp_path / "base")
    (base / "taskflux.settings.json").write_text('{"LogFileSoftLimt": 1}')
    result = run("repair", base, "--yes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "taskflux.settings.json" in result.stderr


def test_a_read_only_open_warns_and_uses_the_defaults(tmp_path):
    base = small_store(tmp_path / "base")
    (base / "taskflux.settings.json").write_text('{"LogSyncPolicy": "sometimes"}')
    with pytest.warns(tflux.SettingsWarning, match="LogSyncPolicy"):
        store = tflux.open(base, readonly=True)
    with store:
        assert store.settings["LogSyncPolicy"] == "always"
        assert "taskflux.settings.json" in store.settings_warning
        assert sum(q.count for q in store.queues()) == 21
    with tflux.open(tmp_path / "other") as fine:
        assert fine.settings_warning is None


def test_settings_values_are_typed(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "taskflux.settings.json").write_text(
        json.dumps({"LogFileSoftLimit": 4096, "LogPreallocateSegments": False})
    )
    expected_types = {
        "LogFileSoftLimit": int,
        "LogFileHardLimit": int,
        "LogPreallocateSegments": bool,
        "SnapshotCreationSegmentsThreshold": int,
        "LogSyncPolicy": str,
        "LogSyncIntervalMs": int,
        "DiskFullRatio": float,
        "LogCompressSealedSegments": str,
        "DeadLetter": dict,
    }
    resolved = tflux.settings(base)
    with tflux.open(base) as store:
        in_force = store.settings
    for values in (resolved, in_force):
        assert {k: type(v) for k, v in values.items()} == expected_types
        assert values["LogFileSoftLimit"] == 4096
        assert values["LogPreallocateSegments"] is False
    # Typed values round-trip through the settings file and the keyword arguments.
    (base / "taskflux.settings.json").write_text(json.dumps(in_force))
    assert tflux.settings(base) == in_force


@pytest.mark.parametrize("word", ["always", "interval", "never", "batch"])
def test_log_open_accepts_the_stores_sync_words(tmp_path, word):
    with tflux.Log.open(tmp_path / "log", sync=word, sync_interval_ms=5) as log:
        lsn = log.append(1, b"x")
    with tflux.Log.open(tmp_path / "log", readonly=True) as log:
        assert [e.data for e in log.entries(lsn, lsn + 1)] == [b"x"]
    with tflux.open(tmp_path / "base", log_sync_policy=word if word != "batch" else "interval"):
        pass


def test_log_open_names_the_stores_words_for_an_unknown_sync_policy(tmp_path):
    with pytest.raises(ValueError, match="interval"):
        tflux.Log.open(tmp_path / "log", sync="sometimes")


# ---------------------------------------------------------------------------------------------
# defect 2: tables never cut numbers on a narrow terminal

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def tty_run(*args: str | Path, columns: int = 80) -> tuple[int, str]:
    """``python -m tflux ARGS`` with stdout on a pseudo-terminal ``columns`` wide (and
    ``COLUMNS`` set, as a shell does); returns the exit code and the text shown."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    environ.update(COLUMNS=str(columns), LINES="50", TERM="xterm-256color")
    child = subprocess.Popen(
        [sys.executable, "-m", "tflux", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.DEVNULL,
        env=environ,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    code = child.wait(timeout=300)
    text = ANSI.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r", "")
    assert "Traceback" not in text, text
    return code, text


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
