# What the training loop of benchmarks/bench_r.R costs statement by statement, R against
# Python in one process, taking turns (thread CPU time).
#
#   R_LIBS=.Rlib Rscript benchmarks/bench_r_train.R [rounds]
#   R_LIBS=.Rlib R -d "valgrind --tool=callgrind --collect-atstart=no" --no-echo \
#     -f benchmarks/bench_r_train.R --args --callgrind [epochs]
#
# A timer around each statement would cost as much as some statements (a thread CPU clock
# is a system call), so each run does the first k statements of every step only
# (k = 0: the loop alone, ..., k = 8: the whole step), R and Python the same k, taking
# turns; a statement's cost is the difference between the medians of k and k - 1 (µs a
# step). Statements left out change what the later ones find (no backward: the graphs
# stay), the same on both sides. Differences of medians on a busy machine are noisy: use
# many rounds, or `--callgrind`, which counts instructions (exact, and the same on a busy
# machine): under valgrind's callgrind, each run (default 2 epochs) is counted alone
# (collection is switched on and off around it by a client request, from a small shared
# object built with R CMD SHLIB in a temporary folder) and the table is read back from
# the dumps callgrind writes in the working folder. Add `--cache-sim=yes --LL=1048576,8,64`
# (this machine's L2) to valgrind's options for the misses (see the note in bench_r.R).

library(tracebridge)

argv <- commandArgs(trailingOnly = TRUE)
callgrind <- "--callgrind" %in% argv
args <- suppressWarnings(as.integer(argv[argv != "--callgrind"]))
first <- if (length(args) >= 1 && !is.na(args[[1]])) args[[1]] else NA
rounds <- if (callgrind) 1L else if (is.na(first)) 9L else first
epochs <- if (!callgrind) 5L else if (is.na(first)) 2L else first

