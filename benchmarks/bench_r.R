# Per-call latency of a traced small module called from R, against the same traced module
# called from Python (timed inside Python, through reticulate), at batch size 1.
#
#   R_LIBS=.Rlib Rscript benchmarks/bench_r.R [calls]
#
# Prints the best-of-repeats time per call for each side and the R overhead in
# microseconds. Target (issue 8): R adds at most 50 us per call over Python.

library(tracebridge)

args <- commandArgs(trailingOnly = TRUE)
calls <- if (length(args)) as.integer(args[[1]]) else 2000L
repeats <- 7L

Small <- nn_module("Small",
  initialize = function() {
    self$fc1 <- nn_linear(16, 32)
    self$fc2 <- nn_linear(32, 4)
  },
  forward = function(x) self$fc2(torch_relu(self$fc1(x)))
)

torch_manual_seed(0)
net <- Small()
net$eval()
x <- torch_randn(1, 16)
traced <- jit_trace(net, x, respect_mode = FALSE)
stopifnot(isTRUE(all.equal(as_array(traced(x)), as_array(net(x)), tolerance = 1e-6)))

time_r <- function() {
  for (i in seq_len(100)) traced(x)
  best <- Inf
  for (r in seq_len(repeats)) {
    t0 <- Sys.time()
    for (i in seq_len(calls)) traced(x)
    best <- min(best, as.double(Sys.time() - t0, units = "secs") / calls)
  }
  best * 1e6
}

bench_py <- reticulate::py_run_string("
def per_call_us(fn, x, calls, repeats):
    import time
    for _ in range(100):
        fn(x)
    best = float('inf')
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(x)
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6
", local = TRUE, convert = TRUE)

py_us <- bench_py$per_call_us(traced$py, x$py, calls, repeats)
r_us <- time_r()

# The floor: one reticulate call of a Python function that does nothing. Whatever R does
# per call can not be cheaper than this; on a loaded machine it dominates.
noop <- reticulate::py_eval("lambda x: x", convert = FALSE)
xpy <- x$py
floor_us <- {
  best <- Inf
  for (r in seq_len(repeats)) {
    t0 <- Sys.time()
    for (i in seq_len(calls)) reticulate::py_call(noop, xpy)
    best <- min(best, as.double(Sys.time() - t0, units = "secs") / calls)
  }
  best * 1e6
}

cat(sprintf("traced Small (16 -> 32 -> 4), batch 1, best of %d x %d calls\n", repeats, calls))
cat(sprintf("  Python call: %8.1f us\n", py_us))
cat(sprintf("  R call:      %8.1f us\n", r_us))
cat(sprintf("  R overhead:  %8.1f us per call (target <= 50 us)\n", r_us - py_us))
cat(sprintf("  (reticulate floor, a no-op Python call from R: %.1f us; load average %s)\n",
            floor_us, paste(tryCatch(readLines("/proc/loadavg", 1L), error = function(e) "?"))))
