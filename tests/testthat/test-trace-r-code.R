# R code as an mlverse user writes it, run inside jit_trace(): what benchmarks/r_trace_trial.R
# found. Each function is traced at one shape, called at that shape and at another, saved,
# loaded and called again, and every result is compared with the same code run without a
# trace.

# The traced and the loaded function give `f`'s values at every input list in `calls`
# (the first one is the example).
expect_traced_like_eager <- function(f, calls, ...) {
  tr <- suppressWarnings(do.call(jit_trace, c(list(f), calls[[1]], list(...))))
  path <- tempfile(fileext = ".pt")
  on.exit(unlink(path))
  jit_save(tr, path)
  ld <- jit_load(path)
  for (k in seq_along(calls)) {
    want <- as_array(do.call(f, calls[[k]]))
    expect_equal(as_array(do.call(tr, calls[[k]])), want, info = paste("traced, call", k))
    expect_equal(as_array(do.call(ld, calls[[k]])), want, info = paste("loaded, call", k))
  }
  invisible(tr)
}

m <- function(n, p = 2) torch_tensor(matrix(seq_len(n * p) / 2, n, p))

test_that("factories called inside a trace save and load (no requires_grad keyword)", {
  skip_if_no_torch()
  calls <- list(list(m(3)), list(m(5)))
  expect_traced_like_eager(function(x) x + torch_zeros(x$size(1), 2), calls)
  expect_traced_like_eager(function(x) x + torch_ones(x$size(1), 2), calls)
  expect_traced_like_eager(function(x) x + torch_full(c(x$size(1), 1), 2.5), calls)
  # a traced size as the fill value: a double, as an R integer is (float32, not int64)
  full <- function(x) torch_full(c(x$size(1), 2), x$size(2))
  expect_traced_like_eager(full, calls)
  # mlverse: torch_full() makes the default dtype, float32, whatever the fill's R type
  expect_true(jit_trace(full, m(3))(m(5))$dtype == torch_float32())
  expect_traced_like_eager(function(x) torch_zeros_like(x) + 1, calls)
  expect_traced_like_eager(function(x) torch_matmul(x, torch_eye(2)), calls)
  expect_traced_like_eager(function(x) x$sum(dim = 2) * torch_arange(1, 3)$sum(), calls)
  # requires_grad = TRUE is still honoured outside a trace
  expect_true(torch_zeros(2, requires_grad = TRUE)$requires_grad)
  expect_true(torch_arange(1, 3, requires_grad = TRUE)$requires_grad)
  expect_false(torch_ones(2)$requires_grad)
})

test_that("dim(), nrow() and ncol() inside a trace are traced sizes, as x$shape is", {
  skip_if_no_torch()
  calls <- list(list(m(3, 2)), list(m(5, 4)))
  expect_traced_like_eager(function(x) x$view(c(dim(x)[1], -1)), calls)
  expect_traced_like_eager(function(x) x * nrow(x) + ncol(x), calls)
  expect_traced_like_eager(function(x) x / sum(dim(x)) + prod(dim(x)), calls)
  expect_traced_like_eager(function(x) x$reshape(rev(dim(x))), calls)
  expect_traced_like_eager(function(x) x / tail(dim(x), 1), calls)
  expect_traced_like_eager(function(x) torch_zeros(dim(x)) + x, calls)
  # compared as an R integer vector: R logicals, with a guard
  f <- function(x) if (all(dim(x) == c(3, 2))) x * 2 else x
  tr <- jit_trace(f, m(3, 2))
  expect_equal(as_array(tr(m(3, 2))), as_array(f(m(3, 2))))
  expect_error(tr(m(5, 2)), class = "tracebridge_guard_error")
  expect_identical(dim(m(5, 4)), c(5L, 4L)) # outside a trace: R integers
})

test_that("x$numel() inside a trace is a traced integer", {
  skip_if_no_torch()
  v <- function(n) torch_tensor(seq_len(n) * 1.5)
  expect_traced_like_eager(function(x) x[x$numel()], list(list(v(4)), list(v(7))))
  expect_traced_like_eager(function(x) x / x$numel(), list(list(m(3)), list(m(5))))
})

