test_that("torch_tensor keeps shape and values of vectors, matrices and arrays", {
  skip_if_no_torch()
  v <- c(1.5, -2, 3)
  expect_equal(arr(torch_tensor(v)), v)
  expect_equal(dim(torch_tensor(v)), 3L)

  m <- matrix(1:6, nrow = 2)
  tm <- torch_tensor(m)
  expect_equal(dim(tm), c(2L, 3L))
  expect_identical(arr(tm), m)
  # Column-major R data arrives with the same meaning of each index.
  expect_equal(arr(tm[2, 3]), m[2, 3])
  expect_equal(arr(tm[1, 2]), m[1, 2])

  a <- array(as.double(1:24), c(2, 3, 4))
  ta <- torch_tensor(a)
  expect_equal(dim(ta), c(2L, 3L, 4L))
  expect_identical(arr(ta), a)
  expect_equal(arr(ta[2, 1, 3]), a[2, 1, 3])
  expect_equal(arr(ta[, 2, ]), a[, 2, ])
})

test_that("dtypes follow the R type unless given", {
  skip_if_no_torch()
  expect_equal(capture_output(print(torch_tensor(1)$dtype)), "torch_float32")
  expect_match(capture_output(print(torch_tensor(1:2))), "CPULongType\\{2\\}")
  expect_match(capture_output(print(torch_tensor(c(TRUE, FALSE)))), "CPUBoolType\\{2\\}")
  expect_match(capture_output(print(torch_tensor(1:2, dtype = torch_double()))),
               "CPUDoubleType\\{2\\}")
  expect_type(arr(torch_tensor(1:3)), "integer")
  expect_type(arr(torch_tensor(c(TRUE, FALSE))), "logical")
  expect_true(torch_tensor(c(1, 2), requires_grad = TRUE)$requires_grad)
})

test_that("tensors print like mlverse torch", {
  skip_if_no_torch()
  expect_equal(
    capture_output(print(torch_tensor(c(0, 0, 1)))),
    "torch_tensor\n 0\n 0\n 1\n[ CPUFloatType{3} ]"
  )
  expect_equal(
    capture_output(print(torch_tensor(matrix(1:4, 2)))),
    "torch_tensor\n 1 3\n 2 4\n[ CPULongType{2,2} ]"
  )
  expect_equal(
    capture_output(print(torch_tensor(c(0.5, -1.25)))),
    "torch_tensor\n  0.5000\n -1.2500\n[ CPUFloatType{2} ]"
  )
})

test_that("indexing is 1-based and drops like R", {
  skip_if_no_torch()
  m <- matrix(as.double(1:12), 3, 4)
  x <- torch_tensor(m)
  expect_equal(arr(x[1, ]), m[1, ])
  expect_equal(arr(x[, 2:3]), m[, 2:3])
  expect_equal(arr(x[c(1, 3), ]), m[c(1, 3), ])
  expect_equal(arr(x[-1, ]), m[3, ])
  expect_equal(dim(x[1, , drop = FALSE]), c(1L, 4L))
  # A mask selects in torch's row-major order.
  expect_equal(arr(x[x > 6]), t(m)[t(m) > 6])
  expect_error(x[0, 1], "1-based")
  y <- torch_zeros(2, 2)
  y[1, 2] <- 5
  expect_equal(arr(y), matrix(c(0, 0, 5, 0), 2))
})

test_that("operators match base R", {
  skip_if_no_torch()
  a <- c(1, -2, 3.5)
  b <- c(2, 4, -1)
  x <- torch_tensor(a)
  y <- torch_tensor(b)
  expect_equal(arr(x + y), a + b)
  expect_equal(arr(x - y), a - b)
  expect_equal(arr(x * y), a * b)
  expect_equal(arr(x / y), a / b)
  expect_equal(arr(x^2), a^2)
  expect_equal(arr(2 - x), 2 - a)
  expect_equal(arr(-x), -a)
  expect_equal(arr(x %% 2), a %% 2)
  expect_equal(arr(x %/% 2), a %/% 2)
  expect_equal(arr(x > y), a > b)
  expect_equal(arr(x == 1), a == 1)
  expect_equal(arr(x <= y), a <= b)
  expect_equal(arr((x > 0) & (y > 0)), (a > 0) & (b > 0))
  expect_equal(arr(abs(x)), abs(a), tolerance = 1e-6)
  expect_equal(arr(exp(x)), exp(a), tolerance = 1e-6)
})

test_that("methods through $ convert sizes and dims", {
  skip_if_no_torch()
  x <- torch_tensor(array(as.double(1:24), c(2, 3, 4)))
  expect_equal(x$size(), c(2L, 3L, 4L))
  expect_equal(x$size(1), 2L)
  expect_equal(x$size(-1), 4L)
  expect_equal(x$shape, c(2L, 3L, 4L))
  expect_equal(dim(x$view(c(2, -1))), c(2L, 12L))
  expect_equal(dim(x$transpose(1, 3)), c(4L, 3L, 2L))
  expect_equal(arr(x$sum(dim = 3)), apply(array(1:24, c(2, 3, 4)), c(1, 2), sum))
  expect_equal(dim(x$unsqueeze(1)), c(1L, 2L, 3L, 4L))
  expect_equal(dim(x$flatten(start_dim = 2)), c(2L, 12L))
  expect_equal(x$dim(), 3L)
  expect_equal(x$numel(), 24L)
  # view() is row-major like torch: the rows of the result are C-order chunks.
  v <- torch_tensor(matrix(1:6, 2, byrow = TRUE))$view(c(3, 2))
  expect_equal(arr(v), matrix(1:6, 3, byrow = TRUE))
})

