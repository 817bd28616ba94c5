"""The documentation site builds without warnings (a dead link or anchor is one), no internal
link of the built site is dead, its API reference covers every public name with formatted
signatures, its guides have structure, and its user pages carry no issue or session numbers."""

from __future__ import annotations

import ast
import html
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tflux
from tflux import aio

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once for this module's tests: ``mkdocs build --strict`` (mkdocs.yml's
    ``validation`` turns a dead link or a missing anchor in a page's Markdown into a warning,
    so into a failure)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return out


def _text(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_the_site_builds_strict_and_documents_every_public_name(site):
    api = (site / "api" / "index.html").read_text()
    anchors = set(re.findall(r'id="([^"]+)"', api))
    missing = [name for name in tflux.__all__ if f"tflux.{name}" not in anchors]
    assert not missing, missing
    # Signatures carry the stub's types, Sphinx roles are not raw markup, the names come in
    # reading order (opening a store before the errors).
    text = re.sub(r"<[^>]+>", "", api)
    assert "progress: Callable[[int], object] | None = None" in html.unescape(text)
    assert not re.search(r":(func|class|meth|attr|mod|exc):", text), "raw Sphinx role"
    assert api.index('id="tflux.open"') < api.index('id="tflux.TfluxError"')
    # Only tflux.aio's public names (its __all__): not the TypeVar its annotations use.
    assert all(f"tflux.aio.{name}" in anchors for name in aio.__all__)
    assert "tflux.aio.T" not in anchors and "tflux.aio.AsyncStore.__aenter__" not in anchors
    # A docstring's 'docs/format.md, "Task-queue deltas"' is a link to that heading (hooks.py).
    assert '<a href="../format/#task-queue-deltas' in api


def test_api_signatures_are_formatted_one_parameter_a_line(site):
    """separate_signature renders each signature through a formatter (ruff, in the docs extra):
    without one, tflux.open's nine parameters were one line far wider than the page."""
    api = (site / "api" / "index.html").read_text()
    at = api.index('id="tflux.open"')
    block = api[at : api.index("</pre>", at)]
    signature = html.unescape(re.sub(r"<[^>]+>", "", block[block.index("<pre") :]))
    lines = [line for line in signature.splitlines() if line.strip()]
    assert len(lines) >= 5, signature
    assert max(map(len, lines)) <= 100, signature


def test_the_guides_have_structure_and_hold_the_readme_sections(site):
    readme = (ROOT / "README.md").read_text()
    for guide, words in {
        "queue": "enqueue_many",
        "operations": "Unknown keys are errors",
        "channels": "all or nothing, durable when it returns",
        "spark": "The JVM reader",
        "deployment": "owner.is_owner",
    }.items():
        built = (site / "guide" / guide / "index.html").read_text()
        plain = words.replace("`", "")
        assert words in readme and plain in _text(site / "guide" / guide / "index.html"), guide
        assert len(re.findall(r"<h2 ", built)) >= 3, f"guide {guide}: no structure"


def test_code_blocks_say_their_language_so_long_lines_wrap_or_scroll(site):
    """At 1280 px a code block shows about 95 characters and Material scrolled the rest out of
    sight: docs/stylesheets/extra.css wraps code and scrolls terminal output (``text``), which
    it tells apart by the class pymdownx.highlight's ``pygments_lang_class`` gives each block."""
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    assert ".highlight:not(.language-text) pre > code" in css and "pre-wrap" in css
    assert ".language-text pre > code" in css and "overflow-x: auto" in css
    pages = [site / "cli" / "index.html", *sorted(site.glob("guide/*/index.html"))]
    pages += sorted(site.glob("recipes/*/index.html"))
    for page in pages:
        built = page.read_text(encoding="utf-8")
        assert "stylesheets/extra.css" in built, page
        blocks = re.findall(r'<div class="([^"]*\bhighlight\b[^"]*)">', built)
        untold = [b for b in blocks if "language-" not in b]
        assert blocks and not untold, (page, untold)


def test_the_cli_reference_has_a_section_per_verb_with_a_run_and_its_exit_codes(site):
    from tflux.cli.app import cli

    page = _text(site / "cli" / "index.html")
    built = (site / "cli" / "index.html").read_text(encoding="utf-8")
    sections = re.split(r"\n(?=tflux [a-z]+¶?\n)", page)
    for verb in cli.commands:
        assert f'id="tflux-{verb}"' in built, f"no section for tflux {verb}"
        section = next(s for s in sections if s.startswith(f"tflux {verb}"))
        assert f"$ tflux {verb}" in section, f"tflux {verb}: no example run"
        assert "Exit codes" in section, f"tflux {verb}: no exit codes"
    assert "\\|" not in page, "a pipe escaped for a table shows as \\|"


def _is_internal(href: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", href) and not href.startswith("//")


def test_no_internal_link_of_the_site_is_dead(site):
    """Every href and src of every built page that stays inside the site names a file that
    exists, and its #fragment an id of that file: links written in Markdown, the ones the
    README's sections bring in, mkdocstrings' cross-references and the theme's own."""
    ids: dict[Path, set[str]] = {}

    def ids_of(page: Path) -> set[str]:
        if page not in ids:
            text = page.read_text(encoding="utf-8", errors="replace")
            ids[page] = set(re.findall(r'\b(?:id|name)="([^"]+)"', text))
        return ids[page]

    dead = []
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    for page in pages:
        text = page.read_text(encoding="utf-8", errors="replace")
        for raw in re.findall(r'\b(?:href|src)="([^"]*)"', text):
            link = html.unescape(raw)
            if not link or not _is_internal(link):
                continue
            path, _, fragment = link.partition("#")
            path = path.split("?", 1)[0]
            if path.startswith("/"):  # 404.html links from the site's root
                target = site / path.lstrip("/")
            else:
                target = (page.parent / path).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                dead.append(f"{page.relative_to(site)}: {link} (no such file)")
            elif fragment and target.suffix == ".html" and fragment not in ids_of(target):
                dead.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not dead, "\n".join(dead[:40])


# The Internals pages (the format decisions, the reliability report) keep their history's
# labels; the benchmark page is its generator's (benches/report) to keep clean.
NOT_USER_PAGES = {"format", "reliability", "internals"}


def test_user_pages_carry_no_issue_or_session_numbers(site):
    found = []
    for page in sorted(site.rglob("index.html")):
        parts = page.relative_to(site).parts
        if parts[0] in NOT_USER_PAGES or parts[0] in {"search", "assets"}:
            continue
        for match in re.finditer(r".{0,50}\b(?:[Ii]ssue|[Ss]ession) [0-9]+.{0,30}", _text(page)):
            found.append(f"{page.relative_to(site)}: {match.group(0)}")
    assert not found, "\n".join(found)


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
