"""mkdocs hooks (mkdocs.yml ``hooks:``): the guides' README sections, and Sphinx roles as code.

- A line ``--8<-- "README.md:NAME"`` in a page is replaced by the README's lines between
  ``<!-- --8<-- [start:NAME] -->`` and ``<!-- --8<-- [end:NAME] -->``: the guides and the README
  are one text. The README links to ``docs/X.md``; from a guide page that is ``../X.md``.
- mkdocstrings renders docstrings as Markdown, where a Sphinx role (``:func:`tflux.open```)
  showed as raw markup (issue 30, item 20): the site shows the name alone, as code.
- Docstrings name the site's pages as paths (``docs/format.md, "Task-queue deltas"``), which
  read well in an editor: on the site each becomes a link to that page, at the heading that
  starts with the quoted words when there is one (the link checker in tests/docs holds them).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from markdown.extensions.toc import slugify

INCLUDE = re.compile(r'^--8<-- "README\.md:([a-z-]+)"$', re.MULTILINE)
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const):(<code>)")
DOCS = Path(__file__).resolve().parent
README = DOCS.parent / "README.md"
# A page named as a path, and the heading that may follow it in quotes.
PAGE_REF = re.compile(r'docs/([a-z-]+)\.md(,? (?:&quot;|")([^"&<]+)(?:&quot;|"))?')
# The parts of a page's HTML where a reference stays text: links, code, and the tags themselves.
SKIP = re.compile(r"(<a\b.*?</a>|<code\b.*?</code>|<pre\b.*?</pre>|<[^>]+>)", re.S)
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)


def section(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = f"<!-- --8<-- [start:{name}] -->"
    end = f"<!-- --8<-- [end:{name}] -->"
    if start not in text or end not in text:
        raise ValueError(f"README.md has no section {name!r} (markers {start} ... {end})")
    return text.split(start, 1)[1].split(end, 1)[0].strip("\n")


def on_page_markdown(markdown: str, page, **_: object) -> str:
    depth = page.file.src_uri.count("/")
    up = "../" * depth

    def include(match: re.Match[str]) -> str:
        body = section(match.group(1))
        return body.replace("](docs/", f"]({up}")

    return INCLUDE.sub(include, markdown)


def _anchor(name: str, words: str) -> str:
    """``#slug`` of the first heading of ``docs/<name>.md`` that starts with ``words``."""
    for heading in HEADING.findall((DOCS / f"{name}.md").read_text(encoding="utf-8")):
        text = re.sub(r"[`*]", "", heading)
        if text.lower().startswith(words.lower()):
            return "#" + slugify(text, "-")
    return ""


def _link_page_refs(content: str, up: str) -> str:
    def link(match: re.Match[str]) -> str:
        name, quoted, words = match.groups()
        if not (DOCS / f"{name}.md").is_file():
            return match.group(0)
        anchor = _anchor(name, html.unescape(words)) if words else ""
        return f'<a href="{up}{name}/{anchor}">docs/{name}.md</a>{quoted or ""}'

    parts = SKIP.split(content)
    return "".join(part if k % 2 else PAGE_REF.sub(link, part) for k, part in enumerate(parts))


def on_page_content(content: str, page, **_: object) -> str:
    up = "../" * page.url.count("/")
    return _link_page_refs(ROLE.sub(r"\1", content), up)
