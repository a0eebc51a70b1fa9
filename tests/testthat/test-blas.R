# torch in R's process keeps torch's own BLAS (the note at import_torch_own_blas() in
# R/python.R): R's BLAS is in the global symbol scope first, and libtorch_cpu.so's calls to
# its own sgemm_, strsm_, ... were bound to R's. The dynamic linker's log of its bindings
# (LD_DEBUG) says where each of libtorch_cpu's symbols went.

# The bindings of libtorch_cpu.so to R's BLAS or LAPACK in a new R process running `code`,
# and what that process printed.
torch_bindings_to_r_blas <- function(code) {
  log <- tempfile("ld-bindings")
  out <- suppressWarnings(system2(
    file.path(R.home("bin"), "Rscript"), c("-e", shQuote(code)), stdout = TRUE,
    stderr = TRUE, env = c(paste0("R_LIBS=", paste(.libPaths(), collapse = ":")),
                           "LD_DEBUG=bindings", paste0("LD_DEBUG_OUTPUT=", log))))
  files <- Sys.glob(paste0(log, ".*"))
  on.exit(unlink(files))
  lines <- unlist(lapply(files, function(f) {
    grep("libtorch_cpu.so", readLines(f, warn = FALSE), value = TRUE, fixed = TRUE)
  }))
  list(torch = length(lines), to_r = grep("to \\S*/lib(R)?(blas|lapack)\\.so", lines, value = TRUE),
       out = out)
}

test_that("torch's matrix products use torch's BLAS in R's process, not R's", {
  skip_if_no_torch()
  skip_if(!identical(.Platform$OS.type, "unix") || Sys.info()[["sysname"]] != "Linux",
          "LD_DEBUG is glibc's")
  code <- paste(
    "library(tracebridge)",
    "x <- torch_mm(torch_ones(2, 3), torch_ones(3, 2))",
    "cat('sum', x$sum()$item(), 'blas', tracebridge:::.tb$torch_blas, '\\n')", sep = "; ")
  got <- torch_bindings_to_r_blas(code)
  expect_true("sum 12 blas own " %in% got$out, label = paste(got$out, collapse = "\n"))
  expect_gt(got$torch, 0) # the log has libtorch_cpu's bindings
  expect_equal(got$to_r, character())
  # The check finds the fault where it exists: torch imported before tracebridge.
  before <- torch_bindings_to_r_blas(paste(
    "reticulate::import('torch')", "library(tracebridge)",
    "cat('blas', tracebridge:::import_torch_own_blas(), '\\n')",
    sep = "; "))
  expect_true(any(grepl("blas imported before tracebridge", before$out)),
              label = paste(before$out, collapse = "\n"))
  skip_if(!length(before$to_r), "R's BLAS exports none of the names torch's does here")
  expect_match(before$to_r[[1]], "libtorch_cpu.so")
})
