# R against Python in one process, taking turns: the everyday ops of issue 18 on 8x8
# tensors, a module forward, with_no_grad(), as_array(), `$item()`, a traced module's call,
# and a small training loop.
#
#   R_LIBS=.Rlib Rscript benchmarks/bench_r.R [calls] [repeats] [--write]
#
# Each repeat times every op's Python loop (compiled Python: `for _ in range(n): x + y`)
# and then its R loop (`for (i in seq_len(n)) x + y`), each R loop (and training run)
# after a gc(), so that none pays for the garbage of the loop before it (see r_loop());
# the table gives the median over
# repeats of the time per call. Both sides run in the same thread (torch with 1 thread)
# and are timed with that thread's CPU time (time.thread_time()), as
# benchmarks/bench_python.py does, so that other work on a shared machine does not count. The training loop runs R, Python, R, Python,
# ... and gives the median of each, and the median (and range) of each turn's R / Python:
# the load of a shared machine changes between turns, less within one. `--write` puts the
# table into benchmarks/RESULTS.md (between the bench_r markers).
#
# Goals (issue 18): each op <= its Python time + 15 us; with_no_grad() adds <= 5 us to the
# call it wraps; as_array() of an 8x8 tensor <= 30 us; the training loop <= 1.15x Python.
#
# Note: what the training loop's R / Python ratio is made of (measured again 2026-11-26,
# session 10; benchmarks/bench_r_train.R takes it statement by statement, in time or, under
# callgrind, in instructions, with R's own floor beside it).
# - Both loops do the same aten work but for R's 1-based positions: one shift a step for
#   `idx` (t - 1, as positions all above 0 are; the shift cache serves it again to
#   `Y[idx]`) and one (t - 1) for the class targets; `X[idx, ]` and `Y[idx]` read with
#   aten::index, as Python's `X[idx]` does; float32 X, int64 Y, the same torch.optim.Adam
#   over the same parameters, gradients zeroed in place on both sides (the same weights to
#   the last bit: test-training.R). One thing R does with less code than Python:
#   `opt$zero_grad()` zeroes the gradients in C (src/optim.c: what
#   Optimizer.zero_grad(set_to_none=False) does, without its Python, ~9 us a step).
#   reticulate is not reached (its only code that runs is its Python interrupt hook, on
#   both sides alike).
# - Session 10 found two costs in the step: rbridge.r_positions() (five ops in a Python
#   function, ~21 us a call, once a step for `idx`, added with negative positions) and
#   rbridge.select_positions()'s Python frame (~2 us, twice a step); both are now done in
#   C for the common case (src/convert.c, src/index.c), with the same results and errors.
# - Instructions (callgrind, 2 epochs = 126 steps, the loop above alone): R 2.314M a step,
#   Python 2.188M: +126k (+5.8%; before session 10 +265k, +12.1%), of which libR.so
#   +142k (R's interpreter: dispatch, closures, promises, its fresh cells), libc +12k
#   (malloc), tracebridge.so +8k, torch +5k (the two shifts), while libpython runs 34k
#   fewer (zero_grad's Python) and libtorch_python 7k fewer. Before session 10, by
#   statement, R - Python: the loop +4k, `perm[s:e]` +19k, `X[idx, ]` +27k (its shift
#   ~11k), `Y[idx]` +15k, `opt$zero_grad()` +17k, `model(xb)` +4k, `nnf_cross_entropy()`
#   +29k (its shift ~11k), `loss$backward()` +30k, `opt$step()` +30k. R's floor, pure R
#   counted the same way: an S3 dispatch of `[` to a method whose body is one .Call()
#   costs 12.9k instructions, `x$m()` 13.2k, a closure of 4 arguments around one .Call()
#   7.0k, a .Call() 1.6k; a step makes 3 `[`, 3 `$` and 2 other closure calls (~90k at
#   that floor) and wraps its result tensors (~1.9k each: R objects and a finalizer).
#   What is left beyond R's own interpreter is now below zero: the gap is R's.
# - Misses (callgrind --cache-sim=yes --LL=1048576,8,64, this machine's L2): 11.9k L2
#   misses a step in R against 7.9k (+4.0k, +51%): instruction fetches +1.84k (torch's code
#   +0.70k, evicted by R's; R +0.48k; Python +0.31k; tracebridge.so +0.16k), data +2.19k
#   (R's interpreter and its fresh cells +0.86k, Python +0.47k, torch's kernels +0.39k,
#   malloc +0.30k: the heap that R's kept objects leave).
# - Time (before session 10): at this loop's ~3.9 instructions per ns, +175k was ~45 us
#   a step and +4.0k L2 misses served by L3 (~15 ns) ~60 us: ~105 us on Python's ~565
#   us, ~1.19x, as measured (1.20x at load ~1; single turns 0.9x to 1.5x on this shared
#   machine; the ratio grows with the load, 1.38x in a run at load ~5, as a gap made of
#   misses would). The misses above were counted before session 10's changes, which
#   remove Python and torch work and touch no R code; at the same miss cost, +126k
#   instructions give ~1.14x on a quiet machine (not measured quiet: the machine ran at
#   load 10-20 through session 10: there, this loop alone in separate processes, the
#   package before and after session 10's changes taking turns, 10 processes of each,
#   gave a median R / Python of 1.54x before (1.27-1.88x) and 1.36x after (1.20-1.68x)).
#   Below that is R's interpreter: each statement of mlverse's API is an S3-dispatched
#   R call.
# - Measured and left: carrying the shift (`torch_randperm(n) + 1L` keeping its 0-based
#   source, `perm[s:e]` the same slice of it) is exact for integer dtypes with the version
#   counters, but that slice (THPVariable_getitem, ~6.8k instructions) costs nearly what
#   the shift does (~10.7k with the cache's checks): ~3k a step (0.1%). The class
#   targets' shift can not be carried cheaper: `Y[idx]` of 0-based targets is another
#   index_select, which costs more than the shift. Calling `opt$zero_grad()`,
#   `loss$backward()` and `opt$step()` with .Call directly (no `$` dispatch, no closures)
#   removes 45k instructions a step and ~2% of the time.
# - Session 11 (callgrind, 2 epochs, bench_r_train.R --callgrind): R 2.314M a step ->
#   2.140M against Python 2.193M (0.976x). `opt$step()` of a plain torch.optim.Adam runs
#   in C (src/adam.c: torch 2.13's _single_tensor_adam ops in its order, with its floats;
#   Python's step for any other case): 921k instructions against Python's 1,055k, its
#   libpython 150k less; the rest is R's share: `[` and the surface rows hand C their frame
#   with .External2() (base R's environment() was a closure call, five a step), positions
#   are checked > 0 from memory (min() and .item() were two ops a step), and op_call()
#   and the wrappers allocate less. Time: 1.01x (turns 0.92-1.06x, load ~8) from 1.20x.
#   The note's analysis below is of the loop before session 11.
# - Memory: no R collection runs during a 315-step run (a minor one costs ~3 ms on the
#   1.6M-cell heap that reticulate brings), so R keeps each step's Python objects (~18.7 KB:
#   tensors, spent autograd graphs) and takes ~300 fresh R cells (~17 KB) a step, where
#   Python reuses what it just freed. Freeing those objects at once (an experiment) moved
#   their deallocation into the loop and gained nothing; R's loop otherwise frees them in
#   the gc() before the next turn, outside its timing. Python keeping the same objects
#   alive (an experiment) costs it ~2-3%.

