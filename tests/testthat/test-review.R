# Findings of the review of the eleventh round's changes (each with the case that showed
# it, compared with Python torch or mlverse torch's documented defaults).

test_that("nnf_grid_sample's align_corners defaults to FALSE, as in mlverse (no warning)", {
  input <- torch_tensor(array(as.numeric(1:16), c(1, 1, 4, 4)))
  grid <- torch_tensor(array(c(-0.5, 0.25, 0.5, -1, 0.75, 0, -0.25, 1), c(1, 2, 2, 2)))
  expect_no_warning(got <- nnf_grid_sample(input, grid))
  want <- tracebridge:::py_torch()$nn$functional$grid_sample(input$py, grid$py,
                                                             align_corners = FALSE)
  expect_equal(as_array(got), as_array(tracebridge:::wrap_tensor(want)))
})

test_that("torch_take_along_dim refuses a 0 or a position past the dimension (torch wraps them)", {
  x <- torch_tensor(rbind(c(1, 2, 3, 4), c(5, 6, 7, 8)))
  # torch.take_along_dim with a dim reads an index modulo the size: R's 0 read column 1.
  expect_error(torch_take_along_dim(x, torch_tensor(rbind(0L, 2L)), dim = 2), "0 \\(positions")
  expect_error(x$take_along_dim(torch_tensor(rbind(5L, 2L)), dim = 2), "out of bounds")
  expect_error(torch_take_along_dim(x, torch_tensor(rbind(-5L, 2L)), dim = 2), "out of bounds")
  expect_error(torch_take_along_dim(x, torch_tensor(matrix(c(1L, 3L), 1)), dim = 1), "out of bounds")
  # Valid positions: what Python torch gives for the 0-based ones (negatives from the end).
  idx <- torch_tensor(rbind(c(4L, 1L), c(-1L, 2L)))
  want <- tracebridge:::py_torch()$take_along_dim(
    x$py, torch_tensor(rbind(c(3L, 0L), c(-1L, 1L)))$py, dim = 1L)
  expect_equal(as_array(torch_take_along_dim(x, idx, dim = 2)),
               as_array(tracebridge:::wrap_tensor(want)))
  expect_equal(as_array(x$take_along_dim(torch_tensor(matrix(c(2L, 1L, 1L, 2L), 1)), dim = 1)),
               rbind(c(5, 2, 3, 8)))
  # Broadcast along the other dimensions, and without a dim (flattened), as before.
  expect_equal(as_array(torch_take_along_dim(x, torch_tensor(matrix(c(4L, 1L), 1)), dim = 2)),
               rbind(c(4, 1), c(8, 5)))
  expect_equal(as_array(torch_take_along_dim(x, torch_tensor(c(8L, 1L)))), c(8, 1))
  expect_error(torch_take_along_dim(x, torch_tensor(c(0L))), "0 \\(positions")
})

test_that("a traced torch_take_along_dim checks its positions on every call", {
  Net <- nn_module(forward = function(x, i) torch_take_along_dim(x, i, dim = 2))
  x <- torch_tensor(rbind(c(1, 2, 3), c(4, 5, 6)))
  tr <- jit_trace(Net(), x, torch_tensor(rbind(3L, 1L)))
  expect_equal(as_array(tr(x, torch_tensor(rbind(2L, -1L)))), rbind(2, 6))
  expect_error(tr(x, torch_tensor(rbind(4L, 1L))), "out of bounds")
  expect_error(tr(x, torch_tensor(rbind(0L, 1L))), "0 \\(positions")
})

test_that("R doubles become the default dtype that torch_set_default_dtype() set", {
  on.exit(torch_set_default_dtype(torch_float32()))
  torch_set_default_dtype(torch_float64())
  # Were float32 whatever the default: 0.1 lost its last 29 bits silently.
  expect_equal(torch_tensor(0.1)$dtype, torch_float64())
  expect_identical(torch_tensor(0.1)$item(), 0.1)
  expect_identical(as_array(torch_tensor(matrix(c(0.1, 1 / 3), 1))), matrix(c(0.1, 1 / 3), 1))
  expect_equal(torch_arange(0, 1, 0.25)$dtype, torch_float64())
  expect_equal(torch_tensor(1:2)$dtype, torch_long())
  expect_equal(torch_tensor(0.5, dtype = torch_float32())$dtype, torch_float32())
  want <- tracebridge:::py_torch()$tensor(list(0.1, 0.2))$dtype
  expect_equal(torch_tensor(c(0.1, 0.2))$dtype, tracebridge:::dtype_from_py(want))
  # Traced numbers too: a size times an R double is a tensor of the default dtype.
  f <- function(x) x * torch_tensor(x$size(1) * 0.5)
  tr <- jit_trace(f, torch_ones(4, dtype = torch_float64()))
  expect_equal(tr(torch_ones(6, dtype = torch_float64()))$dtype, torch_float64())
  expect_equal(as_array(tr(torch_ones(6, dtype = torch_float64()))), rep(3, 6))
  torch_set_default_dtype(torch_float32())
  expect_equal(torch_tensor(0.1)$dtype, torch_float32())
})

test_that("functions of a list of tensors take named lists and c(list, tensor)", {
  a <- torch_ones(1, 1)
  b <- torch_tensor(matrix(c(2, 3, 4, 5), 2))
  want <- as_array(torch_block_diag(list(a, b)))
  # The names went to Python as keywords ("unexpected keyword argument 'a'").
  expect_equal(as_array(torch_block_diag(list(a = a, b = b))), want)
  expect_equal(as_array(torch_block_diag(c(a = a, b = b))), want)
  # c(a_list, tensor) splices the tensor's Python object ("Expected a torch_tensor").
  expect_equal(as_array(torch_block_diag(c(list(a), b))), want)
  expect_equal(as_array(torch_cartesian_prod(list(x = torch_tensor(c(1, 2)),
                                                  y = torch_tensor(3))))[, 2], c(3, 3))
  got <- torch_broadcast_tensors(list(p = torch_ones(2, 1), q = torch_zeros(3)))
  expect_equal(dim(got[[1]]), c(2L, 3L))
  expect_error(torch_block_diag(list(a, 3)), "Expected a torch_tensor")
})
