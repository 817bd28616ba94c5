"""The documentation site builds without warnings and its API reference covers every public name."""

from __future__ import annotations

import ast
import html
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tflux

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict_and_documents_every_public_name(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    api = (tmp_path / "api" / "index.html").read_text()
    anchors = set(re.findall(r'id="([^"]+)"', api))
    missing = [name for name in tflux.__all__ if f"tflux.{name}" not in anchors]
    assert not missing, missing
    # Issue 30, item 20: signatures carry the stub's types, Sphinx roles are not raw markup, the
    # names come in reading order (opening a store before the errors), and the guides hold the
    # README's sections.
    text = re.sub(r"<[^>]+>", "", api)
    assert "progress: Callable[[int], object] | None = None" in html.unescape(text)
    assert not re.search(r":(func|class|meth|attr|mod|exc):", text), "raw Sphinx role"
    assert api.index('id="tflux.open"') < api.index('id="tflux.TfluxError"')
    readme = (ROOT / "README.md").read_text()
    for guide, words in {
        "queue": "A `queue.Queue`-shaped face and asyncio",
        "settings": "Unknown keys are errors",
        "channels": "A channel directory",
        "spark": "The JVM reader",
    }.items():
        built = (tmp_path / "guide" / guide / "index.html").read_text()
        page = html.unescape(re.sub(r"<[^>]+>", "", built))
        plain = words.replace("`", "")
        assert words in readme and plain in page, (guide, words)


def _undocumented(nodes: list[ast.stmt], exported: set[str] | None, prefix: str = "") -> list[str]:
    """Public classes and defs under ``nodes`` without a docstring (``exported`` filters the top
    level; members of a class are all walked)."""
    missing = []
    for node in nodes:
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.name.startswith("_") or (exported is not None and node.name not in exported):
            continue
        if ast.get_docstring(node) is None:
            missing.append(prefix + node.name)
        if isinstance(node, ast.ClassDef):
            missing += _undocumented(node.body, None, f"{prefix}{node.name}.")
    return missing


def test_every_public_member_of_the_stub_has_a_docstring():
    stub = ROOT / "python" / "tflux" / "_tflux.pyi"
    tree = ast.parse(stub.read_text(), filename=str(stub))
    exported = set(tflux.__all__)
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    assert defined & exported, "no name of tflux.__all__ is defined in the stub"
    missing = _undocumented(tree.body, exported)
    assert not missing, f"add a docstring to these members of _tflux.pyi: {missing}"
