# What the training loop of benchmarks/bench_r.R costs statement by statement, R against
# Python in one process, taking turns (thread CPU time).
#
#   R_LIBS=.Rlib Rscript benchmarks/bench_r_train.R [rounds]
#
# A timer around each statement would cost as much as some statements (a thread CPU clock
# is a system call), so each run does the first k statements of every step only
# (k = 0: the loop alone, ..., k = 8: the whole step), R and Python the same k, taking
# turns; a statement's cost is the difference between the medians of k and k - 1 (µs a
# step). Statements left out change what the later ones find (no backward: the graphs
# stay), the same on both sides. Differences of medians on a busy machine are noisy: use
# many rounds, and callgrind for instruction counts (see the note in bench_r.R).

library(tracebridge)

args <- suppressWarnings(as.integer(commandArgs(trailingOnly = TRUE)))
rounds <- if (length(args) >= 1 && !is.na(args[[1]])) args[[1]] else 9L
epochs <- 5L

torch_manual_seed(0)
reticulate::import("torch")$set_num_threads(1L)
cpu_time <- reticulate::import("time", convert = TRUE)$thread_time
py <- reticulate::py_run_string("
import time, torch
import torch.nn.functional as F

def train_k(X, Y, epochs, batch, k):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    n = X.shape[0]
    t0 = time.thread_time()
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
    return time.thread_time() - t0
", local = FALSE, convert = FALSE)

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
  cpu_time() - t0
}
train_k_py <- function(k) {
  reticulate::py_to_r(py$train_k(X$py, Ypy, epochs, batch, as.integer(k)))
}

labels <- c("loop (`s`, `e`)", "`idx <- perm[s:e]`", "`xb <- X[idx, ]`", "`yb <- Y[idx]`",
            "`opt$zero_grad()`", "`out <- model(xb)`", "`loss <- nnf_cross_entropy(out, yb)`",
            "`loss$backward()`", "`opt$step()`")
ks <- 0:8
invisible(lapply(ks, train_k))
invisible(lapply(ks, train_k_py))
times <- array(NA_real_, c(length(ks), 2, rounds))
for (r in seq_len(rounds)) {
  for (k in ks) {
    invisible(gc())
    times[k + 1, 1, r] <- train_k(k)
    times[k + 1, 2, r] <- train_k_py(k)
  }
}
med <- apply(times, c(1, 2), stats::median) / steps * 1e6
cost <- rbind(med[1, ], diff(med))
cat(sprintf("%d rounds of %d steps, µs a step (differences of medians of cumulative runs)\n\n",
            rounds, steps))
cat("| statement | R | Python | R - Python |\n|---|---|---|---|\n")
for (k in ks) {
  cat(sprintf("| %s | %.1f | %.1f | %+.1f |\n", labels[[k + 1]], cost[k + 1, 1],
              cost[k + 1, 2], cost[k + 1, 1] - cost[k + 1, 2]))
}
cat(sprintf("| the whole step | %.1f | %.1f | %+.1f (%.2fx) |\n", med[9, 1], med[9, 2],
            med[9, 1] - med[9, 2], med[9, 1] / med[9, 2]))
