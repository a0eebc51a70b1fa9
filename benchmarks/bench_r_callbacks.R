# R functions that Python calls back, through C (src/callback.c) against reticulate's
# r_to_py(<function>) (the path with TRACEBRIDGE_C_CALL=0), in one process, taking turns.
#
#   R_LIBS=.Rlib Rscript benchmarks/bench_r_callbacks.R [calls] [repeats]
#
# Each row is timed with the thread's CPU time (time.thread_time()), after a gc(), and
# gives the median over repeats of the time per call in microseconds. The first row: a
# compiled Python loop calls the R function `function(g) g` with one tensor (the
# callback's own cost); the other rows are what an R user writes, with all C paths on,
# or all off (TRACEBRIDGE_C_CALL=0's path: the objects are made and the loop runs so).

library(tracebridge)

args <- suppressWarnings(as.integer(commandArgs(trailingOnly = TRUE)))
calls <- if (length(args) >= 1 && !is.na(args[[1]])) args[[1]] else 2000L
repeats <- if (length(args) >= 2 && !is.na(args[[2]])) args[[2]] else 5L

reticulate::import("torch")$set_num_threads(1L)
torch_manual_seed(0)
cpu_time <- reticulate::import("time", convert = TRUE)$thread_time
py <- reticulate::py_run_string("
import time
def call_loop(f, x, n):
    t0 = time.thread_time()
    for _ in range(n):
        f(x)
    return (time.thread_time() - t0) / n * 1e6
", local = FALSE, convert = FALSE)

# The objects of each row are made with the path on (`c_on`), as a user's would be.
setup <- function(c_on) {
  tracebridge:::set_c_call(c_on)
  on.exit(tracebridge:::set_c_call(TRUE))
  w <- torch_zeros(2, requires_grad = TRUE)
  target <- torch_tensor(c(1, -2))
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 0.1)
  Twice <- nn_module("Twice", forward = function(x) x * 2)
  list(
    callable = tracebridge:::r_function_py(function(g) g, "bench"),
    sched = lr_lambda(opt, function(epoch) 0.99^epoch),
    lbfgs = optim_lbfgs(list(w), lr = 1, max_iter = 1L),
    w = w, target = target,
    seq = nn_sequential(Twice(), nn_relu()),
    t8 = torch_ones(8)
  )
}

rows <- list(
  list(label = "an R function called from Python (one tensor)",
       run = function(o, n) reticulate::py_to_r(py$call_loop(o$callable, o$t8$py, n))),
  list(label = "`x$register_hook(h)` on a new leaf, then `(x * 2)$sum()$backward()`",
       run = function(o, n) {
         t0 <- cpu_time()
         for (i in seq_len(n)) {
           x <- torch_ones(8, requires_grad = TRUE)
           x$register_hook(function(g) g)
           (x * 2)$sum()$backward()
         }
         (cpu_time() - t0) / n * 1e6
       }),
  list(label = "`scheduler$step()` of `lr_lambda()`",
       run = function(o, n) {
         s <- o$sched
         t0 <- cpu_time()
         for (i in seq_len(n)) s$step()
         (cpu_time() - t0) / n * 1e6
       }),
  list(label = "`opt$step(closure)` of `optim_lbfgs(max_iter = 1)`",
       run = function(o, n) {
         opt <- o$lbfgs
         w <- o$w
         target <- o$target
         closure <- function() {
           opt$zero_grad()
           l <- ((w - target)^2)$sum()
           l$backward()
           l
         }
         t0 <- cpu_time()
         for (i in seq_len(n)) opt$step(closure)
         (cpu_time() - t0) / n * 1e6
       }),
  list(label = "an R module inside `nn_sequential()` (forward run from Python)",
       run = function(o, n) {
         s <- o$seq
         t8 <- o$t8
         t0 <- cpu_time()
         for (i in seq_len(n)) s(t8)
         (cpu_time() - t0) / n * 1e6
       })
)

objs <- list(c = setup(TRUE), r = setup(FALSE))
suppressWarnings(for (row in rows) for (j in 1:2) { # warm up
  tracebridge:::set_c_call(j == 1)
  row$run(objs[[j]], 50L)
  tracebridge:::set_c_call(TRUE)
})
times <- array(NA_real_, c(length(rows), 2, repeats))
suppressWarnings(for (r in seq_len(repeats)) {
  for (k in seq_along(rows)) {
    for (j in 1:2) {
      invisible(gc())
      n <- if (j == 1) calls else max(50L, calls %/% 5L)
      tracebridge:::set_c_call(j == 1)
      times[k, j, r] <- rows[[k]]$run(objs[[j]], n)
      tracebridge:::set_c_call(TRUE)
    }
  }
})
med <- apply(times, c(1, 2), stats::median)
cat(sprintf("`R_LIBS=.Rlib Rscript benchmarks/bench_r_callbacks.R %d %d`: median of %d repeats, µs per call (reticulate: a fifth of the calls); R %s, reticulate %s\n\n",
            calls, repeats, repeats, getRversion(), utils::packageVersion("reticulate")))
cat("| R function called from Python | through C (µs) | through reticulate (µs) |\n|---|---|---|\n")
for (k in seq_along(rows)) {
  cat(sprintf("| %s | %.1f | %.1f |\n", rows[[k]]$label, med[k, 1], med[k, 2]))
}
