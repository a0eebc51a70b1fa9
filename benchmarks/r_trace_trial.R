# A trial of R code run INSIDE jit_trace(), written as an R user of mlverse torch writes it:
# functions and nn_modules with indexing of every kind, sizes, R arithmetic on sizes, loops,
# branches, factories from sizes, nnf_* functions, layers, lists, `$item()`, `as_array`,
# character and logical arguments. Each snippet is traced at one shape, then called at the
# same shape and at another, saved with jit_save(), loaded with jit_load() and called
# again; every result is compared with the same R code run without a trace. Each snippet
# ends as one of:
#   works          every call gave the eager value (or, for code that reads a size as an R
#                  number, `guard = TRUE`, the other shape stopped with a guard error);
#   clear error    tracing refused with an error the snippet expects (`error = regex`);
#   fails          an error where the eager code runs (a gap to fix), or a guard error
#                  where the code is shape-general;
#   SILENTLY WRONG a traced or loaded call gave another value than the eager code;
#   CRASH          R died running it (a segfault must never happen).
#
#   R_LIBS=.Rlib Rscript benchmarks/r_trace_trial.R [--verbose] [--only user]
#
# The snippets of benchmarks/r_trace_trial_user.R (section "user": what an R user of
# mlverse torch writes around a trace: modules and containers, data loaders, optimizers,
# dtypes, NA, autograd, saving) run after these, counted apart too; `--only user` runs
# them alone.
#
# The snippets run in a child Rscript (the same file with --child FROM OUT): each one writes
# "start" before and its outcome after, so a child that dies is restarted after the snippet
# that killed it, which is counted as CRASH, and one segfault does not hide the rest.
# Exits with status 1 if a snippet is silently wrong or crashes.

args <- commandArgs(trailingOnly = TRUE)
verbose <- "--verbose" %in% args
child <- match("--child", args)
only <- match("--only", args)
only <- if (is.na(only)) NULL else args[[only + 1L]]

# ---- the parent: runs children until every snippet has an outcome ---------------------
if (is.na(child)) {
  script <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)[[1]])
  out <- tempfile("r_trace_trial", fileext = ".tsv")
  from <- 1L
  rows <- list()
  repeat {
    unlink(out)
    status <- system2(file.path(R.home("bin"), "Rscript"),
                      c(shQuote(script), "--child", from, shQuote(out), if (verbose) "--verbose",
                        if (!is.null(only)) c("--only", only)),
                      stdout = "", stderr = if (verbose) "" else FALSE)
    lines <- if (file.exists(out)) readLines(out) else character()
    parts <- strsplit(lines, "\t", fixed = TRUE)
    done <- Filter(function(p) p[[1]] == "done", parts)
    for (p in done) {
      rows[[p[[3]]]] <- list(outcome = p[[4]], section = p[[5]],
                             msg = if (length(p) > 5) p[[6]] else "")
    }
    started <- Filter(function(p) p[[1]] == "start", parts)
    total <- Filter(function(p) p[[1]] == "total", parts)
    if (length(total)) n_total <- as.integer(total[[1]][[2]])
    last <- if (length(started)) started[[length(started)]] else NULL
    finished <- length(total) && length(Filter(function(p) p[[1]] == "end", parts))
    if (finished) break
    if (is.null(last) || !is.null(rows[[last[[3]]]])) {
      stop("the trial's child stopped outside a snippet (status ", status, ")")
    }
    rows[[last[[3]]]] <- list(outcome = "CRASH", section = last[[4]],
                              msg = sprintf("R died (status %s)", status))
    cat(sprintf("[CRASH] %s\n", last[[3]]))
    from <- as.integer(last[[2]]) + 1L
    if (from > n_total) break
  }
  outcomes <- vapply(rows, `[[`, "", "outcome")
  sections <- vapply(rows, `[[`, "", "section")
  tally <- function(o) {
    counts <- table(factor(o, c("works", "clear error", "fails", "SILENTLY WRONG", "CRASH")))
    paste(sprintf("%s %d", names(counts), as.integer(counts)), collapse = ", ")
  }
  for (sec in unique(sections)) {
    cat(sprintf("\nsection %s: %d snippets: %s", sec, sum(sections == sec),
                tally(outcomes[sections == sec])))
  }
  counts <- table(factor(outcomes, c("works", "clear error", "fails", "SILENTLY WRONG", "CRASH")))
  cat(sprintf("\n%d snippets traced: %s\n", length(outcomes), tally(outcomes)))
  if (counts[["SILENTLY WRONG"]] + counts[["CRASH"]] > 0) quit(status = 1)
  quit(status = 0)
}

# ---- the child: runs the snippets from FROM on, writing to OUT --------------------------
from <- as.integer(args[[child + 1L]])
out <- args[[child + 2L]]
script <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)[[1]])
section <- "core"
suppressPackageStartupMessages(library(tracebridge))
torch_manual_seed(42)
snippets <- list()

# A case: `f` (a function or a module constructor called with no argument), `example` (a
# list of inputs it is traced with), `other` (a list of inputs of other sizes; NULL: none).
# `guard = TRUE`: the code reads a size as an R number, so a guard error at `other` is right.
# `error`: tracing must refuse with a message matching it.
# `trace_args`: more arguments to jit_trace() (`strict = FALSE`).
case <- function(name, f, example, other = NULL, guard = FALSE, error = NULL, tol = 1e-5,
                 trace_args = list()) {
  snippets[[length(snippets) + 1L]] <<- list(name = name, f = f, example = example,
                                             other = other, guard = guard, error = error,
                                             tol = tol, trace_args = trace_args,
                                             section = section)
}

plain <- function(v) {
  if (inherits(v, "torch_tensor")) {
    a <- as_array(v$detach()$cpu())
    return(list(dtype = as.character(v$dtype), dim = dim(v), value = a))
  }
  if (is.list(v)) return(lapply(v, plain))
  v
}
same <- function(a, b, tol) {
  isTRUE(all.equal(plain(a), plain(b), tolerance = tol, check.attributes = TRUE))
}
# A guard error, or the error for a call whose containers differ from the example's
# (their structure is fixed in a trace, as in Python).
is_guard <- function(e) {
  inherits(e, "tracebridge_guard_error") ||
    grepl("guard|assum|fixed in a trace", conditionMessage(e), ignore.case = TRUE)
}
one_line <- function(msg) gsub("[\t\n]+", " ", substr(msg, 1, 400))

# A snippet that does its own tracing: `fn()` returns list(got, want), compared as the
# traced calls are; `error`: it must raise an error matching it (a clear refusal).
custom <- function(name, fn, error = NULL, tol = 1e-5) {
  snippets[[length(snippets) + 1L]] <<- list(name = name, custom = fn, error = error,
                                             tol = tol, section = section)
}

run_custom <- function(s) {
  r <- tryCatch(s$custom(), error = identity)
  if (inherits(r, "error")) {
    msg <- conditionMessage(r)
    if (!is.null(s$error) && grepl(s$error, msg)) return(list("clear error", msg))
    return(list("fails", msg))
  }
  if (!is.null(s$error)) return(list("SILENTLY WRONG", "ran where an error was expected"))
  if (!same(r[[1]], r[[2]], s$tol)) return(list("SILENTLY WRONG", "differs from eager"))
  list("works", "")
}

run_snippet <- function(s) {
  if (!is.null(s$custom)) return(run_custom(s))
  f <- if (isTRUE(attr(s$f, "module"))) s$f() else s$f
  eager <- function(inputs) do.call(f, inputs)
  traced <- tryCatch(do.call(jit_trace, c(list(f), s$example, s$trace_args)), error = identity)
  if (inherits(traced, "error")) {
    msg <- conditionMessage(traced)
    if (!is.null(s$error) && grepl(s$error, msg)) return(list("clear error", msg))
    return(list("fails", paste("trace:", msg)))
  }
  if (!is.null(s$error)) return(list("fails", "traced where an error was expected"))
  path <- tempfile(fileext = ".pt")
  saved <- tryCatch({
    jit_save(traced, path)
    jit_load(path)
  }, error = identity)
  if (inherits(saved, "error")) return(list("fails", paste("save/load:", conditionMessage(saved))))
  calls <- list(list("same shape", s$example))
  if (!is.null(s$other)) calls[[2]] <- list("other shape", s$other)
  guarded <- FALSE
  for (cl in calls) {
    want <- tryCatch(eager(cl[[2]]), error = identity)
    if (inherits(want, "error")) return(list("fails", paste("eager", cl[[1]], "failed:",
                                                            conditionMessage(want))))
    for (who in list(list("traced", traced), list("loaded", saved))) {
      got <- tryCatch(do.call(who[[2]], cl[[2]]), error = identity)
      if (inherits(got, "error")) {
        if (cl[[1]] == "other shape" && s$guard && is_guard(got)) {
          guarded <- conditionMessage(got)
          next
        }
        return(list("fails", sprintf("%s call at %s: %s%s", who[[1]], cl[[1]],
                                     if (is_guard(got)) "(guard) " else "",
                                     conditionMessage(got))))
      }
      if (!same(got, want, s$tol)) {
        return(list("SILENTLY WRONG", sprintf("%s call at %s differs from eager", who[[1]],
                                              cl[[1]])))
      }
    }
  }
  list("works", if (is.character(guarded)) paste("guarded at the other shape:", guarded) else "")
}

T <- function(...) torch_randn(...)
module <- function(gen) structure(gen, module = TRUE)

