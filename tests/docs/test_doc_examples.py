"""Every Python block of the site's own pages runs as written, twice in the same directory (a
user runs an example again), as the README's do (test_readme_examples.py): the home page, the
getting-started page, the guides and the recipes. Each block is written to a file and run as a
script (so ``if __name__ == "__main__":`` and multiprocessing's spawn work) in a fresh temporary
working directory. Blocks the pages include from the README (``--8<--``) are the README's test's.

A block that imports pyspark runs only where pyspark and a Java runtime are installed (skipped
with the reason otherwise; a failure where TFLUX_REQUIRE_TOOLS says they are, as in CI)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import _needs
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [
    DOCS / "index.md",
    DOCS / "getting-started.md",
    *sorted((DOCS / "guide").glob("*.md")),
    *sorted((DOCS / "recipes").glob("*.md")),
]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for k, code in enumerate(BLOCK.findall(page.read_text(encoding="utf-8"))):
            found.append((f"{page.relative_to(DOCS).with_suffix('')}-{k}", code))
    return found


BLOCKS = _blocks()


def test_every_recipe_is_one_complete_program():
    recipes = sorted((DOCS / "recipes").glob("*.md"))
    assert len(recipes) >= 4
    for page in recipes:
        codes = BLOCK.findall(page.read_text(encoding="utf-8"))
        assert len(codes) == 1, f"{page.name}: a recipe is one program, {len(codes)} blocks"


@pytest.mark.parametrize("code", [c for _, c in BLOCKS], ids=[name for name, _ in BLOCKS])
def test_a_docs_example_runs_as_written_and_again(tmp_path, code):
    timeout = 120
    if "pyspark" in code:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            _needs.missing("the example needs pyspark (pip install '.[spark]')")
        if not _needs.has_java():
            _needs.missing("the example needs Java for Spark (no java on PATH, no JAVA_HOME)")
        timeout = 600
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for run in ("first", "second"):
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=run_dir,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"{run} run:\n{code}\n{done.stderr[-3000:]}"


def test_the_examples_run_one_after_another_in_one_directory(tmp_path):
    """A reader tries the examples in reading order in one directory, as they are written
    (most on "path/to/base"): the README's, then the site's pages'. None may refuse what an
    earlier one left, e.g. a queue created there without rules that a later example creates
    again with rules and ``exist_ok=True`` (``QueueExistsError``). The Spark examples are the
    other tests' (they need Java)."""
    readme = BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    codes = [(f"README-{k}", code) for k, code in enumerate(readme)] + BLOCKS
    script = tmp_path / "example.py"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name, code in codes:
        if "pyspark" in code:
            continue
        script.write_text(code, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=run_dir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{name}, after the ones before it:\n{done.stderr[-3000:]}"
