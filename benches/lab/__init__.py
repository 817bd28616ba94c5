"""One-off lab scripts (A/B runs of two builds, side-by-side ratios, cost probes) run by hand, as
each one's docstring says. Not collected by pytest: no file here matches ``python_files``
(``test_*.py``, ``bench_*.py``), and ``testpaths`` lists ``benches/suite`` only."""