# ---- indexing -----------------------------------------------------------------------------
case("x[1, ]", function(x) x[1, ], list(T(3, 4)), list(T(5, 4)))
case("x[, 2]", function(x) x[, 2], list(T(3, 4)), list(T(5, 4)))
case("x[2:3, ]", function(x) x[2:3, ], list(T(4, 3)), list(T(6, 3)))
case("x[c(1L, 2L), ]", function(x) x[c(1L, 2L), ], list(T(3, 4)), list(T(5, 4)))
case("x[c(1, 3), ] doubles", function(x) x[c(1, 3), ], list(T(3, 4)), list(T(5, 4)))
case("x[c(3, 1), ] out of order", function(x) x[c(3, 1), ], list(T(3, 4)), list(T(5, 4)))
case("x[-1, ] drops the first", function(x) x[-1, ], list(T(3, 4)), list(T(5, 4)))
case("x[-c(1, 2), ]", function(x) x[-c(1, 2), ], list(T(4, 2)), list(T(6, 2)))
case("x[, -1]", function(x) x[, -1], list(T(3, 4)), list(T(5, 4)))
case("x[N, ] last row", function(x) x[N, ], list(T(3, 4)), list(T(5, 4)))
case("x[2:N, ]", function(x) x[2:N, ], list(T(3, 4)), list(T(5, 4)))
case("x[.., 1]", function(x) x[.., 1], list(T(2, 3, 4)), list(T(5, 3, 4)))
case("x[1, .. ]", function(x) x[1, ..], list(T(2, 3, 4)), list(T(5, 3, 4)))
case("x[1, , drop = FALSE]", function(x) x[1, , drop = FALSE], list(T(3, 4)), list(T(5, 4)))
case("x[, 1, drop = FALSE]", function(x) x[, 1, drop = FALSE], list(T(3, 4)), list(T(5, 4)))
case("x[x > 0] mask", function(x) x[x > 0], list(T(3, 4)), list(T(5, 4)))
case("x[m, ] logical tensor rows", function(x) x[x[, 1] > 0, ], list(T(6, 2)), list(T(9, 2)))
case("x[c(TRUE, FALSE, TRUE), ] R logical", function(x) x[c(TRUE, FALSE, TRUE), ],
     list(T(3, 2)), list(T(3, 5)))
case("x[i, ] i a tensor of 1-based indices", function(x, i) x[i, ],
     list(T(4, 3), torch_tensor(c(1L, 3L))), list(T(6, 3), torch_tensor(c(2L, 6L, 1L))))
case("x[x$size(1), ] traced size as position", function(x) x[x$size(1), ],
     list(T(3, 4)), list(T(5, 4)))
case("x[x$size(1) - 1L, ]", function(x) x[x$size(1) - 1L, ], list(T(3, 4)), list(T(5, 4)))
case("x[1:x$size(1), ]", function(x) x[1:x$size(1), ], list(T(3, 4)), list(T(5, 4)),
     guard = TRUE)
case("x[c(1, x$size(1)), ]", function(x) x[c(1, x$size(1)), ], list(T(3, 4)), list(T(5, 4)))
case("x[seq(1, N, by = 2), ]", function(x) x[seq(1, N, by = 2), ], list(T(5, 2)),
     list(T(7, 2)), guard = TRUE)
case("x[, , 1] 3-d", function(x) x[, , 1], list(T(2, 3, 4)), list(T(5, 3, 4)))
case("x[1, 2] scalar", function(x) x[1, 2], list(T(3, 4)), list(T(5, 4)))
case("x[[1]] on a list input", function(l) l[[1]] + l[[2]], list(list(T(2), T(2))),
     list(list(T(3), T(3))))
case("x[-N, ] all but last", function(x) x[-N, ], list(T(3, 2)), list(T(5, 2)))
case("x[2:-1] negative end", function(x) x[2:-1], list(T(5)), list(T(8)))
case("x[1:2, ][, 2] chained", function(x) x[1:2, ][, 2], list(T(3, 4)), list(T(5, 4)))
case("x[x$size(1):1, ] reversed", function(x) x[x$size(1):1, ], list(T(3, 2)),
     list(T(4, 2)), guard = TRUE)
# length() must give R an R integer (seq_along() and friends call it), so inside a trace
# it reads the element count with a guard; x$numel() stays traced.
case("x[n] for n <- length(x) (guard)", function(x) {
  n <- length(x)
  x[n]
}, list(T(4)), list(T(7)), guard = TRUE)
case("x[n] for n <- x$numel()", function(x) {
  n <- x$numel()
  x[n]
}, list(T(4)), list(T(7)))
case("x[1:2] <- 0 assignment", function(x) {
  y <- x$clone()
  y[1:2] <- 0
  y
}, list(T(4)), list(T(6)))
case("y[, 1] <- y[, 2] column assignment", function(x) {
  y <- x$clone()
  y[, 1] <- y[, 2]
  y
}, list(T(3, 2)), list(T(5, 2)))
case("y[y < 0] <- 0 mask assignment", function(x) {
  y <- x$clone()
  y[y < 0] <- 0
  y
}, list(T(3, 4)), list(T(5, 4)))
case("y[N, ] <- 1 last row", function(x) {
  y <- x$clone()
  y[N, ] <- 1
  y
}, list(T(3, 4)), list(T(5, 4)))
case("y[x$size(1), 1] <- 5", function(x) {
  y <- x$clone()
  y[x$size(1), 1] <- 5
  y
}, list(T(3, 4)), list(T(5, 4)))
case("y[-1, ] <- 0", function(x) {
  y <- x$clone()
  y[-1, ] <- 0
  y
}, list(T(3, 4)), list(T(5, 4)))
case("y[c(1, 3), ] <- tensor", function(x) {
  y <- x$clone()
  y[c(1, 3), ] <- torch_ones(2, 4)
  y
}, list(T(3, 4)), list(T(5, 4)))

# ---- sizes -------------------------------------------------------------------------------
case("x$size(1) times a tensor", function(x) x * x$size(1), list(T(3, 2)), list(T(5, 2)))
case("x$sum() / x$size(1)", function(x) x$sum() / x$size(1), list(T(3, 2)), list(T(5, 2)))
case("x$sum() / x$shape[1]", function(x) x$sum() / x$shape[1], list(T(3, 2)), list(T(5, 2)))
case("dim(x)[1] in a view", function(x) x$view(c(dim(x)[1], -1)), list(T(3, 2, 2)),
     list(T(5, 2, 2)))
case("x$view(c(x$size(1), -1))", function(x) x$view(c(x$size(1), -1)), list(T(3, 2, 2)),
     list(T(5, 2, 2)))
case("x$reshape(c(-1, x$size(2) * x$size(3)))",
     function(x) x$reshape(c(-1, x$size(2) * x$size(3))), list(T(3, 2, 2)), list(T(5, 3, 2)))
case("length(x) as a divisor (guard)", function(x) x$sum() / length(x), list(T(3, 2)),
     list(T(5, 2)), guard = TRUE)
case("nrow(x)", function(x) x * nrow(x), list(T(3, 2)), list(T(5, 2)))
case("ncol(x)", function(x) x * ncol(x), list(T(3, 2)), list(T(3, 5)))
case("x$numel()", function(x) x / x$numel(), list(T(3, 2)), list(T(5, 2)))
case("x$dim() in a branch", function(x) if (x$dim() == 2) x * 2 else x,
     list(T(3, 2)), list(T(5, 2)))
case("x$ndim", function(x) x * x$ndim, list(T(3, 2)), list(T(5, 2)))
case("-log(10000) / x$size(2)", function(x) x * (-log(10000) / x$size(2)), list(T(3, 4)),
     list(T(3, 6)))
case("2.5 - n", function(x) x * (2.5 - x$size(1)), list(T(3, 4)), list(T(5, 4)))
case("0.9^n", function(x) x * 0.9^x$size(1), list(T(3, 4)), list(T(5, 4)))
case("n^2", function(x) x * x$size(1)^2, list(T(3, 4)), list(T(5, 4)))
case("sqrt(x$size(2))", function(x) x / sqrt(x$size(2)), list(T(3, 4)), list(T(3, 9)))
case("1 / sqrt(d) as in attention", function(q, k) {
  d <- q$size(-1)
  torch_matmul(q, k$transpose(-2, -1)) / sqrt(d)
}, list(T(2, 3, 4), T(2, 3, 4)), list(T(2, 5, 8), T(2, 5, 8)))
case("exp(n)", function(x) x * exp(x$size(1) / 10), list(T(3)), list(T(5)))
case("log(n)", function(x) x * log(x$size(1)), list(T(3)), list(T(5)))
case("floor(n / 2)", function(x) x * floor(x$size(1) / 2), list(T(3)), list(T(5)))
case("n %/% 2", function(x) x * (x$size(1) %/% 2), list(T(4)), list(T(7)))
case("n %% 2", function(x) x + (x$size(1) %% 2), list(T(4)), list(T(7)))
case("max(n, 3)", function(x) x * max(x$size(1), 3), list(T(4)), list(T(7)), guard = TRUE)
case("min(dim(x))", function(x) x * min(dim(x)), list(T(4, 2)), list(T(7, 2)), guard = TRUE)
case("sum(dim(x))", function(x) x * sum(dim(x)), list(T(4, 2)), list(T(7, 3)))
case("prod(dim(x))", function(x) x / prod(dim(x)), list(T(4, 2)), list(T(7, 3)))
case("as.integer(n) guard", function(x) x * as.integer(x$size(1)), list(T(4)), list(T(7)),
     guard = TRUE)
case("as.numeric(n) guard", function(x) x * as.numeric(x$size(1)), list(T(4)), list(T(7)),
     guard = TRUE)
case("n / 2L integer division gives double", function(x) x * (x$size(1) / 2L), list(T(3)),
     list(T(5)))
case("n == 3 logical", function(x) if (x$size(1) == 3) x + 1 else x - 1, list(T(3)),
     list(T(5)), guard = TRUE)
case("n > 2 && n < 10", function(x) if (x$size(1) > 2 && x$size(1) < 10) x else -x,
     list(T(3)), list(T(5)), guard = TRUE)
case("identical(n, 3L)", function(x) if (identical(as.integer(x$size(1)), 3L)) x else -x,
     list(T(3)), list(T(5)), guard = TRUE)
case("x$shape used whole", function(x) torch_zeros(x$shape), list(T(3, 2)), list(T(5, 2)))
case("x$size() whole", function(x) torch_ones(x$size()), list(T(3, 2)), list(T(5, 2)))
case("dim(x) whole to a factory", function(x) torch_zeros(dim(x)) + x, list(T(3, 2)),
     list(T(5, 2)))
