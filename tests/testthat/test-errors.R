# Errors are classed one-line R conditions with R's 1-based numbers.

test_that("eager errors are classed conditions, not Rcpp exceptions", {
  x <- torch_tensor(c(1, 2, 3))
  e <- tryCatch(x$sum(dim = 2), error = identity)
  expect_s3_class(e, c("index_error", "tracebridge_error"))
  expect_false(inherits(e, "Rcpp::exception"))
  # torch says "range of [-1, 0], but got 1" (0-based); R users read dims 1-based.
  expect_match(conditionMessage(e), "range of \\[-1, 1\\], but got 2", fixed = FALSE)
  expect_false(grepl("\n", conditionMessage(e)))
  e2 <- tryCatch(x[5], error = identity)
  expect_s3_class(e2, "index_error")
  expect_match(conditionMessage(e2), "index 5 is out of bounds for dimension 1 with size 3")
  e3 <- tryCatch(torch_matmul(torch_ones(2, 3), torch_ones(2, 3)), error = identity)
  expect_s3_class(e3, c("runtime_error", "tracebridge_error"))
  expect_false(grepl("\n", conditionMessage(e3)))
  e4 <- tryCatch(nnf_cross_entropy(torch_randn(2, 3), torch_tensor(c(1L, 4L))),
                 error = identity)
  expect_s3_class(e4, "tracebridge_error")
  expect_match(conditionMessage(e4), "Target 4 is out of bounds")
})

test_that("R-side checks name the argument and the 1-based rule", {
  expect_error(torch_sum(torch_ones(2), dim = 0), class = "index_error")
  expect_error(torch_sum(torch_ones(2), dim = 1.5), class = "value_error")
  expect_error(torch_ones(2)$index_select(1, torch_tensor(c(0.5))), class = "type_error")
  expect_error(nn_module("X", function() 1), class = "value_error")
  expect_error(optim_sgd(list("a"), lr = 0.1), class = "type_error")
})

test_that("a traced function takes named inputs in any order", {
  f <- function(x, y) x + 2 * y
  tr <- jit_trace(f, torch_ones(2), torch_zeros(2))
  expect_equal(as_array(tr(y = torch_ones(2), x = torch_zeros(2))), c(2, 2))
  expect_equal(as_array(tr(torch_zeros(2), y = torch_ones(2))), c(2, 2))
  expect_error(tr(z = torch_ones(2), x = torch_ones(2)), class = "value_error")
})

test_that("an R error inside a trace leaves no Python error behind for the next call", {
  skip_if_no_torch()
  err <- tryCatch(jit_trace(function(x) stop("boom in R"), torch_ones(2)), error = identity)
  expect_equal(conditionMessage(err), "boom in R")
  later <- tryCatch(torch_tensor(1:2, requires_grad = TRUE), error = identity)
  expect_match(conditionMessage(later), "only Tensors of floating point dtype")
  expect_no_match(conditionMessage(later), "boom")
})

test_that("torch_cat and narrow errors give 1-based positions", {
  skip_if_no_torch()
  err <- tryCatch(torch_cat(list(torch_ones(2, 2), torch_ones(3, 3)), dim = 1),
                  error = identity)
  expect_match(conditionMessage(err), "except in dimension 1", fixed = TRUE)
  expect_match(conditionMessage(err), "for tensor number 2 in the list", fixed = TRUE)
  err <- tryCatch(torch_ones(4)$narrow(1, 3, 3), error = identity)
  expect_match(conditionMessage(err), "start (3) + length (3)", fixed = TRUE)
  expect_s3_class(err, "tracebridge_error")
})

# ---- messages in R terms (issue 18) ----------------------------------------------------

# A function as Rscript leaves it: parsed without keeping its source.
without_source <- function(text) {
  env <- new.env(parent = globalenv())  # user code: outside any package namespace
  eval(parse(text = text, keep.source = FALSE)[[1]], env)
}

