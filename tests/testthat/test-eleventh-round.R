# What the eleventh round of R snippets (benchmarks/r_trial_eleventh.R) found missing or
# unclear: functions mlverse exports, in their 1-based terms, checked against base R or
# against Python torch called with the 0-based arguments Python takes.

py_result <- function(py) as_array(tracebridge:::wrap_tensor(py))

test_that("torch_quantile and torch_nanquantile take 1-based dims and vectors of q", {
  x <- torch_tensor(rbind(c(1, 2, 3, 4), c(10, 20, 30, 40)))
  expect_equal(torch_quantile(torch_tensor(c(1, 2, 3, 4)), 0.5)$item(), 2.5)
  expect_equal(as_array(torch_quantile(x, 0.5, dim = 2)), c(2.5, 25))
  expect_equal(as_array(x$quantile(c(0.25, 0.75), dim = 2)),
               rbind(c(1.75, 17.5), c(3.25, 32.5)), tolerance = 1e-6)
  expect_equal(dim(torch_quantile(x, 0.5, dim = 1, keepdim = TRUE)), c(1L, 4L))
  expect_equal(torch_nanquantile(torch_tensor(c(1, NaN, 3)), 0.5)$item(), 2)
  expect_equal(torch_nansum(torch_tensor(c(1, NaN, 2)))$item(), 3)
  expect_equal(as_array(torch_nansum(torch_tensor(rbind(c(1, NaN), c(2, 3))), dim = 1)), c(3, 3))
})

test_that("torch_tile's dims are repetition counts, not dimensions", {
  x <- torch_tensor(matrix(1:6, 2))
  expect_equal(as_array(torch_tile(x, c(2, 1))), rbind(matrix(1:6, 2), matrix(1:6, 2)))
  expect_equal(dim(x$tile(c(1, 3))), c(2L, 9L))
})

test_that("torch_tensordot contracts 1-based dims, or the last d with the first d", {
  a <- torch_randn(2, 3, 4)
  b <- torch_randn(4, 3, 5)
  got <- torch_tensordot(a, b, dims = list(c(2, 3), c(2, 1)))
  want <- py_result(tracebridge:::py_torch()$tensordot(a$py, b$py,
                                                       dims = list(list(1L, 2L), list(1L, 0L))))
  expect_equal(as_array(got), want, tolerance = 1e-5)
  expect_equal(dim(torch_tensordot(a, torch_randn(3, 4, 6))), c(2L, 6L))
  expect_equal(dim(torch_tensordot(a, b, dims = list(-1, 1))), c(2L, 3L, 3L, 5L))
  expect_error(torch_tensordot(a, b, dims = list(c(1, 2), 1)), "same length")
  expect_error(torch_tensordot(a, b, dims = list(0, 1)), "1-based|0")
})

test_that("kron, cartesian_prod, block_diag, histc, trapz, logit, clip, isclose", {
  expect_equal(as_array(torch_kron(torch_eye(2), torch_ones(2, 2))),
               kronecker(diag(2), matrix(1, 2, 2)))
  cp <- torch_cartesian_prod(list(torch_tensor(1:2), torch_tensor(3:5)))
  expect_equal(as_array(cp), as.matrix(expand.grid(b = 3:5, a = 1:2)[, 2:1]),
               ignore_attr = TRUE)
  expect_equal(dim(torch_block_diag(list(torch_ones(2, 2), torch_ones(1, 3)))), c(3L, 5L))
  expect_equal(as_array(torch_histc(torch_tensor(c(0.5, 1.5, 1.7, 3.2)), bins = 4, min = 0,
                                    max = 4)), c(1, 2, 0, 1))
  expect_equal(torch_trapz(torch_tensor(c(1, 2, 3)))$item(), 4)
  expect_equal(torch_trapz(torch_tensor(c(1, 2, 3)), dx = 2)$item(), 8)
  expect_equal(torch_trapz(torch_tensor(c(1, 2, 3)), x = torch_tensor(c(0, 1, 3)))$item(), 6.5)
  expect_equal(as_array(torch_trapz(torch_tensor(rbind(c(1, 1), c(3, 3))), dim = 1)), c(2, 2))
  expect_equal(as_array(torch_logit(torch_tensor(c(0.5, 0.75)))), c(0, log(3)), tolerance = 1e-6)
  expect_equal(as_array(torch_clip(torch_tensor(c(-3, 0, 3)), -1, 1)), c(-1, 0, 1))
  expect_equal(as_array(torch_isclose(torch_tensor(c(1, 2)), torch_tensor(c(1 + 1e-9, 3)))),
               c(TRUE, FALSE))
})