case("x$size(-1)", function(x) x / x$size(-1), list(T(3, 2)), list(T(3, 5)))
case("x$shape[length(x$shape)]", function(x) x / x$shape[length(x$shape)], list(T(3, 2)),
     list(T(3, 5)))
case("tail(dim(x), 1)", function(x) x / tail(dim(x), 1), list(T(3, 2)), list(T(3, 5)))
case("n * 1.5 rounded", function(x) x[1:round(x$size(1) * 0.5)], list(T(4)), list(T(8)),
     guard = TRUE)
case("paste(n) for a message", function(x) {
  msg <- paste("rows:", x$size(1))
  x * nchar(msg)
}, list(T(3)), list(T(5)), guard = TRUE)
case("stopifnot(n > 0)", function(x) {
  stopifnot(x$size(1) > 0)
  x
}, list(T(3)), list(T(5)))
case("c(n, m) vector of sizes", function(x) x$view(c(x$size(2), x$size(1))), list(T(3, 2)),
     list(T(5, 4)))
case("rev(dim(x))", function(x) x$reshape(rev(dim(x))), list(T(3, 2)), list(T(5, 4)))

# ---- loops and branches ------------------------------------------------------------------
case("for (i in seq_len(n))", function(x) {
  s <- torch_zeros(x$size(2))
  for (i in seq_len(x$size(1))) s <- s + x[i, ]
  s
}, list(T(3, 2)), list(T(5, 2)), guard = TRUE)
case("for (i in seq_len(3)) fixed", function(x) {
  for (i in seq_len(3)) x <- x * 2
  x
}, list(T(3, 2)), list(T(5, 2)))
case("for (i in 1:n)", function(x) {
  s <- 0
  for (i in 1:x$size(1)) s <- s + x[i]
  s
}, list(T(3)), list(T(5)), guard = TRUE)
case("seq_along(list)", function(l) {
  s <- l[[1]] * 0
  for (i in seq_along(l)) s <- s + l[[i]] * i
  s
}, list(list(T(2), T(2), T(2))), list(list(T(4), T(4), T(4))))
case("while loop on a constant", function(x) {
  i <- 0
  while (i < 3) {
    x <- x + 1
    i <- i + 1
  }
  x
}, list(T(2)), list(T(4)))
case("if on a tensor value (guard)", function(x) if (x$sum()$item() > 0) x else -x,
     list(torch_ones(3)), list(-torch_ones(5)), guard = TRUE)
case("if (as.logical(x$any()))", function(x) if (as.logical(x$any()$item())) x + 1 else x,
     list(torch_ones(3)), list(torch_ones(5)))
case("if (x$size(1) > 1) multi-row path", function(x) {
  if (x$size(1) > 1) x$mean(dim = 1) else x[1, ]
}, list(T(3, 2)), list(T(5, 2)), guard = TRUE)
case("Reduce over a list", function(l) Reduce(`+`, l), list(list(T(2), T(2), T(2))),
     list(list(T(3), T(3), T(3))))
case("lapply over a list", function(l) torch_stack(lapply(l, function(t) t * 2)),
     list(list(T(2), T(2))), list(list(T(3), T(3))))
case("vapply of sizes", function(l) {
  n <- vapply(l, function(t) as.integer(t$size(1)), integer(1))
  l[[1]] * sum(n)
}, list(list(T(2), T(2))), list(list(T(3), T(3))), guard = TRUE)
case("switch on a character argument", function(x) {
  act <- "relu"
  switch(act, relu = nnf_relu(x), gelu = nnf_gelu(x))
}, list(T(3)), list(T(5)))

# ---- factories from sizes ---------------------------------------------------------------
case("torch_zeros(n, 2)", function(x) x + torch_zeros(x$size(1), 2), list(T(3, 2)), list(T(5, 2)))
case("torch_ones(dim(x))", function(x) x + torch_ones(dim(x)), list(T(3, 2)), list(T(5, 2)))
case("torch_zeros_like", function(x) torch_zeros_like(x) + 1, list(T(3, 2)), list(T(5, 2)))
case("torch_full(c(n, 1), 2.5)", function(x) x + torch_full(c(x$size(1), 1), 2.5),
     list(T(3, 2)), list(T(5, 2)))
case("torch_arange(1, n) is 1-based inclusive", function(x) x * torch_arange(1, x$size(1)),
     list(T(3)), list(T(5)))
case("torch_arange(0, n - 1)", function(x) x * torch_arange(0, x$size(1) - 1), list(T(3)),
     list(T(5)))
case("torch_arange(1, n, 2)", function(x) torch_arange(1, x$size(1), 2) * 1,
     list(T(5)), list(T(7)))
case("torch_arange(start = 1, end = n, dtype = long)",
     function(x) x[torch_arange(1, x$size(1), dtype = torch_long())], list(T(3)), list(T(5)))
case("torch_eye(n)", function(x) torch_matmul(x, torch_eye(x$size(2))), list(T(3, 2)),
     list(T(3, 4)))
case("torch_tensor(constant) inside", function(x) x + torch_tensor(c(1, 2)), list(T(3, 2)),
     list(T(5, 2)))
case("torch_tensor(n) of a size", function(x) x * torch_tensor(x$size(1)), list(T(3)),
     list(T(5)), guard = TRUE)
case("torch_linspace(0, 1, n)", function(x) x * torch_linspace(0, 1, x$size(1)), list(T(3)),
     list(T(5)))
case("torch_randn(n) shape only", function(x) torch_randn(x$size(1), 2) * 0 + x,
     list(T(3, 2)), list(T(5, 2)))
case("torch_empty(n)$fill_(1)", function(x) x + torch_empty(x$size(1))$fill_(1), list(T(3)),
     list(T(5)))
case("torch_tril(torch_ones(n, n)) causal mask", function(x) {
  n <- x$size(1)
  x$masked_fill(torch_tril(torch_ones(n, n)) == 0, 0)
}, list(T(3, 3)), list(T(5, 5)))

# ---- ops with R arguments -------------------------------------------------------------------
case("torch_cat(list(), dim = 2)", function(x, y) torch_cat(list(x, y), dim = 2),
     list(T(3, 2), T(3, 1)), list(T(5, 2), T(5, 1)))
case("torch_stack(list(), dim = 1)", function(x, y) torch_stack(list(x, y), dim = 1),
     list(T(3), T(3)), list(T(5), T(5)))
case("torch_stack(list(), dim = 2)", function(x, y) torch_stack(list(x, y), dim = 2),
     list(T(3), T(3)), list(T(5), T(5)))
case("sum(dim = 2)", function(x) x$sum(dim = 2), list(T(3, 2)), list(T(5, 2)))
case("mean(dim = c(1, 2))", function(x) x$mean(dim = c(1, 2)), list(T(3, 2, 2)), list(T(5, 2, 2)))
case("max(dim = 2) values and indices", function(x) {
  r <- torch_max(x, dim = 2)
  list(r[[1]], r[[2]])
}, list(T(3, 4)), list(T(5, 4)))
case("argmax(dim = 2) is 1-based", function(x) torch_argmax(x, dim = 2), list(T(3, 4)),
     list(T(5, 4)))
case("topk indices 1-based", function(x) torch_topk(x, 2)[[2]], list(T(5)), list(T(7)))
case("sort indices", function(x) torch_sort(x)[[2]], list(T(5)), list(T(7)))
case("transpose(1, 2)", function(x) x$transpose(1, 2), list(T(3, 2)), list(T(5, 2)))
case("permute(c(2, 1, 3))", function(x) x$permute(c(2, 1, 3)), list(T(3, 2, 4)),
     list(T(5, 2, 4)))
case("unsqueeze(1)", function(x) x$unsqueeze(1), list(T(3, 2)), list(T(5, 2)))
case("squeeze(2)", function(x) x$squeeze(2), list(T(3, 1)), list(T(5, 1)))
case("narrow(1, 2, 2)", function(x) x$narrow(1, 2, 2), list(T(4, 2)), list(T(6, 2)))
case("narrow(1, n - 1, 1)", function(x) x$narrow(1, x$size(1) - 1, 1), list(T(4, 2)),
     list(T(6, 2)))
case("torch_select(x, 1, n)", function(x) torch_select(x, 1, x$size(1)), list(T(4, 2)),
     list(T(6, 2)))
case("index_select(1, idx)", function(x) x$index_select(1, torch_tensor(c(1L, 3L))),
     list(T(4, 2)), list(T(6, 2)))
case("gather(2, idx)", function(x) torch_gather(x, 2, torch_ones(x$size(1), 1, dtype = torch_long())),
     list(T(3, 4)), list(T(5, 4)))
case("chunk(2, dim = 1)", function(x) torch_chunk(x, 2, dim = 1), list(T(4, 2)), list(T(6, 2)))
case("split(x, 2)", function(x) torch_split(x, 2), list(T(4, 2)), list(T(6, 2)), guard = TRUE)
case("unbind(x, 1) (guard: the number of results)", function(x) torch_unbind(x, 1)[[1]],
     list(T(3, 2)), list(T(5, 2)), guard = TRUE)
case("unbind(x, 2)", function(x) torch_unbind(x, 2)[[2]], list(T(3, 2)), list(T(5, 2)))
case("flatten(start_dim = 2)", function(x) torch_flatten(x, start_dim = 2), list(T(3, 2, 2)),
     list(T(5, 2, 2)))
case("cumsum(dim = 1)", function(x) torch_cumsum(x, dim = 1), list(T(3, 2)), list(T(5, 2)))
case("where(x > 0, x, 0)", function(x) torch_where(x > 0, x, torch_zeros_like(x)),
     list(T(3, 2)), list(T(5, 2)))
case("clamp(min = 0)", function(x) torch_clamp(x, min = 0), list(T(3, 2)), list(T(5, 2)))
case("x$to(dtype = torch_double())", function(x) x$to(dtype = torch_double()), list(T(3)),
     list(T(5)))
case("integer tensor arithmetic", function(x) (x * 2L) %/% 3L, list(torch_tensor(1:4)),
     list(torch_tensor(1:7)))
