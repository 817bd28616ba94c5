"""Help, version, verbs and usage errors; ``python -m tflux`` is the ``tflux`` command; the
package's own files (README's queue example, CHANGELOG's version) as a new user reads them
(issue 15).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import tflux
from _cli_support import DIALECT_VERBS, ROOT, VERBS, run, run_cli, small_store

# --------------------------------------------------------------------------------------------
# help and version


def test_version_prints_the_library_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert tflux.__version__ in result.stdout


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_help_with_examples_and_exit_codes(verb):
    result = run_cli(verb, "--help")
    assert result.returncode == 0
    assert "Examples:" in result.stdout
    assert f"tflux {verb}" in result.stdout
    assert "Exit codes" in result.stdout


@pytest.mark.parametrize("verb", DIALECT_VERBS)
def test_every_verb_that_reads_a_base_takes_the_dialect_option(verb):
    """Spec section 11: every verb can be told the dialect (default: detected)."""
    text = run_cli(verb, "--help").stdout
    assert "--dialect [spec|taskflux]" in text


def test_top_level_help_lists_every_verb():
    text = run_cli("--help").stdout
    for verb in VERBS:
        assert f"tflux {verb}" in text


@pytest.mark.parametrize("verb", ["verify", "repair"])
def test_verify_and_repair_help_document_each_exit_code(verb):
    text = run_cli(verb, "--help").stdout
    for code in ("0  ", "1  ", "2  "):
        assert code in text
    assert "--yes" in run_cli("repair", "--help").stdout


def test_unknown_verb_is_a_usage_error():
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "frobnicate" in result.stderr


# ---------------------------------------------------------------------------------------------
# defect 4: python -m tflux


def test_python_dash_m_tflux_is_the_tflux_command(tmp_path):
    result = run("--version")
    assert result.returncode == 0
    assert tflux.__version__ in result.stdout
    assert run("replay", small_store(tmp_path)).returncode == 0


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


def test_import_tflux_does_not_import_asyncio():
    """Issue 43 item 21: ``import tflux`` imported asyncio (71 of its 88 ms) for ``tflux.aio``,
    which now loads on first use; ``tflux.aio`` and ``from tflux import aio`` still work."""
    import subprocess
    import sys

    code = (
        "import sys, tflux; assert 'asyncio' not in sys.modules, 'asyncio imported'; "
        "from tflux import aio; assert tflux.aio is aio and callable(aio.open); "
        "assert 'asyncio' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
