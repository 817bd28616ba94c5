"""The generators of the benchmark pages.

``product.py`` writes ``docs/benchmarks.md``, the page users read: one table and one chart per
question, each with its command and machine (``python -m benches.report.product``).

``python -m benches.report`` (see ``__main__.py``) writes the lab notebook,
``docs/internals/benchmark-notes.md``, in three parts, each rendered from its own run of the suite:
``page.py`` the head of the page (every group of a run of ``benches/suite``), ``restore.py`` the
issue-11 restore section and ``reads.py`` the issue-11 reads section, each between its own
markers. Everything else on that page is kept.
"""