library(tracebridge)

args <- commandArgs(trailingOnly = TRUE)
write <- "--write" %in% args
nums <- suppressWarnings(as.integer(args[args != "--write"]))
calls <- if (length(nums) >= 1 && !is.na(nums[[1]])) nums[[1]] else 2000L
repeats <- if (length(nums) >= 2 && !is.na(nums[[2]])) nums[[2]] else 7L
epochs_rounds <- 9L

torch_manual_seed(0) # tracebridge imports torch first, with torch's own BLAS (R/python.R)
reticulate::import("torch")$set_num_threads(1L) # the same for both sides
x <- torch_randn(8, 8)
y <- torch_randn(8, 8)
a <- torch_randn(8, 8)
b <- torch_randn(8, 8)
lin <- nn_linear(16, 16)
xl <- torch_randn(8, 16)
opt <- optim_sgd(lin$parameters, lr = 0.1)
invisible(list(x$dtype, opt$param_groups)) # the first of each is made by R (src/fields.c)

Small <- nn_module("Small",
  initialize = function() {
    self$fc1 <- nn_linear(16, 32)
    self$fc2 <- nn_linear(32, 4)
  },
  forward = function(x) self$fc2(torch_relu(self$fc1(x)))
)
net <- Small()
net$eval()
xs <- torch_randn(1, 16)
traced <- jit_trace(net, xs, respect_mode = FALSE)
stopifnot(isTRUE(all.equal(as_array(traced(xs)), as_array(net(xs)), tolerance = 1e-6)))

