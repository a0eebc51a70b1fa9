test_that("a write through a parameter's $data is seen, and invalidate_caches() forgets kept values", {
  skip_if_no_torch()
  torch_manual_seed(1)
  Doubled <- nn_module("Doubled",
    initialize = function() self$fc <- nn_linear(2, 2, bias = FALSE),
    forward = function(x) torch_matmul(x, (self$fc$weight * 2)$t())
  )
  net <- Doubled()
  net$eval()
  f <- jit_trace(net, torch_ones(1, 2))
  x <- torch_ones(1, 2)
  w <- as_array(net$fc$weight)
  before <- as_array(with_no_grad(f(x)))
  expect_equal(before, matrix(2 * rowSums(w), 1), tolerance = 1e-6)
  invisible(net$fc$weight$data$zero_()) # torch records no version change for this,
  # but taking a parameter's $data drops the values kept from it (runtime/data_writes.py)
  expect_equal(as_array(with_no_grad(f(x))), matrix(0, 1, 2))
  expect_null(invalidate_caches())
  expect_equal(as_array(with_no_grad(f(x))), matrix(0, 1, 2))
  # A write torch records is seen without it.
  with_no_grad(net$fc$weight$copy_(torch_ones(2, 2)))
  expect_equal(as_array(with_no_grad(f(x))), matrix(4, 1, 2))
})