case("R recycling of a length-1 vector", function(x) x + c(1), list(T(3)), list(T(5)))
case("x + R vector of length 2", function(x) x + c(1, 2), list(T(3, 2)), list(T(5, 2)))
case("logical tensor ops", function(x) (x > 0) & (x < 1), list(T(3)), list(T(5)))
case("x$masked_fill(mask, -Inf)", function(x) x$masked_fill(x < 0, -Inf), list(T(3, 2)),
     list(T(5, 2)))
case("x$repeat(c(2, 1))", function(x) x$`repeat`(c(2, 1)), list(T(3, 2)), list(T(5, 2)))
case("x$expand(c(n, -1))", function(x, y) y$expand(c(x$size(1), -1)), list(T(3, 2), T(1, 2)),
     list(T(5, 2), T(1, 2)))
case("torch_einsum", function(a, b) torch_einsum("ij,jk->ik", list(a, b)),
     list(T(3, 2), T(2, 4)), list(T(5, 2), T(2, 4)))
# R dispatches `%*%` to a tensor method from R 4.3 on only (see tensor_matmul()).
if (getRversion() >= "4.3.0") {
  case("x %*% y", function(a, b) a %*% b, list(T(3, 2), T(2, 4)), list(T(5, 2), T(2, 4)))
}
case("torch_bmm", function(a, b) torch_bmm(a, b), list(T(2, 3, 2), T(2, 2, 4)),
     list(T(5, 3, 2), T(5, 2, 4)))
case("$item() as a scale (guard)", function(x) x * x$max()$item(), list(torch_ones(3)),
     list(torch_ones(3) * 2), guard = TRUE)
case("as_array inside the trace (guard)", function(x) x * sum(as_array(x)),
     list(torch_ones(3)), list(torch_ones(3) * 2), guard = TRUE)

# ---- nnf_* ----------------------------------------------------------------------------------
case("nnf_relu", function(x) nnf_relu(x), list(T(3, 2)), list(T(5, 2)))
case("nnf_softmax(dim = 2)", function(x) nnf_softmax(x, dim = 2), list(T(3, 4)), list(T(5, 4)))
case("nnf_log_softmax(dim = -1)", function(x) nnf_log_softmax(x, dim = -1), list(T(3, 4)),
     list(T(5, 4)))
case("nnf_linear", function(x, w) nnf_linear(x, w), list(T(3, 4), T(2, 4)), list(T(5, 4), T(2, 4)))
case("nnf_dropout(training = FALSE)", function(x) nnf_dropout(x, p = 0.5, training = FALSE),
     list(T(3, 2)), list(T(5, 2)))
case("nnf_layer_norm(normalized_shape = n)",
     function(x) nnf_layer_norm(x, normalized_shape = x$size(-1)), list(T(3, 4)), list(T(5, 6)))
case("nnf_pad", function(x) nnf_pad(x, c(1, 1)), list(T(3, 2)), list(T(5, 2)))
case("nnf_one_hot (1-based classes)", function(i) nnf_one_hot(i, num_classes = 4),
     list(torch_tensor(c(1L, 3L))), list(torch_tensor(c(4L, 2L, 1L))))
case("nnf_cross_entropy (1-based targets)", function(x, y) nnf_cross_entropy(x, y),
     list(T(3, 4), torch_tensor(c(1L, 4L, 2L))), list(T(5, 4), torch_tensor(c(1L, 2L, 3L, 4L, 1L))))
case("nnf_mse_loss", function(a, b) nnf_mse_loss(a, b), list(T(3), T(3)), list(T(5), T(5)))
case("nnf_mse_loss reduction = 'sum'", function(a, b) nnf_mse_loss(a, b, reduction = "sum"),
     list(T(3), T(3)), list(T(5), T(5)))
case("nnf_interpolate(scale_factor = 2)",
     function(x) nnf_interpolate(x, scale_factor = 2, mode = "nearest"),
     list(T(1, 1, 3, 3)), list(T(2, 1, 4, 4)))
case("nnf_max_pool2d", function(x) nnf_max_pool2d(x, kernel_size = 2), list(T(1, 1, 4, 4)),
     list(T(2, 1, 6, 6)))
case("nnf_embedding (1-based)", function(i, w) nnf_embedding(i, w),
     list(torch_tensor(c(1L, 3L)), T(4, 2)), list(torch_tensor(c(4L, 2L, 1L)), T(4, 2)))
case("nnf_gelu", function(x) nnf_gelu(x), list(T(3)), list(T(5)))
case("nnf_normalize(dim = 2)", function(x) nnf_normalize(x, dim = 2), list(T(3, 4)), list(T(5, 4)))
case("nnf_binary_cross_entropy_with_logits",
     function(x, y) nnf_binary_cross_entropy_with_logits(x, y),
     list(T(3), torch_ones(3)), list(T(5), torch_zeros(5)))

# ---- modules ---------------------------------------------------------------------------------
case("MLP module", module(function() nn_module(
  initialize = function() {
    self$fc1 <- nn_linear(4, 8)
    self$fc2 <- nn_linear(8, 2)
  },
  forward = function(x) self$fc2(nnf_relu(self$fc1(x))))()), list(T(3, 4)), list(T(5, 4)))
case("module with nn_sequential", module(function() nn_module(
  initialize = function() self$net <- nn_sequential(nn_linear(3, 4), nn_relu(), nn_linear(4, 1)),
  forward = function(x) self$net(x))()), list(T(2, 3)), list(T(6, 3)))
case("module flattening with x$size(1)", module(function() nn_module(
  initialize = function() {
    self$conv <- nn_conv2d(1, 2, 3)
    self$fc <- nn_linear(2 * 2 * 2, 3)
  },
  forward = function(x) {
    y <- self$conv(x)
    self$fc(y$view(c(y$size(1), -1)))
  })()), list(T(2, 1, 4, 4)), list(T(5, 1, 4, 4)))
case("module with torch_flatten(start_dim = 2)", module(function() nn_module(
  initialize = function() self$fc <- nn_linear(6, 2),
  forward = function(x) self$fc(torch_flatten(x, start_dim = 2)))()),
  list(T(2, 2, 3)), list(T(4, 2, 3)))
case("module in eval mode with dropout", module(function() {
  m <- nn_module(
    initialize = function() {
      self$fc <- nn_linear(3, 3)
      self$drop <- nn_dropout(0.5)
    },
    forward = function(x) self$drop(self$fc(x)))()
  m$eval()
  m
}), list(T(2, 3)), list(T(4, 3)))
case("module with batch norm (eval)", module(function() {
  m <- nn_module(
    initialize = function() self$bn <- nn_batch_norm1d(3),
    forward = function(x) self$bn(x))()
  m$eval()
  m
}), list(T(4, 3)), list(T(6, 3)))
case("module with layer norm and residual", module(function() nn_module(
  initialize = function() {
    self$ln <- nn_layer_norm(4)
    self$fc <- nn_linear(4, 4)
  },
  forward = function(x) x + self$fc(self$ln(x)))()), list(T(2, 3, 4)), list(T(5, 7, 4)))
case("module with embedding (1-based)", module(function() nn_module(
  initialize = function() self$emb <- nn_embedding(10, 3),
  forward = function(i) self$emb(i)$sum(dim = 2))()),
  list(torch_tensor(matrix(c(1L, 2L, 10L, 4L), 2))),
  list(torch_tensor(matrix(c(1L, 2L, 3L, 5L, 6L, 7L), 3))))
case("module with nn_module_list loop", module(function() nn_module(
  initialize = function() self$layers <- nn_module_list(list(nn_linear(2, 2), nn_linear(2, 2))),
  forward = function(x) {
    for (i in seq_along(self$layers)) x <- self$layers[[i]](x)
    x
  })()), list(T(3, 2)), list(T(5, 2)))
case("module with a buffer", module(function() nn_module(
  initialize = function() self$scale <- nn_buffer(torch_tensor(c(2, 3))),
  forward = function(x) x * self$scale)()), list(T(3, 2)), list(T(5, 2)))
case("module with nn_parameter", module(function() nn_module(
  initialize = function() self$w <- nn_parameter(torch_ones(2)),
  forward = function(x) x * self$w)()), list(T(3, 2)), list(T(5, 2)))
case("module attention with sizes", module(function() nn_module(
  initialize = function() self$qkv <- nn_linear(4, 12),
  forward = function(x) {
    b <- x$size(1)
    t <- x$size(2)
    qkv <- self$qkv(x)$view(c(b, t, 3, 4))
    q <- qkv[, , 1, ]
    k <- qkv[, , 2, ]
    v <- qkv[, , 3, ]
    att <- torch_matmul(q, k$transpose(2, 3)) / sqrt(k$size(-1))
    mask <- torch_tril(torch_ones(t, t)) == 0
    att <- att$masked_fill(mask, -Inf)
    torch_matmul(nnf_softmax(att, dim = -1), v)
  })()), list(T(2, 3, 4)), list(T(3, 5, 4)))
case("module positional encoding", module(function() nn_module(
  initialize = function() NULL,
  forward = function(x) {
    n <- x$size(2)
    d <- x$size(3)
    pos <- torch_arange(0, n - 1)$unsqueeze(2)
    div <- torch_exp(torch_arange(0, d - 1, 2) * (-log(10000) / d))
    pe <- torch_zeros(n, d)
    pe[, seq(1, d, by = 2)] <- torch_sin(pos * div)
    x + pe
  })()), list(T(2, 3, 4)), list(T(1, 5, 4)), guard = TRUE)
case("module with conv1d and pooling", module(function() nn_module(
  initialize = function() {
    self$conv <- nn_conv1d(2, 3, kernel_size = 3, padding = 1)
    self$pool <- nn_adaptive_avg_pool1d(1)
  },
  forward = function(x) self$pool(nnf_relu(self$conv(x)))$squeeze(3))()),
  list(T(2, 2, 8)), list(T(4, 2, 11)))