test_that("guard errors name sizes 1-based, with R's TRUE/FALSE and R words", {
  skip_if_no_torch()
  f <- function(x) if (x$shape[1] == 2) x * 2 else x
  tr <- suppressWarnings(jit_trace(f, torch_ones(2, 3)))
  err <- tryCatch(tr(torch_ones(3, 3)), error = identity)
  expect_s3_class(err, "tracebridge_guard_error")
  msg <- conditionMessage(err)
  expect_match(msg, "the trace assumed that x$shape[1] == 2 is TRUE, but now it is FALSE",
               fixed = TRUE)
  expect_match(msg, "the R-level decision", fixed = TRUE)
  expect_no_match(msg, "x.shape[0]", fixed = TRUE)
  expect_no_match(msg, "Python")
  g <- function(x) x$view(c(as.integer(x$size(2)), -1))
  w <- tryCatch(jit_trace(g, torch_ones(2, 3)), warning = identity)
  expect_match(conditionMessage(w), "x$shape[2] was turned into an R number (3)", fixed = TRUE)
})

test_that("guard errors quote the R source line even when R kept no sources (Rscript)", {
  skip_if_no_torch()
  f <- without_source("function(x) {\n  y <- x * 2\n  if (x$shape[1] == 2) y else -y\n}")
  expect_null(attr(f, "srcref"))
  tr <- suppressWarnings(jit_trace(f, torch_ones(2, 3)))
  # deparse(f) puts `function (x)` and `{` on lines 1 and 2, so the `if` is line 4
  expect_error(tr(torch_ones(3, 3)), "assumption made at <R function f>:4: if (x$shape[1] == 2)",
               fixed = TRUE, class = "tracebridge_guard_error")
  expect_match(tr$guards, "x$shape[1] == 2 is TRUE (at <R function f>:4)", fixed = TRUE)
  # the traced function still sees its own variables
  k <- 3
  h <- without_source("function(x) x * k")
  environment(h) <- environment()
  expect_equal(as_array(jit_trace(h, torch_ones(2))(torch_ones(2))), c(3, 3))
})

test_that("under Rscript, a guard error quotes the R line", {
  skip_if_no_torch()
  script <- tempfile(fileext = ".R")
  writeLines(c(
    "library(tracebridge)",
    "f <- function(x) {",
    "  if (x$shape[1] == 2) x else -x",
    "}",
    "tr <- suppressWarnings(jit_trace(f, torch_ones(2, 3)))",
    "cat(tryCatch(tr(torch_ones(4, 3)), error = conditionMessage))"
  ), script)
  out <- system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = TRUE,
                 env = paste0("R_LIBS=", paste(.libPaths(), collapse = ":")))
  out <- paste(out, collapse = "\n")
  # deparse() puts the body's first line on line 3, and `x else -x` on lines of their own
  expect_match(out, "assumption made at <R function f>:3: if (x$shape[1] == 2);", fixed = TRUE)
  expect_no_match(out, "unknown location", fixed = TRUE)
})

test_that("check errors name R's jit_trace() arguments, which exist", {
  skip_if_no_torch()
  calls <- 0
  f <- function(x) {
    calls <<- calls + 1
    x * calls  # a value that changes from call to call: the check catches it
  }
  err <- tryCatch(jit_trace(f, torch_ones(2)), error = identity)
  expect_s3_class(err, "tracebridge_check_error")
  expect_match(conditionMessage(err), "check_trace = FALSE", fixed = TRUE)
  expect_no_match(conditionMessage(err), "check_trace=False", fixed = TRUE)
  tr <- jit_trace(f, torch_ones(2), check_trace = FALSE)
  expect_s3_class(tr, "script_function")
  expect_error(jit_trace(f, torch_ones(2), check_trace = NA), "TRUE or FALSE",
               class = "type_error")
  expect_error(jit_trace(f, torch_ones(2), check_tolerance = -1), "0 or more",
               class = "value_error")
})

test_that("the check's other sizes are named 1-based", {
  msg <- paste("the trace does not generalise to other sizes, though the code does: with",
               "dimension 2 of input 0 grown from 8 to 16: output [output] differs")
  expect_match(r_terms(msg), "with dimension 3 of input 1 grown from 8 to 16", fixed = TRUE)
  msg <- "the trace does not generalise from batch size 2 to 3 (dimension 0 of the inputs)"
  expect_match(r_terms(msg), "(dimension 1 of the inputs)", fixed = TRUE)
})

