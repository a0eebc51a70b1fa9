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
  expect_traced_like_eager(function(x) torch_zeros_like(x) + 1, calls)
  expect_traced_like_eager(function(x) torch_matmul(x, torch_eye(2)), calls)
  expect_traced_like_eager(function(x) x$sum(dim = 2) * torch_arange(1, 3)$sum(), calls)
  # requires_grad = TRUE is still honoured outside a trace
  expect_true(torch_zeros(2, requires_grad = TRUE)$requires_grad)
  expect_true(torch_arange(1, 3, requires_grad = TRUE)$requires_grad)
  expect_false(torch_ones(2)$requires_grad)
})