case("module with nn_gru", module(function() nn_module(
  initialize = function() self$rnn <- nn_gru(3, 4, batch_first = TRUE),
  forward = function(x) self$rnn(x)[[1]][, N, ])()), list(T(2, 5, 3)), list(T(3, 7, 3)),
  tol = 1e-4)
case("module with nn_lstm output list", module(function() nn_module(
  initialize = function() self$rnn <- nn_lstm(3, 4, batch_first = TRUE),
  forward = function(x) {
    out <- self$rnn(x)
    out[[1]][, -1, ]
  })()), list(T(2, 5, 3)), list(T(3, 7, 3)), tol = 1e-4)
case("module with with_no_grad", module(function() nn_module(
  initialize = function() self$fc <- nn_linear(2, 2),
  forward = function(x) with_no_grad(self$fc(x)))()), list(T(3, 2)), list(T(5, 2)))
case("module returning a named list", module(function() nn_module(
  initialize = function() self$fc <- nn_linear(2, 2),
  forward = function(x) {
    y <- self$fc(x)
    list(out = y, sum = y$sum())
  })()), list(T(3, 2)), list(T(5, 2)), trace_args = list(strict = FALSE))

# ---- inputs and outputs -------------------------------------------------------------------
case("unnamed list output", function(x) list(x + 1, x * 2), list(T(3)), list(T(5)))
case("named list output, strict = FALSE", function(x) list(a = x + 1, b = x * 2), list(T(3)),
     list(T(5)), trace_args = list(strict = FALSE))
case("named list output with strict = TRUE says strict = FALSE",
     function(x) list(a = x + 1, b = x * 2), list(T(3)), error = "strict = FALSE")
case("named list input", function(l) l$a + l$b, list(list(a = T(3), b = T(3))),
     list(list(a = T(5), b = T(5))))
case("nested list input", function(l) l[[1]][[1]] + l[[2]],
     list(list(list(T(3)), T(3))), list(list(list(T(5)), T(5))))
case("two inputs", function(x, y) x * y + 1, list(T(3), T(3)), list(T(5), T(5)))
case("integer input tensor", function(i) i * 2L, list(torch_tensor(1:3)), list(torch_tensor(1:5)))
case("logical input tensor", function(m) m$logical_not(), list(torch_tensor(c(TRUE, FALSE))),
     list(torch_tensor(c(FALSE, FALSE, TRUE))))
case("double input tensor", function(x) x * 2, list(torch_tensor(c(1, 2), dtype = torch_double())),
     list(torch_tensor(c(1, 2, 3), dtype = torch_double())))
case("scalar 0-d input", function(x) x * 2, list(torch_tensor(3)), list(torch_tensor(5)))
case("a size as an output is refused", function(x) list(x, x$size(1)), list(T(3)),
     error = "outputs must be tensors")
case("function with a default argument", function(x, k = 2) x * k, list(T(3)), list(T(5)))

# ---- what must be refused clearly -------------------------------------------------------------
case("a character example is refused", function(x) x, list("a"), error = "tensor|example|input")
case("an R vector as the example is refused", function(x) x * 2, list(c(-1, 1)),
     error = "tensor|example|input")
case("an R matrix as the example is refused", function(x) x * 2, list(matrix(1:4, 2)),
     error = "tensor|example|input")
case("x[0] is a clear error", function(x) x[0], list(T(3)), error = "0|1-based|position")
case("x[x$size(1) + 1] out of bounds", function(x) x[x$size(1) + 1], list(T(3)),
     error = "out of|bounds|range|index")


# ---- values read from tensors: guards, never a baked value ---------------------------------
case("if (x$sum() > 0) on a tensor (guard)", function(x) if (as.logical(x$sum() > 0)) x else -x,
     list(torch_ones(3)), list(-torch_ones(3)), guard = TRUE)
case("as.numeric(x$sum()) as a scale (guard)", function(x) x * as.numeric(x$sum()),
     list(torch_ones(3)), list(torch_ones(3) * 2), guard = TRUE)
case("as.integer(x[1]) as a position (guard)", function(x, i) x[as.integer(i$item())],
     list(T(4), torch_tensor(2L)), list(T(4), torch_tensor(3L)), guard = TRUE)
case("which(as_array(m)) positions (guard)", function(x) x[which(as_array(x > 0))],
     list(torch_tensor(c(1, -1, 2))), list(torch_tensor(c(-1, 1, 2))), guard = TRUE)
case("max(as_array(x)) (guard)", function(x) x / max(as_array(x)), list(torch_tensor(c(1, 2))),
     list(torch_tensor(c(1, 4))), guard = TRUE)
case("as.numeric(as_array(x)) summed in R (guard)", function(x) x * Reduce(`+`, as.numeric(as_array(x))),
     list(torch_tensor(c(1, 2))), list(torch_tensor(c(1, 4))), guard = TRUE)
case("ifelse on a size", function(x) x * ifelse(x$size(1) > 3, 1, 2), list(T(3)), list(T(5)),
     guard = TRUE)
case("is.numeric(n) is TRUE as for an R integer", function(x) if (is.numeric(x$size(1))) x * 2 else x,
     list(T(3)), list(T(5)))
# identical() compares objects: a traced size is not the R integer 3L, so the traced branch
# differs from the untraced one, which the check catches (use `==`, which records a guard).
case("identical(n, 3L) is caught by the check", function(x) if (identical(x$size(1), 3L)) x * 2 else x,
     list(T(3)), list(T(5)), error = "differs between the code and the trace")
case("n %in% c(3, 5) (guard)", function(x) if (x$size(1) %in% c(3, 5)) x * 2 else x,
     list(T(3)), list(T(4)), guard = TRUE)
case("switch(as.character(n)) (guard)", function(x) switch(as.character(x$size(1)), "3" = x * 3, x),
     list(T(3)), list(T(4)), guard = TRUE)
case("vapply(seq_len(n)) (guard)", function(x) {
  w <- vapply(seq_len(x$size(1)), function(i) i * 1.0, numeric(1))
  x * torch_tensor(w)
}, list(T(3)), list(T(4)), guard = TRUE)
case("seq(1, n, length.out = 3) (guard)", function(x) x[seq(1, x$size(1), length.out = 2)],
     list(T(3)), list(T(5)), guard = TRUE)
case("numeric(n) (guard)", function(x) x * torch_tensor(numeric(x$size(1)) + 1),
     list(T(3)), list(T(5)), guard = TRUE)
case("rep(1, n) (guard)", function(x) x * torch_tensor(rep(2, x$size(1))), list(T(3)),
     list(T(5)), guard = TRUE)
case("matrix(0, n, 2) (guard)", function(x) x + torch_tensor(matrix(1, x$size(1), 2)),
     list(T(3, 2)), list(T(5, 2)), guard = TRUE)
case("isTRUE(n == 3) (guard)", function(x) if (isTRUE(x$size(1) == 3)) x else -x, list(T(3)),
     list(T(5)), guard = TRUE)
case("n as a list name", function(x) {
  l <- list()
  l[[paste0("n", x$size(1))]] <- x
  l[[1]] * 2
}, list(T(3)), list(T(5)), guard = TRUE)
case("a size kept in a closure", function(x) {
  n <- x$size(1)
  scale <- function(t) t / n
  scale(x)
}, list(T(3)), list(T(5)))
case("do.call(torch_cat, ...)", function(x) do.call(torch_cat, list(list(x, x), dim = 1)),
     list(T(3)), list(T(5)))
case("Recall/recursion on sizes (guard)", function(x) {
  f <- function(t) if (t$size(1) <= 1) t else f(t[2:N]) + t[1]
  f(x)
}, list(T(3)), list(T(4)), guard = TRUE)

# ---- more indexing ------------------------------------------------------------------------
case("x[1, 1, drop = FALSE]", function(x) x[1, 1, drop = FALSE], list(T(3, 4)), list(T(5, 4)))
case("x[, 1:2, drop = FALSE]", function(x) x[, 1:2, drop = FALSE], list(T(3, 4)), list(T(5, 4)))
case("x[.., N]", function(x) x[.., N], list(T(2, 3, 4)), list(T(2, 3, 6)))
case("x[N - 1, ]", function(x) x[N - 1, ], list(T(3, 4)), list(T(5, 4)))
case("x[(N %/% 2):N]", function(x) x[(N %/% 2):N], list(T(4)), list(T(8)))
case("x[1:(x$size(1) %/% 2), ]", function(x) x[1:(x$size(1) %/% 2), ], list(T(4, 2)),
     list(T(8, 2)), guard = TRUE)
case("x[x$size(1) %/% 2, ]", function(x) x[x$size(1) %/% 2, ], list(T(4, 2)), list(T(8, 2)))
case("x[-x$size(1), ] (negative traced position)", function(x) x[-x$size(1), ],
     list(T(4, 2)), list(T(6, 2)))
case("x[c(-1, -N), ]", function(x) x[c(-1, -2), ], list(T(4, 2)), list(T(6, 2)))
case("x[c(N, 1), ]", function(x) x[c(N, 1), ], list(T(4, 2)), list(T(6, 2)))
case("x[i] i an int64 0-d tensor", function(x, i) x[i], list(T(4), torch_tensor(2L)$squeeze()),
     list(T(6), torch_tensor(5L)$squeeze()))
case("x[i, j] two index tensors", function(x, i, j) x[i, j],
     list(T(4, 3), torch_tensor(c(1L, 2L)), torch_tensor(c(3L, 1L))),
     list(T(6, 5), torch_tensor(c(6L, 2L, 1L)), torch_tensor(c(5L, 1L))))
case("x[m] m a logical input tensor", function(x, m) x[m], list(T(3), torch_tensor(c(TRUE, FALSE, TRUE))),
     list(T(5), torch_tensor(c(TRUE, FALSE, TRUE, TRUE, FALSE))))
