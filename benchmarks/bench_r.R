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

# Each repeat times the three side by side (Python loop, R loop, reticulate's py_call), so
# that a busy machine slows all three alike; the best repeat of each is reported.
bench_py <- reticulate::py_run_string("
def per_call_us(fn, x, calls):
    import time
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - t0) / calls * 1e6
", local = TRUE, convert = TRUE)

r_loop <- function(f) {
  t0 <- proc.time()[[3]]
  for (i in seq_len(calls)) f()
  (proc.time()[[3]] - t0) / calls * 1e6
}

xpy <- x$py
tpy <- traced$py
for (i in seq_len(100)) traced(x)
py_us <- r_us <- bare_us <- Inf
for (r in seq_len(repeats)) {
  py_us <- min(py_us, bench_py$per_call_us(tpy, xpy, calls))
  r_us <- min(r_us, r_loop(function() traced(x)))
  bare_us <- min(bare_us, r_loop(function() reticulate::py_call(tpy, xpy)))
}

cat(sprintf("traced Small (16 -> 32 -> 4), batch 1, best of %d x %d calls\n", repeats, calls))
cat(sprintf("  Python call: %8.1f us\n", py_us))
cat(sprintf("  R call:      %8.1f us\n", r_us))
cat(sprintf("  R overhead:  %8.1f us per call (target <= 50 us)\n", r_us - py_us))
cat(sprintf("  the same call through reticulate::py_call(): %.1f us over Python\n",
            bare_us - py_us))
cat(sprintf("  (R's call goes through the package's C call path: src/call.c; load average %s)\n",
            paste(tryCatch(readLines("/proc/loadavg", 1L), error = function(e) "?"))))
