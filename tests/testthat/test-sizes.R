# Traced sizes behave as R integers inside jit_trace(): each function below is traced at
# one shape and compared with the same R code run without a trace, at that shape and at
# another one; where the code turns a size into an R number, the other shape is a guard
# error instead.

ex <- function(n) torch_tensor(matrix(seq_len(n * 3), n, 3, byrow = TRUE) * 1.5)

expect_same_as_eager <- function(f, shapes = c(4, 6)) {
  tr <- suppressWarnings(jit_trace(f, ex(shapes[[1]])))
  for (n in shapes) {
    expect_equal(as_array(tr(ex(n))), as_array(f(ex(n))), info = paste("rows:", n))
  }
  invisible(tr)
}

test_that("a traced size used as a position is shifted to 0-based exactly once", {
  skip_if_no_torch()
  expect_same_as_eager(function(x) x[x$size(1)])
  expect_same_as_eager(function(x) x[x$size(1), ])
  expect_same_as_eager(function(x) x[x$size(1) - 1])
  expect_same_as_eager(function(x) x[x$size(1) - 1L, 2])
  expect_same_as_eager(function(x) x[, x$size(2)])
  expect_same_as_eager(function(x) torch_select(x, 1, x$size(1)))
  expect_same_as_eager(function(x) x$select(1, x$size(1) - 2))
  expect_same_as_eager(function(x) x$narrow(1, x$size(1) - 1L, 1))
  expect_same_as_eager(function(x) torch_narrow(x, 1, 2, x$size(1) - 1))
  expect_same_as_eager(function(x) x[2:x$size(1), ])
  # the untraced values, worked out by hand: the last row of ex(4) is 10 11 12 (* 1.5)
  tr <- jit_trace(function(x) x[x$size(1), ], ex(4))
  expect_equal(as_array(tr(ex(4))), c(10, 11, 12) * 1.5)
  expect_equal(as_array(tr(ex(6))), c(16, 17, 18) * 1.5)
})

test_that("arithmetic on traced sizes, and division of tensors by them", {
  skip_if_no_torch()
  expect_same_as_eager(function(x) x$sum() / x$size(1))
  expect_same_as_eager(function(x) x$sum() / x$shape[1])
  expect_same_as_eager(function(x) x$sum(dim = 1) / (x$size(1) - 1))
  expect_same_as_eager(function(x) x * (x$size(1) * 2 + 1))
  expect_same_as_eager(function(x) x$size(1) / x)
  expect_same_as_eager(function(x) x$view(c(x$shape[1] * x$shape[2])))
  expect_same_as_eager(function(x) x$reshape(c(x$size(1) %/% 2, -1)))
  expect_same_as_eager(function(x) x$narrow(1, 1, x$size(1) %/% 2))
  expect_same_as_eager(function(x) x$view(c(-1, prod(x$shape))))
  expect_same_as_eager(function(x) x$view(c(max(x$size(1), 2), -1)))
  expect_same_as_eager(function(x) torch_zeros(x$size(1) - 1, 2))
})

test_that("a fractional number on the left of a traced size stays traced", {
  skip_if_no_torch()
  # Python would compute `2.5 - n` in float's own code, reading n's value without a guard
  # (docs/divergence.md); from R the size takes the operation, so the trace stays general.
  expect_same_as_eager(function(x) x * (-log(10000) / x$size(1)))
  expect_same_as_eager(function(x) x * (2.5 - x$size(1)))
  expect_same_as_eager(function(x) x * 0.9^x$size(1))
  expect_same_as_eager(function(x) x * (1.5 %/% x$size(1) + 0.5 %% x$size(1)))
  f <- function(x) if (3.5 < x$size(1)) x * 2 else x
  tr <- suppressWarnings(jit_trace(f, ex(4)))
  expect_equal(as_array(tr(ex(2))), as_array(f(ex(2))))
})

test_that("sqrt(), exp(), log(), floor() of traced sizes are recorded; others guard", {
  skip_if_no_torch()
  expect_same_as_eager(function(x) x / sqrt(x$size(1)))
  expect_same_as_eager(function(x) x * exp(-1 / x$size(1)))
  expect_same_as_eager(function(x) x * log(x$size(1)) + log2(x$size(1)) + log10(x$size(1)))
  expect_same_as_eager(function(x) x$narrow(1, 1, floor(x$size(1) / 2)))
  expect_same_as_eager(function(x) x * ceiling(x$size(1) / 3) * abs(trunc(x$size(1) / 3)))
  g <- function(x) x * sin(x$size(1))
  tr <- suppressWarnings(jit_trace(g, ex(4)))
  expect_equal(as_array(tr(ex(4))), as_array(g(ex(4))))
  expect_error(tr(ex(6)), class = "tracebridge_guard_error")
})

