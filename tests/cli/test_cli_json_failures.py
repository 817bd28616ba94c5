"""Issue 43 item 17: ``verify nosuch --json`` printed nothing on stdout, so a JSON consumer got
no object. Every ``--json`` verb prints one JSON object on failure too (with the error), on one
line, and exits as before; a verb that printed its own object prints no second one."""

from __future__ import annotations

import json

import pytest
from _cli_support import flip, run_cli, segment_files, store_with_segments


@pytest.mark.parametrize("verb", ["verify", "inspect", "replay", "repair", "compress", "dump"])
def test_a_json_verb_that_fails_prints_one_json_object_with_the_error(tmp_path, verb):
    result = run_cli(verb, tmp_path / "nosuch", "--json")
    assert result.returncode == 2
    (line,) = result.stdout.splitlines()
    said = json.loads(line)
    assert said == {"ok": False, "error": said["error"], "exit_code": 2}
    assert "nosuch" in said["error"] and "nosuch" in result.stderr


def test_a_usage_error_of_a_json_verb_is_a_json_object_too(tmp_path):
    result = run_cli("verify", tmp_path, "--json", "--no-such-option")
    assert result.returncode == 2
    assert json.loads(result.stdout)["error"].startswith("No such option")


def test_a_verb_that_printed_its_own_object_prints_no_second_one(tmp_path):
    store_with_segments(tmp_path, adds=150)
    flip(segment_files(tmp_path / "data" / "log")[1], 8 + 16 + 3)
    result = run_cli("verify", tmp_path, "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["ok"] is False  # one object: json.loads refuses two
    plain = run_cli("verify", tmp_path / "nosuch")
    assert plain.returncode == 2 and plain.stdout == ""
