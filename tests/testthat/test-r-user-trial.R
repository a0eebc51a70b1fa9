# Behaviour an R user of mlverse torch met in the trial of R code
# (benchmarks/r_trace_trial.R, section "as an R user"): each fix with its test.

test_that("scatter takes a number as its third argument (the value), as mlverse does", {
  skip_if_no_torch()
  x <- torch_zeros(3, 4)
  idx <- torch_tensor(matrix(c(2L, 1L, 4L), 3))
  want <- matrix(0, 3, 4)
  want[cbind(1:3, c(2, 1, 4))] <- 1
  expect_equal(arr(x$scatter(2, idx, 1)), want)
  expect_equal(arr(torch_scatter(x, 2, idx, 1)), want)
  expect_equal(arr(x$scatter(2, idx, value = 1)), want)
  expect_equal(arr(x$scatter(2, idx, torch_ones(3, 1))), want)
  y <- x$clone()
  y$scatter_(2, idx, 1)
  expect_equal(arr(y), want)
  expect_equal(arr(x), matrix(0, 3, 4)) # scatter() made a new tensor
})

test_that("scatter with a number traces, saves and runs at another size", {
  skip_if_no_torch()
  f <- function(x) {
    torch_zeros_like(x)$scatter(2, torch_ones(x$size(1), 1, dtype = torch_long()), 1)
  }
  tr <- jit_trace(f, torch_ones(3, 2))
  path <- tempfile(fileext = ".pt")
  jit_save(tr, path)
  expect_equal(arr(jit_load(path)(torch_ones(5, 2))), arr(f(torch_ones(5, 2))))
})

test_that("a list of single numbers is a vector, as c() of them is", {
  skip_if_no_torch()
  expect_equal(dim(torch_tensor(list(3L, 2L))), 2L)
  expect_equal(torch_tensor(list(3L, 2L))$dtype, torch_long())
  expect_equal(torch_tensor(list(3L, 2))$dtype, torch_float())
  expect_equal(arr(torch_tensor(list(1, TRUE))), c(1, 1))
  # Other lists are stacked along a new first dimension.
  expect_equal(arr(torch_tensor(list(c(1, 2), c(3, 4)))), rbind(c(1, 2), c(3, 4)))
  expect_equal(arr(torch_tensor(list(list(1, 2), list(3, 4)))), rbind(c(1, 2), c(3, 4)))
  l <- torch_tensor(list(torch_ones(2), torch_zeros(2)), dtype = torch_long())
  expect_equal(l$dtype, torch_long())
  expect_equal(dim(l), c(2L, 2L))
  expect_error(torch_tensor(list()), "empty list")
})

test_that("torch_tensor(list(n, 2L)) of a traced size is the tensor it is untraced", {
  skip_if_no_torch()
  f <- function(x) x$sum() * torch_tensor(list(x$size(1), 2L))
  tr <- jit_trace(f, torch_ones(3, 2))
  expect_equal(arr(tr(torch_ones(5, 2))), arr(f(torch_ones(5, 2))))
  expect_equal(arr(tr(torch_ones(5, 2))), c(50, 20))
})

test_that("matrix(data, nrow) inside a trace works out ncol from the data, as untraced", {
  skip_if_no_torch()
  f <- function(x) {
    y <- x$clone()
    y[2:3, 2:3] <- matrix(c(1, 2, 3, 4), 2)
    y + torch_tensor(matrix(1:9, ncol = 3))
  }
  tr <- suppressWarnings(jit_trace(f, torch_zeros(3, 3)))
  want <- matrix(1:9, 3) + rbind(0, cbind(0, matrix(c(1, 2, 3, 4), 2)))
  expect_equal(arr(f(torch_zeros(3, 3))), want)
  expect_equal(arr(tr(torch_zeros(3, 3))), want)
  # A traced size as nrow is read (with a guard), as seq_len() reads it.
  g <- function(x) x + torch_tensor(matrix(0.5, x$size(1), byrow = TRUE))
  tg <- suppressWarnings(jit_trace(g, torch_zeros(3, 1)))
  expect_equal(arr(tg(torch_zeros(3, 1))), matrix(0.5, 3, 1))
})

