"""Issue 43 item 19 (in part): small conversions and checks printed "(0 MB/s)", and the
``convert`` bar counted raw bytes without units."""

from __future__ import annotations

import re

from _cli_support import open_store, run_cli
from tflux.cli._render import _progress, _rate


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