test_that("vector positions inside a trace: general, no warning; negative ones too", {
  skip_if_no_torch()
  # Bounds were checked against the traced size, which R compared with a vector through
  # reticulate: the R session crashed.
  f <- function(x) x[c(1L, 3L), ]
  expect_no_warning(tr <- jit_trace(f, ex(4)))
  for (n in c(3, 5)) expect_equal(as_array(tr(ex(n))), as_array(f(ex(n))))
  expect_error(tr(ex(2)), "out of range|out of bounds")
  g <- function(x) x[c(-1L, -2L), ]
  tr <- suppressWarnings(jit_trace(g, ex(4)))
  # counted from the traced size: general (test-trace-r-code.R)
  for (n in c(4, 5)) expect_equal(as_array(tr(ex(n))), as_array(g(ex(n))))
  h <- function(x) x[c(TRUE, FALSE), ]
  tr <- suppressWarnings(jit_trace(h, ex(4)))
  expect_equal(as_array(tr(ex(4))), as_array(h(ex(4))))
  expect_same_as_eager(function(x) x[c(1, floor(x$size(1) / 2)), ])
})

test_that("comparisons of traced sizes are R logicals and record guards", {
  skip_if_no_torch()
  f <- function(x) if (x$size(1) > 2) x * 2 else x
  tr <- expect_same_as_eager(f, c(4, 6))
  # size 2 takes the other branch: served by the graph traced where the comparison flips
  expect_equal(as_array(tr(ex(2))), as_array(f(ex(2))))
  h <- function(x) if (x$size(1) < 5) x * 2 else x
  tr <- suppressWarnings(jit_trace(h, ex(4)))
  expect_error(tr(ex(6)), class = "tracebridge_guard_error")
  g <- function(x) if (x$shape[1] == 4) x + 1 else x - 1
  tr <- suppressWarnings(jit_trace(g, ex(4)))
  expect_equal(as_array(tr(ex(4))), as_array(g(ex(4))))
  expect_error(tr(ex(5)), class = "tracebridge_guard_error")
  expect_error(tr(ex(5)), "x$shape[1] == 4 is TRUE, but now it is FALSE", fixed = TRUE)
})

test_that("seq_len() and a:b over a traced size unroll the loop and record a guard", {
  skip_if_no_torch()
  f <- function(x) {
    s <- torch_zeros(3)
    for (i in seq_len(x$size(1))) s <- s + x[i, ] * i
    s
  }
  tr <- expect_same_as_eager(f, 4)
  # 1.5 * (1 * (1, 2, 3) + 2 * (4, 5, 6) + 3 * (7, 8, 9) + 4 * (10, 11, 12))
  expect_equal(as_array(tr(ex(4))), 1.5 * c(70, 80, 90))
  expect_error(tr(ex(6)), class = "tracebridge_guard_error")
  expect_error(tr(ex(6)), "x$shape[1] == 4", fixed = TRUE)
  expect_warning(jit_trace(f, ex(4)), "x$shape[1]", fixed = TRUE)
  g <- function(x) {
    out <- list()
    for (i in 1:x$size(2)) out[[i]] <- x[, i]$sum()
    torch_stack(out)
  }
  tr <- expect_same_as_eager(g, 4)
  expect_equal(as_array(tr(ex(5))), as_array(g(ex(5))))
  x7 <- torch_ones(2, 7)
  expect_error(tr(x7), class = "tracebridge_guard_error")
})

test_that("traced sizes print and convert as R integers", {
  skip_if_no_torch()
  seen <- NULL
  f <- function(x) {
    vals <- list(size = x$size(1), shape = x$shape, first = x$shape[1],
                 as_int = as.integer(x$size(2)), as_num = as.numeric(x$size(2) / 2))
    # the first call is the trace (the checks that follow run the code again)
    if (is.null(seen)) {
      seen <<- vals
      printed <<- utils::capture.output(print(vals$size))
    }
    x
  }
  printed <- NULL
  suppressWarnings(jit_trace(f, ex(4)))
  expect_s3_class(seen$size, "torch_sym_int")
  expect_identical(printed, "<traced integer>")
  # kept after the trace, it is the example's number (test-trace-r-code.R)
  expect_output(print(seen$size), "^\\[1\\] 4$")
  expect_s3_class(seen$shape, "torch_sym_sizes")
  expect_length(seen$shape, 2)
  expect_s3_class(seen$first, "torch_sym_int")
  expect_identical(seen$as_int, 3L)
  expect_identical(seen$as_num, 1.5)
  # outside a trace, sizes are plain R integers as before
  expect_identical(ex(4)$size(1), 4L)
  expect_identical(ex(4)$shape, c(4L, 3L))
})

