# tracebridge: `make demo` and `make test` set everything up themselves.
PY := .venv/bin/python
export R_LIBS := $(CURDIR)/.Rlib
export TRACEBRIDGE_PYTHON := $(CURDIR)/.venv/bin/python

.PHONY: setup demo test test-python test-r lint bench docs clean fuzz

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) scripts/demo.py

test: setup lint test-python test-r

lint:
	.venv/bin/ruff check python tests/python benchmarks shared_ir scripts

test-python:
	$(PY) -m pytest -n 2 -q --doctest-modules python/tracebridge tests/python

# The loader fuzzer's long run (make test runs 800 cases): cases and seed from the environment.
FUZZ_CASES ?= 20000
FUZZ_SEED ?= $(shell date +%s)
fuzz: setup
	TRACEBRIDGE_FUZZ_CASES=$(FUZZ_CASES) TRACEBRIDGE_FUZZ_SEED=$(FUZZ_SEED) \
	  $(PY) -m pytest -q -s -p no:xdist -p no:cacheprovider tests/python/test_fuzz.py -k loader

test-r:
	@if [ -f scripts/test-r.sh ]; then bash scripts/test-r.sh; else echo "R tests: none yet"; fi

bench: setup
	$(PY) benchmarks/bench_python.py
	@if [ -f benchmarks/bench_r.R ]; then Rscript benchmarks/bench_r.R; fi

clean:
	rm -rf .venv .Rlib demo-out bench-out .pytest_cache *.Rcheck tracebridge_*.tar.gz