test_that("take_along_dim, renorm, unfold and masked_scatter use 1-based dims and indices", {
  m <- torch_tensor(rbind(c(1, 2, 3), c(4, 5, 6)))
  idx <- torch_tensor(matrix(c(3L, 1L, 2L, 2L), 2))
  expect_equal(as_array(torch_take_along_dim(m, idx, dim = 2)), rbind(c(3, 2), c(4, 5)))
  expect_equal(as_array(m$take_along_dim(torch_tensor(c(6L, 1L)))), c(6, 1))
  x <- torch_tensor(rbind(c(3, 4), c(0.3, 0.4)))
  expect_equal(as_array(torch_renorm(x, p = 2, dim = 1, maxnorm = 1)),
               rbind(c(0.6, 0.8), c(0.3, 0.4)), tolerance = 1e-5)
  expect_equal(as_array(torch_renorm(x, p = 2, dim = 2, maxnorm = 1)),
               py_result(x$py$renorm(2, 1L, 1)), tolerance = 1e-6)
  w <- torch_tensor(array(as.numeric(1:12), c(2, 6)))$unfold(2, 3, 3)
  expect_equal(dim(w), c(2L, 2L, 3L))
  expect_equal(as_array(w[1, 2, ]), c(7, 9, 11))
  y <- torch_zeros(4)
  y$masked_scatter_(torch_tensor(c(TRUE, FALSE, TRUE, FALSE)), torch_tensor(c(1, 2, 3, 4)))
  expect_equal(as_array(y), c(1, 0, 2, 0))
})

test_that("nnf_pdist, nnf_local_response_norm, nnf_affine_grid and nnf_grid_sample", {
  p <- torch_tensor(rbind(c(0, 0), c(3, 4), c(0, 1)))
  expect_equal(as_array(nnf_pdist(p)), c(5, 1, sqrt(18)), tolerance = 1e-6)
  x <- torch_randn(1, 4, 3, 3)
  expect_equal(as_array(nnf_local_response_norm(x, size = 2)),
               py_result(tracebridge:::py_torch()$nn$functional$local_response_norm(x$py, 2L)),
               tolerance = 1e-6)
  img <- torch_randn(1, 1, 3, 3)
  theta <- torch_tensor(array(c(1, 0, 0, 1, 0, 0), c(1, 2, 3)))
  g <- nnf_affine_grid(theta, c(1, 1, 3, 3), align_corners = TRUE)
  expect_equal(dim(g), c(1L, 3L, 3L, 2L))
  expect_equal(as_array(nnf_grid_sample(img, g, align_corners = TRUE)), as_array(img),
               tolerance = 1e-5)
})

test_that("nn_init_orthogonal_, trunc_normal_, dirac_ and calculate_gain", {
  w <- torch_empty(3, 3)
  nn_init_orthogonal_(w)
  expect_equal(as_array(torch_mm(w, w$t())), diag(3), tolerance = 1e-5)
  v <- torch_empty(2000)
  nn_init_trunc_normal_(v, a = -1, b = 0.5)
  expect_true(all(as_array(v) >= -1 & as_array(v) <= 0.5))
  k <- torch_empty(2, 2, 3)
  nn_init_dirac_(k)
  expect_equal(as_array(k[1, 1, ]), c(0, 1, 0))
  expect_equal(nn_init_calculate_gain("relu"), sqrt(2))
  expect_equal(nn_init_calculate_gain("leaky_relu", 0.2), sqrt(2 / (1 + 0.2^2)))
})

test_that("lr_cosine_annealing follows the cosine from lr to eta_min", {
  opt <- optim_sgd(list(torch_ones(1, requires_grad = TRUE)), lr = 1)
  s <- lr_cosine_annealing(opt, T_max = 4, eta_min = 0.1)
  lrs <- numeric()
  for (i in 1:4) {
    opt$step()
    s$step()
    lrs <- c(lrs, opt$param_groups[[1]]$lr)
  }
  expect_equal(lrs, 0.1 + 0.9 * (1 + cos(pi * (1:4) / 4)) / 2, tolerance = 1e-10)
})