test_that("x[i] with a matrix of positions has the shape of i, as in torch", {
  skip_if_no_torch()
  x <- torch_tensor(c(10, 20, 30, 40, 50, 60))
  i <- torch_tensor(matrix(c(1L, 2L, 6L, 4L), 2))
  expect_equal(arr(x[i]), matrix(c(10, 20, 60, 40), 2))
  # On one dimension of several: that dimension becomes the index's two.
  m <- torch_tensor(matrix(1:12, 3))
  j <- torch_tensor(matrix(c(1L, 3L, 2L, 3L), 2))
  expect_equal(dim(m[j, ]), c(2L, 2L, 4L))
  expect_equal(arr(m[j, 2]), matrix(c(4L, 6L, 5L, 6L), 2))
  expect_equal(arr(m[2, j]), matrix(c(2L, 8L, 5L, 8L), 2))
  expect_equal(dim(m[j, 2:3]), c(2L, 2L, 2L))
  # Traced, and called with other positions and sizes.
  f <- function(x, i) x[i]
  tr <- jit_trace(f, x, i)
  y <- torch_tensor(c(1, 2, 3, 4, 5, 6, 7, 8))
  k <- torch_tensor(matrix(c(8L, 1L, 3L, 3L, 2L, 2L), 3))
  expect_equal(arr(tr(y, k)), matrix(c(8, 1, 3, 3, 2, 2), 3))
  expect_error(x[torch_tensor(matrix(c(1L, 7L), 1))], "out of|range|bounds")
})

test_that("nnf_max_pool*d(return_indices = TRUE) gives values and 1-based positions", {
  skip_if_no_torch()
  x <- torch_tensor(array(c(1, 5, 2, 3, 9, 4, 8, 7, 6, 0, 1, 2, 3, 4, 5, 6), c(1, 1, 4, 4)))
  r <- nnf_max_pool2d(x, 2, return_indices = TRUE)
  expect_length(r, 2)
  # Positions within each 4 x 4 plane, 1-based, counted along rows as torch counts.
  flat <- as.numeric(aperm(as_array(x)[1, 1, , ], c(2, 1)))
  expect_equal(as.numeric(as_array(r[[1]])), flat[as.numeric(as_array(r[[2]]))])
  expect_equal(arr(nnf_max_pool2d(x, 2)), arr(r[[1]]))
  r1 <- nnf_max_pool1d(torch_tensor(array(c(3, 1, 2, 5), c(1, 1, 4))), 2, return_indices = TRUE)
  expect_equal(as.integer(as_array(r1[[2]])), c(1L, 4L))
  tr <- jit_trace(function(x) nnf_max_pool2d(x, 2, return_indices = TRUE)[[2]], x)
  y <- torch_randn(2, 1, 6, 6)
  expect_equal(arr(tr(y)), arr(nnf_max_pool2d(y, 2, return_indices = TRUE)[[2]]))
})

test_that("integer and logical NA: refused for int64 and bool, NaN in a float tensor", {
  skip_if_no_torch()
  expect_error(torch_tensor(c(1L, NA)), "NA at position 2.*int64.*torch_float")
  expect_error(torch_tensor(c(TRUE, NA, NA)), "NA at position 2, 3.*bool")
  expect_error(torch_tensor(NA), "NA at position 1")
  expect_true(is.nan(as_array(torch_tensor(c(1L, NA), dtype = torch_float()))[[2]]))
  m <- torch_tensor(matrix(c(1L, NA, 3L, 4L), 2), dtype = torch_double())
  expect_equal(dim(m), c(2L, 2L))
  expect_true(is.na(as_array(m)[2, 1]))
  # Doubles hold NA as NaN, as before.
  expect_true(is.na(as_array(torch_tensor(c(1, NA)))[[2]]))
})

