"""The generator of ``docs/benchmarks.md``: ``python -m benches.report`` (see ``__main__.py``).

Three parts, each rendered from its own run of the suite: ``page.py`` the head of the page (every
group of a run of ``benches/suite``), ``restore.py`` the issue-11 restore section and ``reads.py``
the issue-11 reads section, each between its own markers. Everything else on the page is kept.
"""
