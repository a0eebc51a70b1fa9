# State dicts, printing and `$data` from R: through C (src/state.c, src/fields.c) against
# TRACEBRIDGE_C_CALL=0's path (reticulate), in one process; thread CPU time, median of 3
# runs of `calls` calls, µs per call.
#
#   R_LIBS=.Rlib Rscript benchmarks/bench_r_state.R [calls]

library(tracebridge)

args <- suppressWarnings(as.integer(commandArgs(trailingOnly = TRUE)))
calls <- if (length(args) >= 1 && !is.na(args[[1]])) args[[1]] else 200L
reticulate::import("torch")$set_num_threads(1L)
cpu_time <- reticulate::import("time", convert = TRUE)$thread_time
time_us <- function(expr, n) {
  f <- eval(bquote(function() {
    t0 <- cpu_time()
    for (i in seq_len(.(n))) .(expr)
    (cpu_time() - t0) / .(n) * 1e6
  }))
  f()
  invisible(gc())
  stats::median(c(f(), f(), f()))
}

torch_manual_seed(0)
x <- torch_randn(8, 8)
y <- torch_randn(8, 8)
net <- nn_sequential(nn_linear(20, 64), nn_relu(), nn_linear(64, 64), nn_relu(),
                     nn_linear(64, 2))
opt <- optim_adam(net$parameters)
net(torch_randn(4, 20))$sum()$backward()
opt$step()
sd <- net$state_dict()
osd <- opt$state_dict()
rows <- list(
  list("`net$state_dict()` (MLP 20-64-64-2)", quote(net$state_dict())),
  list("`net$load_state_dict(sd)`", quote(net$load_state_dict(sd))),
  list("`opt$state_dict()` (Adam over that MLP)", quote(opt$state_dict())),
  list("`opt$load_state_dict(osd)`", quote(opt$load_state_dict(osd))),
  list("`print(x)` (8x8, into capture.output())", quote(utils::capture.output(print(x)))),
  list("`print(net)` (into capture.output())", quote(utils::capture.output(print(net)))),
  list("`x$data`", quote(x$data)),
  list("`x$data <- y`", quote(x$data <- y)),
  list("`x$py`", quote(x$py))
)
cat(sprintf("`R_LIBS=.Rlib Rscript benchmarks/bench_r_state.R %d`\n\n", calls))
cat("| call | through C (µs) | through reticulate (µs) |\n|---|---|---|\n")
for (row in rows) {
  c_us <- time_us(row[[2]], calls)
  tracebridge:::set_c_call(FALSE)
  r_us <- time_us(row[[2]], max(20L, calls %/% 5L))
  tracebridge:::set_c_call(TRUE)
  cat(sprintf("| %s | %.1f | %.1f |\n", row[[1]], c_us, r_us))
}
