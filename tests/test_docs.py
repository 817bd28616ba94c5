"""The documentation site builds without warnings and its API reference covers every public name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tflux

ROOT = Path(__file__).resolve().parent.parent


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
