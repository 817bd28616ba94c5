"""The verbs hand the core's events (logger ``tflux``: owner changes, lease expiries, dead
letters, torn tails cut) to stderr at ``--log-level`` (issue 44): ``tflux serve`` at INFO by
default, every other verb at WARNING; stdout, and so ``--json``, stays clean."""

from __future__ import annotations

import json

import pytest
from _cli_support import run_cli
from test_cli_serve import _first_line, _serve, _stop


def test_serve_logs_that_it_is_the_owner_at_info_on_stderr(tmp_path):
    base = tmp_path / "base"
    proc = _serve(base, "--queue", "jobs")
    _first_line(proc)
    code, stdout, stderr = _stop(proc)
    assert code == 0, stderr
    assert "is the owner of" in stderr
    assert "INFO" in stderr and "tflux.share" in stderr, stderr
    assert "is the owner" not in stdout


def test_serve_at_warning_keeps_the_owner_line_to_itself(tmp_path):
    base = tmp_path / "base"
    proc = _serve(base, "--log-level", "warning")
    _first_line(proc)
    code, _, stderr = _stop(proc)
    assert code == 0, stderr
    assert "is the owner" not in stderr


def test_serve_json_keeps_stdout_one_json_line_while_it_logs(tmp_path):
    base = tmp_path / "base"
    proc = _serve(base, "--json", "--log-level", "DEBUG")
    line = json.loads(_first_line(proc))
    code, stdout, stderr = _stop(proc)
    assert code == 0, stderr
    assert line["pid"] == proc.pid
    assert stdout == ""
    assert "is the owner of" in stderr


def test_a_json_verb_with_logging_on_keeps_stdout_parseable(tmp_path):
    base = tmp_path / "base"
    proc = _serve(base, "--queue", "jobs", "--log-level", "warning")
    try:
        _first_line(proc)
        # stats asks the owner as its client: the client's DEBUG line goes to stderr only.
        result = run_cli("--log-level", "debug", "stats", base, "--json")
    finally:
        code, _, stderr = _stop(proc)
    assert code == 0, stderr
    assert result.returncode == 0, result.stderr
    assert "jobs" in json.dumps(json.loads(result.stdout))
    assert "client" in result.stderr and "DEBUG" in result.stderr, result.stderr


def test_other_verbs_log_warnings_by_default_and_nothing_below(tmp_path):
    result = run_cli("demo", "--dir", tmp_path / "base", "--records", "200")
    assert result.returncode == 0, result.stderr
    assert "INFO" not in result.stderr


@pytest.mark.parametrize("bad", ["loud", "5"])
def test_an_unknown_log_level_is_a_usage_error(tmp_path, bad):
    result = run_cli("--log-level", bad, "replay", tmp_path)
    assert result.returncode == 2
    assert "--log-level" in result.stderr