test_that("a traced size as text reads its value with a guard", {
  skip_if_no_torch()
  f <- function(x) x * nchar(paste("rows:", x$size(1)))
  expect_warning(tr <- jit_trace(f, m(3)), "turned into an R number")
  expect_equal(as_array(tr(m(3))), as_array(f(m(3))))
  expect_error(tr(m(12)), class = "tracebridge_guard_error")
  g <- function(x) x * nchar(sprintf("%s x %s", x$size(1), format(x$shape)[2]))
  expect_equal(as_array(suppressWarnings(jit_trace(g, m(3)))(m(3))), as_array(g(m(3))))
})

test_that("torch_arange() with traced bounds is R's range (end included) at every size", {
  skip_if_no_torch()
  v <- function(n) torch_tensor(seq_len(n) * 1.5)
  calls <- list(list(v(3)), list(v(6)))
  expect_traced_like_eager(function(x) x * torch_arange(1, x$size(1)), calls)
  expect_traced_like_eager(function(x) x * torch_arange(0, x$size(1) - 1), calls)
  expect_traced_like_eager(function(x) x[torch_arange(1, x$size(1), 2)$to(dtype = torch_long())],
                           calls)
  expect_traced_like_eager(function(x) x[torch_arange(1L, x$size(1), 1L)], calls)
  tr <- jit_trace(function(x) torch_arange(1L, x$size(1), 1L), v(3))
  expect_identical(as.character(tr(v(6))$dtype), "int64")
  expect_traced_like_eager(function(x) x * torch_arange(1.5, x$size(1))$sum(), calls)
  expect_traced_like_eager(function(x) x[1:2] * torch_arange(x$size(1), 1, -x$size(1) + 1), calls)
  expect_equal(as_array(tr(v(6))), 1:6)
})

test_that("torch_tensor() of traced sizes makes the tensor R numbers make", {
  skip_if_no_torch()
  calls <- list(list(m(3, 2)), list(m(5, 4)))
  expect_traced_like_eager(function(x) x * torch_tensor(x$size(1)), calls)
  expect_traced_like_eager(function(x) x$sum() * torch_tensor(x$shape), calls)
  expect_traced_like_eager(function(x) x * torch_tensor(x$size(2) / 2), calls)
})

test_that("one traced size is accepted where a size is (normalized_shape)", {
  skip_if_no_torch()
  calls <- list(list(m(3, 4)), list(m(5, 6)))
  expect_traced_like_eager(function(x) nnf_layer_norm(x, normalized_shape = x$size(-1)), calls)
  expect_traced_like_eager(function(x) x$sum(dim = 2) + torch_zeros(x$size(1)), calls)
})

test_that("negative vector positions (counted from the end) stay general", {
  skip_if_no_torch()
  calls <- list(list(m(4, 3)), list(m(6, 3)))
  expect_traced_like_eager(function(x) x[-c(1, 2), ], calls)
  expect_traced_like_eager(function(x) x[, -c(3, 1)], calls)
  expect_error(jit_trace(function(x) x[-c(1, 5), ], m(4, 3)))
})

test_that("a named list output with strict = TRUE is refused in R terms", {
  skip_if_no_torch()
  f <- function(x) list(a = x + 1, b = x * 2)
  expect_error(jit_trace(f, m(3)), "returns a named list; with strict = TRUE", fixed = TRUE)
  expect_error(jit_trace(f, m(3)), "or pass strict = FALSE", fixed = TRUE)
  expect_traced_like_eager(function(x) list(x + 1, x * 2)[[2]], list(list(m(3))))
  expect_warning(tr <- jit_trace(f, m(3), strict = FALSE), "structure is fixed")
  expect_equal(as_array(tr(m(5))$b), as_array(f(m(5))$b))
})

test_that("an int64 torch_arange() includes its end, as in mlverse (eager too)", {
  skip_if_no_torch()
  # Python truncated the half-step end of an int64 range: 1:3 came back as 1 2.
  expect_equal(as_array(torch_arange(1L, 3L, 1L)), 1:3)
  expect_equal(as_array(torch_arange(1, 3, dtype = torch_long())), 1:3)
  expect_equal(as_array(torch_arange(5L, 1L, -2L)), c(5, 3, 1))
  expect_equal(as_array(torch_arange(1, 4, 2)), c(1, 3))
  expect_equal(as_array(torch_arange(0, 1, 0.25)), c(0, 0.25, 0.5, 0.75, 1))
  expect_equal(as_array(torch_arange(0, 3.5, dtype = torch_long())), 0:3)
})

