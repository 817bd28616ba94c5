"""Benchmarks of tflux (pytest-benchmark); see conftest.py and report.py."""