test_that("torch_finfo, torch_iinfo and the default dtype", {
  expect_equal(as.character(torch_get_default_dtype()), "float32")
  f <- torch_finfo(torch_float32())
  expect_equal(f$eps, 2^-23)
  expect_equal(f$bits, 32)
  expect_equal(torch_finfo(torch_float64())$max, .Machine$double.xmax)
  expect_equal(torch_iinfo(torch_int32())$max, .Machine$integer.max)
  expect_equal(torch_iinfo(torch_int64())$min, -2^63)
  expect_equal(torch_iinfo(torch_uint8())$max, 255)
  expect_error(torch_finfo(torch_int32()), "torch_iinfo")
  expect_error(torch_iinfo(torch_float32()), "torch_finfo")
  expect_error(torch_finfo("float32"), "dtype")
  torch_set_default_dtype(torch_float64())
  on.exit(torch_set_default_dtype(torch_float32()))
  expect_equal(as.character(torch_get_default_dtype()), "float64")
})

test_that("torch_scalar_tensor is 0-d; is_torch_tensor tells tensors apart", {
  x <- torch_scalar_tensor(3)
  expect_equal(dim(x), integer(0))
  expect_equal(x$item(), 3)
  expect_equal(as.character(torch_scalar_tensor(2L)$dtype), "int64")
  expect_equal(as.character(torch_scalar_tensor(2, dtype = torch_float64())$dtype), "float64")
  expect_true(torch_scalar_tensor(1.5, requires_grad = TRUE)$requires_grad)
  expect_equal(dim(torch_scalar_tensor(torch_tensor(c(7)))), integer(0))
  expect_error(torch_scalar_tensor(c(1, 2)), "one number")
  expect_error(torch_scalar_tensor(torch_ones(2)), "2 elements")
  expect_identical(c(is_torch_tensor(x), is_torch_tensor(3), is_torch_tensor(list(x))),
                   c(TRUE, FALSE, FALSE))
  y <- torch_ones(2)
  z <- torch_clone(y)
  z$add_(1)
  expect_equal(as_array(y), c(1, 1))
})

test_that("dataset_subset keeps the given items, 1-based, in order", {
  Squares <- dataset("sq",
    initialize = function(n) self$n <- n,
    .getitem = function(i) list(x = torch_tensor(i), y = torch_tensor(i^2)),
    .length = function() self$n)
  s <- dataset_subset(Squares(10), c(7, 2, 5))
  expect_equal(length(s), 3L)
  expect_equal(s[1]$y$item(), 49)
  b <- dataloader_next(dataloader_make_iter(dataloader(s, batch_size = 3)))
  expect_equal(as_array(b$x)[, 1], c(7, 2, 5))
  td <- dataset_subset(tensor_dataset(torch_tensor(matrix(1:8, 4))), c(4, 1))
  expect_equal(as_array(td[1][[1]]), c(4L, 8L))
  expect_equal(as_array(td[1:2][[1]]), rbind(c(4L, 8L), c(1L, 5L)))
  expect_error(dataset_subset(Squares(3), c(1, 4)), "1 to 3", class = "index_error")
  expect_error(dataset_subset(Squares(3), 1.5), "whole")
  expect_error(dataset_subset(list(), 1), "must be a dataset")
})

test_that("nn_module_list$insert() puts the module at a 1-based position", {
  l <- nn_module_list(list(nn_linear(1, 1), nn_relu()))
  l$insert(1, nn_tanh())
  l$insert(4, nn_identity())
  expect_equal(length(l), 4L)
  expect_match(class(l[[1]])[[1]], "tanh", ignore.case = TRUE)
  expect_match(class(l[[4]])[[1]], "identity", ignore.case = TRUE)
  # The Python list agrees, so parameters are named by the new positions.
  Net <- nn_module(initialize = function() self$layers <- l, forward = function(x) x)
  expect_equal(names(Net()$parameters), c("layers.1.weight", "layers.1.bias"))
  expect_error(l$insert(7, nn_relu()), "1 to 5", class = "index_error")
})

test_that("a tensor with a character operand and an out-of-range class say so in R terms", {
  expect_error(torch_ones(2) + "a", "character value", class = "type_error")
  expect_error("a" * torch_ones(2), "character value", class = "type_error")
  expect_error(nnf_cross_entropy(torch_randn(2, 3), torch_tensor(c(1L, 4L))),
               "Target 4 is out of bounds: classes are 1-based")
  # What works stays as it was.
  expect_equal(as_array(torch_tensor(c(1, 2)) + TRUE), c(2, 3))
})

test_that("quantile() on a tensor points at torch_quantile()", {
  expect_error(stats::quantile(torch_tensor(c(1, 2))), "torch_quantile")
})