test_that("torch_stack names its entries 1-based", {
  skip_if_no_torch()
  expect_error(torch_stack(list(torch_ones(2), torch_ones(2), torch_ones(3))),
               "got [2] at entry 1 and [3] at entry 3", fixed = TRUE)
})

test_that("a class 0 is said to be no class: R classes are 1-based", {
  skip_if_no_torch()
  logits <- torch_randn(2, 3)
  for (target in list(torch_tensor(c(0L, 1L)), c(0, 1))) {
    err <- tryCatch(nnf_cross_entropy(logits, target), error = identity)
    expect_s3_class(err, "index_error")
    expect_match(conditionMessage(err), "Target 0 is out of bounds: classes are 1-based in R",
                 fixed = TRUE)
  }
  expect_error(nnf_nll_loss(logits$log_softmax(2), torch_tensor(c(2L, 0L))),
               "classes are 1-based in R")
  expect_error(nn_cross_entropy_loss()(logits, torch_tensor(c(0L, 3L))),
               "classes are 1-based in R")
  expect_error(nnf_one_hot(torch_tensor(c(0L, 2L))),
               "Class values must be 1 or more: classes are 1-based in R", fixed = TRUE)
  # a class past the last keeps its R number
  expect_error(nnf_cross_entropy(logits, c(1, 4)), "Target 4 is out of bounds", fixed = TRUE)
  expect_equal(as_array(nnf_one_hot(torch_tensor(c(1L, 3L)))), rbind(c(1L, 0L, 0L), c(0L, 0L, 1L)))
})

test_that("torch_repeat_interleave takes whole doubles as counts", {
  skip_if_no_torch()
  x <- torch_tensor(c(5, 7))
  expect_equal(as_array(torch_repeat_interleave(x, 2)), c(5, 5, 7, 7))
  expect_equal(as_array(x$repeat_interleave(3)), c(5, 5, 5, 7, 7, 7))
  expect_equal(as_array(torch_repeat_interleave(x, torch_tensor(c(1L, 2L)))), c(5, 7, 7))
  m <- torch_tensor(rbind(c(1, 2), c(3, 4)))
  expect_equal(as_array(torch_repeat_interleave(m, 2, dim = 1)),
               rbind(c(1, 2), c(1, 2), c(3, 4), c(3, 4)))
})

test_that("an R vector as jit_trace()'s example is refused at trace time", {
  skip_if_no_torch()
  f <- function(x) x * 2
  err <- tryCatch(jit_trace(f, c(-1, 1)), error = identity)
  expect_s3_class(err, "type_error")
  expect_match(conditionMessage(err),
               "example input 1 is an R double vector (c(-1, 1)); example inputs must be tensors",
               fixed = TRUE)
  expect_match(conditionMessage(err), "pass torch_tensor(c(-1, 1))", fixed = TRUE)
  expect_error(jit_trace(function(x, y) x * y, torch_ones(2), 3), "example input 2",
               class = "type_error")
  expect_error(jit_trace(function(l) l[[1]], list(torch_ones(2), 1:3)), "R integer vector",
               class = "type_error")
  expect_error(jit_trace_module(nn_linear(2, 2), forward = list(c(1, 2))),
               "pass torch_tensor(c(1, 2))", fixed = TRUE)
})

# ---- without a usable Python -----------------------------------------------------------

run_r <- function(code, python) {
  out <- system2(file.path(R.home("bin"), "Rscript"), c("-e", shQuote(code)),
                 stdout = TRUE, stderr = TRUE,
                 env = c(paste0("R_LIBS=", paste(.libPaths(), collapse = ":")),
                         paste0("TRACEBRIDGE_PYTHON=", python), "RETICULATE_PYTHON="))
  paste(out, collapse = "\n")
}

expect_setup_advice <- function(out, problem) {
  expect_match(out, problem, fixed = TRUE)
  expect_match(out, "Set TRACEBRIDGE_PYTHON", fixed = TRUE)
  expect_match(out, "`make setup`", fixed = TRUE)
  expect_no_match(out, "Detected Python configuration", fixed = TRUE)
  expect_no_match(out, "py_discover_config", fixed = TRUE)
}

