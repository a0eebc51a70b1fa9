# nn_module(): lexical scoping, inherit/super, state and the module API; layers.

test_that("methods see the environment nn_module() was called in, not a global", {
  scale <- 100
  make <- function() {
    scale <- 3
    nn_module("Scaled",
      initialize = function() self$fc <- nn_linear(2, 1),
      forward = function(x) self$fc(x) * scale
    )
  }
  m <- make()()
  x <- torch_ones(1, 2)
  expect_equal(as_array(m(x)), 3 * as_array(m$fc(x)), tolerance = 1e-6)
})

test_that("inherit = reuses methods and super$ calls the parent's", {
  Base <- nn_module("Base",
    initialize = function(n) self$fc <- nn_linear(n, 1),
    forward = function(x) self$fc(x),
    describe = function() "base"
  )
  Child <- nn_module("Child", inherit = Base,
    initialize = function(n) {
      super$initialize(n)
      self$extra <- nn_parameter(torch_ones(1))
    },
    forward = function(x) super$forward(x) + self$extra,
    describe = function() paste("child of", super$describe())
  )
  ch <- Child(3)
  expect_s3_class(ch, c("Child", "Base", "nn_module"))
  expect_setequal(names(ch$parameters), c("fc.weight", "fc.bias", "extra"))
  x <- torch_ones(2, 3)
  expect_equal(as_array(ch(x)), as_array(ch$fc(x)) + 1, tolerance = 1e-6)
  expect_equal(ch$describe(), "child of base")
})

test_that("parameters, buffers, children, modules, apply, state_dict, to", {
  Net <- nn_module("Net",
    initialize = function() {
      self$fc <- nn_linear(2, 3)
      self$bn <- nn_batch_norm1d(3)
      self$register_buffer("steps", torch_zeros(1))
    },
    forward = function(x) self$bn(self$fc(x))
  )
  net <- Net()
  expect_equal(names(net$parameters), c("fc.weight", "fc.bias", "bn.weight", "bn.bias"))
  expect_true(all(c("steps", "bn.running_mean") %in% names(net$buffers)))
  expect_equal(names(net$children), c("fc", "bn"))
  expect_length(net$modules, 3)
  seen <- character()
  net$apply(function(m) seen <<- c(seen, class(m)[[1]]))
  expect_setequal(seen, c("Net", "nn_linear", "nn_batch_norm1d"))
  sd <- net$state_dict()
  expect_true(all(c("fc.weight", "bn.running_var", "steps") %in% names(sd)))
  other <- Net()
  other$load_state_dict(sd)
  expect_equal(as_array(other$fc$weight), as_array(net$fc$weight))
  expect_identical(net$to(device = "cpu"), net)
  expect_identical(net$cpu(), net)
  net$to(dtype = torch_double())
  expect_true(net$fc$weight$dtype == torch_double())
  expect_false(net$eval()$training)
  expect_true(net$train()$training)
})

test_that("containers: nn_sequential, nn_module_list, nn_module_dict", {
  seq <- nn_sequential(nn_linear(4, 8), nn_relu(), nn_linear(8, 2))
  expect_length(seq, 3)
  expect_s3_class(seq[[1]], "nn_linear")
  expect_equal(dim(seq(torch_ones(5, 4))), c(5L, 2L))
  Stack <- nn_module("Stack",
    initialize = function() self$layers <- nn_module_list(list(nn_linear(2, 2), nn_linear(2, 2))),
    forward = function(x) {
      for (i in seq_len(length(self$layers))) x <- self$layers[[i]](x)
      x
    }
  )
  s <- Stack()
  expect_equal(names(s$parameters), c("layers.0.weight", "layers.0.bias", "layers.1.weight",
                                      "layers.1.bias"))
  s$layers$append(nn_relu())
  expect_length(s$layers, 3)
  d <- nn_module_dict(list(a = nn_linear(1, 1), b = nn_relu()))
  expect_s3_class(d$a, "nn_linear")
  expect_error(seq[[4]], class = "index_error")
})

test_that("layers give the shapes mlverse documents", {
  x <- torch_randn(2, 3, 8, 8)
  expect_equal(dim(nn_conv2d(3, 4, 3, padding = 1)(x)), c(2L, 4L, 8L, 8L))
  expect_equal(dim(nn_conv_transpose2d(3, 2, 2, stride = 2)(x)), c(2L, 2L, 16L, 16L))
  expect_equal(dim(nn_max_pool2d(2)(x)), c(2L, 3L, 4L, 4L))
  expect_equal(dim(nn_adaptive_avg_pool2d(c(1, 1))(x)), c(2L, 3L, 1L, 1L))
  expect_equal(dim(nn_group_norm(1, 3)(x)), dim(x))
  expect_equal(dim(nn_conv1d(3, 5, 3)(torch_randn(2, 3, 10))), c(2L, 5L, 8L))
  expect_equal(dim(nn_conv3d(1, 2, 3)(torch_randn(1, 1, 5, 5, 5))), c(1L, 2L, 3L, 3L, 3L))
  lstm <- nn_lstm(input_size = 4, hidden_size = 6, batch_first = TRUE)
  out <- lstm(torch_randn(2, 5, 4))
  expect_equal(dim(out[[1]]), c(2L, 5L, 6L))
  expect_equal(dim(out[[2]][[1]]), c(1L, 2L, 6L))
  expect_equal(dim(nn_gru(4, 3)(torch_randn(5, 2, 4))[[1]]), c(5L, 2L, 3L))
  mha <- nn_multihead_attention(8, 2, batch_first = TRUE)
  q <- torch_randn(2, 5, 8)
  expect_equal(dim(mha(q, q, q)[[1]]), c(2L, 5L, 8L))
  enc <- nn_transformer_encoder_layer(d_model = 8, nhead = 2, dim_feedforward = 16,
                                      batch_first = TRUE)
  expect_equal(dim(enc(q)), c(2L, 5L, 8L))
  expect_equal(as_array(nn_softmax(2)(torch_zeros(1, 4))), matrix(0.25, 1, 4))
  expect_equal(dim(nn_flatten()(x)), c(2L, 192L))
})

test_that("R modules can be traced and the trace follows 1-based code", {
  Net <- nn_module("Net",
    initialize = function() self$emb <- nn_embedding(5, 2),
    forward = function(i) self$emb(i)$sum(dim = 2)
  )
  net <- Net()
  i <- torch_tensor(c(5L, 1L))
  tr <- jit_trace(net, i)
  expect_equal(as_array(tr(i)), rowSums(as_array(net$emb$weight)[c(5, 1), ]), tolerance = 1e-6)
})

test_that("a traced module's sub-module gives its parameters and buffers through `$`", {
  skip_if_no_torch()
  Net <- nn_module(
    initialize = function() {
      self$fc <- nn_linear(4, 3)
      self$bn <- nn_batch_norm1d(3)
    },
    forward = function(x) self$bn(self$fc(x))
  )
  net <- Net()
  net$eval()
  tm <- suppressWarnings(jit_trace(net, torch_randn(5, 4)))
  path <- tempfile(fileext = ".pt")
  on.exit(unlink(path))
  jit_save(tm, path)
  for (m in list(tm, jit_load(path))) {
    # a new batch norm's running statistics (mlverse: zeros and ones)
    expect_equal(as_array(m$bn$running_mean), c(0, 0, 0))
    expect_equal(as_array(m$bn$running_var), c(1, 1, 1))
    expect_equal(m$fc$weight$shape, c(3, 4))
    expect_equal(as_array(m$fc$weight), as_array(net$fc$weight))  # the same tensor
  }
})
