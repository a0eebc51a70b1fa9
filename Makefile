# tracebridge: `make demo` and `make test` set everything up themselves.
PY := .venv/bin/python
export R_LIBS := $(CURDIR)/.Rlib
export TRACEBRIDGE_PYTHON := $(CURDIR)/.venv/bin/python

.PHONY: setup demo test test-python test-r lint bench docs clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) scripts/demo.py

test: setup lint test-python test-r

lint:
	.venv/bin/ruff check python tests/python benchmarks shared_ir scripts

test-python:
	$(PY) -m pytest -n 2 -q --doctest-modules python/tracebridge tests/python

test-r:
	@if [ -f scripts/test-r.sh ]; then bash scripts/test-r.sh; else echo "R tests: none yet"; fi

bench: setup
	$(PY) benchmarks/bench_python.py
	$(PY) benchmarks/bench_large.py
	@if [ -f benchmarks/bench_r.R ]; then Rscript benchmarks/bench_r.R; fi

clean:
	rm -rf .venv .Rlib demo-out bench-out .pytest_cache *.Rcheck tracebridge_*.tar.gz
