# tracebridge: `make demo` and `make test` set everything up themselves.
PY := .venv/bin/python
export R_LIBS := $(CURDIR)/.Rlib
export TRACEBRIDGE_PYTHON := $(CURDIR)/.venv/bin/python

.PHONY: setup demo test test-python test-r lint bench docs clean zoo zoo-setup fuzz \
	scale-setup test-scale bench-scale docs-setup test-docs

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) scripts/demo.py

# Everything, each extra in its own environment that this installs: the documentation site
# (.venv-docs, pkgdown) built and checked, and the Ray and Spark examples on two local workers
# (.venv-scale, Java). From nothing they add about 4 minutes (README, "Further reading").
test: setup lint test-python test-r test-docs test-scale

lint:
	.venv/bin/ruff check python tests/python benchmarks shared_ir scripts examples

test-python:
	$(PY) -m pytest -n 2 -q --doctest-modules python/tracebridge tests/python

# The loader fuzzer's long run (make test runs 800 cases) and the op contract's (make test
# runs one case per op): cases and seed from the environment.
FUZZ_CASES ?= 20000
FUZZ_SEED ?= $(shell date +%s)
CONTRACT_CASES ?= 20
fuzz: setup
	TRACEBRIDGE_FUZZ_CASES=$(FUZZ_CASES) TRACEBRIDGE_FUZZ_SEED=$(FUZZ_SEED) \
	  $(PY) -m pytest -q -s -p no:xdist -p no:cacheprovider tests/python/test_fuzz.py -k "loader or crafted"
	TRACEBRIDGE_CONTRACT_CASES=$(CONTRACT_CASES) TRACEBRIDGE_CONTRACT_SEED=$(FUZZ_SEED) \
	  $(PY) -m pytest -q -s -p no:xdist -p no:cacheprovider tests/python/test_op_contract.py \
	  -k every_op

test-r:
	@if [ -f scripts/test-r.sh ]; then bash scripts/test-r.sh; else echo "R tests: none yet"; fi

bench: setup
	$(PY) benchmarks/bench_python.py
	$(PY) benchmarks/bench_large.py
	@if [ -f benchmarks/bench_r.R ]; then Rscript benchmarks/bench_r.R; fi

clean:
	rm -rf .venv .venv-scale .venv-docs site build/docs-src .Rlib demo-out bench-out .pytest_cache *.Rcheck tracebridge_*.tar.gz

# The model zoo (docs/zoo.md): optional packages, pinned, installed with the project's pins
# as constraints so torch and numpy never move. Not part of `make test`.
# `make zoo ZOO_ARGS="--only bert --tools tracebridge"` runs a subset.
ZOO_STAMP := .venv/.zoo.sha
zoo-setup: setup
	@want=$$(sha256sum requirements.txt requirements-zoo.txt | sha256sum | cut -c1-16); \
	if [ "$$(cat $(ZOO_STAMP) 2>/dev/null)" != "$$want" ]; then \
	  .venv/bin/pip install -q -c requirements.txt --no-deps torchvision==0.28.0 && \
	  .venv/bin/pip install -q -c requirements.txt -r requirements-zoo.txt && \
	  echo "$$want" > $(ZOO_STAMP); \
	fi

zoo: zoo-setup
	$(PY) benchmarks/zoo.py $(ZOO_ARGS)

# Ray and Spark (docs/scale-out.md) in an environment of their own, .venv-scale: they need
# numpy 2, which R's Python (.venv) cannot have. About 600 MB of downloads (pyspark's source
# archive is 456 MB and is built into a wheel once per machine: pip caches it) and Java 17
# for Spark (apt). `make test` runs test-scale. tracebridge goes in as a user installs it:
# pip resolves its ranges against the torch already there and keeps it. --no-compile: byte-
# compiling every module of torch, Ray and Spark took longer than the downloads; Python
# compiles the few that the tests import.
SCALE_PY := .venv-scale/bin/python
SCALE_STAMP := .venv-scale/.requirements.sha
SCALE_PIP := .venv-scale/bin/pip install -q --no-compile
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
SCALE_PYTHON ?= $(shell command -v python3.11 || command -v python3)
scale-setup:
	@bash scripts/apt-install.sh openjdk-17-jre-headless
	@want=$$(sha256sum requirements-scale.txt pyproject.toml | sha256sum | cut -c1-16); \
	if [ "$$(cat $(SCALE_STAMP) 2>/dev/null)" != "$$want" ]; then \
	  echo "scale-setup: creating .venv-scale"; \
	  ( [ -x $(SCALE_PY) ] || $(SCALE_PYTHON) -m venv .venv-scale ) && \
	  $(SCALE_PIP) --no-deps --extra-index-url $(TORCH_INDEX_URL) \
	    "$$(grep -E '^torch==' requirements-scale.txt)" && \
	  $(SCALE_PIP) -r requirements-scale.txt && \
	  $(SCALE_PIP) --no-build-isolation -e . && \
	  echo "$$want" > $(SCALE_STAMP); \
	fi

# TRACEBRIDGE_SCALE=1: a missing engine or Java fails the tests instead of skipping them.
test-scale: scale-setup
	TRACEBRIDGE_SCALE=1 $(SCALE_PY) -m pytest -p no:xdist -p no:cacheprovider -q \
	  tests/python/test_scale_out.py

bench-scale: scale-setup
	$(SCALE_PY) benchmarks/bench_scale.py

# The documentation site: MkDocs + mkdocstrings for Python (site/python), pkgdown for R
# (site/r). Fails on an undocumented public function (Python: scripts/docs_site.py check;
# R: tools::undoc / codoc in scripts/docs-r.R) and on a broken link (mkdocs --strict, then
# every relative link of both built sites). `make test` builds and checks it too
# (test-docs), with pkgdown not running the R examples and vignettes again: R CMD build and
# check in test-r run them (scripts/docs-r.R says how).
DOCS_STAMP := .venv-docs/.requirements.sha
docs-setup:
	@bash scripts/apt-install.sh r-cran-pkgdown
	@want=$$(sha256sum requirements-docs.txt | cut -c1-16); \
	if [ "$$(cat $(DOCS_STAMP) 2>/dev/null)" != "$$want" ]; then \
	  echo "docs-setup: creating .venv-docs"; \
	  ( [ -x .venv-docs/bin/python ] || $(SCALE_PYTHON) -m venv .venv-docs ) && \
	  .venv-docs/bin/pip install -q --no-compile -r requirements-docs.txt && \
	  echo "$$want" > $(DOCS_STAMP); \
	fi

define DOCS_BUILD
$(PY) scripts/docs_site.py check
$(PY) scripts/docs_site.py stage
.venv-docs/bin/mkdocs build --strict --quiet
PYTHONPATH=$(CURDIR)/python RETICULATE_PYTHON=$(TRACEBRIDGE_PYTHON) Rscript scripts/docs-r.R
$(PY) scripts/docs_site.py links site/python site/r
endef

docs: setup docs-setup
	$(DOCS_BUILD)

test-docs: export TRACEBRIDGE_DOCS_RUN := 0
test-docs: docs-setup
	$(DOCS_BUILD)