test_that("library(tracebridge) without Python says what to set and how", {
  code <- paste(
    "library(tracebridge)",
    "cat('== first call\\n')",
    "r <- tryCatch(torch_tensor(1), error = function(e) cat(class(e)[1], conditionMessage(e)))",
    "r <- tryCatch(torch_randn(2), error = function(e) cat('\\n== again:', conditionMessage(e)))",
    "cat('\\n== installed:', torch_is_installed())",
    sep = "; ")
  missing <- file.path(tempdir(), "no-such-dir", "python")
  out <- run_r(code, missing)
  expect_setup_advice(out, sprintf("TRACEBRIDGE_PYTHON is %s, which does not exist", missing))
  expect_match(out, "tracebridge_python_missing_error", fixed = TRUE)
  expect_match(out, "== again: tracebridge needs a Python", fixed = TRUE)
  expect_match(out, "== installed: FALSE", fixed = TRUE)
  # the message comes once when the package is attached, and again at the first call
  expect_equal(lengths(regmatches(out, gregexpr("Set TRACEBRIDGE_PYTHON", out))), 3L)
})

test_that("a Python without torch is named, with what to set", {
  # A stand-in for a Python that has no torch: it answers the probe as such a Python does.
  fake <- tempfile("python")
  writeLines(c("#!/bin/sh", "exit 4"), fake)
  Sys.chmod(fake, "755")
  out <- run_r("library(tracebridge); tryCatch(torch_ones(2), error = function(e) cat(conditionMessage(e)))",
               fake)
  expect_setup_advice(out, sprintf("The Python at %s (TRACEBRIDGE_PYTHON) has no module torch", fake))
  # and a real Python without torch, where the machine has one (the system's, usually)
  py <- if (file.exists("/usr/bin/python3")) "/usr/bin/python3" else Sys.which("python3")
  has_torch <- nzchar(py) && identical(suppressWarnings(system2(py, c("-c", shQuote("import torch")),
                                                             stdout = FALSE, stderr = FALSE)), 0L)
  skip_if(!nzchar(py) || has_torch, "no python3 without torch on this machine")
  out <- run_r("library(tracebridge); tryCatch(torch_tensor(1), error = function(e) cat(conditionMessage(e)))",
               py)
  expect_setup_advice(out, "has no module torch")
})

test_that("with no Python configured, the first call says what to set, every time", {
  skip_if(!is.null(venv_above(system.file(package = "tracebridge"))) ||
            !is.null(venv_above(tempdir())), "a .venv is found from the installed package")
  # The child's PATH holds only the system's directories, where reticulate looks.
  path <- "/usr/bin:/bin"
  py <- if (file.exists("/usr/bin/python3")) "/usr/bin/python3" else ""
  skip_if(!nzchar(py), "no system python3")
  skip_if(identical(suppressWarnings(system2(py, c("-c", shQuote("import torch")),
                                             stdout = FALSE, stderr = FALSE)), 0L),
          "the system python3 has torch: reticulate would find it")
  code <- paste(
    "library(tracebridge)",
    "for (k in 1:2) tryCatch(torch_tensor(1), error = function(e) cat(conditionMessage(e), '\\n'))",
    sep = "; ")
  old <- setwd(tempdir())
  on.exit(setwd(old))
  out <- system2("env", c("-u", "TRACEBRIDGE_PYTHON", "-u", "RETICULATE_PYTHON",
                          "-u", "PYTHONPATH", paste0("PATH=", path),
                          paste0("R_LIBS=", paste(.libPaths(), collapse = ":")),
                          file.path(R.home("bin"), "Rscript"), "-e", shQuote(code)),
                 stdout = TRUE, stderr = TRUE)
  out <- paste(out, collapse = "\n")
  expect_setup_advice(out, "No Python with torch was found")
  expect_equal(lengths(regmatches(out, gregexpr("Set TRACEBRIDGE_PYTHON", out))), 2L)
})