test_that("c() of tensors is a list of them; c(a_list, tensor) still cats and stacks", {
  r <- c(torch_ones(1), b = torch_zeros(2), 3)
  expect_type(r, "list")
  expect_equal(length(r), 3L)
  expect_s3_class(r[[1]], "torch_tensor")
  expect_equal(names(r), c("", "b", ""))
  expect_equal(r[[3]], 3)
  # The mlverse habit of growing a list with c(): R splices each tensor's Python object
  # into the list; torch_cat() and torch_stack() read them back as the same tensors.
  preds <- list()
  for (i in 1:3) preds <- c(preds, torch_tensor(c(i, i)))
  expect_equal(as_array(torch_cat(preds)), c(1L, 1L, 2L, 2L, 3L, 3L))
  expect_equal(dim(torch_stack(preds)), c(3L, 2L))
  w <- torch_tensor(2, requires_grad = TRUE)
  losses <- NULL
  for (k in 3:4) losses <- c(losses, w * k)
  torch_stack(losses)$sum()$backward()
  expect_equal(as_array(w$grad), 7)
  expect_equal(as_array(torch_tensor(preds[[2]])), c(2L, 2L))
})

test_that("x$put_(), x$put() and x$index_copy_() take 1-based positions", {
  x <- torch_zeros(2, 2)
  x$put_(torch_tensor(c(2L, 4L)), torch_tensor(c(5, 6)))
  expect_equal(as_array(x), rbind(c(0, 5), c(0, 6)))
  x$put_(torch_tensor(c(2L, 2L)), torch_tensor(c(1, 1)), accumulate = TRUE)
  expect_equal(as_array(x)[1, 2], 7)
  expect_equal(as_array(torch_zeros(3)$put(torch_tensor(-1L), torch_tensor(1))), c(0, 0, 1))
  y <- torch_zeros(3, 2)
  y$index_copy_(1, torch_tensor(3L), torch_ones(1, 2))
  expect_equal(as_array(y), rbind(c(0, 0), c(0, 0), c(1, 1)))
  expect_error(torch_zeros(3)$put_(torch_tensor(0L), torch_tensor(1)), "1-based|0")
})

test_that("m$clone() says it is not there and how to copy the weights", {
  m <- nn_linear(1, 1)
  expect_error(m$clone(deep = TRUE), "state_dict", class = "not_implemented_error")
  best <- lapply(m$state_dict(), function(t) t$clone())
  w <- m$weight$item()
  with_no_grad(m$weight$fill_(w + 1))
  m$load_state_dict(best)
  expect_equal(m$weight$item(), w)
})

test_that("max-pooling modules with return_indices = TRUE give 1-based indices", {
  x <- torch_tensor(array(c(1, 5, 7, 2), c(1, 1, 4)))
  r <- nn_max_pool1d(2, return_indices = TRUE)(x)
  expect_equal(as_array(r[[1]])[1, 1, ], c(5, 7))
  expect_equal(as_array(r[[2]])[1, 1, ], c(2, 3))
  x2 <- torch_randn(2, 1, 4, 4)
  expect_equal(as_array(nn_max_pool2d(2, return_indices = TRUE)(x2)[[2]]),
               as_array(nnf_max_pool2d(x2, 2, return_indices = TRUE)[[2]]))
  expect_equal(as_array(nn_adaptive_max_pool2d(c(1, 1), return_indices = TRUE)(x2)[[2]]),
               as_array(nnf_adaptive_max_pool2d(x2, c(1, 1), return_indices = TRUE)[[2]]))
  expect_equal(as_array(nn_adaptive_max_pool2d(c(1, 1), return_indices = TRUE)(x2)[[2]])[, 1, 1, 1],
               vapply(1:2, function(i) which.max(t(as_array(x2)[i, 1, , ])), 0L))
  # Without it, the module still returns the values alone; traced, the indices stay 1-based.
  expect_equal(dim(nn_max_pool2d(2)(x2)), c(2L, 1L, 2L, 2L))
  Net <- nn_module(initialize = function() self$p <- nn_max_pool1d(2, return_indices = TRUE),
                   forward = function(x) self$p(x)[[2]])
  tr <- jit_trace(Net(), torch_randn(1, 1, 4))
  y <- torch_tensor(array(c(9, 1, 1, 9, 5, 6), c(1, 1, 6)))
  expect_equal(as_array(tr(y))[1, 1, ], c(1, 4, 6))
})

test_that("torch_cat() and torch_stack() of one tensor ask for a list of tensors", {
  expect_error(torch_cat(torch_ones(2)), "must be a list of tensors, such as list\\(x, y\\)")
  expect_error(torch_stack(torch_ones(2)), "must be a list of tensors")
  expect_equal(dim(torch_cat(list(torch_ones(2)))), 2L)
})
