#!/usr/bin/env bash
# Build the R package tarball, vignettes included, from a clean export of the sources, and
# print its path. Usage: scripts/r-build.sh OUTDIR
#
# Why an export: R CMD build copies the whole directory before .Rbuildignore prunes it, so
# building a working checkout copies the 1 GB .venv (minutes). The export holds what git
# would (tracked files and new files that are not ignored, as they are in the working
# tree), so .venv, .venv-scale, .Rlib and build outputs never travel; outside a git
# checkout those are left out by name.
#
# The vignettes run against Python (TRACEBRIDGE_PYTHON, PYTHONPATH): a tarball whose
# vignettes were built without it would ship them without results, so that is an error.
set -euo pipefail
OUT=$(cd "${1:?usage: scripts/r-build.sh OUTDIR}" && pwd)
cd "$(dirname "$0")/.."
ROOT=$(pwd)
EXPORT_PARENT=$(mktemp -d)
trap 'rm -rf "$EXPORT_PARENT"' EXIT
EXPORT=$EXPORT_PARENT/tracebridge
mkdir -p "$EXPORT"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$EXPORT"
else
  tar --exclude=./.venv --exclude=./.venv-scale --exclude=./.Rlib --exclude=./.git \
    --exclude='./*.Rcheck' --exclude='./tracebridge_*.tar.gz' --exclude=./site \
    -cf - . | tar -xf - -C "$EXPORT"
fi

(cd "$OUT" && R CMD build "$EXPORT" >build.log 2>&1) || { cat "$OUT/build.log" >&2; exit 1; }
TARBALL=$(ls -t "$OUT"/tracebridge_*.tar.gz | head -1)

# Every vignette must have run: its HTML holds printed results ("#>" comments).
for html in $(tar -tzf "$TARBALL" | grep -E '^tracebridge/inst/doc/.*\.html$'); do
  # grep -c reads to the end (grep -q would stop early, and pipefail see tar's SIGPIPE).
  if ! tar -xzOf "$TARBALL" "$html" | grep -c '#&gt;' >/dev/null; then
    echo "r-build: $html has no results: the vignettes were built without Python." >&2
    echo "         Set TRACEBRIDGE_PYTHON (and PYTHONPATH=$ROOT/python), or run make setup." >&2
    exit 1
  fi
done
echo "$TARBALL"
