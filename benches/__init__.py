"""Benchmarks of tflux: ``suite/`` (pytest-benchmark, collected by pytest), ``report/`` (the
generator of docs/benchmarks.md, ``python -m benches.report``) and ``lab/`` (one-off scripts run
by hand, never collected)."""