test_that("a traced module assigned in an nn_module (or a container) is its submodule", {
  skip_if_no_torch()
  torch_manual_seed(3)
  inner <- nn_linear(3, 3)
  tinner <- jit_trace(inner, torch_ones(2, 3))
  Outer <- nn_module(initialize = function(core) {
    self$core <- core
    self$head <- nn_linear(3, 1)
  }, forward = function(x) self$head(torch_relu(self$core(x))))
  m <- Outer(tinner)
  expect_equal(names(m$parameters), c("core.weight", "core.bias", "head.weight", "head.bias"))
  # An optimizer over the outer module's parameters trains the traced one (and the
  # original, which it shares its parameters with).
  opt <- optim_sgd(m$parameters, lr = 0.1)
  before <- as_array(inner$weight)
  nnf_mse_loss(m(torch_randn(4, 3)), torch_ones(4, 1))$backward()
  opt$step()
  expect_true(any(as_array(inner$weight) != before))
  s <- nn_sequential(tinner, nn_relu(), nn_linear(3, 1))
  expect_equal(names(s$parameters), c("0.weight", "0.bias", "2.weight", "2.bias"))
  expect_length(nn_module_list(list(tinner))$parameters, 2)
  expect_error(nn_sequential(nn_relu(), function(x) x), "nn_module \\(or a traced module\\)")
})

test_that("nn_module() takes private fields and active bindings, as mlverse does", {
  skip_if_no_torch()
  Net <- nn_module(
    initialize = function() {
      self$fc <- nn_linear(2, 2)
      private$k <- 2
    },
    forward = function(x) self$fc(x) * private$k * self$twice + private$bias(),
    private = list(k = NULL, bias = function() private$k / 2),
    active = list(twice = function(value) if (missing(value)) 2 else stop("read-only"))
  )
  m <- Net()
  x <- torch_randn(3, 2)
  expect_equal(arr(m(x)), arr(m$fc(x) * 4 + 1), tolerance = 1e-6)
  expect_equal(m$twice, 2)
  expect_error(m$twice <- 3, "read-only")
  # An inheriting class adds its own private fields; each instance has its own.
  Child <- nn_module(inherit = Net, private = list(extra = 5),
                     forward = function(x) super$forward(x) + private$extra)
  ch <- Child()
  expect_equal(arr(ch(x)), arr(ch$fc(x) * 4 + 6), tolerance = 1e-6)
  tm <- jit_trace(ch, torch_ones(3, 2))
  expect_equal(arr(tm(x)), arr(ch(x)), tolerance = 1e-6)
  expect_error(nn_module(private = list(1)), "`private` must be a named list")
  expect_error(nn_module(active = list(a = 1)), "`active` must be a named list of functions")
})

test_that("autograd_function() runs R's forward and backward, traced as one node", {
  skip_if_no_torch()
  exp10 <- autograd_function(
    forward = function(ctx, i) {
      result <- i$exp()
      ctx$save_for_backward(result = result)
      result
    },
    # A gradient that is not autograd's own, so that using it is seen.
    backward = function(ctx, grad_output) list(i = grad_output * ctx$saved_variables$result * 10)
  )
  x <- torch_tensor(c(0, 1), requires_grad = TRUE)
  exp10(x)$sum()$backward()
  expect_equal(as.numeric(x$grad), 10 * exp(c(0, 1)), tolerance = 1e-6)
  f <- function(x) exp10(x) * 2
  tr <- jit_trace(f, torch_ones(2))
  expect_match(tr$graph, "prim.autograd_function")
  path <- tempfile(fileext = ".pt")
  jit_save(tr, path)
  for (g in list(tr, jit_load(path))) {
    y <- torch_tensor(c(0, 1, 2), requires_grad = TRUE)
    g(y)$sum()$backward()
    expect_equal(as.numeric(y$grad), 20 * exp(c(0, 1, 2)), tolerance = 1e-5)
  }
  # Several inputs and outputs, a number among the inputs, needs_input_grad by name.
  seen <- NULL
  mulk <- autograd_function(
    forward = function(ctx, a, b, k = 2) {
      ctx$save_for_backward(b = b, k = k)
      seen <<- ctx$needs_input_grad
      list(a * b * k, a + b)
    },
    backward = function(ctx, g1, g2) {
      s <- ctx$saved_variables
      list(a = g1 * s$b * s$k + g2)
    })
  a <- torch_tensor(c(1, 2), requires_grad = TRUE)
  b <- torch_tensor(c(3, 4), requires_grad = TRUE)
  out <- mulk(a, b, k = 3)
  expect_equal(as.numeric(out[[1]]), c(9, 24))
  expect_equal(seen, list(a = TRUE, b = TRUE, k = FALSE))
  (out[[1]]$sum() + out[[2]]$sum())$backward()
  expect_equal(as.numeric(a$grad), c(10, 13))
  expect_null(b$grad)
})