test_that("base R functions that need a plain integer read traced sizes with a guard", {
  skip_if_no_torch()
  v <- function(n) torch_tensor(seq_len(n) * 1.5)
  fs <- list(
    in_set = function(x) if (x$size(1) %in% c(3, 5)) x * 2 else x,
    numeric = function(x) x * torch_tensor(numeric(x$size(1)) + 1),
    matrix = function(x) x$unsqueeze(2) + torch_tensor(matrix(1, x$size(1), 2)),
    rep_len = function(x) x * torch_tensor(rep_len(c(1, 2), x$size(1))),
    match = function(x) x * match(x$size(1), c(5, 3))
  )
  for (nm in names(fs)) {
    f <- fs[[nm]]
    tr <- suppressWarnings(jit_trace(f, v(3)))
    expect_equal(as_array(tr(v(3))), as_array(f(v(3))), info = nm)
    expect_error(tr(v(4)), class = "tracebridge_guard_error", info = nm)
  }
})

test_that("is.numeric() of a traced size is TRUE, as for the integer it stands for", {
  skip_if_no_torch()
  f <- function(x) {
    n <- x$size(1)
    stopifnot(is.numeric(n), !is.na(n))
    if (is.numeric(n)) x * 2 else x
  }
  expect_traced_like_eager(f, list(list(m(3)), list(m(5))))
})

test_that("a traced size kept after its trace is the example's R number", {
  skip_if_no_torch()
  keep <- new.env()
  f <- function(x) {
    keep$n <- x$size(1)
    x * 2
  }
  jit_trace(f, m(3), check_trace = FALSE)
  expect_no_warning(expect_identical(keep$n * 2, 6))
  expect_identical(as.integer(keep$n), 3L)
  expect_identical(keep$n - 1L, 2L)
  expect_identical(sqrt(keep$n^2), 3)
  expect_equal(as_array(m(4)[keep$n, ]), as_array(m(4)[3, ]))
  expect_identical(dim(torch_zeros(keep$n, 2)), c(3L, 2L))
  expect_output(print(keep$n), "3")
})

test_that("a character or logical example input says to fix it in the code", {
  skip_if_no_torch()
  f <- function(x, act) if (act == "relu") nnf_relu(x) else x
  expect_error(jit_trace(f, m(3), "relu"),
               "example input 2 is an R character vector (\"relu\"); example inputs must be tensors (or lists of tensors): fix it in the traced code instead",
               fixed = TRUE, class = "type_error")
  expect_error(jit_trace(function(x, k) x * k, m(3), 2), "pass torch_tensor(2)", fixed = TRUE)
})

test_that("torch_nonzero() inside a trace saves (no as_tuple keyword) and stays 1-based", {
  skip_if_no_torch()
  v <- function(...) torch_tensor(c(...))
  expect_traced_like_eager(function(x) torch_nonzero(x > 0),
                           list(list(v(1, -1, 2)), list(v(-1, 1, 2, 3))))
  expect_equal(as.vector(as_array(torch_nonzero(v(0, 3, 0, 1)))), c(2, 4))
  expect_length(torch_nonzero(v(0, 3), as_list = TRUE), 1)
})

test_that("x$new_zeros(), $new_ones(), $new_full(), $new_empty() and $unflatten()", {
  skip_if_no_torch()
  calls <- list(list(m(4, 3)), list(m(6, 3)))
  expect_traced_like_eager(function(x) x + x$new_zeros(c(x$size(1), 3)), calls)
  expect_traced_like_eager(function(x) x$new_ones(x$size(1), 3) + x$new_full(c(1, 3), 2), calls)
  expect_traced_like_eager(function(x) x$unflatten(1, c(2, -1)), calls)
  expect_identical(dim(m(2)$new_empty(c(4, 1))), c(4L, 1L))
  expect_identical(as.character(m(2)$new_zeros(2, dtype = torch_long())$dtype), "int64")
})