py <- reticulate::py_run_string("
import time, torch
import torch.nn.functional as F

def make_loop(stmt, names):
    src = ('def _loop(n, ' + ', '.join(names) + '):\\n'
           '    t0 = time.thread_time()\\n'
           '    for _ in range(n):\\n'
           '        ' + stmt + '\\n'
           '    return (time.thread_time() - t0) / n * 1e6\\n')
    ns = {'time': time, 'torch': torch}
    exec(src, ns)
    return ns['_loop']

def train(X, Y, epochs, batch):
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
            idx = perm[s:s + batch]
            xb = X[idx]
            yb = Y[idx]
            opt.zero_grad(set_to_none=False)  # as mlverse (and R here) zero in place
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
    return time.thread_time() - t0, loss.item()
", local = FALSE, convert = FALSE)

# One row: the R expression, the Python statement over the same objects.
ops <- list(
  list(label = "`x + y`", r = quote(x + y), py = "x + y"),
  list(label = "`torch_mm(a, b)`", r = quote(torch_mm(a, b)), py = "torch.mm(a, b)"),
  list(label = "`x$sum()`", r = quote(x$sum()), py = "x.sum()"),
  list(label = "`x[1, ]`", r = quote(x[1, ]), py = "x[0, :]"),
  list(label = "`x[1, 1]$item()`", r = quote(x[1, 1]$item()), py = "x[0, 0].item()"),
  list(label = "`nn_linear(16, 16)` forward (8 x 16)", r = quote(lin(xl)), py = "lin(xl)"),
  list(label = "the same inside `with_no_grad()`", r = quote(with_no_grad(lin(xl))),
       py = "with torch.no_grad(): lin(xl)"),
  list(label = "`as_array(x)` (Python: `x.numpy()`)", r = quote(as_array(x)), py = "x.numpy()"),
  list(label = "a traced module's call (Small 16-32-4, batch 1)", r = quote(traced(xs)),
       py = "traced(xs)"),
  list(label = "`x$shape`", r = quote(x$shape), py = "x.shape"),
  list(label = "`x$dtype`", r = quote(x$dtype), py = "x.dtype"),
  list(label = "`opt$param_groups[[1]]$lr` (SGD over `nn_linear(16, 16)`)",
       r = quote(opt$param_groups[[1]]$lr), py = "opt.param_groups[0]['lr']")
)
objects <- list(x = x$py, y = y$py, a = a$py, b = b$py, lin = tracebridge:::module_py(lin),
                xl = xl$py, traced = traced$py, xs = xs$py, opt = .subset2(opt, ".py"))

cpu_time <- reticulate::import("time", convert = TRUE)$thread_time
# Each R loop starts from a collected heap: R frees garbage only when its collector runs,
# so without this a loop would pay for the garbage the loop before it left (the reticulate
# column leaves much), which no Python loop does. What a loop's own calls leave is its.
r_loop <- function(expr, n) {
  loop <- eval(bquote(function() {
    t0 <- cpu_time()
    for (i in seq_len(.(n))) .(expr)
    (cpu_time() - t0) / .(n) * 1e6
  }))
  invisible(gc())
  loop()
}

py_loops <- lapply(ops, function(op) {
  py$make_loop(op$py, as.list(names(objects)))
})

for (op in ops) r_loop(op$r, 200L) # warm up both sides (and start the C paths)
# The third column: the same R code with the C paths off (every call through reticulate,
# as before issue 18), with a tenth of the calls.
slow_calls <- max(100L, calls %/% 10L)
times <- array(NA_real_, c(length(ops), 3, repeats))
for (r in seq_len(repeats)) {
  for (k in seq_along(ops)) {
    times[k, 1, r] <- reticulate::py_to_r(do.call(reticulate::py_call,
      c(list(py_loops[[k]], calls), unname(objects))))
    times[k, 2, r] <- r_loop(ops[[k]]$r, calls)
    tracebridge:::set_c_call(FALSE)
    times[k, 3, r] <- r_loop(ops[[k]]$r, slow_calls)
    tracebridge:::set_c_call(TRUE)
  }
}
med <- apply(times, c(1, 2), stats::median)

# The training loop: MLP 20-64-64-2, 2,000 samples, batch 32, Adam, 5 epochs, R and
# Python taking turns.
n <- 2000L
batch <- 32L
torch_manual_seed(2)
X <- torch_randn(n, 20)
Y <- (X[, 1] > 0)$long() + 1L # classes 1 and 2 (1-based in R)
Ypy <- tracebridge:::tensor_py(Y - 1L) # not `$py`: that turns the shift cache off (src/convert.c)
starts <- seq(1L, n, by = batch)
ends <- pmin(starts + batch - 1L, n)
train_r <- function(epochs = 5L) {
  torch_manual_seed(1)
  model <- nn_sequential(nn_linear(20, 64), nn_relu(), nn_linear(64, 64), nn_relu(),
                         nn_linear(64, 2))
  opt <- optim_adam(model$parameters, lr = 1e-3)
  t0 <- cpu_time()
  for (epoch in seq_len(epochs)) {
    perm <- torch_randperm(n) + 1L
    for (k in seq_along(starts)) {
      s <- starts[[k]]
      e <- ends[[k]]
      idx <- perm[s:e]
      xb <- X[idx, ]
      yb <- Y[idx]
      opt$zero_grad()
      loss <- nnf_cross_entropy(model(xb), yb)
      loss$backward()
      opt$step()
    }
  }
  c(cpu_time() - t0, loss$item())
}
train_py <- function(epochs = 5L) {
  unlist(reticulate::py_to_r(py$train(X$py, Ypy, as.integer(epochs), batch)))
}
invisible(train_r(1L))
invisible(train_py(1L))
tr <- matrix(NA_real_, epochs_rounds, 2)
loss_r <- loss_py <- NA
for (r in seq_len(epochs_rounds)) {
  invisible(gc())
  out <- train_r()
  tr[r, 1] <- out[[1]]
  loss_r <- out[[2]]
  out <- train_py()
  tr[r, 2] <- out[[1]]
  loss_py <- out[[2]]
}
train_med <- apply(tr, 2, stats::median)
tracebridge:::set_c_call(FALSE)
train_slow <- train_r()[[1]]
tracebridge:::set_c_call(TRUE)

load <- tryCatch(strsplit(readLines("/proc/loadavg", 1L), " ")[[1]][[1]],
                 error = function(e) "?")
fmt <- function(v) if (v >= 100) sprintf("%.0f", v) else sprintf("%.1f", v)
signed <- function(v) paste0(if (v < 0) "-" else "+", fmt(abs(v)))
plain_lin <- med[6, 2]
rows <- character()
for (k in seq_along(ops)) {
  r_us <- med[k, 2]
  p_us <- med[k, 1]
  label <- ops[[k]]$label
  goal <- if (k == 7) {
    sprintf("adds <= 5 us to the call: %s", signed(r_us - plain_lin))
  } else if (k == 8) {
    sprintf("<= 30 us: %s", fmt(r_us))
  } else {
    sprintf("<= Python + 15 us: %s", signed(r_us - p_us))
  }
  met <- if (k == 7) r_us - plain_lin <= 5 else if (k == 8) r_us <= 30 else r_us <= p_us + 15
  rows <- c(rows, sprintf("| %s | %s | %s | %.2fx | %s | %s, %s |", label, fmt(r_us),
                          fmt(p_us), r_us / p_us, fmt(med[k, 3]), goal,
                          if (met) "met" else "not met"))
}
turns <- tr[, 1] / tr[, 2]
ratio <- stats::median(turns)
rows <- c(rows, sprintf(
  "| training loop: MLP 20-64-64-2, 2,000 samples, batch 32, Adam, 5 epochs | %.3f s | %.3f s | %.2fx (%.2f-%.2fx) | %.2f s | <= 1.15x: %s |",
  train_med[[1]], train_med[[2]], ratio, min(turns), max(turns), train_slow,
  if (ratio <= 1.15) "met" else "not met"))

table <- c(
  paste("| op (8x8 tensors unless said) | R (µs) | Python (µs) | R / Python |",
        "R through reticulate (µs) | goal (issue 18) |"),
  "|---|---|---|---|---|---|",
  rows
)
header <- sprintf(paste0(
  "`R_LIBS=.Rlib Rscript benchmarks/bench_r.R %d %d --write`: R and Python in one process, ",
  "taking turns, thread CPU time; each R loop starts after a gc(), so it does not pay ",
  "for the previous loop's garbage (its own is collected only if a collection runs ",
  "during it); ",
  "median of %d repeats of %d calls (training: median of ",
  "%d runs each, taking turns; its ratio is the median of each turn's R / Python, with ",
  "their range; the reticulate column: `TRACEBRIDGE_C_CALL=0`'s path, a tenth of the ",
  "calls, training once); ",
  "R %s, reticulate %s, torch %s (BLAS: %s), 1 thread; load average %s at the end; %s."),
  calls, repeats, repeats, calls, epochs_rounds, getRversion(),
  utils::packageVersion("reticulate"),
  reticulate::py_to_r(reticulate::import("torch")$`__version__`),
  if (identical(tracebridge:::import_torch_own_blas(), "own")) "torch's own" else "R's",
  load, format(Sys.Date()))
cat(header, "\n\n", paste(table, collapse = "\n"), "\n", sep = "")
cat(sprintf("\nfinal losses: R %.4f, Python %.4f\n", loss_r, loss_py))
cat("training turns (s), R:", sprintf("%.3f", tr[, 1]), "\n                 Python:",
    sprintf("%.3f", tr[, 2]), "\n                  R / Python:", sprintf("%.2f", turns), "\n")

if (write) {
  path <- file.path("benchmarks", "RESULTS.md")
  lines <- readLines(path)
  begin <- grep("<!-- bench_r:begin -->", lines, fixed = TRUE)
  end <- grep("<!-- bench_r:end -->", lines, fixed = TRUE)
  block <- c("<!-- bench_r:begin -->", "### R against Python, per op", "", header, "",
             table, "<!-- bench_r:end -->")
  lines <- if (length(begin) && length(end)) {
    c(lines[seq_len(begin - 1)], block, lines[-seq_len(end)])
  } else {
    c(lines, "", block)
  }
  writeLines(lines, path)
  cat("wrote", path, "\n")
}