test_that("autograd_function() errors say what to fix, in R terms", {
  skip_if_no_torch()
  expect_error(autograd_function(function(ctx, ...) 1, function(ctx, g) g), "not `...`")
  bad <- autograd_function(function(ctx, x) x * 2, function(ctx, g) list(y = g))
  expect_error(bad(torch_ones(2, requires_grad = TRUE))$sum()$backward(),
               "gradient for `y`, which is not an input of `forward` \\(`x`\\)")
  unnamed <- autograd_function(function(ctx, x) {
    ctx$save_for_backward(x)
    x
  }, function(ctx, g) list(g))
  expect_error(unnamed(torch_ones(2)), "name each value")
  reads <- autograd_function(
    forward = function(ctx, i) {
      ctx$save_for_backward(i = i)
      i * 2
    },
    backward = function(ctx, g) list(i = g * ctx$saved_variables$i$sum()$item()))
  expect_error(jit_trace(function(x) reads(x), torch_ones(2, requires_grad = TRUE)),
               "the autograd_function\\(\\) at .*\\$item\\(\\) or as_array\\(\\).*with_no_grad\\(\\)")
})

test_that("out-of-range positions and classes are reported in R's 1-based numbering", {
  skip_if_no_torch()
  x <- torch_randn(3, 4)
  expect_error(x$select(1, 5), "index 5 out of range for tensor of size \\[3, 4\\] at dimension 1")
  expect_error(torch_take(x, torch_tensor(13L)), "tried to access index 13 on a tensor of 12")
  expect_error(nnf_one_hot(torch_tensor(c(1L, 6L)), num_classes = 4),
               "at most num_classes: classes are 1 to num_classes in R")
  expect_error(x$index_select(1, torch_tensor(c(1L, 4L))),
               "index out of range: an index is past the size of its dimension \\(indices are 1-based")
  expect_error(nnf_embedding(torch_tensor(c(1L, 9L)), torch_randn(4, 2)), "number of rows")
})

test_that("print() of a long tensor shows n = 30 lines of values, as mlverse does", {
  skip_if_no_torch()
  out <- capture.output(print(torch_arange(1, 40)))
  expect_length(out, 33)
  expect_equal(out[[31]], " 30")
  expect_equal(out[[32]], "... [the output was truncated (use n=-1 to disable)]")
  expect_equal(out[[33]], "[ CPUFloatType{40} ]")
  expect_length(capture.output(print(torch_arange(1, 40), n = -1)), 42)
  short <- capture.output(print(torch_ones(2, 2, requires_grad = TRUE) * 2, n = 1))
  expect_equal(short[[3]], "... [the output was truncated (use n=-1 to disable)]")
  expect_equal(short[[4]], "[ CPUFloatType{2,2} ][ grad_fn = <MulBackward0> ]")
  expect_length(capture.output(print(torch_ones(30))), 32) # 30 lines: all shown
})

test_that("a dataset without .getitem() or .length(), and a data.frame, are refused clearly", {
  skip_if_no_torch()
  ds <- dataset("nothing", initialize = function() NULL)()
  expect_error(ds[1], "<nothing> has no `.getitem\\(\\)` method; define it in dataset")
  expect_error(length(ds), "has no `.length\\(\\)` method")
  dl <- dataloader(dataset(.length = function() 2)(), batch_size = 2)
  expect_error(dataloader_next(dataloader_make_iter(dl)), "no `.getitem\\(\\)` method")
  # .getbatch alone serves ds[i] too.
  only_batch <- dataset(.getbatch = function(i) torch_tensor(i * 10), .length = function() 3)()
  expect_equal(as.numeric(only_batch[2]), 20)
  expect_error(torch_tensor(data.frame(a = 1:2, b = 3:4)), "as.matrix\\(df\\)")
})