test_that("factories make the right shapes and values", {
  skip_if_no_torch()
  expect_equal(arr(torch_zeros(2, 3)), matrix(0, 2, 3))
  expect_equal(arr(torch_ones(c(2, 2))), matrix(1, 2, 2))
  expect_equal(arr(torch_eye(3)), diag(3))
  expect_equal(arr(torch_arange(1, 5)), as.double(1:5))
  expect_equal(arr(torch_arange(0, 1, 0.25)), seq(0, 1, 0.25))
  expect_equal(arr(torch_arange(1L, 4L)), 1:4)
  torch_manual_seed(3)
  r1 <- arr(torch_rand(4))
  torch_manual_seed(3)
  expect_equal(arr(torch_rand(4)), r1)
  expect_true(all(r1 >= 0 & r1 < 1))
  expect_equal(dim(torch_randn(2, 5)), c(2L, 5L))
  expect_error(torch_tensor("a"), "Cannot make a tensor")
})

test_that("dtypes compare with ==, length is the number of elements, fields are values", {
  x <- torch_tensor(c(1, 9, 3))
  expect_true(x$dtype == torch_float())
  expect_true(torch_tensor(1:2)$dtype == torch_long())
  expect_false(x$dtype == torch_long())
  expect_true(x$dtype != torch_int())
  expect_equal(length(x), 3L)
  expect_equal(length(torch_zeros(2, 3)), 6L)
  expect_true(x$to(dtype = torch_long())$dtype == torch_long())
  expect_s3_class(x$cpu(), "torch_tensor")
  expect_s3_class(x$to(device = "cpu"), "torch_tensor")
  expect_s3_class(x$data, "torch_tensor")
  expect_null(x$grad_fn)
  expect_s3_class(x$device, "torch_device")
})

test_that("printing has mlverse's requires_grad and grad_fn footers", {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  expect_equal(capture_output(print(x)),
               "torch_tensor\n 1\n 2\n[ CPUFloatType{2} ][ requires_grad = TRUE ]")
  expect_equal(capture_output(print(x * 2)),
               "torch_tensor\n 2\n 4\n[ CPUFloatType{2} ][ grad_fn = <MulBackward0> ]")
})

test_that("factories: dtype, device, requires_grad; inclusive arange; linspace; *_like", {
  expect_equal(as_array(torch_arange(1, 5)), c(1, 2, 3, 4, 5))
  expect_equal(as_array(torch_arange(0, 1, 0.25)), c(0, 0.25, 0.5, 0.75, 1))
  expect_equal(as_array(torch_arange(1L, 3L)), 1:3)
  expect_equal(as_array(torch_linspace(0, 1, 5)), c(0, 0.25, 0.5, 0.75, 1))
  expect_equal(as_array(torch_logspace(0, 2, 3)), c(1, 10, 100))
  expect_equal(as_array(torch_full(c(2, 2), 7)), matrix(7, 2, 2))
  z <- torch_zeros_like(torch_ones(2, 3), dtype = torch_double())
  expect_equal(dim(z), c(2L, 3L))
  expect_true(z$dtype == torch_double())
  expect_equal(as_array(torch_ones_like(torch_zeros(2))), c(1, 1))
  expect_equal(as_array(torch_eye(2)), diag(2))
  expect_true(torch_randn(2, 2, requires_grad = TRUE)$requires_grad)
  expect_true(torch_zeros(c(2, 2), dtype = torch_int())$dtype == torch_int())
  expect_equal(dim(torch_empty(3, 1, device = "cpu")), c(3L, 1L))
  expect_true(all(as_array(torch_randint(1, 4, c(20))) %in% 1:3))
})

test_that("R scalars work on either side of operators; Math and Summary", {
  x <- torch_tensor(c(1, 2, 3))
  expect_equal(as_array(2 * x), c(2, 4, 6))
  expect_equal(as_array(10 - x), c(9, 8, 7))
  expect_equal(as_array(x / 2), c(0.5, 1, 1.5))
  expect_equal(as_array(1 / x), c(1, 0.5, 1 / 3), tolerance = 1e-6)
  expect_equal(as_array(x > 1), c(FALSE, TRUE, TRUE))
  expect_equal(as_array(exp(torch_zeros(2))), c(1, 1))
  expect_equal(as_array(sum(x)), 6)
  expect_equal(as_array(max(x)), 3)
  expect_equal(as_array(min(x)), 1)
  expect_equal(as.numeric(x), c(1, 2, 3))
})

