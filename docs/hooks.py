"""mkdocs hooks (mkdocs.yml ``hooks:``): the guides' README sections, and Sphinx roles as code.

- A line ``--8<-- "README.md:NAME"`` in a page is replaced by the README's lines between
  ``<!-- --8<-- [start:NAME] -->`` and ``<!-- --8<-- [end:NAME] -->``: the guides and the README
  are one text. The README links to ``docs/X.md``; from a guide page that is ``../X.md``.
- mkdocstrings renders docstrings as Markdown, where a Sphinx role (``:func:`tflux.open```)
  showed as raw markup (issue 30, item 20): the site shows the name alone, as code.
"""

from __future__ import annotations

import re
from pathlib import Path

INCLUDE = re.compile(r'^--8<-- "README\.md:([a-z-]+)"$', re.MULTILINE)
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const):(<code>)")
README = Path(__file__).resolve().parent.parent / "README.md"


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


def on_page_content(html: str, **_: object) -> str:
    return ROLE.sub(r"\1", html)
