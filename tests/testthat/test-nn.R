Net <- nn_module("Net",
  initialize = function(n_in, n_hidden) {
    self$fc1 <- nn_linear(n_in, n_hidden)
    self$fc2 <- nn_linear(n_hidden, 1)
    self$scale <- nn_parameter(torch_ones(1))
    self$offset <- nn_buffer(torch_zeros(1))
  },
  forward = function(x) {
    h <- torch_relu(self$fc1(x))
    self$fc2(h) * self$scale + self$offset
  }
)

test_that("nn_module registers children, parameters and buffers under their R names", {
  skip_if_no_torch()
  net <- Net(3, 4)
  expect_s3_class(net, "Net")
  expect_s3_class(net, "nn_module")
  expect_equal(names(net$parameters),
               c("scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"))
  expect_equal(names(net$buffers), "offset")
  expect_equal(dim(net$fc1$weight), c(4L, 3L))
  expect_output(print(net), "An `nn_module` containing 22 parameters")
})

test_that("an R module computes what base R computes", {
  skip_if_no_torch()
  torch_manual_seed(1)
  net <- Net(3, 4)
  x <- matrix(c(0.5, -1, 2, 1, 0, -0.5), 2, 3)
  w1 <- arr(net$fc1$weight)
  b1 <- arr(net$fc1$bias)
  w2 <- arr(net$fc2$weight)
  b2 <- arr(net$fc2$bias)
  h <- pmax(x %*% t(w1) + matrix(b1, 2, 4, byrow = TRUE), 0)
  expected <- h %*% t(w2) + b2
  expect_equal(arr(net(torch_tensor(x))), expected, tolerance = 1e-5)
  expect_equal(arr(net$forward(torch_tensor(x))), expected, tolerance = 1e-5)
})

test_that("$train() and $eval() set the mode of the module and its children", {
  skip_if_no_torch()
  net <- Net(3, 4)
  expect_true(net$training)
  net$eval()
  expect_false(net$training)
  expect_false(net$fc1$training)
  net$train()
  expect_true(net$fc1$training)
})

test_that("built-in layers match base R or their definition", {
  skip_if_no_torch()
  torch_manual_seed(2)
  x <- torch_randn(4, 3)
  lin <- nn_linear(3, 2)
  expect_equal(arr(lin(x)), arr(x) %*% t(arr(lin$weight)) +
                 matrix(arr(lin$bias), 4, 2, byrow = TRUE), tolerance = 1e-5)
  expect_equal(arr(nn_relu()(x)), pmax(arr(x), 0))

  drop <- nn_dropout(0.5)
  drop$eval()
  expect_equal(arr(drop(x)), arr(x))

  bn <- nn_batch_norm1d(3)
  xa <- arr(x)
  centred <- sweep(xa, 2, colMeans(xa))
  biased_var <- colMeans(centred^2)
  expect_equal(arr(bn(x)), sweep(centred, 2, sqrt(biased_var + 1e-5), "/"), tolerance = 1e-4)
  expect_equal(arr(bn$running_mean), 0.1 * colMeans(xa), tolerance = 1e-5)

  ln <- nn_layer_norm(3)
  rc <- xa - rowMeans(xa)
  expect_equal(arr(ln(x)), rc / sqrt(rowMeans(rc^2) + 1e-5), tolerance = 1e-4)

  emb <- nn_embedding(5, 2)
  w <- arr(emb$weight)
  expect_equal(arr(emb(torch_tensor(c(1L, 5L, 3L)))), w[c(1, 5, 3), ])

  c1 <- nn_conv1d(2, 3, kernel_size = 2)
  expect_equal(dim(c1(torch_randn(1, 2, 6))), c(1L, 3L, 5L))
  expect_equal(dim(c1$weight), c(3L, 2L, 2L))
  c2 <- nn_conv2d(1, 4, kernel_size = 3, padding = 1)
  expect_equal(dim(c2(torch_randn(2, 1, 5, 5))), c(2L, 4L, 5L, 5L))
  bn2 <- nn_batch_norm2d(4)
  expect_equal(dim(bn2(torch_randn(2, 4, 3, 3))), c(2L, 4L, 3L, 3L))

  # A 1x1 convolution is a per-pixel linear map.
  c3 <- nn_conv2d(2, 1, kernel_size = 1, bias = FALSE)
  img <- torch_randn(1, 2, 2, 2)
  wk <- arr(c3$weight)
  ia <- arr(img)
  expect_equal(arr(c3(img))[1, 1, , ], wk[1, 1, 1, 1] * ia[1, 1, , ] + wk[1, 2, 1, 1] * ia[1, 2, , ],
               tolerance = 1e-5)
})

test_that("nn_sequential chains modules, R ones included", {
  skip_if_no_torch()
  seq_net <- nn_sequential(nn_linear(3, 4), nn_relu(), Net(4, 2))
  expect_equal(length(seq_net), 3L)
  expect_s3_class(seq_net[[3]], "Net")
  expect_true("2.fc1.weight" %in% names(seq_net$parameters))
  x <- torch_randn(5, 3)
  expect_equal(arr(seq_net(x)), arr(seq_net[[3]](seq_net[[2]](seq_net[[1]](x)))))
  expect_error(nn_sequential(1), "nn_module")
})

test_that("gradient clipping, nn_upsample, nn_softmax2d and padding = \"same\"", {
  m <- nn_linear(2, 1, bias = FALSE)
  with_no_grad(m$weight$fill_(0))
  m(torch_tensor(rbind(c(3, 4))))$sum()$backward()
  # The gradient (3, 4) has norm 5: clipped to norm 1 it is (0.6, 0.8).
  expect_equal(nn_utils_clip_grad_norm_(m$parameters, max_norm = 1)$item(), 5)
  expect_equal(as_array(m$weight$grad), matrix(c(0.6, 0.8), 1), tolerance = 1e-6)
  nn_utils_clip_grad_value_(m$parameters, clip_value = 0.7)
  expect_equal(as_array(m$weight$grad), matrix(c(0.6, 0.7), 1), tolerance = 1e-6)
  up <- nn_upsample(scale_factor = 2, mode = "nearest")(torch_tensor(array(c(1, 2, 3, 4), c(1, 1, 2, 2))))
  expect_equal(as_array(up)[1, 1, , ], matrix(c(1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4), 4))
  expect_equal(as_array(nn_softmax2d()(torch_zeros(1, 2, 1, 1)))[1, , 1, 1], c(0.5, 0.5))
  expect_equal(dim(nn_conv1d(1, 1, 3, padding = "same")(torch_ones(1, 1, 5))), c(1L, 1L, 5L))
})

test_that("model[i] of an nn_sequential is a smaller nn_sequential sharing the modules", {
  q <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  head2 <- q[1:2]
  expect_s3_class(head2, "nn_sequential")
  expect_length(head2, 2)
  x <- torch_randn(4, 2)
  expect_equal(as_array(head2(x)), as_array(q[[2]](q[[1]](x))))
  # As for R lists, a negative position leaves that module out.
  expect_s3_class(q[-1][[1]], "nn_relu")
  expect_equal(as_array(q[-1][[2]]$weight), as_array(q[[3]]$weight))
  expect_equal(as_array(q(x)), as_array(q[[3]](head2(x))))
  expect_error(q[5], class = "index_error")
})
