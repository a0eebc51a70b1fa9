"""R's base-R reader run on its own: the reader's files of R/ sourced into a plain Rscript
(no Python, no installed package), so that tests hold R's reading of a file to Python's
wherever R and jsonlite are, before or after the R package is built."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# `args` holds the repository root, then the arguments given to run_r().
PREAMBLE = r"""
args <- commandArgs(trailingOnly = TRUE)
root <- args[[1]]
`%||%` <- function(a, b) if (is.null(a)) b else a
for (f in c("artifact-read.R", "check.R", "inspect.R", "graph-print.R")) {
  sys.source(file.path(root, "R", f), envir = globalenv())
}
# The reader's one native routine (src/jsonscan.c, built by _scanner()), as the package
# registers it.
tb_json_scan <- getNativeSymbolInfo(
  "tb_json_scan", dyn.load(Sys.getenv("TRACEBRIDGE_JSONSCAN_LIB")))
"""


@functools.cache
def _scanner() -> str:
    """src/jsonscan.c built on its own (R CMD SHLIB, in a folder of its own: nothing is
    written under src/), once per test process: the path of the shared library."""
    folder = Path(tempfile.mkdtemp(prefix="tb-jsonscan-"))
    shutil.copy(ROOT / "src" / "jsonscan.c", folder / "jsonscan.c")
    done = subprocess.run(
        ["R", "CMD", "SHLIB", "-o", "jsonscan.so", "jsonscan.c"],
        cwd=folder,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return str(folder / "jsonscan.so")


def run_r(body: str, *args: str | os.PathLike, timeout: float = 600) -> str:
    """Run ``body`` after the reader is sourced (``args[[2]]`` onwards are ``args``); its
    standard output, as UTF-8 text. A failed Rscript fails the test with R's stderr."""
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "reader.R"
        script.write_text(PREAMBLE + body)
        done = subprocess.run(
            ["Rscript", str(script), str(ROOT), *map(str, args)],
            capture_output=True,
            timeout=timeout,
            env={
                **os.environ,
                "TRACEBRIDGE_SHARED_IR": str(ROOT / "shared_ir"),
                "TRACEBRIDGE_JSONSCAN_LIB": _scanner(),
            },
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode("utf-8")