torch_manual_seed(0)
reticulate::import("torch")$set_num_threads(1L)
cpu_time <- reticulate::import("time", convert = TRUE)$thread_time
# Under callgrind, the clock is a switch: on at the start of a run, off at its end.
toggle_c <- NULL
if (callgrind) {
  src <- file.path(tempdir(), "tb_callgrind.c")
  writeLines(c("#include <valgrind/callgrind.h>", "#include <Rinternals.h>",
               "void tb_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }",
               "void tb_dump(char **label) { CALLGRIND_DUMP_STATS_AT(label[0]); }",
               "SEXP tb_first(SEXP x, SEXP a, SEXP b, SEXP c) { return x; }"), src)
  lib <- sub("[.]c$", .Platform$dynlib.ext, src)
  if (system2(file.path(R.home("bin"), "R"), c("CMD", "SHLIB", "-o", lib, src),
              stdout = FALSE) != 0) stop("could not build ", lib, " (valgrind/callgrind.h?)")
  dll <- dyn.load(lib)
  toggle_c <- lib
  # Resolved now: .C() with a name searches every DLL, inside the count.
  tb_toggle <- getNativeSymbolInfo("tb_toggle", dll)
  tb_dump <- getNativeSymbolInfo("tb_dump", dll)
  tb_first <- getNativeSymbolInfo("tb_first", dll)
}
py <- reticulate::py_run_string("
import time, torch
import torch.nn.functional as F

def train_k(X, Y, epochs, batch, k, toggle=None):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    n = X.shape[0]
    t0 = time.thread_time()
    if toggle is not None:
        toggle()
    for epoch in range(epochs):
        perm = torch.randperm(n)
        for s in range(0, n, batch):
            if k >= 1: idx = perm[s:s + batch]
            if k >= 2: xb = X[idx]
            if k >= 3: yb = Y[idx]
            if k >= 4: opt.zero_grad(set_to_none=False)
            if k >= 5: out = model(xb)
            if k >= 6: loss = F.cross_entropy(out, yb)
            if k >= 7: loss.backward()
            if k >= 8: opt.step()
    if toggle is not None:
        toggle()
    return time.thread_time() - t0
", local = FALSE, convert = FALSE)
toggle_py <- if (callgrind) {
  reticulate::import("ctypes", convert = FALSE)$CDLL(toggle_c)$tb_toggle
} else {
  NULL
}
counting <- FALSE # under callgrind: runs count only from the first round on
clock_on <- function() if (counting) invisible(.C(tb_toggle))
clock_off <- function(label) {
  if (!counting) return(invisible())
  .C(tb_toggle)
  invisible(.C(tb_dump, label))
}

n <- 2000L
batch <- 32L
torch_manual_seed(2)
X <- torch_randn(n, 20)
Y <- (X[, 1] > 0)$long() + 1L
Ypy <- tracebridge:::tensor_py(Y - 1L)
starts <- seq(1L, n, by = batch)
ends <- pmin(starts + batch - 1L, n)
steps <- epochs * length(starts)

train_k <- function(k) {
  torch_manual_seed(1)
  model <- nn_sequential(nn_linear(20, 64), nn_relu(), nn_linear(64, 64), nn_relu(),
                         nn_linear(64, 2))
  opt <- optim_adam(model$parameters, lr = 1e-3)
  t0 <- cpu_time()
  clock_on()
  for (epoch in seq_len(epochs)) {
    perm <- torch_randperm(n) + 1L
    for (j in seq_along(starts)) {
      s <- starts[[j]]
      e <- ends[[j]]
      if (k >= 1) idx <- perm[s:e]
      if (k >= 2) xb <- X[idx, ]
      if (k >= 3) yb <- Y[idx]
      if (k >= 4) opt$zero_grad()
      if (k >= 5) out <- model(xb)
      if (k >= 6) loss <- nnf_cross_entropy(out, yb)
      if (k >= 7) loss$backward()
      if (k >= 8) opt$step()
    }
  }
  clock_off(sprintf("tb_R_%d", k))
  cpu_time() - t0
}
train_k_py <- function(k) {
  toggle <- if (counting) toggle_py else NULL
  t <- reticulate::py_to_r(py$train_k(X$py, Ypy, epochs, batch, as.integer(k), toggle))
  if (counting) .C(tb_dump, sprintf("tb_Py_%d", k))
  t
}

labels <- c("loop (`s`, `e`)", "`idx <- perm[s:e]`", "`xb <- X[idx, ]`", "`yb <- Y[idx]`",
            "`opt$zero_grad()`", "`out <- model(xb)`", "`loss <- nnf_cross_entropy(out, yb)`",
            "`loss$backward()`", "`opt$step()`")
ks <- 0:8
# Warm up both sides (compiled closures, the C paths, torch's first calls).
invisible(lapply(ks, train_k))
invisible(lapply(ks, train_k_py))
counting <- callgrind
times <- array(NA_real_, c(length(ks), 2, rounds))
for (r in seq_len(rounds)) {
  for (k in ks) {
    invisible(gc())
    times[k + 1, 1, r] <- train_k(k)
    times[k + 1, 2, r] <- train_k_py(k)
  }
}
# R's own floor (callgrind only): pure R calls of the kinds a step makes, each to a body
# that is one .Call of a C function that returns its first argument.
floor_rows <- list(
  list(label = "the loop alone", expr = quote(NULL)),
  list(label = "`.Call()` of it", expr = quote(.Call(tb_first, x, 1, 2, 3))),
  list(label = "a closure with 4 arguments (2 defaults) whose body is that `.Call()`",
       expr = quote(g(s, e))),
  list(label = "`x[s:e]`: S3 dispatch of `[` to such a method (as `[.torch_tensor`)",
       expr = quote(x[s:e])),
  list(label = "`x$m()`: S3 dispatch of `$` (as `$.torch_optimizer`), then `m()`",
       expr = quote(x$m()))
)
if (callgrind) {
  `[.tb_floor` <- function(x, ..., drop = TRUE) {
    out <- .Call(tb_first, x, environment(), drop, NULL)
    if (!is.symbol(out)) return(out)
  }
  `$.tb_floor` <- function(x, name) {
    f <- .subset2(x, name)
    if (is.null(f)) stop("no ", name) else f
  }
  registerS3method("[", "tb_floor", `[.tb_floor`)
  registerS3method("$", "tb_floor", `$.tb_floor`)
  g <- function(a, b, c = NULL, d = 1) .Call(tb_first, a, b, c, d)
  x <- structure(list(m = function() .Call(tb_first, 1, 2, 3, 4)), class = "tb_floor")
  for (k in seq_along(floor_rows)) {
    loop <- eval(bquote(function() {
      clock_on()
      for (i in seq_len(.(steps))) {
        s <- 1L
        e <- 5L
        .(floor_rows[[k]]$expr)
      }
      clock_off(.(sprintf("tb_floor_%d", k)))
    }))
    counting <- FALSE
    loop() # compiled and warm
    counting <- TRUE
    loop()
  }
}

unit <- "µs"
if (callgrind) {
  # The dumps of this process: `desc: Trigger: Client Request: tb_R_3`, `totals: N ...`.
  dumps <- list.files(".", pattern = sprintf("^callgrind[.]out[.]%d[.]", Sys.getpid()))
  if (!length(dumps)) stop("no callgrind dumps in ", getwd(), ": run it under callgrind")
  for (f in dumps) {
    lines <- readLines(f, n = 200L)
    label <- sub(".*Client Request: ", "", grep("^desc: Trigger", lines, value = TRUE))
    total <- as.numeric(strsplit(grep("^(totals|summary):", lines, value = TRUE)[[1]],
                                 " ")[[1]][[2]])
    m <- regmatches(label, regexec("^tb_(R|Py|floor)_([0-9])$", label))[[1]]
    if (length(m) != 3) next
    if (m[[2]] == "floor") floor_rows[[as.integer(m[[3]])]]$total <- total
    else times[as.integer(m[[3]]) + 1, if (m[[2]] == "R") 1 else 2, 1] <- total
  }
  unit <- "instructions"
}
med <- apply(times, c(1, 2), stats::median) / steps * if (callgrind) 1 else 1e6
cost <- rbind(med[1, ], diff(med))
cat(sprintf("%d rounds of %d steps, %s a step (differences of cumulative runs)\n\n",
            rounds, steps, unit))
cat("| statement | R | Python | R - Python |\n|---|---|---|---|\n")
for (k in ks) {
  cat(sprintf("| %s | %.1f | %.1f | %+.1f |\n", labels[[k + 1]], cost[k + 1, 1],
              cost[k + 1, 2], cost[k + 1, 1] - cost[k + 1, 2]))
}
cat(sprintf("| the whole step | %.1f | %.1f | %+.1f (%.3fx) |\n", med[9, 1], med[9, 2],
            med[9, 1] - med[9, 2], med[9, 1] / med[9, 2]))
if (callgrind) {
  cat("\nR's floor: instructions a call of pure R (beyond the loop alone)\n\n")
  cat("| call | instructions |\n|---|---|\n")
  base <- floor_rows[[1]]$total / steps
  for (row in floor_rows[-1]) {
    cat(sprintf("| %s | %.0f |\n", row$label, row$total / steps - base))
  }
}