case("x[x[, 1] > 0, 2]", function(x) x[x[, 1] > 0, 2], list(T(6, 2)), list(T(9, 2)))
case("x[[2]] on a 1-d tensor", function(x) x[[2]], list(T(3)), list(T(5)))
case("y[2:N] <- 0", function(x) {
  y <- x$clone()
  y[2:N] <- 0
  y
}, list(T(4)), list(T(6)))
case("y[i, ] <- v with a traced size i", function(x) {
  y <- x$clone()
  y[x$size(1) - 1L, ] <- x[1, ]
  y
}, list(T(4, 2)), list(T(6, 2)))
case("y[c(1, n), ] <- 0 traced vector assignment", function(x) {
  y <- x$clone()
  y[c(1, x$size(1)), ] <- 0
  y
}, list(T(4, 2)), list(T(6, 2)))
case("y[-1] <- 0 (last, mlverse)", function(x) {
  y <- x$clone()
  y[-1] <- 0
  y
}, list(T(4)), list(T(6)))
case("y[m] <- tensor of values", function(x) {
  y <- x$clone()
  y[y > 0] <- y[y > 0] * 10
  y
}, list(T(6)), list(T(9)))
case("y[, N] <- y[, 1]", function(x) {
  y <- x$clone()
  y[, N] <- y[, 1]
  y
}, list(T(3, 4)), list(T(3, 6)))
case("y[.., 1] <- 0", function(x) {
  y <- x$clone()
  y[.., 1] <- 0
  y
}, list(T(2, 3, 4)), list(T(5, 3, 4)))
case("in-place x$add_() on a clone", function(x) {
  y <- x$clone()
  y$add_(1)
  y$mul_(x$size(1))
}, list(T(3)), list(T(5)))
case("x[0] is a clear error (1-based)", function(x) x[0], list(T(3)), error = "1-based|0")
case("x[c(1, NA)] is a clear error", function(x) x[c(1, NA)], list(T(3)),
     error = "NA|whole|index")
case("x[1.5] is a clear error", function(x) x[1.5], list(T(3)), error = "whole|index")
case("x[\"a\"] is a clear error", function(x) x["a"], list(T(3)), error = "index|character")

# ---- arguments that are not tensors --------------------------------------------------------
# Example inputs are tensors (as in mlverse): numbers, characters and logicals are refused
# with a message that says what to do, never baked in silently.
case("a number argument is refused (pass a tensor)", function(x, k) x * k, list(T(3), 2),
     error = "pass torch_tensor\\(2\\)")
case("an integer argument is refused (pass a tensor)", function(x, k) x * k, list(T(3), 2L),
     error = "pass torch_tensor\\(2L\\)")
case("a character argument is refused (fix it in the code)", function(x, act) {
  if (act == "relu") nnf_relu(x) else nnf_gelu(x)
}, list(T(3), "relu"), error = "fix it in the traced code instead")
case("a logical argument is refused (fix it in the code)", function(x, flag) if (flag) x * 2 else x,
     list(T(3), TRUE), error = "fix it in the traced code instead")
case("a number as a 0-d tensor is not baked", function(x, k) x * k, list(T(3), torch_tensor(2)),
     list(T(3), torch_tensor(3)))
case("a NULL argument", function(x, y) if (is.null(y)) x else x + y, list(T(3), NULL),
     list(T(5), NULL))
case("a list input whose length changes", function(l) Reduce(`+`, l), list(list(T(2), T(2))),
     list(list(T(2), T(2), T(2))), guard = TRUE)
case("a named list input, names in another order", function(l) l$a - l$b,
     list(list(a = T(3), b = T(3))), list(list(b = T(3), a = T(3))))

custom("a traced size kept on a module after the trace", function() {
  Net <- nn_module(
    initialize = function() self$fc <- nn_linear(2, 2),
    forward = function(x) {
      self$last_n <- x$size(1)
      self$fc(x)
    })
  m <- Net()
  suppressWarnings(tm <- jit_trace(m, torch_ones(3, 2)))
  n <- m$last_n
  list(as.integer(n) + 1L, 4L)
})
# The check runs the code again (at other sizes too), so what it leaves in a global is
# from its last run; with check_trace = FALSE the code runs once, on the example.
custom("a traced size kept in a global after the trace", function() {
  keep <- new.env()
  f <- function(x) {
    keep$n <- x$size(1)
    x * 2
  }
  tr <- jit_trace(f, torch_ones(3), check_trace = FALSE)
  list(keep$n * 2, 6)
})
custom("a tensor made inside the trace kept outside it", function() {
  keep <- new.env()
  f <- function(x) {
    keep$t <- x * 2
    x + 1
  }
  tr <- jit_trace(f, torch_ones(3), check_trace = FALSE)
  list(as_array(keep$t + 1), c(3, 3, 3))
})
custom("the traced function called with an R matrix", function() {
  f <- function(x) x * 2
  tr <- jit_trace(f, torch_ones(2, 2))
  list(tr(matrix(1, 2, 2)), f(torch_ones(2, 2)))
}, error = "tensor")
custom("the traced function called with too many inputs", function() {
  tr <- jit_trace(function(x) x * 2, torch_ones(2))
  list(tr(torch_ones(2), torch_ones(2)), NULL)
}, error = "argument|input|expected")
custom("the traced function called with another dtype", function() {
  f <- function(x) x * 2
  tr <- jit_trace(f, torch_ones(2))
  list(tr(torch_tensor(c(1L, 2L))), f(torch_tensor(c(1L, 2L))))
}, error = "dtype|int64|float")
custom("the traced function called with another rank", function() {
  f <- function(x) x$sum(dim = 1)
  tr <- jit_trace(f, torch_ones(2, 3))
  list(tr(torch_ones(2, 3, 4)), f(torch_ones(2, 3, 4)))
}, error = "dimension|rank|dim|shape")
custom("a module traced in both modes follows $train()/$eval()", function() {
  Net <- nn_module(
    initialize = function() self$fc <- nn_linear(2, 2),
    forward = function(x) if (self$training) self$fc(x) * 2 else self$fc(x))
  m <- Net()
  tm <- jit_trace(m, torch_ones(3, 2))
  tm$eval()
  m$eval()
  a <- tm(torch_ones(4, 2))
  list(a, m(torch_ones(4, 2)))
})
custom("training the traced module trains the original", function() {
  m <- nn_linear(2, 1)
  tm <- jit_trace(m, torch_ones(3, 2))
  opt <- optim_sgd(tm$parameters, lr = 0.1)
  loss <- tm(torch_ones(3, 2))$sum()
  loss$backward()
  opt$step()
  list(tm(torch_ones(1, 2)), m(torch_ones(1, 2)))
})
custom("a module with batch norm in train mode: statistics updated once a call", function() {
  torch_manual_seed(1)
  m1 <- nn_batch_norm1d(2)
  m2 <- nn_batch_norm1d(2)
  x <- torch_randn(4, 2)
  tm <- jit_trace(m1, x)
  unchanged <- as_array(m1$running_mean)
  tm(x)
  m2(x) # tracing did not count: one call, one update
  list(list(unchanged, m1$running_mean), list(c(0, 0), m2$running_mean))
})
custom("gradients through a traced function", function() {
  f <- function(x) (x * x$size(1))$sum()
  tr <- jit_trace(f, torch_ones(3))
  a <- torch_ones(5, requires_grad = TRUE)
  tr(a)$backward()
  b <- torch_ones(5, requires_grad = TRUE)
  f(b)$backward()
  list(a$grad, b$grad)
})
custom("a traced function inside another trace", function() {
  inner <- jit_trace(function(x) x * x$size(1), torch_ones(3))
  outer <- function(x) inner(x) + 1
  tr <- jit_trace(outer, torch_ones(3))
  list(tr(torch_ones(5)), outer(torch_ones(5)))
})
custom("a loaded module keeps R-side sizes general", function() {
  Net <- nn_module(
    initialize = function() self$fc <- nn_linear(4, 2),
    forward = function(x) self$fc(x$view(c(x$size(1), -1))))
  m <- Net()
  tm <- jit_trace(m, torch_ones(3, 2, 2))
  path <- tempfile(fileext = ".pt")
  jit_save(tm, path)
  ld <- jit_load(path)
  ld$eval()
  m$eval()
  x <- torch_randn(7, 2, 2)
  list(ld(x), m(x))
})

# ---- sizes as vectors ------------------------------------------------------------------------
case("x$view(x$shape)", function(x) (x + 1)$view(x$shape), list(T(3, 2)), list(T(5, 4)))
case("x$view(rev(x$shape))", function(x) x$view(rev(x$shape)), list(T(3, 2)), list(T(5, 4)))
case("torch_zeros(x$shape[-1])", function(x) x + torch_zeros(x$shape[-1]), list(T(3, 2)),
     list(T(5, 4)))
case("x$expand(x$shape) of a row", function(x) x[1, , drop = FALSE]$expand(x$shape),
     list(T(3, 2)), list(T(5, 4)))
case("x$view(c(x$shape[1], x$shape[2] * x$shape[3]))",
     function(x) x$view(c(x$shape[1], x$shape[2] * x$shape[3])), list(T(3, 2, 2)),
     list(T(5, 4, 3)))
case("x$shape[[2]]", function(x) x / x$shape[[2]], list(T(3, 2)), list(T(5, 4)))
case("x$size()[2]", function(x) x / x$size()[2], list(T(3, 2)), list(T(5, 4)))
case("dim(x)[[2]]", function(x) x / dim(x)[[2]], list(T(3, 2)), list(T(5, 4)))
case("max(x$shape)", function(x) x / max(x$shape), list(T(3, 2)), list(T(5, 4)), guard = TRUE)
case("length(x$shape)", function(x) x * length(x$shape), list(T(3, 2)), list(T(5, 4)))
case("all(x$shape == c(3, 2)) (guard)", function(x) if (all(x$shape == c(3, 2))) x * 2 else x,
     list(T(3, 2)), list(T(5, 4)), guard = TRUE)
case("x$shape * 2 to a factory", function(x) torch_zeros(x$shape * 2)$sum() + x, list(T(3, 2)),
     list(T(5, 4)))
