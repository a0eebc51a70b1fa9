#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: system packages, the .venv with pinned
# Python packages, and the R package in .Rlib/. Every step checks before it acts,
# so a second run costs a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

APT_PACKAGES="r-base-dev r-cran-reticulate r-cran-testthat r-cran-jsonlite r-cran-knitr r-cran-rmarkdown r-cran-cli pandoc graphviz"
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

bash scripts/apt-install.sh $APT_PACKAGES

# torch is pinned in requirements.txt to the CPU build, which lives on PyTorch's CPU wheel
# index (TORCH_INDEX_URL to use another, e.g. .../whl/cu128); from the public index an
# unpinned or plain torch pulls GBs of CUDA wheels. It is installed first, alone and without
# its dependencies, so that index is asked about torch only (requirements.txt brings the rest).
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
STAMP=.venv/.requirements.sha
want=$(sha256sum requirements.txt pyproject.toml | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat $STAMP 2>/dev/null)" != "$want" ]; then
  echo "setup: creating .venv"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  torch_pin=$(grep -E '^torch==' requirements.txt)
  .venv/bin/pip install -q --no-deps --extra-index-url "$TORCH_INDEX_URL" "$torch_pin"
  .venv/bin/pip install -q -r requirements.txt
  # R's Python: reticulate 1.28 cannot load numpy 2 (see README "Installing").
  .venv/bin/python -c 'import numpy, sys; sys.exit(int(numpy.__version__.split(".")[0]) >= 2)' || {
    echo "setup: .venv has numpy >= 2, which R's reticulate cannot load; keep Ray, Spark and"
    echo "       other numpy-2 packages in .venv-scale (make scale-setup)"; exit 1; }
  .venv/bin/pip install -q --no-deps --no-build-isolation -e .
  echo "$want" > $STAMP
fi

# The R package goes into a project-local library so nothing system-wide changes. It is
# built first (R CMD build runs the vignettes against the .venv) and installed from the
# tarball, so that the vignettes are installed: vignette(package = "tracebridge").
if [ -f DESCRIPTION ]; then
  mkdir -p .Rlib
  rstamp=.Rlib/.tracebridge.sha
  rwant=$(find DESCRIPTION NAMESPACE R inst vignettes man -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)
  if [ "$(cat $rstamp 2>/dev/null)" != "$rwant" ]; then
    echo "setup: building and installing the R package (with vignettes) into .Rlib"
    export TRACEBRIDGE_PYTHON=${TRACEBRIDGE_PYTHON:-$ROOT/.venv/bin/python}
    export RETICULATE_PYTHON=$TRACEBRIDGE_PYTHON
    export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
    RBUILD=$(mktemp -d)
    # From a clean export of the sources (never the .venv): scripts/r-build.sh.
    TARBALL=$(R_LIBS="$ROOT/.Rlib" bash scripts/r-build.sh "$RBUILD") || { rm -rf "$RBUILD"; exit 1; }
    R_LIBS=.Rlib R CMD INSTALL --no-test-load --library=.Rlib "$TARBALL" >/dev/null
    rm -rf "$RBUILD"
    echo "$rwant" > $rstamp
  fi
fi
echo "setup: ready (python: $ROOT/.venv/bin/python)"
