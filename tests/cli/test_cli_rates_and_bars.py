"""Issue 43 item 19: small conversions and checks printed "(0 MB/s)", the ``convert`` bar
counted raw bytes without units, ``export`` showed no progress and ``demo``'s finished bar
stayed above its title."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tflux
from _cli_support import open_store, run_cli, run_on_terminal
from tflux.cli._render import _progress, _rate

ERASE_LINE = "\x1b[2K"


def stderr_tty_run(*args: str | Path, columns: int = 80) -> tuple[int, str, str]:
    """``python -m tflux ARGS`` with stderr on a pseudo-terminal (where the bars are drawn)
    and stdout on a pipe; returns the exit code, stdout and stderr as written (escapes kept)."""
    return run_on_terminal(*args, columns=columns, on="stderr")


def segmented_store(base: Path) -> None:
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


def test_a_small_rate_is_not_printed_as_zero():
    assert _rate(0.004, 1.0) == "0.004"
    assert _rate(3.0, 1.0) == "3" and _rate(1234.0, 1.0) == "1,234"
    assert _rate(0.0, 1.0) == "0" and _rate(1.0, 0.0) == "-"


def test_verify_and_convert_of_a_small_base_print_a_non_zero_rate(tmp_path):
    src = tmp_path / "src"
    with open_store(src) as store:
        store.create_queue("q")
        store.enqueue("q", 1, b"x")
    for args in (["verify", src], ["convert", src, tmp_path / "dst", "--to", "taskflux"]):
        result = run_cli(*args)
        assert result.returncode == 0, result.stderr
        (rate,) = re.findall(r"\(([^ ]+) MB/s\)", result.stdout)
        assert float(rate.replace(",", "")) > 0, result.stdout


def test_the_convert_bar_shows_bytes_with_units():
    progress = _progress(in_bytes=True)
    task = progress.add_task("convert", total=3 * 1024 * 1024)
    progress.update(task, completed=1024 * 1024)
    shown = progress.columns[2].render(progress.tasks[0]).plain
    assert "MB" in shown or "MiB" in shown, shown


def test_export_shows_a_bar_in_bytes_on_a_terminal_only_and_not_with_json(tmp_path):
    pytest.importorskip("pyarrow.parquet")
    base = tmp_path / "base"
    segmented_store(base)
    code, stdout, stderr = stderr_tty_run("export", base, tmp_path / "out")
    assert code == 0, stderr
    assert "export" in stderr and "kB" in stderr, stderr
    assert "wrote 301 log rows" in stdout
    code, stdout, stderr = stderr_tty_run("export", base, tmp_path / "json", "--json")
    assert code == 0, stderr
    assert stderr == "", stderr
    assert json.loads(stdout)["log"]["rows"] == 301
    off = run_cli("export", base, tmp_path / "pipe")
    assert off.returncode == 0 and off.stderr == "", off.stderr


def test_export_progress_counts_every_segment_and_the_snapshot(tmp_path):
    pytest.importorskip("pyarrow.parquet")
    from tflux.parquet import export

    base = tmp_path / "base"
    segmented_store(base)
    with tflux.open(base) as store:
        store.snapshot()
    calls: list[tuple[int, int]] = []
    export(base, tmp_path / "out", progress=lambda done, total: calls.append((done, total)))
    files = [*(base / "data" / "log").iterdir(), base / "data" / "tflux.snapshot"]
    total = sum(p.stat().st_size for p in files)
    assert calls[0] == (0, total) and calls[-1] == (total, total), calls
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and len(calls) == len(files) + 1


def test_the_demo_bar_is_erased_when_done_so_the_title_comes_first(tmp_path):
    code, stdout, stderr = stderr_tty_run("demo", "--records", "2000", "--dir", tmp_path / "d")
    assert code == 0, stderr
    assert "writing" in stderr, stderr  # the bar was drawn
    assert "writing" not in stderr.rsplit(ERASE_LINE, 1)[-1], repr(stderr[-300:])
    assert stdout.startswith("tflux demo:"), stdout


@pytest.mark.parametrize("verb", ["convert", "compress"])
def test_convert_and_compress_show_no_bar_with_json_on_a_terminal(tmp_path, verb):
    base = tmp_path / "base"
    segmented_store(base)
    args = (
        ("convert", base, tmp_path / "out", "--to", "taskflux")
        if verb == "convert"
        else ("compress", base)
    )
    code, stdout, stderr = stderr_tty_run(*args, "--json")
    assert code == 0, stderr
    assert stderr == "", stderr
    assert isinstance(json.loads(stdout), dict)