test_that("x$stride(), $ndimension(), $bernoulli_(), $fill_diagonal_(), $where() (mlverse methods)", {
  skip_if_no_torch()
  x <- torch_ones(2, 3)
  expect_identical(x$stride(), c(3L, 1L))
  expect_identical(x$stride(1), 3L)
  expect_identical(torch_ones(2, 3, 4)$ndimension(), 3L)
  torch_manual_seed(1)
  v <- as.numeric(torch_empty(2000)$bernoulli_(0.25))
  expect_true(all(v %in% c(0, 1)))
  expect_equal(mean(v), 0.25, tolerance = 0.1)
  expect_equal(arr(torch_ones(3, 3)$fill_diagonal_(0)), 1 - diag(3))
  y <- torch_tensor(c(-1, 2, 3))
  expect_equal(as.numeric(y$where(y > 0, -5)), c(-5, 2, 3))
  expect_equal(as.numeric(y$where(y > 0, torch_zeros(3))), c(0, 2, 3))
  tr <- jit_trace(function(y) y$where(y > 0, 0), y)
  expect_equal(as.numeric(tr(torch_tensor(c(4, -2)))), c(4, 0))
})

test_that("traced sizes: c(n, 2) are sizes (arithmetic works), pmax/pmin/sprintf read them", {
  skip_if_no_torch()
  f <- function(x) torch_zeros(c(x$size(1), 2) * 2)$sum() + x
  tr <- jit_trace(f, torch_ones(2))
  expect_equal(arr(tr(torch_ones(5))), arr(f(torch_ones(5))))
  g <- function(x) x$view(c(x$size(1), dim(x)[-1] * 1L, 1L))
  expect_equal(dim(jit_trace(g, torch_ones(2, 3))(torch_ones(4, 3))), c(4L, 3L, 1L))
  # Outside a trace c() of sizes is R's integer vector, as always.
  expect_identical(c(torch_ones(2, 3)$size(1), 5L), c(2L, 5L))
  h <- function(x) x * pmax(x$size(1), 3) + nchar(sprintf("%d rows", x$size(1)))
  th <- suppressWarnings(jit_trace(h, torch_ones(4)))
  expect_equal(arr(th(torch_ones(4))), arr(h(torch_ones(4))))
  expect_error(th(torch_ones(7)), class = "tracebridge_guard_error")
  expect_equal(arr(h(torch_ones(2))), rep(3 + 6, 2)) # untraced: base R's
})

test_that("data loaders and datasets print what they hold; a fractional batch_size is refused", {
  skip_if_no_torch()
  ds <- tensor_dataset(torch_randn(5, 2))
  expect_output(print(ds), "<dataset: tensor_dataset> 5 items")
  dl <- dataloader(ds, batch_size = 2, shuffle = TRUE)
  expect_output(print(dl), "<dataloader> 3 batches of 2 from a dataset of 5 items, shuffled")
  expect_output(print(dl), "enumerate\\(dl\\)")
  expect_error(dataloader(ds, batch_size = 2.5), "positive whole number")
  expect_error(dataloader(ds, batch_size = c(1, 2)), "positive whole number")
})

