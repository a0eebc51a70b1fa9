m <- matrix(c(-1.5, 2, 0.25, 4, -3, 1), nrow = 2)

test_that("elementwise functions match base R", {
  skip_if_no_torch()
  x <- torch_tensor(m)
  expect_equal(arr(torch_relu(x)), pmax(m, 0))
  expect_equal(arr(torch_sigmoid(x)), 1 / (1 + exp(-m)), tolerance = 1e-6)
  expect_equal(arr(torch_tanh(x)), tanh(m), tolerance = 1e-6)
  expect_equal(arr(torch_exp(x)), exp(m), tolerance = 1e-6)
  expect_equal(arr(torch_abs(x)), abs(m))
  expect_equal(arr(torch_log(torch_abs(x))), log(abs(m)), tolerance = 1e-6)
  expect_equal(arr(torch_sqrt(torch_abs(x))), sqrt(abs(m)), tolerance = 1e-6)
  expect_equal(arr(nnf_relu(x)), pmax(m, 0))
  expect_equal(arr(nnf_sigmoid(x)), 1 / (1 + exp(-m)), tolerance = 1e-6)
  expect_equal(arr(nnf_tanh(x)), tanh(m), tolerance = 1e-6)
  expect_equal(arr(nnf_leaky_relu(x, 0.1)), ifelse(m > 0, m, 0.1 * m), tolerance = 1e-6)
})

test_that("matrix products match %*%", {
  skip_if_no_torch()
  b <- matrix(c(1, 0, 2, -1, 3, 1), nrow = 3)
  expect_equal(arr(torch_mm(torch_tensor(m), torch_tensor(b))), m %*% b, tolerance = 1e-6)
  expect_equal(arr(torch_matmul(torch_tensor(m), torch_tensor(b))), m %*% b,
               tolerance = 1e-6)
  w <- matrix(c(0.5, -1, 2, 1, 0, 1), nrow = 2)
  expect_equal(arr(nnf_linear(torch_tensor(m), torch_tensor(w), torch_tensor(c(1, 2)))),
               m %*% t(w) + matrix(c(1, 2), 2, 2, byrow = TRUE), tolerance = 1e-6)
})

test_that("cat and stack use 1-based dims", {
  skip_if_no_torch()
  a <- matrix(1:4, 2)
  b <- matrix(5:8, 2)
  expect_equal(arr(torch_cat(list(torch_tensor(a), torch_tensor(b)), dim = 1)), rbind(a, b))
  expect_equal(arr(torch_cat(list(torch_tensor(a), torch_tensor(b)), dim = 2)), cbind(a, b))
  s <- torch_stack(list(torch_tensor(1:3), torch_tensor(4:6)), dim = 2)
  expect_equal(arr(s), cbind(1:3, 4:6))
  expect_equal(arr(torch_stack(list(torch_tensor(1:3), torch_tensor(4:6)))), rbind(1:3, 4:6))
})

test_that("reductions match base R with 1-based dims", {
  skip_if_no_torch()
  x <- torch_tensor(m)
  expect_equal(arr(torch_sum(x)), sum(m), tolerance = 1e-6)
  expect_equal(arr(torch_sum(x, dim = 1)), colSums(m), tolerance = 1e-6)
  expect_equal(arr(torch_sum(x, dim = 2)), rowSums(m), tolerance = 1e-6)
  expect_equal(dim(torch_sum(x, dim = 2, keepdim = TRUE)), c(2L, 1L))
  expect_equal(arr(torch_mean(x)), mean(m), tolerance = 1e-6)
  expect_equal(arr(torch_mean(x, dim = 1)), colMeans(m), tolerance = 1e-6)
  expect_equal(arr(torch_max(x)), max(m))
  expect_equal(arr(torch_min(x)), min(m))
  mx <- torch_max(x, dim = 2)
  expect_equal(arr(mx[[1]]), apply(m, 1, max))
  expect_equal(arr(mx[[2]]), apply(m, 1, which.max))
  mn <- torch_min(x, dim = 1)
  expect_equal(arr(mn[[1]]), apply(m, 2, min))
  expect_equal(arr(mn[[2]]), apply(m, 2, which.min))
  expect_error(torch_sum(x, dim = 0), "1-based")
})

test_that("softmax, transpose, flatten and reshape", {
  skip_if_no_torch()
  x <- torch_tensor(m)
  soft_rows <- exp(m) / rowSums(exp(m))
  expect_equal(arr(torch_softmax(x, dim = 2)), soft_rows, tolerance = 1e-6)
  expect_equal(arr(nnf_softmax(x, dim = 2)), soft_rows, tolerance = 1e-6)
  expect_equal(arr(nnf_log_softmax(x, dim = 1)), log(t(t(exp(m)) / colSums(exp(m)))),
               tolerance = 1e-5)
  expect_equal(arr(torch_transpose(x, 1, 2)), t(m))
  expect_equal(arr(torch_flatten(x)), as.vector(t(m)))
  expect_equal(arr(nnf_flatten(x)), as.vector(t(m)))
  expect_equal(arr(torch_reshape(x, c(3, -1))), matrix(as.vector(t(m)), 3, byrow = TRUE))
  a <- array(as.double(1:24), c(2, 3, 4))
  expect_equal(dim(torch_flatten(torch_tensor(a), start_dim = 2)), c(2L, 12L))
})

test_that("dropout follows training", {
  skip_if_no_torch()
  x <- torch_ones(1000)
  expect_equal(arr(nnf_dropout(x, 0.5, training = FALSE)), rep(1, 1000))
  y <- arr(nnf_dropout(x, 0.5, training = TRUE))
  expect_true(all(y %in% c(0, 2)))
  expect_true(any(y == 0))
})

test_that("add and sub of integer tensors take the default alpha, on both call paths", {
  skip_if_no_torch()
  on.exit(tracebridge:::set_c_call(TRUE))
  for (c_path in c(TRUE, FALSE)) {
    tracebridge:::set_c_call(c_path)
    x <- torch_tensor(c(1L, 2L, 3L))
    y <- torch_tensor(c(10L, 20L, 30L))
    expect_equal(arr(torch_add(x, y)), c(11, 22, 33))
    expect_equal(arr(torch_sub(x, y, alpha = 2L)), c(-19, -38, -57))
    expect_equal(arr(x$add(y)), c(11, 22, 33))
    z <- x$clone()
    z$add_(y)
    z$sub_(x)
    expect_equal(arr(z), c(10, 20, 30))
    expect_false(z$is_floating_point())
    expect_equal(arr(x$index_add(1, torch_tensor(c(1L, 3L)), torch_tensor(c(5L, 7L)))),
                 c(6, 2, 10))
    ones <- torch_ones(2, 3, dtype = torch_long())
    expect_equal(arr(torch_addmm(torch_zeros(2, 2, dtype = torch_long()), ones, ones$t())),
                 matrix(3, 2, 2))
    f <- torch_tensor(c(0.5, 1.5))
    expect_equal(arr(torch_add(f, f, alpha = 0.5)), c(0.75, 2.25))
  }
})
