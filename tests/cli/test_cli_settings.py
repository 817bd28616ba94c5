"""The settings file as the command line meets it (issue 15, defect 3): the real file named, a bad
one a warning for a read-only look, typed values, the store's sync words in ``Log.open``.
"""

from __future__ import annotations

import json
import re

import pytest
import tflux
from _cli_support import run, small_store

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


def test_a_settings_warning_names_the_users_line_through_queue_and_aio(tmp_path):
    """Issue 43 item 16: the SettingsWarning of a bad settings file named
    concurrent/futures/thread.py through tflux.aio and tflux/_queue.py through tflux.Queue."""
    import subprocess
    import sys

    import tflux

    base = tmp_path / "b"
    with tflux.open(base, log_sync_policy="never") as store:
        store.create_queue("q")
    (base / "taskflux.settings.json").write_text("{bad")
    user = tmp_path / "user.py"
    user.write_text(
        "import asyncio, sys, warnings, tflux\n"
        "warnings.simplefilter('always')\n"
        "base = sys.argv[1]\n"
        "tflux.open(base, readonly=True).close()\n"
        "async def main():\n"
        "    async with tflux.aio.open(base, readonly=True):\n"
        "        pass\n"
        "asyncio.run(main())\n"
        "tflux.Queue(base, 'q', readonly=True).close()\n"
    )
    done = subprocess.run([sys.executable, str(user), str(base)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stderr.splitlines() if "SettingsWarning" in x]
    assert [x.split(": SettingsWarning")[0] for x in lines] == [
        f"{user}:4",
        f"{user}:6",
        f"{user}:9",
    ], done.stderr