test_that("a tensor of positions: -1 is the last (as in R vectors), 0 is an error, never a silent pick", {
  skip_if_no_torch()
  v <- function() torch_tensor(c(1, 2, 3, 4))
  y <- v()
  y[torch_tensor(-1L)] <- 0
  expect_equal(as.numeric(y), c(1, 2, 3, 0)) # was c(1, 2, 0, 4): -1 shifted to -2
  expect_equal(as.numeric(torch_index_put(v(), list(torch_tensor(-1L)), torch_tensor(0))),
               c(1, 2, 3, 0))
  expect_equal(as.numeric(torch_take(v(), torch_tensor(-1L))), 4)
  expect_equal(as.numeric(v()$index_fill(1, torch_tensor(c(-1L, 1L)), 0)), c(0, 2, 3, 0))
  y <- v()
  y[torch_tensor(c(2L, -2L))] <- 9
  expect_equal(as.numeric(y), c(1, 9, 9, 4))
  # 0 names no position: the op fails, and says 0.
  expect_error(v()$index_fill(1, torch_tensor(0L), 9), "index 0 \\(positions are 1-based in R")
  expect_error(torch_take(v(), torch_tensor(0L)), "1-based")
  expect_error(v()[torch_tensor(0L)],
               "index 0 \\(positions are 1-based in R.*\\) is out of bounds for dimension 1 with size 4",
               class = "index_error")
  y <- v()
  expect_error(y[torch_tensor(0L)] <- 5, "index 0 \\(positions are 1-based")
  expect_error(torch_tensor(matrix(1:6, 2))[, torch_tensor(4L)],
               "index 4 is out of bounds for dimension 2 with size 3")
  # Traced: the shift is recorded, so it holds for other positions at call time.
  f <- function(x, i) {
    y <- x$clone()
    y[i] <- 0
    y
  }
  tr <- jit_trace(f, v(), torch_tensor(2L))
  expect_equal(as.numeric(tr(v(), torch_tensor(-1L))), c(1, 2, 3, 0))
  expect_equal(as.numeric(tr(v(), torch_tensor(3L))), c(1, 2, 0, 4))
  expect_error(tr(v(), torch_tensor(0L)), "index 0")
})

test_that("nnf_adaptive_max_pool*d(return_indices = TRUE) gives 1-based positions too", {
  skip_if_no_torch()
  x <- torch_tensor(array(c(1, 5, 2, 3), c(1, 1, 4)))
  r <- nnf_adaptive_max_pool1d(x, 2, return_indices = TRUE)
  expect_equal(as.numeric(r[[1]]), c(5, 3))
  expect_equal(as.integer(r[[2]]), c(2L, 4L))
  r2 <- nnf_adaptive_max_pool2d(torch_tensor(array(c(1, 9, 2, 3), c(1, 1, 2, 2))), 1,
                                return_indices = TRUE)
  expect_equal(as.integer(r2[[2]]), 3L) # 9 is at [2, 1]: the 3rd of the plane, row by row
})

test_that("reading with a tensor of positions: -1 is the last, as writing does", {
  skip_if_no_torch()
  x <- torch_tensor(c(10, 20, 30, 40))
  expect_equal(as.numeric(x[torch_tensor(-1L)]), 40) # was an "index out of range" error
  expect_equal(as.numeric(x[torch_tensor(c(-1L, 1L))]), c(40, 10))
  expect_equal(as.numeric(x[torch_tensor(c(-2L, 2L))]), c(30, 20))
  m <- torch_tensor(matrix(1:6, 2)) # rows (1, 3, 5) and (2, 4, 6)
  expect_equal(as_array(m[torch_tensor(-1L), ]), as_array(m[torch_tensor(2L), ]))
  expect_equal(as.numeric(m[torch_tensor(-1L), ]), c(2, 4, 6))
  expect_equal(as.numeric(m[, torch_tensor(c(-1L, 1L))]), c(5, 6, 1, 2))
  # drop = FALSE and a matrix of positions go through R's path: the same meaning.
  expect_equal(dim(m[torch_tensor(-1L), , drop = FALSE]), c(1L, 3L))
  expect_equal(as_array(x[torch_tensor(matrix(c(-1L, 1L, -2L, 2L), 2))]),
               matrix(c(40, 10, 30, 20), 2))
  # One past the start and 0 still fail, in R's terms, naming the dimension.
  expect_error(x[torch_tensor(-5L)], "index -5 is out of bounds for dimension 1 with size 4",
               class = "index_error")
  expect_error(x[torch_tensor(0L)], "index 0 \\(positions are 1-based")
  expect_error(m[, torch_tensor(c(1L, -4L))], "index -4 is out of bounds for dimension 2 with size 3")
  expect_error(m[, torch_tensor(9L), drop = FALSE], "index 9 is out of bounds for dimension 2")
  # Traced (R's path): the count from the end is recorded, so it holds at another size.
  f <- function(x, i) x[i]
  tr <- jit_trace(f, x, torch_tensor(-1L))
  expect_equal(as.numeric(tr(torch_tensor(c(1, 2, 3)), torch_tensor(-1L))), 3)
  expect_equal(as.numeric(tr(x, torch_tensor(2L))), 20)
  expect_equal(as.numeric(tr(x, torch_tensor(-3L))), 20)
})