# Everyday base R on tensors: each of these once answered silently wrongly or failed.
test_that("round(x, digits) and log(x, base) use their second argument, as in R", {
  x <- torch_tensor(c(1.2345, 2.5678), dtype = torch_float64())
  expect_equal(as_array(round(x, 2)), c(1.23, 2.57))
  expect_equal(as_array(round(x)), c(1, 3))
  expect_equal(as_array(log(torch_tensor(c(8, 64)), 2)), c(3, 6), tolerance = 1e-6)
  expect_equal(as_array(log(torch_tensor(100), base = 10)), 2, tolerance = 1e-6)
  expect_equal(as_array(acos(torch_tensor(1))), 0)
  expect_equal(as_array(trunc(torch_tensor(c(-1.5, 1.5)))), c(-1, 1))
  expect_equal(as_array(cumprod(torch_tensor(c(1, 2, 3)))), c(1, 2, 6))
  # Like R, cumsum() runs over the elements in column-major order.
  expect_equal(as_array(cumsum(torch_tensor(matrix(1:4, 2)))), cumsum(matrix(1:4, 2)))
})

test_that("rev, is.na, mean, unique, as.vector, %in% and t() mean what they mean in R", {
  expect_equal(as_array(rev(torch_tensor(1:3))), 3:1)
  expect_equal(as_array(rev(torch_tensor(matrix(1:4, 2)))), rev(matrix(1:4, 2)))
  expect_equal(as_array(is.na(torch_tensor(c(1, NaN)))), c(FALSE, TRUE))
  expect_equal(as_array(mean(torch_tensor(c(1, 2, 3)))), 2)
  expect_equal(as_array(unique(torch_tensor(c(3, 1, 3, 2)))), c(3, 1, 2))
  expect_equal(as.vector(torch_tensor(matrix(1:4, 2))), 1:4)
  expect_equal(torch_tensor(c(1, 2, 3)) %in% 2, c(FALSE, TRUE, FALSE))
  expect_equal(dim(t(torch_tensor(matrix(1:6, 2)))), c(3L, 2L))
  expect_error(t(torch_zeros(2, 2, 2)), class = "value_error")
})

test_that("operator errors are classed R conditions with 1-based dimensions", {
  err <- tryCatch(torch_ones(2) + torch_ones(3), error = identity)
  expect_s3_class(err, "runtime_error")
  expect_s3_class(err, "tracebridge_error")
  expect_match(conditionMessage(err), "non-singleton dimension 1")
  expect_error(torch_ones(2, 3) * torch_ones(3, 2), class = "tracebridge_error")
})

test_that("copy_, to(other =), einsum and searchsorted accept mlverse's calls", {
  y <- torch_zeros(3)
  y$copy_(torch_tensor(c(1, 2, 4)))
  expect_equal(as_array(y), c(1, 2, 4))
  expect_true(y$to(other = torch_tensor(1L))$dtype == torch_long())
  expect_equal(as_array(torch_einsum("i,i->", list(torch_tensor(c(1, 2)),
                                                  torch_tensor(c(3, 4))))), 11)
  expect_equal(as_array(torch_einsum("ij,jk->ik", list(torch_eye(2), torch_ones(2, 2)))),
               matrix(1, 2, 2))
  # 4 goes before the third element of c(1, 3, 5): position 3, 1-based.
  expect_equal(as_array(torch_searchsorted(torch_tensor(c(1, 3, 5)), torch_tensor(4))), 3)
})

test_that("torch_tensor() errors are classed; x$is_cuda is a field as in mlverse", {
  expect_error(torch_tensor(1:2, requires_grad = TRUE), class = "runtime_error")
  expect_error(torch_tensor(torch_tensor(1:2), requires_grad = TRUE), class = "tracebridge_error")
  expect_false(torch_zeros(1)$is_cuda)
  expect_true("is_cuda" %in% .DollarNames(torch_zeros(1), ""))
})

test_that("sum/max/min(x, na.rm = TRUE) leave out NaN as R does; Summary errors are classed", {
  x <- torch_tensor(c(1, NaN, 3))
  expect_equal(as_array(sum(x, na.rm = TRUE)), 4)
  expect_true(is.nan(as_array(sum(x))))
  expect_equal(as_array(max(x, na.rm = TRUE)), 3)
  expect_equal(as_array(min(x, na.rm = TRUE)), 1)
  expect_error(max(torch_tensor(numeric(0))), class = "tracebridge_error")
})

test_that("torch_max(x, y) is elementwise; torch_where(cond, 1, 0) takes numbers", {
  a <- torch_tensor(c(1, 5))
  b <- torch_tensor(c(3, 2))
  expect_equal(as_array(torch_max(a, b)), c(3, 5))
  expect_equal(as_array(torch_min(a, b)), c(1, 2))
  expect_equal(as_array(a$max(b)), c(3, 5))
  expect_equal(as_array(torch_max(a, dim = 1)[[2]]), 2)
  expect_equal(as_array(torch_where(torch_tensor(c(TRUE, FALSE)), 1, 0)), c(1, 0))
})
