"""The maintained benchmark suite (pytest-benchmark): ``bench_*.py``, the session fixtures of
``conftest.py`` and the data helpers. The default ``pytest`` run smoke-tests every benchmark once,
untimed; ``make bench`` times them and renders docs/benchmarks.md (``python -m benches.report``)."""