test_that("traced sizes as values: y[i] <- n, torch_tensor(c(n, 2))", {
  skip_if_no_torch()
  v <- function(n) torch_tensor(seq_len(n) * 1.5)
  calls <- list(list(v(3)), list(v(5)))
  expect_traced_like_eager(function(x) {
    y <- x$clone()
    y[1] <- x$size(1)
    y[2] <- x$size(1) / 2
    y
  }, calls)
  expect_traced_like_eager(function(x) x[1:2] * torch_tensor(c(x$size(1), 2)), calls)
  tr <- jit_trace(function(x) torch_tensor(c(x$size(1), 2L)), v(3))
  expect_identical(as.character(tr(v(5))$dtype), "int64")
  tr <- jit_trace(function(x) torch_tensor(c(x$size(1), 2)), v(3))
  expect_identical(as.character(tr(v(5))$dtype), "float32")
})

test_that("calling a trace with what it can not take says so in R terms", {
  skip_if_no_torch()
  tr <- jit_trace(function(x) x * 2, m(2))
  expect_error(tr(matrix(1, 2, 2)),
               "input 1 (x) must be a tensor, got an R vector or array (make it one with torch_tensor())",
               fixed = TRUE)
  expect_error(tr(list(m(2))), "input 1 (x) must be a tensor, got an unnamed list", fixed = TRUE)
  expect_error(tr(m(2), m(2)), "the trace takes 1 argument(s) but was given 2 (unused arguments)",
               fixed = TRUE)
  expect_error(tr(), "arguments of the trace missing, with no default: 'x'", fixed = TRUE)
  expect_error(jit_trace(function(x) x, matrix(1:4, 2)),
               "example input 1 is an R integer array (2 x 2); example inputs must be tensors (or lists of tensors): pass torch_tensor() of it.",
               fixed = TRUE, class = "type_error")
})

test_that("guards name the R line of a one-line function, and read values in R terms", {
  skip_if_no_torch()
  # no kept sources, as under Rscript: the function is parsed again from its deparsed lines
  # (made in the global environment: code of the package's own environments is not quoted)
  f <- eval(parse(text = "function(x) x * as.integer(x$size(1))", keep.source = FALSE),
            globalenv())
  tr <- suppressWarnings(jit_trace(f, m(3)))
  expect_error(tr(m(5)), "assumption made at <R function f>:2: x * as.integer(x$size(1))",
               fixed = TRUE)
  g <- eval(parse(text = "function(x) x * sum(as_array(x))", keep.source = FALSE), globalenv())
  v <- torch_tensor(c(0.5, 1, 1.5))
  tr <- suppressWarnings(jit_trace(g, v))
  err <- tryCatch(tr(v * 2), error = conditionMessage)
  expect_match(err, "the trace assumed as_array(detach(x)) == c(0.5, 1, 1.5), but now it is c(1, 2, 3)",
               fixed = TRUE)
  expect_match(err, "assumption made at <R function g>:2: x * sum(as_array(x))", fixed = TRUE)
  h <- function(x) if (as.logical(x$sum() > 0)) x else -x
  tr <- suppressWarnings(jit_trace(h, m(3)))
  expect_error(tr(-m(3)), "the trace assumed as_array(detach(gt(sum(x), 0.0))) is TRUE",
               fixed = TRUE)
})

test_that("x[N, , drop = FALSE] with a traced N, and sapply()/vapply() of traced sizes", {
  skip_if_no_torch()
  calls <- list(list(m(3)), list(m(5)))
  expect_traced_like_eager(function(x) x[N, , drop = FALSE], calls)
  expect_traced_like_eager(function(x) torch_cat(list(x[1:2, ], x[N, , drop = FALSE]), dim = 1),
                           calls)
  expect_traced_like_eager(function(x) x[x$size(1) - 1L, , drop = FALSE], calls)
  expect_traced_like_eager(function(x) x$sum() * sum(sapply(list(x, x), function(t) t$size(1))),
                           calls)
  f <- function(x) x * sum(vapply(list(x), function(t) t$size(1), integer(1)))
  tr <- suppressWarnings(jit_trace(f, m(3)))
  expect_equal(as_array(tr(m(3))), as_array(f(m(3))))
  expect_error(tr(m(5)), class = "tracebridge_guard_error")
})