test_that("names() of a tensor is NULL; median() and quantile() say what to use", {
  skip_if_no_torch()
  x <- torch_tensor(c(4, 1, 3, 2))
  expect_null(names(x)) # was ".py"
  expect_null(names(torch_tensor(matrix(1:4, 2))))
  # Base R functions that drop names leave the tensor whole.
  y <- x
  names(y) <- NULL
  expect_equal(as.numeric(y), c(4, 1, 3, 2))
  expect_error(names(y) <- letters[1:4], "Tensors can not have names", class = "value_error")
  expect_error(median(x), "median\\(\\) is not defined for tensors.*torch_median\\(x\\)",
               class = "not_implemented_error")
  expect_equal(as.numeric(torch_median(x)), 2) # the lower middle value, as the message says
  expect_equal(median(as_array(x)), 2.5)
  expect_error(quantile(x), "quantile\\(\\) is not defined for tensors.*quantile\\(as_array\\(x\\)\\)",
               class = "not_implemented_error")
})

test_that("a module returning a dataclass or a named tuple gives R a named list", {
  skip_if_no_torch()
  reticulate::py_run_string(paste(
    "import collections, dataclasses, torch",
    "@dataclasses.dataclass",
    "class TbTrialOut:",
    "    y: torch.Tensor",
    "    n: int",
    "TbTrialPair = collections.namedtuple('TbTrialPair', ['p', 'q'])",
    "class TbTrialDc(torch.nn.Module):",
    "    def forward(self, x):",
    "        return TbTrialOut(x * 2, 3)",
    "class TbTrialNt(torch.nn.Module):",
    "    def forward(self, x):",
    "        return TbTrialPair(x + 1, (x, TbTrialOut(x, 1)))",
    "tb_trial_dc, tb_trial_nt = TbTrialDc(), TbTrialNt()",
    sep = "\n"))
  main <- reticulate::import_main(convert = FALSE)
  x <- torch_tensor(c(1, 2))
  check_dc <- function(r, y) {
    expect_type(r, "list") # was the raw Python object TbTrialOut(y=tensor(...), n=3)
    expect_named(r, c("y", "n"))
    expect_s3_class(r$y, "torch_tensor")
    expect_equal(as.numeric(r$y), y)
    expect_identical(r$n, 3L)
  }
  dc <- tracebridge:::from_py(main$tb_trial_dc)
  check_dc(dc(x), c(2, 4))
  nt <- tracebridge:::from_py(main$tb_trial_nt)
  r <- nt(x)
  expect_named(r, c("p", "q"))
  expect_equal(as.numeric(r$p), c(2, 3))
  expect_null(names(r$q)) # a plain tuple stays an unnamed list
  expect_named(r$q[[2]], c("y", "n")) # nested records too
  expect_equal(as.numeric(r$q[[2]]$y), c(1, 2))
  # Traced, and through an artifact saved and loaded back (the classes are importable
  # from R's embedded Python, so the outputs are rebuilt as them).
  # (Python 3.11's inspect warns about a class made in `__main__`, which has no file.)
  quiet_trace <- function(m) withCallingHandlers(jit_trace(m, x), warning = function(w) {
    if (grepl("module_repr", conditionMessage(w))) invokeRestart("muffleWarning")
  })
  tr <- quiet_trace(dc)
  check_dc(tr(torch_tensor(c(5, 6))), c(10, 12))
  path <- tempfile(fileext = ".tb")
  on.exit(unlink(path))
  jit_save(quiet_trace(nt), path)
  r <- jit_load(path)(torch_tensor(c(5, 6)))
  expect_named(r, c("p", "q"))
  expect_equal(as.numeric(r$p), c(6, 7))
  # torch's own result tuples (values, indices) stay unnamed lists, as in mlverse.
  expect_null(names(torch_max(torch_tensor(matrix(1:4, 2)), dim = 1)))
})
