# tflux developer targets. `make help` lists them.
PYTHON ?= python

.PHONY: help install build wheels docs lint typecheck test test-rust bench fuzz clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

install: ## build the extension (release) and install tflux with test extras
	$(PYTHON) -m pip install -e '.[test]'

build: ## build a release wheel into dist/
	maturin build --release -o dist

# Pinned build tools for the portable wheels (zig links against glibc 2.17, so no auditwheel).
WHEEL_TOOLS = 'maturin>=1.9,<2' 'ziglang>=0.13,<0.14'

wheels: ## abi3 manylinux2014 wheel + sdist into dist/wheels (installs maturin and zig from PyPI)
	$(PYTHON) -m pip install -q $(WHEEL_TOOLS)
	@# A `zig` on PATH that is the ziglang just installed (whatever python maturin itself runs).
	mkdir -p target/zig-shim
	printf '#!/bin/sh\nexec "%s" -m ziglang "$$@"\n' "$$($(PYTHON) -c 'import sys; print(sys.executable)')" > target/zig-shim/zig
	chmod +x target/zig-shim/zig
	PATH="$(CURDIR)/target/zig-shim:$$PATH" maturin build --release --zig --compatibility manylinux2014 --out dist/wheels
	maturin sdist --out dist/wheels

docs: ## the documentation site into site/ (needs '.[docs]'); warnings fail
	$(PYTHON) -m mkdocs build --strict

lint: ## cargo fmt + clippy, ruff check + format
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	ruff check python tests benches
	ruff format --check python tests benches

typecheck: ## check the native module against its stub
	$(PYTHON) -m mypy.stubtest tflux._tflux --mypy-config-file pyproject.toml --allowlist stubtest-allowlist.txt

test: ## the whole Python suite (benchmarks run once, untimed) and the Rust suite
	$(PYTHON) -m pytest
	cargo test -p tflux-core

test-rust: ## the Rust core alone (no Python needed)
	cargo test -p tflux-core

bench: ## every benchmark group, timed (needs '.[bench]'); regenerates docs/benchmarks.md, the notes + docs/img/
	mkdir -p .benchmarks
	$(PYTHON) -m pytest benches --benchmark-enable --benchmark-json=.benchmarks/all.json -p no:cacheprovider && $(PYTHON) -m benches.report .benchmarks/all.json && $(PYTHON) -m benches.report.product --scan .benchmarks/all.json --queue .benchmarks/all.json

clean: ## remove build products
	cargo clean
	rm -rf dist site .pytest_cache .benchmarks

.PHONY: reliability
reliability: ## long reliability campaign (slow tests, 2 min per fuzz target); figures in .reliability/
	TFLUX_RELIABILITY_OUT=.reliability $(PYTHON) -m pytest -m slow -s -p no:cacheprovider tests/reliability/test_crash.py tests/reliability/test_power_loss.py tests/reliability/test_corruption_sweep.py tests/reliability/test_concurrency.py
	rust/core/fuzz/run-fuzz.sh 120