case("for (d in x$shape) accumulate", function(x) {
  s <- 1
  for (d in x$shape) s <- s * d
  x / s
}, list(T(3, 2)), list(T(5, 4)))
case("x$new_zeros(c(n, 2))", function(x) x$new_zeros(c(x$size(1), 2)) + x, list(T(3, 2)),
     list(T(5, 2)))
case("torch_full_like(x, n)", function(x) torch_full_like(x, 2) * x$size(1), list(T(3, 2)),
     list(T(5, 2)))
case("torch_split(x, n %/% 2)", function(x) torch_split(x, x$size(1) %/% 2)[[1]],
     list(T(4, 2)), list(T(6, 2)))
case("x$topk(k = n %/% 2)", function(x) x$topk(k = x$size(1) %/% 2)[[1]], list(T(4)),
     list(T(8)))
case("x$repeat(c(1, n))", function(x) x$`repeat`(c(1, x$size(1))), list(T(3, 2)),
     list(T(5, 2)))
case("nnf_pad(x, c(0, n))", function(x) nnf_pad(x, c(0, x$size(2))), list(T(3, 2)),
     list(T(3, 4)))
case("nnf_interpolate(size = 2 * n)", function(x) {
  nnf_interpolate(x, size = c(x$size(3) * 2, x$size(4) * 2), mode = "nearest")
}, list(T(1, 1, 2, 3)), list(T(2, 1, 4, 5)))
case("x$unflatten(1, c(2, -1))", function(x) x$unflatten(1, c(2, -1)), list(T(4, 3)),
     list(T(6, 3)))

# ---- ops that return indices, used again ---------------------------------------------------
case("x[torch_argmax(x)]", function(x) x[torch_argmax(x)], list(T(5)), list(T(7)))
case("gather(2, argmax(keepdim = TRUE))", function(x) {
  torch_gather(x, 2, torch_argmax(x, dim = 2, keepdim = TRUE))
}, list(T(3, 4)), list(T(5, 4)))
case("index_select with sort indices", function(x) x$index_select(1, torch_sort(x[, 1])[[2]]),
     list(T(4, 2)), list(T(6, 2)))
case("torch_where(cond) 1-based positions", function(x) torch_where(x > 0)[[1]],
     list(torch_tensor(c(1, -1, 2))), list(torch_tensor(c(-1, 1, 2, 3))))
case("torch_nonzero 1-based", function(x) torch_nonzero(x > 0), list(torch_tensor(c(1, -1, 2))),
     list(torch_tensor(c(-1, 1, 2, 3))))
case("x$max(dim = 1)[[2]] as an index", function(x) x[x$max(dim = 1)[[2]], 1],
     list(T(4, 2)), list(T(6, 2)))
case("index_fill(1, idx, 0)", function(x) x$index_fill(1, torch_tensor(c(1L, 2L)), 0),
     list(T(4, 2)), list(T(6, 2)))
case("scatter(2, idx, value = 1)", function(x) {
  torch_zeros_like(x)$scatter(2, torch_ones(x$size(1), 1, dtype = torch_long()), value = 1)
}, list(T(3, 4)), list(T(5, 4)))
case("index_add_ on a clone", function(x) {
  y <- torch_zeros(3, 2)
  y$index_add_(1, torch_tensor(c(1L, 3L)), x[1:2, ])
}, list(T(4, 2)), list(T(6, 2)))
case("y[idx] <- values (index tensor)", function(x) {
  y <- x$clone()
  y[torch_tensor(c(1L, 3L))] <- 0
  y
}, list(T(4)), list(T(6)))

# ---- dtypes, devices, autograd flags ---------------------------------------------------------
case("x$float() / x$long()", function(x) x$long()$float() * 2, list(torch_tensor(c(1.5, 2.5))),
     list(torch_tensor(c(1.5, 2.5, 3.5))))
case("if (x$dtype == torch_float()) (guard)", function(x) {
  if (x$dtype == torch_float()) x * 2 else x
}, list(T(3)), list(T(5)))
case("x$is_floating_point()", function(x) if (x$is_floating_point()) x * 2 else x, list(T(3)),
     list(T(5)))
case("x$to(device = \"cpu\")", function(x) x$to(device = "cpu") * 2, list(T(3)), list(T(5)))
case("x$cpu()", function(x) x$cpu() + 1, list(T(3)), list(T(5)))
case("x$detach()", function(x) x$detach() * 2, list(T(3)), list(T(5)))
case("x$to(dtype = torch_double())$sum()", function(x) x$to(dtype = torch_double())$sum(),
     list(T(3)), list(T(5)))
case("x$new_ones(n) / x$new_full(c(n, 1), 2)", function(x) {
  x$new_ones(x$size(1)) + x$new_full(c(x$size(1), 1), 2)
}, list(T(3, 2)), list(T(5, 2)))
case("x$device$type", function(x) if (x$device$type == "cpu") x + 1 else x, list(T(3)),
     list(T(5)))
case("torch_no_grad inside the function", function(x) with_no_grad(x * 2) + x, list(T(3)),
     list(T(5)))
case("x$permute(rev(seq_len(x$dim())))", function(x) x$permute(rev(seq_len(x$dim()))),
     list(T(3, 2, 4)), list(T(5, 2, 4)))
case("x$transpose(-1, -2)", function(x) x$transpose(-1, -2), list(T(3, 2)), list(T(5, 2)))
case("x$flatten()", function(x) x$flatten(), list(T(3, 2)), list(T(5, 2)))
case("x$view(-1)", function(x) x$contiguous()$view(-1), list(T(3, 2)), list(T(5, 2)))
case("x$diag()", function(x) x$diag(), list(T(3, 3)), list(T(5, 5)))
case("torch_tril(x, diagonal = -1)", function(x) torch_tril(x, diagonal = -1), list(T(3, 3)),
     list(T(5, 5)))
case("torch_cat(lapply(1:3, ...))", function(x) torch_cat(lapply(1:3, function(i) x * i), dim = 1),
     list(T(3)), list(T(5)))
case("torch_stack(x$unbind(2))", function(x) torch_stack(x$unbind(2), dim = 1), list(T(3, 2)),
     list(T(5, 2)))

# ---- more modules ------------------------------------------------------------------------------
mod <- function(init, fwd, eval = TRUE) {
  module(function() {
    m <- nn_module(initialize = init, forward = fwd)()
    if (eval) m$eval()
    m
  })
}
case("nn_conv2d padding = \"same\"", mod(function() self$c <- nn_conv2d(2, 3, 3, padding = "same"),
  function(x) self$c(x)), list(T(1, 2, 5, 5)), list(T(2, 2, 7, 6)), tol = 1e-4)
case("nn_embedding padding_idx = 1", mod(function() self$e <- nn_embedding(5, 2, padding_idx = 1),
  function(i) self$e(i)), list(torch_tensor(c(1L, 2L))), list(torch_tensor(c(3L, 1L, 5L))))
case("nn_multihead_attention", mod(function() {
  self$a <- nn_multihead_attention(4, 2, batch_first = TRUE)
}, function(x) self$a(x, x, x)[[1]]), list(T(2, 3, 4)), list(T(3, 5, 4)), tol = 1e-4)
case("nn_transformer_encoder_layer", mod(function() {
  self$l <- nn_transformer_encoder_layer(d_model = 4, nhead = 2, dim_feedforward = 8,
                                         batch_first = TRUE)
}, function(x) self$l(x)), list(T(2, 3, 4)), list(T(3, 5, 4)), tol = 1e-4)
case("nn_lstm with an initial state list", mod(function() {
  self$r <- nn_lstm(3, 4, batch_first = TRUE)
}, function(x) {
  h0 <- torch_zeros(1, x$size(1), 4)
  self$r(x, list(h0, h0))[[1]]
}), list(T(2, 5, 3)), list(T(3, 7, 3)), tol = 1e-4)
case("self$net[[1]] of a sequential", mod(function() {
  self$net <- nn_sequential(nn_linear(3, 4), nn_relu(), nn_linear(4, 2))
}, function(x) self$net[[3]](self$net[[1]](x))), list(T(2, 3)), list(T(5, 3)))
case("a helper method called in forward", module(function() {
  m <- nn_module(
    initialize = function() self$fc <- nn_linear(3, 3),
    helper = function(x) self$fc(x) * 2,
    forward = function(x) self$helper(x) + 1)()
  m
}), list(T(2, 3)), list(T(5, 3)))
case("an R number attribute used in forward", mod(function() {
  self$fc <- nn_linear(3, 3)
  self$scale <- 0.5
}, function(x) self$fc(x) * self$scale), list(T(2, 3)), list(T(5, 3)))
case("a module returning an unnamed list", mod(function() self$fc <- nn_linear(3, 3),
  function(x) list(self$fc(x), x$sum())), list(T(2, 3)), list(T(5, 3)))
case("nn_flatten + nn_linear", mod(function() {
  self$f <- nn_flatten()
  self$fc <- nn_linear(6, 2)
}, function(x) self$fc(self$f(x))), list(T(2, 2, 3)), list(T(5, 2, 3)))
case("nn_batch_norm2d eval", mod(function() self$b <- nn_batch_norm2d(2),
  function(x) self$b(x)), list(T(2, 2, 3, 3)), list(T(4, 2, 5, 5)))
case("nn_group_norm", mod(function() self$g <- nn_group_norm(2, 4), function(x) self$g(x)),
  list(T(2, 4, 3)), list(T(3, 4, 5)), tol = 1e-4)
case("nn_max_pool2d + nn_avg_pool1d", mod(function() {
  self$p <- nn_max_pool2d(2)
}, function(x) self$p(x)), list(T(1, 1, 4, 4)), list(T(2, 1, 6, 8)))
case("nn_conv_transpose2d", mod(function() self$c <- nn_conv_transpose2d(2, 1, 2, stride = 2),
  function(x) self$c(x)), list(T(1, 2, 3, 3)), list(T(2, 2, 4, 5)), tol = 1e-4)
case("nn_leaky_relu / nn_elu / nn_gelu", mod(function() {
  self$a <- nn_leaky_relu(0.1)
  self$b <- nn_elu()
  self$c <- nn_gelu()
}, function(x) self$c(self$b(self$a(x)))), list(T(3)), list(T(5)))
case("nn_prelu", mod(function() self$p <- nn_prelu(), function(x) self$p(x)), list(T(3)),
  list(T(5)))
