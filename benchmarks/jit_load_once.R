# jit_load() checks once (issue 17 item 6): compare a load that first runs an older R
# checker (the R sources in OLD_R, e.g. a checkout of the commit before) with today's
# jit_load(), alternating in one R process.
#
#   Rscript benchmarks/jit_load_once.R FILE.tb OLD_CHECKOUT/R [REPEATS]
suppressMessages(library(tracebridge))
args <- commandArgs(trailingOnly = TRUE)
path <- args[[1]]
old <- new.env()
old$`%||%` <- function(a, b) if (is.null(a)) b else a
for (f in c("artifact-read.R", "check.R", "inspect.R", "graph-print.R")) {
  sys.source(file.path(args[[2]], f), envir = old)
}
repeats <- if (length(args) > 2) as.integer(args[[3]]) else 25L
invisible(jit_load(path))
invisible(old$read_program(path))
before <- after <- numeric(0)
for (i in seq_len(repeats)) {
  t0 <- proc.time()[["elapsed"]]
  old$read_program(path)
  invisible(jit_load(path))
  t1 <- proc.time()[["elapsed"]]
  invisible(jit_load(path))
  t2 <- proc.time()[["elapsed"]]
  before <- c(before, t1 - t0)
  after <- c(after, t2 - t1)
}
cat(sprintf("%s: R checks, then Python: median %.0f ms (min %.0f); Python once: median %.0f ms (min %.0f)\n",
            basename(path), 1000 * median(before), 1000 * min(before), 1000 * median(after),
            1000 * min(after)))