test_that("a traced size combined with a vector says what to do", {
  skip_if_no_torch()
  f <- function(x) x$view(x$size(1) + c(0, 1))
  expect_error(jit_trace(f, ex(4)), "only with single numbers", class = "type_error")
})

test_that("in an R module's forward (and its submodules'), traced sizes work the same", {
  skip_if_no_torch()
  Inner <- nn_module("Inner",
    forward = function(x) {
      s <- torch_zeros(x$size(2))
      for (i in seq_len(x$size(1))) s <- s + x[i, ]
      s / x$size(1)
    }
  )
  Outer <- nn_module("Outer",
    initialize = function() self$inner <- Inner(),
    forward = function(x) x[x$size(1), ] + self$inner(x)
  )
  net <- Outer()
  tm <- suppressWarnings(jit_trace(net, ex(4), respect_mode = FALSE))
  expect_equal(as_array(tm(ex(4))), as_array(net(ex(4))))
  expect_error(tm(ex(6)), "x$shape[1] == 4", fixed = TRUE, class = "tracebridge_guard_error")
  # the helpers were bound only while tracing
  expect_false(exists("seq_len", envir = environment(net$inner$forward), inherits = FALSE))
  expect_equal(as_array(net(ex(6))), as_array(ex(6)[6, ] + ex(6)$mean(dim = 1)))
})

test_that("a module method without kept sources is quoted from its deparsed lines", {
  skip_if_no_torch()
  env <- new.env(parent = globalenv())
  Net <- eval(parse(keep.source = FALSE, text = paste(
    "nn_module('Net', forward = function(x) {",
    "  if (x$size(1) < 5) x * 2 else x",
    "})", sep = "\n")), env)
  net <- Net()
  expect_null(attr(net$forward, "srcref"))
  tm <- suppressWarnings(jit_trace(net, ex(4), respect_mode = FALSE))
  expect_error(tm(ex(6)), "at <R function Net$forward>:3: if (x$size(1) < 5)", fixed = TRUE)
  expect_null(attr(net$forward, "srcref"))  # the module's own method is put back
})

test_that("N inside [ is a traced size and a 1-based position too", {
  skip_if_no_torch()
  expect_same_as_eager(function(x) x[N, ])
  expect_same_as_eager(function(x) x[N - 1, N])
  expect_same_as_eager(function(x) x[2:N, 1])
})

test_that("seq_len() and a:b read traced sizes in the user's functions that traced code calls", {
  skip_if_no_torch()
  # Plain R functions, called from the traced function (and from each other), not traced
  # themselves: inside a trace their seq_len() and `:` record guards as the traced
  # function's do; outside, they are base R's.
  weighted_rows <- function(x) {
    s <- torch_zeros(3)
    for (i in seq_len(x$size(1))) s <- s + x[i, ] * i
    s
  }
  last_rows <- function(x) {
    n <- x$size(1)
    x[(n - 1):n, ]$sum(dim = 1)
  }
  both <- function(x) weighted_rows(x) + last_rows(x)
  f <- function(x) both(x) * 2
  tr <- expect_same_as_eager(f, 4)
  expect_equal(as_array(tr(ex(4))), 2 * (1.5 * c(70, 80, 90) + 1.5 * c(17, 19, 21)))
  expect_error(tr(ex(6)), "x$shape[1] == 4", fixed = TRUE)
  # The functions themselves are left as they were.
  expect_identical(environment(weighted_rows), environment())
  expect_equal(as_array(weighted_rows(ex(2))), 1.5 * c(9, 12, 15))
  # In an R module's forward too, and nothing stays bound in the module.
  M <- nn_module("M", initialize = function() NULL, forward = function(x) both(x))
  m <- M()
  trm <- suppressWarnings(jit_trace(m, ex(4)))
  expect_equal(as_array(trm(ex(4))), as_array(m(ex(4))))
  expect_false(exists("both", envir = attr(m, "self"), inherits = FALSE))
})

test_that("length() and seq_along() of a tensor read its traced element count with a guard", {
  skip_if_no_torch()
  f <- function(x) {
    s <- torch_zeros(1)
    for (i in seq_along(x)) s <- s + x[i] * i
    s / length(x)
  }
  v <- function(n) torch_tensor(seq_len(n) * 1.5)
  tr <- suppressWarnings(jit_trace(f, v(3)))
  expect_equal(as_array(tr(v(3))), as_array(f(v(3))))
  expect_equal(as_array(tr(v(3))), 1.5 * 14 / 3, tolerance = 1e-6)
  expect_error(tr(v(4)), "x$numel() == 3", fixed = TRUE)
  expect_identical(length(v(4)), 4L)
})
