#!/usr/bin/env bash
# R side of `make test`: R CMD build, install the tarball (vignettes included) into .Rlib,
# run testthat, then R CMD check --no-manual --no-tests; fails on any test failure and on any check
# ERROR or WARNING.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

export TRACEBRIDGE_PYTHON=${TRACEBRIDGE_PYTHON:-$ROOT/.venv/bin/python}
export RETICULATE_PYTHON=$TRACEBRIDGE_PYTHON
export R_LIBS="$ROOT/.Rlib${R_LIBS:+:$R_LIBS}"
# Python must find the tracebridge package from the checkout, even from R CMD check's copy.
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"

mkdir -p .Rlib
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
echo "test-r: R CMD build (from a clean export of the sources)"
TARBALL=$(bash scripts/r-build.sh "$BUILD")
# Installed from the built tarball, so the vignettes are installed too (as by setup).
echo "test-r: installing the R package (with vignettes) into .Rlib"
R CMD INSTALL --no-test-load --library=.Rlib "$TARBALL" >/dev/null

echo "test-r: testthat"
(cd tests/testthat && Rscript -e '
  library(testthat); library(tracebridge)
  if (!torch_is_installed()) stop("Python torch/tracebridge not found; run scripts/setup.sh")
  res <- as.data.frame(test_dir(".", package = "tracebridge", load_package = "installed",
                                reporter = "summary", stop_on_failure = TRUE))
  cat(sprintf("test-r: %d expectations, %d failed, %d skipped\n",
              sum(res$nb), sum(res$failed), sum(res$skipped)))
  if (any(res$failed > 0) || any(res$error)) quit(status = 1)
')


# --no-tests: testthat has just run on the package installed from this same tarball;
# check's own run of tests/testthat.R would run every test a second time (about 4 of
# CI's minutes). Everything else check does (examples, vignettes, documentation, the
# NAMESPACE, compiled code) still runs.
echo "test-r: R CMD check --no-manual --no-tests"
status=0
(cd "$BUILD" && _R_CHECK_FORCE_SUGGESTS_=false R CMD check --no-manual --no-tests "$TARBALL" \
  >check.log 2>&1) || status=$?
cat "$BUILD/check.log" | sed -n '/Status:/p'
if [ $status -ne 0 ] || grep -qE "^Status:.*(ERROR|WARNING)" "$BUILD/check.log"; then
  cat "$BUILD/check.log"
  for f in "$BUILD"/tracebridge.Rcheck/00check.log "$BUILD"/tracebridge.Rcheck/tests/testthat.Rout.fail; do
    [ -f "$f" ] && { echo "== $f"; tail -60 "$f"; }
  done
  echo "test-r: R CMD check failed"
  exit 1
fi
grep -E "NOTE" "$BUILD/check.log" || true
echo "test-r: ok"
