# tflux developer targets. `make help` lists them.
PYTHON ?= python

.PHONY: help install build wheels jar-floor docs lint typecheck test test-rust bench fuzz clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

install: ## build the extension (release) and install tflux with test extras
	$(PYTHON) -m pip install -e '.[test]'

build: ## build a release wheel into dist/
	maturin build --release -o dist

# Pinned build tools for the portable wheels (zig links against glibc 2.17, so no auditwheel;
# maturin 1.12.1 places an `include` under python-source at its package path in the wheel: the
# [build-system] pin of pyproject.toml, which `pip wheel .` builds with, is the same).
WHEEL_TOOLS = 'maturin>=1.12.1,<2' 'ziglang>=0.13,<0.14'
# The Spark jars the shipped JVM reader compiles against: the newest pyspark the `spark` extra
# allows, unpacked here (not installed into $(PYTHON)'s environment).
JAR_SPARK = target/jar-spark

wheels: ## abi3 manylinux2014 wheel (with the JVM reader's jar: needs a JDK 17+) + sdist into dist/wheels
	$(PYTHON) -m pip install -q $(WHEEL_TOOLS)
	rm -rf $(JAR_SPARK)
	$(PYTHON) -m pip install -q --no-deps --target $(JAR_SPARK) "$$($(PYTHON) python/tflux/spark/_jvm.py --spark-requirement)"
	$(PYTHON) python/tflux/spark/_jvm.py --ship $(JAR_SPARK)/pyspark
	@# A `zig` on PATH that is the ziglang just installed (whatever python maturin itself runs).
	mkdir -p target/zig-shim
	printf '#!/bin/sh\nexec "%s" -m ziglang "$$@"\n' "$$($(PYTHON) -c 'import sys; print(sys.executable)')" > target/zig-shim/zig
	chmod +x target/zig-shim/zig
	PATH="$(CURDIR)/target/zig-shim:$$PATH" maturin build --release --zig --compatibility manylinux2014 --out dist/wheels
	maturin sdist --out dist/wheels

# The lowest pyspark the `spark` extra allows, its jars unpacked here from its sdist (434 MB for
# 4.0.0, downloaded once): the Java sources must compile against it too.
JAR_FLOOR = target/jar-floor

jar-floor: ## compile the JVM reader against the lowest pyspark the spark extra allows (downloads it once)
	@set -e; req="$$($(PYTHON) python/tflux/spark/_jvm.py --spark-floor)"; ver="$${req#pyspark==}"; \
	dir="$(JAR_FLOOR)/pyspark-$$ver"; \
	if [ ! -d "$$dir/jars" ]; then \
		mkdir -p $(JAR_FLOOR); \
		$(PYTHON) -m pip download -q --no-deps --no-binary :all: -d $(JAR_FLOOR) "$$req"; \
		tar -xzf "$(JAR_FLOOR)/pyspark-$$ver.tar.gz" -C $(JAR_FLOOR) "pyspark-$$ver/deps/jars" "pyspark-$$ver/pyspark/version.py"; \
		mv "$$dir/deps/jars" "$$dir/jars"; cp "$$dir/pyspark/version.py" "$$dir/version.py"; \
	fi; \
	TFLUX_SPARK_FLOOR="$(CURDIR)/$$dir" $(PYTHON) -m pytest -q -p no:cacheprovider tests/spark/test_jar_choice.py -k lowest_spark

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
