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