case("nn_softmax(dim = 2)", mod(function() self$s <- nn_softmax(dim = 2), function(x) self$s(x)),
  list(T(3, 4)), list(T(5, 4)))
case("nn_gru with h0", mod(function() self$r <- nn_gru(3, 4), function(x) {
  self$r(x, torch_zeros(1, x$size(2), 4))[[2]]
}), list(T(5, 2, 3)), list(T(7, 3, 3)), tol = 1e-4)
case("nn_identity and nn_dropout(eval)", mod(function() {
  self$i <- nn_identity()
  self$d <- nn_dropout(0.3)
}, function(x) self$d(self$i(x))), list(T(3)), list(T(5)))
case("a module in train mode with batch norm (batch statistics)", mod(function() {
  self$b <- nn_batch_norm1d(3)
}, function(x) self$b(x), eval = FALSE), list(T(4, 3)), list(T(6, 3)), tol = 1e-4)
case("a module with a plain tensor attribute (a constant)", mod(function() {
  self$w <- torch_tensor(c(1, 2, 3))
}, function(x) x * self$w), list(T(2, 3)), list(T(5, 3)))

# ---- traced sizes where R values go ---------------------------------------------------------
case("y[1] <- x$size(1) (a size as the value)", function(x) {
  y <- x$clone()
  y[1] <- x$size(1)
  y
}, list(T(3)), list(T(5)))
case("y[1] <- x$size(1) / 2", function(x) {
  y <- x$clone()
  y[1] <- x$size(1) / 2
  y
}, list(T(3)), list(T(5)))
case("y[1:2] <- c(1, 2) (an R vector as the value)", function(x) {
  y <- x$clone()
  y[1:2] <- c(10, 20)
  y
}, list(T(3)), list(T(5)))
case("x * c(n, 2) (a list of size and number)", function(x) x * torch_tensor(c(x$size(1), 2)),
     list(T(3, 2)), list(T(5, 2)))
# c(n, 2) is a list while tracing (a traced size is not an R number): torch_tensor() takes
# it as the vector c(3L, 2) is outside; a list() of single numbers is that vector too.
case("torch_tensor(list(n, 2L))",
     function(x) x$sum() * torch_tensor(list(x$size(1), 2L)), list(T(3, 2)), list(T(5, 2)))
case("x$fill_(n)", function(x) x$clone()$fill_(x$size(1)), list(T(3)), list(T(5)))
case("torch_full(c(2), n)", function(x) torch_full(c(2), x$size(1)) + x$sum(), list(T(3)),
     list(T(5)))
case("x$masked_fill(m, n)", function(x) x$masked_fill(x > 0, x$size(1)), list(T(3)), list(T(5)))
case("torch_clamp(x, max = n)", function(x) torch_clamp(x * 10, max = x$size(1)), list(T(3)),
     list(T(5)))
case("x$pow(n)", function(x) x$pow(x$size(1)), list(T(3)), list(T(5)), tol = 1e-4)
case("torch_where(m, x, n)", function(x) torch_where(x > 0, x, x$size(1)), list(T(3)), list(T(5)))
case("nnf_dropout(p = 1 / n) eval", function(x) nnf_dropout(x, p = 1 / x$size(1), training = FALSE),
     list(T(3)), list(T(5)))
case("x$add(n, alpha = 2)", function(x) x$add(x$size(1), alpha = 2), list(T(3)), list(T(5)))
case("x$narrow(1, 1, n - 1)", function(x) x$narrow(1, 1, x$size(1) - 1), list(T(3)), list(T(5)))
case("x$roll(n %/% 2)", function(x) x$roll(x$size(1) %/% 2), list(T(4)), list(T(6)))
case("torch_cumsum(x, dim = x$dim())", function(x) torch_cumsum(x, dim = x$dim()), list(T(3, 2)),
     list(T(5, 2)))
case("x$sum(dim = x$dim() - 1)", function(x) x$sum(dim = x$dim() - 1), list(T(3, 2, 2)),
     list(T(5, 2, 2)))
case("x$mean(dim = -1)", function(x) x$mean(dim = -1), list(T(3, 2)), list(T(5, 2)))
case("x$select(2, N)?", function(x) x$select(2, x$size(2)), list(T(3, 2)), list(T(3, 4)))
case("torch_index_select(x, 1, n) with a size", function(x) {
  torch_index_select(x, 1, torch_tensor(x$size(1)))
}, list(T(3, 2)), list(T(5, 2)))
case("x[n, n] both traced", function(x) x[x$size(1), x$size(2)], list(T(3, 2)), list(T(5, 4)))
case("x[, n:1] traced reversed columns (guard)", function(x) x[, x$size(2):1], list(T(3, 2)),
     list(T(3, 4)), guard = TRUE)
case("x[(n - 1):n, ]", function(x) x[(x$size(1) - 1):x$size(1), ], list(T(3, 2)), list(T(5, 2)),
     guard = TRUE)

# ---- lists in and out, modules taking lists -------------------------------------------------
case("nested unnamed list output", function(x) list(x, list(x + 1, x * 2)), list(T(3)), list(T(5)))
case("a module taking a named list", module(function() nn_module(
  initialize = function() self$fc <- nn_linear(2, 2),
  forward = function(batch) self$fc(batch$x) + batch$y)()),
  list(list(x = T(3, 2), y = T(3, 2))), list(list(x = T(5, 2), y = T(5, 2))))
case("a module taking two inputs, one unused", module(function() nn_module(
  initialize = function() self$fc <- nn_linear(2, 2),
  forward = function(x, y) self$fc(x))()), list(T(3, 2), T(1)), list(T(5, 2), T(1)))
case("length(list input) in a loop (guard-free: fixed structure)", function(l) {
  out <- l[[1]]
  for (k in seq_len(length(l))) out <- out + l[[k]]
  out
}, list(list(T(2), T(2))), list(list(T(4), T(4))))
case("names(list input)", function(l) if ("b" %in% names(l)) l$a + l$b else l$a,
     list(list(a = T(2), b = T(2))), list(list(a = T(4), b = T(4))))
case("a list of sizes out of sapply", function(x, y) {
  n <- sapply(list(x, y), function(t) t$size(1))
  x$sum() * sum(n)
}, list(T(2), T(3)), list(T(4), T(5)), guard = TRUE)
case("mapply over two lists", function(l) {
  Reduce(`+`, mapply(function(a, b) a * b, l, list(1, 2), SIMPLIFY = FALSE))
}, list(list(T(2), T(2))), list(list(T(3), T(3))))
case("do.call(torch_stack) of a list input", function(l) do.call(torch_stack, list(l)),
     list(list(T(2), T(2))), list(list(T(3), T(3))))
case("torch_cat of a list of slices", function(x) {
  torch_cat(list(x[1:2, ], x[N, , drop = FALSE]), dim = 1)
}, list(T(3, 2)), list(T(5, 2)))
case("x$chunk(2) destructured", function(x) {
  parts <- x$chunk(2, dim = 2)
  parts[[1]] * torch_sigmoid(parts[[2]])
}, list(T(3, 4)), list(T(5, 4)))
case("nnf_glu", function(x) nnf_glu(x, dim = 2), list(T(3, 4)), list(T(5, 4)))
case("torch_max of two tensors (elementwise)", function(x, y) torch_max(x, y), list(T(3), T(3)),
     list(T(5), T(5)))
case("torch_max over dim with keepdim", function(x) torch_max(x, dim = 2, keepdim = TRUE)[[1]],
     list(T(3, 4)), list(T(5, 4)))
case("torch_min of everything", function(x) torch_min(x), list(T(3, 4)), list(T(5, 4)))
case("x$abs()$max()$item() scale (guard)", function(x) x / x$abs()$max()$item(),
     list(torch_tensor(c(1, -2))), list(torch_tensor(c(1, -4))), guard = TRUE)
case("torch_std(dim = 1) and var", function(x) torch_std(x, dim = 1) + torch_var(x, dim = 1),
     list(T(3, 4)), list(T(5, 4)))
case("x$clamp(min = -n, max = n)", function(x) (x * 10)$clamp(min = -x$size(1), max = x$size(1)),
     list(T(3)), list(T(5)))
case("torch_matmul of batched and traced view", function(x, w) {
  torch_matmul(x$view(c(-1, x$size(3))), w)$view(c(x$size(1), x$size(2), -1))
}, list(T(2, 3, 4), T(4, 5)), list(T(3, 6, 4), T(4, 5)))

# ---- what an R user writes around a trace (a file of its own) -----------------------------
section <- "user"
source(file.path(dirname(script), "r_trace_trial_user.R"), local = TRUE)

# ---- run ------------------------------------------------------------------------------------
if (!is.null(only)) snippets <- Filter(function(s) s$section == only, snippets)
dup <- anyDuplicated(vapply(snippets, `[[`, "", "name"))
if (dup) stop("two snippets are named ", snippets[[dup]]$name)
cat(sprintf("total\t%d\n", length(snippets)), file = out, append = TRUE)
for (k in seq_along(snippets)) {
  if (k < from) next
  s <- snippets[[k]]
  cat(sprintf("start\t%d\t%s\t%s\n", k, s$name, s$section), file = out, append = TRUE)
  r <- tryCatch(suppressWarnings(run_snippet(s)), error = function(e) {
    list("fails", paste("harness:", conditionMessage(e)))
  })
  cat(sprintf("done\t%d\t%s\t%s\t%s\t%s\n", k, s$name, r[[1]], s$section, one_line(r[[2]])),
      file = out, append = TRUE)
  if (verbose || r[[1]] %in% c("fails", "SILENTLY WRONG")) {
    cat(sprintf("[%s] %s%s\n", r[[1]], s$name,
                if (nzchar(r[[2]])) paste0("\n    ", substr(r[[2]], 1, 300)) else ""))
  }
}
cat("end\n", file = out, append = TRUE)
