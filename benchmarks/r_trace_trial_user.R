# Section "user" of benchmarks/r_trace_trial.R (sourced by its child, with its helpers
# case(), custom(), T(), module() and mod()): what an R user of mlverse torch writes in and
# around a trace, none of it in the core section: modules in the documented patterns
# (nn_parameter, nn_buffer, containers), data loaders, optimizers and schedulers, saving,
# nnf_* and linalg_* functions with their arguments, index ops, dtypes, NA/NaN/Inf, empty
# tensors, assignment, printing, conversions back to R, autograd, seeds and devices.
# Snippets made with case() are traced and compared with the same code run eagerly;
# custom() ones compare a result with what base R (or mlverse's documentation) says.

ix <- function(...) torch_tensor(c(...)) # an int64 tensor of 1-based indices: ix(1L, 3L)

# ---- nn_module in the documented patterns -------------------------------------------------
case("u: nn_parameter made from torch_randn, used with torch_matmul", mod(function() {
  self$w <- nn_parameter(torch_randn(3, 2))
  self$b <- nn_parameter(torch_zeros(2))
}, function(x) torch_matmul(x, self$w) + self$b), list(T(4, 3)), list(T(6, 3)))
case("u: nn_buffer used and not a parameter", mod(function() {
  self$fc <- nn_linear(2, 2)
  self$mu <- nn_buffer(torch_tensor(c(0.5, -0.5)))
}, function(x) self$fc(x - self$mu)), list(T(3, 2)), list(T(5, 2)))
case("u: nn_sequential with dropout in eval", mod(function() {
  self$net <- nn_sequential(nn_linear(4, 8), nn_relu(), nn_dropout(0.5), nn_linear(8, 3))
}, function(x) self$net(x)), list(T(2, 4)), list(T(7, 4)))
case("u: nn_sequential called directly (no wrapper)", module(function() {
  m <- nn_sequential(nn_linear(3, 5), nn_tanh(), nn_linear(5, 1))
  m$eval()
  m
}), list(T(2, 3)), list(T(6, 3)))
case("u: nn_module_list built with lapply", mod(function() {
  self$layers <- nn_module_list(lapply(1:3, function(i) nn_linear(4, 4)))
}, function(x) {
  for (i in seq_along(self$layers)) x <- torch_relu(self$layers[[i]](x))
  x
}), list(T(2, 4)), list(T(5, 4)))
case("u: nn_module_list length() in forward", mod(function() {
  self$layers <- nn_module_list(list(nn_linear(2, 2), nn_linear(2, 2)))
}, function(x) x * length(self$layers)), list(T(3, 2)), list(T(4, 2)))
case("u: nn_module_list $append() in initialize", mod(function() {
  self$layers <- nn_module_list()
  self$layers$append(nn_linear(3, 3))
  self$layers$append(nn_linear(3, 1))
}, function(x) self$layers[[2]](self$layers[[1]](x))), list(T(2, 3)), list(T(5, 3)))
case("u: nn_module_dict by $name and [[\"name\"]]", mod(function() {
  self$heads <- nn_module_dict(list(a = nn_linear(3, 2), b = nn_linear(3, 4)))
}, function(x) torch_cat(list(self$heads$a(x), self$heads[["b"]](x)), dim = 2)),
list(T(2, 3)), list(T(5, 3)))
case("u: a submodule from another nn_module generator", module(function() {
  Block <- nn_module(
    initialize = function(d) {
      self$fc <- nn_linear(d, d)
      self$ln <- nn_layer_norm(d)
    },
    forward = function(x) x + self$fc(self$ln(x)))
  Net <- nn_module(
    initialize = function() self$blocks <- nn_sequential(Block(4), Block(4)),
    forward = function(x) self$blocks(x))
  Net()
}), list(T(2, 4)), list(T(5, 4)), tol = 1e-4)
case("u: nn_module with a class name and a forward default argument", module(function() {
  Net <- nn_module("Scaler",
    initialize = function() self$fc <- nn_linear(2, 2),
    forward = function(x, scale = 3) self$fc(x) * scale)
  Net()
}), list(T(3, 2)), list(T(5, 2)))
case("u: forward with self$training in eval mode", mod(function() {
  self$fc <- nn_linear(2, 2)
}, function(x) if (self$training) self$fc(x) * 0 else self$fc(x)), list(T(3, 2)),
list(T(5, 2)))
case("u: nnf_linear with the submodule's weight and bias", mod(function() {
  self$fc <- nn_linear(3, 2)
}, function(x) nnf_linear(x, self$fc$weight, self$fc$bias)), list(T(4, 3)), list(T(6, 3)))
case("u: x with a transposed weight self$fc$weight$t()", mod(function() {
  self$fc <- nn_linear(3, 2)
}, function(x) torch_matmul(x, self$fc$weight$t())), list(T(4, 3)), list(T(6, 3)))
case("u: tied weights (embedding used as output layer)", mod(function() {
  self$emb <- nn_embedding(6, 3)
}, function(i) torch_matmul(self$emb(i), self$emb$weight$t())),
list(ix(1L, 6L)), list(ix(2L, 3L, 4L)))
case("u: a module returning list(logits, probs)", mod(function() {
  self$fc <- nn_linear(3, 4)
}, function(x) {
  logits <- self$fc(x)
  list(logits, nnf_softmax(logits, dim = 2))
}), list(T(2, 3)), list(T(5, 3)))
case("u: a module storing an R vector attribute", mod(function() {
  self$fc <- nn_linear(2, 2)
  self$weights <- c(0.25, 0.75)
}, function(x) self$fc(x) * torch_tensor(self$weights)), list(T(3, 2)), list(T(5, 2)))
case("u: private helper stored as a function attribute", mod(function() {
  self$fc <- nn_linear(2, 2)
  self$act <- function(t) torch_sigmoid(t) * t
}, function(x) self$act(self$fc(x))), list(T(3, 2)), list(T(5, 2)))
case("u: CNN block conv2d, batch_norm2d, relu, max_pool2d, flatten, linear", mod(function() {
  self$features <- nn_sequential(nn_conv2d(1, 4, 3, padding = 1), nn_batch_norm2d(4), nn_relu(),
                                 nn_max_pool2d(2))
  self$head <- nn_linear(4 * 4 * 4, 3)
}, function(x) self$head(torch_flatten(self$features(x), start_dim = 2))),
list(T(2, 1, 8, 8)), list(T(5, 1, 8, 8)), tol = 1e-4)
case("u: text classifier embedding + conv1d + adaptive max pool", mod(function() {
  self$emb <- nn_embedding(20, 4)
  self$conv <- nn_conv1d(4, 6, kernel_size = 3)
  self$fc <- nn_linear(6, 2)
}, function(tokens) {
  h <- self$emb(tokens)$permute(c(1, 3, 2))
  h <- nnf_adaptive_max_pool1d(torch_relu(self$conv(h)), 1)$squeeze(3)
  self$fc(h)
}), list(torch_tensor(matrix(c(1L, 5L, 9L, 20L, 3L, 2L, 7L, 8L, 11L, 4L), 2))),
list(torch_tensor(matrix(sample(1:20, 21, TRUE), 3))), tol = 1e-4)
case("u: bidirectional nn_lstm last step", mod(function() {
  self$rnn <- nn_lstm(3, 4, batch_first = TRUE, bidirectional = TRUE)
}, function(x) self$rnn(x)[[1]][, -1, ]), list(T(2, 5, 3)), list(T(3, 8, 3)), tol = 1e-4)
case("u: nn_lstm (h, c) state returned", mod(function() {
  self$rnn <- nn_lstm(3, 4, num_layers = 2)
}, function(x) {
  out <- self$rnn(x)
  out[[2]][[1]] + out[[2]][[2]]
}), list(T(5, 2, 3)), list(T(7, 3, 3)), tol = 1e-4)
case("u: nn_rnn tanh", mod(function() self$rnn <- nn_rnn(3, 4, batch_first = TRUE),
  function(x) self$rnn(x)[[1]]), list(T(2, 5, 3)), list(T(3, 7, 3)), tol = 1e-4)
case("u: nn_unflatten + nn_upsample", mod(function() {
  self$un <- nn_unflatten(2, c(1, 2, 2))
  self$up <- nn_upsample(scale_factor = 2, mode = "nearest")
}, function(x) self$up(self$un(x))), list(T(3, 4)), list(T(5, 4)))
case("u: nn_transformer_encoder with 2 layers", mod(function() {
  layer <- nn_transformer_encoder_layer(d_model = 4, nhead = 2, dim_feedforward = 8,
                                        batch_first = TRUE)
  self$enc <- nn_transformer_encoder(layer, num_layers = 2)
}, function(x) self$enc(x)), list(T(2, 3, 4)), list(T(3, 6, 4)), tol = 1e-4)
case("u: multihead attention with a key padding mask", mod(function() {
  self$att <- nn_multihead_attention(4, 2, batch_first = TRUE)
}, function(x, pad) self$att(x, x, x, key_padding_mask = pad)[[1]]),
list(T(2, 3, 4), torch_tensor(matrix(c(FALSE, FALSE, FALSE, FALSE, TRUE, TRUE), 2))),
list(T(3, 5, 4), torch_tensor(matrix(rep(c(FALSE, TRUE), c(12, 3)), 3))), tol = 1e-4)
case("u: nn_bilinear", mod(function() self$b <- nn_bilinear(3, 2, 4),
  function(x, y) self$b(x, y)), list(T(2, 3), T(2, 2)), list(T(5, 3), T(5, 2)), tol = 1e-4)
case("u: nn_embedding_bag mean", mod(function() self$e <- nn_embedding_bag(10, 3, mode = "mean"),
  function(i) self$e(i)), list(torch_tensor(matrix(c(1L, 2L, 3L, 10L), 2))),
  list(torch_tensor(matrix(c(1L, 2L, 3L, 4L, 5L, 6L), 3))))
case("u: nn_instance_norm1d and nn_softplus", mod(function() {
  self$n <- nn_instance_norm1d(3)
  self$a <- nn_softplus()
}, function(x) self$a(self$n(x))), list(T(2, 3, 5)), list(T(4, 3, 7)), tol = 1e-4)
case("u: nn_hardtanh(-2, 2) / nn_relu6 / nn_selu / nn_silu", mod(function() {
  self$a <- nn_hardtanh(-2, 2)
  self$b <- nn_relu6()
  self$c <- nn_selu()
  self$d <- nn_silu()
}, function(x) self$a(x * 3) + self$b(x * 4) + self$c(x) + self$d(x)), list(T(4)), list(T(9)))
case("u: nn_log_softmax(dim = 2) + nn_nll_loss", mod(function() {
  self$ls <- nn_log_softmax(dim = 2)
  self$loss <- nn_nll_loss()
}, function(x, y) self$loss(self$ls(x), y)), list(T(3, 4), ix(1L, 4L, 2L)),
list(T(5, 4), ix(4L, 4L, 1L, 2L, 3L)))
case("u: nn_cross_entropy_loss module with class weights", mod(function() {
  self$loss <- nn_cross_entropy_loss(weight = torch_tensor(c(1, 2, 3)))
}, function(x, y) self$loss(x, y)), list(T(4, 3), ix(1L, 2L, 3L, 3L)),
list(T(6, 3), ix(3L, 3L, 1L, 2L, 2L, 1L)))
case("u: nn_bce_with_logits_loss(pos_weight =)", mod(function() {
  self$loss <- nn_bce_with_logits_loss(pos_weight = torch_tensor(c(2, 1)))
}, function(x, y) self$loss(x, y)), list(T(3, 2), torch_ones(3, 2)),
list(T(5, 2), torch_zeros(5, 2)))
case("u: nn_mse_loss(reduction = \"none\")", mod(function() {
  self$loss <- nn_mse_loss(reduction = "none")
}, function(a, b) self$loss(a, b)), list(T(3), T(3)), list(T(5), T(5)))
case("u: nn_huber_loss / nn_l1_loss / nn_smooth_l1_loss", mod(function() {
  self$h <- nn_huber_loss(delta = 0.5)
  self$l <- nn_l1_loss()
  self$s <- nn_smooth_l1_loss()
}, function(a, b) self$h(a, b) + self$l(a, b) + self$s(a, b)), list(T(3), T(3)), list(T(6), T(6)))
case("u: nn_kl_div_loss(reduction = \"batchmean\")", mod(function() {
  self$loss <- nn_kl_div_loss(reduction = "batchmean")
}, function(a, b) self$loss(nnf_log_softmax(a, dim = 2), nnf_softmax(b, dim = 2))),
list(T(3, 4), T(3, 4)), list(T(5, 4), T(5, 4)))
custom("u: traced module parameters are the module's (same names and count)", function() {
  m <- nn_sequential(nn_linear(3, 4), nn_relu(), nn_linear(4, 2))
  tm <- jit_trace(m, torch_ones(2, 3))
  list(sort(names(tm$parameters)), sort(names(m$parameters)))
})
custom("u: named parameters are 0.weight, 0.bias, 2.weight, 2.bias", function() {
  m <- nn_sequential(nn_linear(3, 4), nn_relu(), nn_linear(4, 2))
  list(names(m$parameters), c("0.weight", "0.bias", "2.weight", "2.bias"))
})
custom("u: state_dict() holds parameters and buffers, load_state_dict() copies them", function() {
  Net <- nn_module(
    initialize = function() {
      self$fc <- nn_linear(2, 2)
      self$bn <- nn_batch_norm1d(2)
    },
    forward = function(x) self$bn(self$fc(x)))
  a <- Net()
  b <- Net()
  b$load_state_dict(a$state_dict())
  a$eval()
  b$eval()
  x <- torch_randn(3, 2)
  list(list(sort(names(a$state_dict())), b(x)),
       list(sort(c("fc.weight", "fc.bias", "bn.weight", "bn.bias", "bn.running_mean",
                   "bn.running_var", "bn.num_batches_tracked")), a(x)))
})
custom("u: a traced module's state_dict() loads into a fresh R module", function() {
  m <- nn_linear(3, 2)
  tm <- jit_trace(m, torch_ones(1, 3))
  fresh <- nn_linear(3, 2)
  fresh$load_state_dict(tm$state_dict())
  x <- torch_randn(4, 3)
  list(fresh(x), m(x))
})
custom("u: m$zero_grad() clears gradients", function() {
  m <- nn_linear(2, 1)
  m(torch_ones(3, 2))$sum()$backward()
  m$zero_grad()
  g <- m$weight$grad
  list(if (is.null(g) || inherits(g, "torch_tensor") && !g$numel()) "none" else
    as.numeric(g$abs()$sum()), if (is.null(g)) "none" else 0)
})
custom("u: m$to(dtype = torch_double()) then trace with a double input", function() {
  m <- nn_linear(2, 2)
  m$to(dtype = torch_double())
  x <- torch_randn(3, 2, dtype = torch_double())
  tm <- jit_trace(m, x)
  y <- torch_randn(5, 2, dtype = torch_double())
  list(tm(y), m(y))
})
custom("u: m$apply() with an init function", function() {
  m <- nn_sequential(nn_linear(2, 3), nn_linear(3, 1))
  m$apply(function(layer) {
    if (inherits(layer, "nn_linear")) nn_init_constant_(layer$weight, 0.5)
  })
  list(as.numeric(m[[2]]$weight), rep(0.5, 3))
})
custom("u: length(m$parameters) of a two-layer MLP", function() {
  m <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  list(length(m$parameters), 4L)
})
custom("u: m$children and m$modules", function() {
  m <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  list(list(length(m$children), length(m$modules)), list(3L, 4L))
})
custom("u: freezing a layer with requires_grad_(FALSE)", function() {
  m <- nn_sequential(nn_linear(2, 3), nn_linear(3, 1))
  m[[1]]$weight$requires_grad_(FALSE)
  m(torch_ones(2, 2))$sum()$backward()
  list(list(is.null(m[[1]]$weight$grad), m[[1]]$weight$requires_grad), list(TRUE, FALSE))
})

# ---- data: dataset(), dataloader(), enumerate(), iterators --------------------------------
toy_ds <- dataset(
  name = "toy",
  initialize = function(n) {
    self$x <- torch_tensor(matrix(seq_len(n * 2), n, 2, byrow = TRUE) * 1.0)
    self$y <- torch_tensor(seq_len(n))
  },
  .getitem = function(i) list(x = self$x[i, ], y = self$y[i]),
  .length = function() self$x$size(1)
)
custom("u: dataset() length() and [i]", function() {
  ds <- toy_ds(5)
  item <- ds[2]
  list(list(length(ds), as.numeric(item$x), as.integer(item$y)), list(5L, c(3, 4), 2L))
})
custom("u: dataloader(batch_size = 2) batches the items", function() {
  dl <- dataloader(toy_ds(5), batch_size = 2)
  sizes <- integer()
  ys <- integer()
  it <- dataloader_make_iter(dl)
  while (!is.null(b <- dataloader_next(it))) {
    sizes <- c(sizes, b$x$size(1))
    ys <- c(ys, as.integer(b$y))
  }
  list(list(length(dl), sizes, ys), list(3L, c(2L, 2L, 1L), 1:5))
})
custom("u: dataloader(drop_last = TRUE)", function() {
  dl <- dataloader(toy_ds(5), batch_size = 2, drop_last = TRUE)
  n <- 0L
  for (b in enumerate(dl)) n <- n + 1L
  list(c(length(dl), n), c(2L, 2L))
})
custom("u: enumerate(dl) gives the batches in order", function() {
  dl <- dataloader(toy_ds(4), batch_size = 2)
  out <- list()
  for (b in enumerate(dl)) out[[length(out) + 1L]] <- as.numeric(b$x[, 1])
  list(out, list(c(1, 3), c(5, 7)))
})
custom("u: dataloader_next() with a completed value at the end", function() {
  it <- dataloader_make_iter(dataloader(toy_ds(2), batch_size = 2))
  first <- dataloader_next(it)
  end <- dataloader_next(it, completed = "done")
  list(list(first$x$size(1), end), list(2L, "done"))
})
custom("u: dataloader(shuffle = TRUE) with a seed visits every item once", function() {
  torch_manual_seed(3)
  dl <- dataloader(toy_ds(6), batch_size = 4, shuffle = TRUE)
  ys <- integer()
  for (b in enumerate(dl)) ys <- c(ys, as.integer(b$y))
  list(sort(ys), 1:6)
})
custom("u: tensor_dataset() and a dataloader over it", function() {
  ds <- tensor_dataset(torch_tensor(matrix(1:6, 3) * 1.0), torch_tensor(1:3))
  dl <- dataloader(ds, batch_size = 3)
  b <- dataloader_next(dataloader_make_iter(dl))
  list(list(length(ds), as_array(b[[1]]), as.integer(b[[2]])),
       list(3L, matrix(1:6, 3) * 1.0, 1:3))
})
custom("u: a dataset returning an unnamed list", function() {
  ds <- dataset(
    initialize = function() self$n <- 3,
    .getitem = function(i) list(torch_tensor(i * 1.0), torch_tensor(i * 10L)),
    .length = function() self$n)()
  b <- dataloader_next(dataloader_make_iter(dataloader(ds, batch_size = 3)))
  list(list(as.numeric(b[[1]]), as.integer(b[[2]])), list(c(1, 2, 3), c(10L, 20L, 30L)))
})
custom("u: a traced model over the batches of a dataloader", function() {
  m <- nn_linear(2, 1)
  dl <- dataloader(toy_ds(5), batch_size = 2)
  tm <- jit_trace(m, torch_ones(2, 2))
  got <- list()
  want <- list()
  for (b in enumerate(dl)) {
    got[[length(got) + 1L]] <- tm(b$x)
    want[[length(want) + 1L]] <- m(b$x)
  }
  list(got, want)
})
custom("u: dl$.iter() and $.next() as in mlverse's low-level loop", function() {
  dl <- dataloader(toy_ds(3), batch_size = 3)
  it <- dl$.iter()
  b <- it$.next()
  list(as.integer(b$y), 1:3)
})

# ---- optimizers, schedulers, training loops ---------------------------------------------------
fit_steps <- function(model, opt, x, y, steps) {
  losses <- numeric()
  for (i in seq_len(steps)) {
    opt$zero_grad()
    loss <- nnf_mse_loss(model(x), y)
    loss$backward()
    opt$step()
    losses <- c(losses, loss$item())
  }
  losses
}
custom("u: optim_adam lowers the loss of a linear fit", function() {
  torch_manual_seed(1)
  x <- torch_randn(32, 3)
  y <- x$sum(dim = 2, keepdim = TRUE)
  m <- nn_linear(3, 1)
  losses <- fit_steps(m, optim_adam(m$parameters, lr = 0.1), x, y, 30)
  list(losses[30] < losses[1] / 10, TRUE)
})
custom("u: optim_sgd(momentum = 0.9) on a traced module equals the eager run", function() {
  torch_manual_seed(2)
  x <- torch_randn(16, 3)
  y <- torch_randn(16, 1)
  a <- nn_linear(3, 1)
  b <- nn_linear(3, 1)
  b$load_state_dict(a$state_dict())
  ta <- jit_trace(a, x)
  la <- fit_steps(ta, optim_sgd(ta$parameters, lr = 0.05, momentum = 0.9), x, y, 5)
  lb <- fit_steps(b, optim_sgd(b$parameters, lr = 0.05, momentum = 0.9), x, y, 5)
  list(list(la, a$weight), list(lb, b$weight))
})
custom("u: lr_step halves the learning rate every 2 epochs", function() {
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 1)
  sched <- lr_step(opt, step_size = 2, gamma = 0.5)
  lrs <- numeric()
  for (epoch in 1:5) {
    opt$step()
    sched$step()
    lrs <- c(lrs, opt$param_groups[[1]]$lr)
  }
  list(lrs, c(1, 0.5, 0.5, 0.25, 0.25))
})
custom("u: setting opt$param_groups[[1]]$lr by hand", function() {
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 1)
  opt$param_groups[[1]]$lr <- 0.01
  list(opt$param_groups[[1]]$lr, 0.01)
})
custom("u: optim_adamw(weight_decay) and optim_rmsprop step", function() {
  torch_manual_seed(5)
  x <- torch_randn(8, 2)
  y <- torch_randn(8, 1)
  m1 <- nn_linear(2, 1)
  m2 <- nn_linear(2, 1)
  l1 <- fit_steps(m1, optim_adamw(m1$parameters, lr = 0.05, weight_decay = 0.1), x, y, 10)
  l2 <- fit_steps(m2, optim_rmsprop(m2$parameters, lr = 0.01), x, y, 10)
  list(c(l1[10] < l1[1], l2[10] < l2[1]), c(TRUE, TRUE))
})
custom("u: nn_utils_clip_grad_norm_ returns the total norm and clips", function() {
  m <- nn_linear(2, 1, bias = FALSE)
  with_no_grad(m$weight$copy_(torch_tensor(matrix(c(3, 4), 1))))
  (m(torch_ones(1, 2)) * 10)$sum()$backward()
  total <- nn_utils_clip_grad_norm_(m$parameters, max_norm = 1)
  list(list(as.numeric(total), sqrt(sum(as.numeric(m$weight$grad)^2))),
       list(sqrt(200), 1))
}, tol = 1e-4)
custom("u: a full epoch loop over a dataloader with a traced model and Adam", function() {
  torch_manual_seed(7)
  ds <- tensor_dataset(torch_randn(20, 3), torch_randn(20, 1))
  dl <- dataloader(ds, batch_size = 5)
  m <- nn_sequential(nn_linear(3, 8), nn_relu(), nn_linear(8, 1))
  tm <- jit_trace(m, torch_ones(5, 3))
  opt <- optim_adam(tm$parameters, lr = 0.01)
  epoch_loss <- function() {
    total <- 0
    for (b in enumerate(dl)) {
      opt$zero_grad()
      loss <- nnf_mse_loss(tm(b[[1]]), b[[2]])
      loss$backward()
      opt$step()
      total <- total + loss$item()
    }
    total
  }
  first <- epoch_loss()
  for (e in 1:10) last <- epoch_loss()
  list(last < first, TRUE)
})
custom("u: optimizer state_dict() round trip", function() {
  m <- nn_linear(2, 1)
  opt <- optim_adam(m$parameters, lr = 0.1)
  m(torch_ones(3, 2))$sum()$backward()
  opt$step()
  sd <- opt$state_dict()
  opt2 <- optim_adam(m$parameters, lr = 0.5)
  opt2$load_state_dict(sd)
  list(opt2$param_groups[[1]]$lr, 0.1)
})
custom("u: lr_lambda with an R function", function() {
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 1)
  sched <- lr_lambda(opt, lr_lambda = function(epoch) 0.9^epoch)
  for (i in 1:3) {
    opt$step()
    sched$step()
  }
  list(opt$param_groups[[1]]$lr, 0.9^3)
})

# ---- saving and loading ---------------------------------------------------------------------
custom("u: torch_save/torch_load of a tensor", function() {
  x <- torch_randn(3, 4)
  path <- tempfile(fileext = ".pt")
  torch_save(x, path)
  list(torch_load(path), x)
})
custom("u: torch_save/torch_load of an int64 and a bool tensor", function() {
  path <- tempfile(fileext = ".pt")
  torch_save(list(a = torch_tensor(c(1L, 5L)), b = torch_tensor(c(TRUE, FALSE))), path)
  l <- torch_load(path)
  list(list(l$a$dtype == torch_long(), as.integer(l$a), as.logical(l$b)),
       list(TRUE, c(1L, 5L), c(TRUE, FALSE)))
})
custom("u: torch_save of a state_dict, loaded into a new module", function() {
  m <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  path <- tempfile(fileext = ".pt")
  torch_save(m$state_dict(), path)
  m2 <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  m2$load_state_dict(torch_load(path))
  x <- torch_randn(4, 2)
  list(m2(x), m(x))
})
# A module is saved as its state (documented: no code in the file), loaded into a module.
custom("u: torch_save of a whole nn_module, loaded as its state", function() {
  m <- nn_linear(2, 2)
  path <- tempfile(fileext = ".pt")
  torch_save(m, path)
  m2 <- nn_linear(2, 2)
  m2$load_state_dict(torch_load(path))
  x <- torch_randn(3, 2)
  list(m2(x), m(x))
})
custom("u: jit_save of a traced module, loaded, trained further", function() {
  m <- nn_linear(2, 1)
  tm <- jit_trace(m, torch_ones(3, 2))
  path <- tempfile(fileext = ".pt")
  jit_save(tm, path)
  ld <- jit_load(path)
  opt <- optim_sgd(ld$parameters, lr = 0.1)
  before <- as.numeric(ld$parameters[[1]])
  ld(torch_ones(3, 2))$sum()$backward()
  opt$step()
  list(before - as.numeric(ld$parameters[[1]]), rep(0.3, 2))
}, tol = 1e-4)
custom("u: a traced function saved and loaded keeps an integer input dtype", function() {
  f <- function(i) (i * 2L)$sum()
  tr <- jit_trace(f, torch_tensor(1:3))
  path <- tempfile(fileext = ".pt")
  jit_save(tr, path)
  out <- jit_load(path)(torch_tensor(1:5))
  list(list(out$dtype == torch_long(), as.integer(out)), list(TRUE, 30L))
})

# ---- nnf_* functions with their arguments ---------------------------------------------------
case("u: nnf_pad reflect", function(x) nnf_pad(x, c(2, 1), mode = "reflect"), list(T(1, 2, 5)),
     list(T(2, 2, 7)))
case("u: nnf_pad replicate 2-d", function(x) nnf_pad(x, c(1, 1, 2, 0), mode = "replicate"),
     list(T(1, 1, 3, 3)), list(T(2, 1, 4, 5)))
case("u: nnf_pad constant value = -1", function(x) nnf_pad(x, c(0, 2), value = -1),
     list(T(3, 2)), list(T(5, 2)))
case("u: nnf_pad circular", function(x) nnf_pad(x, c(1, 1), mode = "circular"), list(T(1, 1, 4)),
     list(T(2, 1, 6)))
case("u: nnf_interpolate bilinear align_corners", function(x) {
  nnf_interpolate(x, scale_factor = 2, mode = "bilinear", align_corners = TRUE)
}, list(T(1, 1, 3, 3)), list(T(2, 1, 4, 5)), tol = 1e-4)
case("u: nnf_interpolate linear to a size", function(x) {
  nnf_interpolate(x, size = 7, mode = "linear", align_corners = FALSE)
}, list(T(1, 2, 4)), list(T(3, 2, 5)), tol = 1e-4)
case("u: nnf_conv1d stride 2 padding 1", function(x, w) nnf_conv1d(x, w, stride = 2, padding = 1),
     list(T(1, 2, 7), T(3, 2, 3)), list(T(2, 2, 9), T(3, 2, 3)), tol = 1e-4)
case("u: nnf_conv2d groups = 2 with bias", function(x, w, b) nnf_conv2d(x, w, b, groups = 2),
     list(T(1, 4, 5, 5), T(4, 2, 3, 3), T(4)), list(T(2, 4, 6, 7), T(4, 2, 3, 3), T(4)), tol = 1e-4)
case("u: nnf_conv2d dilation 2 padding \"same\"", function(x, w) {
  nnf_conv2d(x, w, padding = "same", dilation = 2)
}, list(T(1, 1, 6, 6), T(2, 1, 3, 3)), list(T(2, 1, 7, 8), T(2, 1, 3, 3)), tol = 1e-4)
case("u: nnf_embedding with padding_idx and max_norm", function(i, w) {
  nnf_embedding(i, w$clone(), padding_idx = 2)
}, list(ix(1L, 2L, 3L), T(4, 3)), list(ix(4L, 2L), T(4, 3)))
case("u: nnf_cross_entropy ignore_index (a 1-based class)", function(x, y) {
  nnf_cross_entropy(x, y, ignore_index = 2)
}, list(T(4, 3), ix(1L, 2L, 3L, 2L)), list(T(6, 3), ix(2L, 2L, 1L, 3L, 3L, 1L)))
case("u: nnf_cross_entropy reduction = \"none\"", function(x, y) {
  nnf_cross_entropy(x, y, reduction = "none")
}, list(T(4, 3), ix(1L, 2L, 3L, 2L)), list(T(6, 3), ix(2L, 2L, 1L, 3L, 3L, 1L)))
case("u: nnf_cross_entropy label_smoothing", function(x, y) {
  nnf_cross_entropy(x, y, label_smoothing = 0.1)
}, list(T(4, 3), ix(1L, 2L, 3L, 2L)), list(T(6, 3), ix(2L, 2L, 1L, 3L, 3L, 1L)))
case("u: nnf_cross_entropy on (N, C, L) targets (N, L)", function(x, y) nnf_cross_entropy(x, y),
     list(T(2, 3, 4), torch_tensor(matrix(c(1L, 2L, 3L, 1L, 2L, 3L, 3L, 1L), 2))),
     list(T(3, 3, 5), torch_tensor(matrix(rep(1:3, 5), 3))))
case("u: nnf_cross_entropy with probabilities as targets", function(x, p) nnf_cross_entropy(x, p),
     list(T(3, 4), nnf_softmax(T(3, 4), dim = 2)), list(T(5, 4), nnf_softmax(T(5, 4), dim = 2)))
case("u: nnf_nll_loss weight", function(x, y) {
  nnf_nll_loss(nnf_log_softmax(x, dim = 2), y, weight = torch_tensor(c(0.5, 1, 2)))
}, list(T(4, 3), ix(1L, 2L, 3L, 2L)), list(T(6, 3), ix(2L, 2L, 1L, 3L, 3L, 1L)))
case("u: nnf_mse_loss reduction none / sum / mean", function(a, b) {
  list(nnf_mse_loss(a, b, reduction = "none"), nnf_mse_loss(a, b, reduction = "sum"),
       nnf_mse_loss(a, b, reduction = "mean"))
}, list(T(3, 2), T(3, 2)), list(T(5, 2), T(5, 2)))
case("u: nnf_l1_loss and nnf_smooth_l1_loss(beta)", function(a, b) {
  nnf_l1_loss(a, b) + nnf_smooth_l1_loss(a, b, beta = 0.5)
}, list(T(4), T(4)), list(T(7), T(7)))
case("u: nnf_binary_cross_entropy of sigmoid with weight", function(x, y, w) {
  nnf_binary_cross_entropy(torch_sigmoid(x), y, weight = w)
}, list(T(4), torch_tensor(c(0, 1, 1, 0)), torch_rand(4)),
list(T(6), torch_tensor(c(1, 1, 0, 0, 1, 0)), torch_rand(6)))
case("u: nnf_softmax over dims 1, 2 and 3", function(x) {
  list(nnf_softmax(x, dim = 1), nnf_softmax(x, dim = 2), nnf_softmax(x, dim = 3))
}, list(T(2, 3, 4)), list(T(5, 3, 2)))
case("u: nnf_log_softmax(dim = 1) of a matrix", function(x) nnf_log_softmax(x, dim = 1),
     list(T(3, 4)), list(T(5, 4)))
case("u: nnf_softmin and nnf_softplus(beta = 2)", function(x) {
  nnf_softmin(x, dim = -1) + nnf_softplus(x, beta = 2)
}, list(T(3, 4)), list(T(5, 4)))
case("u: nnf_gelu(approximate = \"tanh\")", function(x) nnf_gelu(x, approximate = "tanh"),
     list(T(4)), list(T(7)))
case("u: nnf_leaky_relu(negative_slope) / nnf_elu(alpha)", function(x) {
  nnf_leaky_relu(x, negative_slope = 0.2) + nnf_elu(x, alpha = 0.5)
}, list(T(4)), list(T(7)))
case("u: nnf_threshold / nnf_hardtanh / nnf_celu", function(x) {
  nnf_threshold(x, 0.1, 20) + nnf_hardtanh(x, min_val = -0.5, max_val = 0.5) + nnf_celu(x)
}, list(T(4)), list(T(7)))
case("u: nnf_silu / nnf_mish / nnf_hardswish / nnf_logsigmoid", function(x) {
  nnf_silu(x) + nnf_mish(x) + nnf_hardswish(x) + nnf_logsigmoid(x)
}, list(T(4)), list(T(7)))
case("u: nnf_cosine_similarity(dim = 2)", function(a, b) nnf_cosine_similarity(a, b, dim = 2),
     list(T(3, 4), T(3, 4)), list(T(5, 4), T(5, 4)))
case("u: nnf_pairwise_distance", function(a, b) nnf_pairwise_distance(a, b), list(T(3, 4), T(3, 4)),
     list(T(5, 4), T(5, 4)))
case("u: nnf_unfold / nnf_fold", function(x) {
  u <- nnf_unfold(x, kernel_size = 2)
  nnf_fold(u, output_size = c(4, 4), kernel_size = 2)
}, list(T(1, 1, 4, 4)), list(T(3, 1, 4, 4)))
case("u: nnf_pixel_shuffle(2)", function(x) nnf_pixel_shuffle(x, 2), list(T(1, 4, 2, 2)),
     list(T(2, 4, 3, 3)))
case("u: nnf_avg_pool2d(ceil_mode, count_include_pad)", function(x) {
  nnf_avg_pool2d(x, 2, stride = 2, padding = 1, ceil_mode = TRUE, count_include_pad = FALSE)
}, list(T(1, 1, 5, 5)), list(T(2, 1, 6, 7)))
case("u: nnf_adaptive_avg_pool2d(c(2, 3))", function(x) nnf_adaptive_avg_pool2d(x, c(2, 3)),
     list(T(1, 2, 4, 6)), list(T(2, 2, 5, 7)))
case("u: nnf_max_pool1d kernel 3 stride 1", function(x) nnf_max_pool1d(x, 3, stride = 1),
     list(T(1, 2, 6)), list(T(2, 2, 9)))
case("u: nnf_max_pool2d(return_indices = TRUE) indices", function(x) {
  nnf_max_pool2d(x, 2, return_indices = TRUE)[[2]]
}, list(T(1, 1, 4, 4)), list(T(2, 1, 6, 6)))
case("u: nnf_one_hot(num_classes = -1) infers the classes (guard)", function(i) {
  nnf_one_hot(i)
}, list(ix(1L, 3L, 2L)), list(ix(3L, 1L)), guard = TRUE)
case("u: nnf_batch_norm with running stats (eval)", function(x, m, v) {
  nnf_batch_norm(x, m, v, training = FALSE)
}, list(T(4, 3), torch_zeros(3), torch_ones(3)), list(T(6, 3), torch_zeros(3), torch_ones(3)))
case("u: nnf_group_norm / nnf_instance_norm", function(x) {
  nnf_group_norm(x, 2) + nnf_instance_norm(x)
}, list(T(2, 4, 5)), list(T(3, 4, 7)), tol = 1e-4)
case("u: nnf_layer_norm with weight and bias", function(x, w, b) {
  nnf_layer_norm(x, 4, weight = w, bias = b)
}, list(T(3, 4), T(4), T(4)), list(T(5, 4), T(4), T(4)), tol = 1e-4)
case("u: nnf_dropout2d in eval", function(x) nnf_dropout2d(x, p = 0.5, training = FALSE),
     list(T(1, 2, 3, 3)), list(T(2, 2, 4, 4)))
case("u: nnf_normalize(p = 1, dim = 1)", function(x) nnf_normalize(x, p = 1, dim = 1),
     list(T(3, 4)), list(T(5, 4)))
case("u: nnf_kl_div(log_target = TRUE)", function(a, b) {
  nnf_kl_div(nnf_log_softmax(a, dim = 2), nnf_log_softmax(b, dim = 2), reduction = "batchmean",
             log_target = TRUE)
}, list(T(3, 4), T(3, 4)), list(T(5, 4), T(5, 4)))
case("u: nnf_margin_ranking_loss / nnf_hinge_embedding_loss", function(a, b, y) {
  nnf_margin_ranking_loss(a, b, y, margin = 0.1) + nnf_hinge_embedding_loss(a, y)
}, list(T(4), T(4), torch_tensor(c(1, -1, 1, -1))), list(T(6), T(6), torch_tensor(c(1, -1, 1, 1, -1, -1))))
case("u: nnf_triplet_margin_loss", function(a, p, n) nnf_triplet_margin_loss(a, p, n),
     list(T(3, 4), T(3, 4), T(3, 4)), list(T(5, 4), T(5, 4), T(5, 4)))

# ---- linalg_* --------------------------------------------------------------------------------
spd <- function(n) {
  a <- torch_randn(n, n)
  torch_matmul(a, a$t()) + torch_eye(n) * n
}
case("u: linalg_norm of a vector and a matrix", function(v, m) {
  linalg_norm(v) + linalg_norm(m)
}, list(T(4), T(3, 3)), list(T(6), T(4, 5)))
case("u: linalg_vector_norm(ord = 1, dim = 2)", function(x) linalg_vector_norm(x, ord = 1, dim = 2),
     list(T(3, 4)), list(T(5, 4)))
case("u: linalg_vector_norm(ord = Inf)", function(x) linalg_vector_norm(x, ord = Inf),
     list(T(3, 4)), list(T(5, 4)))
case("u: linalg_matrix_norm(ord = \"fro\") batched", function(x) linalg_matrix_norm(x, ord = "fro"),
     list(T(2, 3, 3)), list(T(4, 3, 5)))
case("u: linalg_det and linalg_slogdet", function(a) {
  s <- linalg_slogdet(a)
  list(linalg_det(a), s[[1]], s[[2]])
}, list(spd(3)), list(spd(4)), tol = 1e-4)
case("u: linalg_inv times the matrix is the identity", function(a) torch_matmul(linalg_inv(a), a),
     list(spd(3)), list(spd(5)), tol = 1e-4)
case("u: linalg_solve(A, b)", function(a, b) linalg_solve(a, b), list(spd(3), T(3, 2)),
     list(spd(5), T(5, 2)), tol = 1e-4)
case("u: linalg_cholesky lower factor", function(a) linalg_cholesky(a), list(spd(3)), list(spd(4)),
     tol = 1e-4)
case("u: linalg_qr reconstructs", function(a) {
  qr <- linalg_qr(a)
  torch_matmul(qr[[1]], qr[[2]])
}, list(T(4, 3)), list(T(6, 3)), tol = 1e-4)
case("u: linalg_svd singular values (linalg_svdvals)", function(a) linalg_svdvals(a),
     list(T(4, 3)), list(T(6, 3)), tol = 1e-4)
case("u: linalg_eigh eigenvalues of a symmetric matrix", function(a) linalg_eigh(a)[[1]],
     list(spd(3)), list(spd(5)), tol = 1e-4)
case("u: linalg_pinv of a tall matrix", function(a) torch_matmul(linalg_pinv(a), a),
     list(T(5, 3)), list(T(7, 3)), tol = 1e-4)
case("u: linalg_matrix_power(a, 3)", function(a) linalg_matrix_power(a, 3), list(T(3, 3)),
     list(T(4, 4)), tol = 1e-4)
case("u: linalg_cross(dim = 2)", function(a, b) linalg_cross(a, b, dim = 2), list(T(4, 3), T(4, 3)),
     list(T(6, 3), T(6, 3)))
case("u: linalg_multi_dot(list(a, b, c))", function(a, b, c) linalg_multi_dot(list(a, b, c)),
     list(T(2, 3), T(3, 4), T(4, 2)), list(T(5, 3), T(3, 4), T(4, 2)), tol = 1e-4)
case("u: linalg_vecdot(dim = 2)", function(a, b) linalg_vecdot(a, b, dim = 2), list(T(3, 4), T(3, 4)),
     list(T(5, 4), T(5, 4)))
custom("u: linalg_det of a known matrix", function() {
  a <- matrix(c(2, 1, 1, 3), 2)
  list(as.numeric(linalg_det(torch_tensor(a))), det(a))
}, tol = 1e-5)
custom("u: linalg_solve agrees with base R's solve()", function() {
  a <- matrix(c(4, 1, 2, 3), 2)
  b <- c(1, 2)
  list(as.numeric(linalg_solve(torch_tensor(a), torch_tensor(b))), solve(a, b))
}, tol = 1e-5)
custom("u: linalg_inv agrees with base R's solve(a)", function() {
  a <- matrix(c(4, 1, 2, 3), 2)
  list(as_array(linalg_inv(torch_tensor(a))), solve(a))
}, tol = 1e-5)

# ---- index ops ------------------------------------------------------------------------------
case("u: torch_where(cond, x, y) with a scalar y", function(x) torch_where(x > 0, x, 0),
     list(T(3, 4)), list(T(5, 4)))
case("u: torch_where(cond, 1, -1) two scalars", function(x) torch_where(x > 0, 1, -1),
     list(T(3, 4)), list(T(5, 4)))
case("u: torch_masked_select(x, x > 0)", function(x) torch_masked_select(x, x > 0),
     list(T(3, 4)), list(T(5, 4)))
case("u: x$masked_select(mask) on a logical input", function(x, m) x$masked_select(m),
     list(T(4), torch_tensor(c(TRUE, FALSE, TRUE, TRUE))), list(T(3), torch_tensor(c(FALSE, TRUE, TRUE))))
case("u: torch_gather(x, 1, idx) along the first dim", function(x, i) torch_gather(x, 1, i),
     list(T(3, 4), torch_tensor(matrix(c(1L, 3L, 2L, 1L), 1))),
     list(T(5, 4), torch_tensor(matrix(c(5L, 3L, 2L, 1L), 1))))
case("u: x$scatter(2, idx, 1) a positional value", function(x, i) torch_zeros_like(x)$scatter(2, i, 1),
     list(T(3, 4), torch_tensor(matrix(c(1L, 4L, 2L), 3))), list(T(5, 4), torch_tensor(matrix(c(1L, 4L, 2L, 3L, 3L), 5))))
case("u: torch_scatter(x, 2, idx, src)", function(x, i, s) torch_scatter(x, 2, i, s),
     list(torch_zeros(2, 3), torch_tensor(matrix(c(3L, 1L), 2)), T(2, 1)),
     list(torch_zeros(4, 3), torch_tensor(matrix(c(3L, 1L, 2L, 2L), 4)), T(4, 1)))
case("u: torch_scatter_add counts classes", function(y) {
  torch_zeros(4)$scatter_add(1, y, torch_ones_like(y, dtype = torch_float()))
}, list(ix(1L, 2L, 2L, 4L)), list(ix(3L, 3L, 3L, 1L, 2L, 4L)))
case("u: x$scatter_add_(1, idx, src) in place on a clone", function(y, s) {
  out <- torch_zeros(3)
  out$scatter_add_(1, y, s)
  out
}, list(ix(1L, 3L, 3L), T(3)), list(ix(2L, 2L, 1L, 3L), T(4)))
case("u: torch_index_select with an R vector", function(x) torch_index_select(x, 2, c(3, 1)),
     list(T(2, 3)), list(T(5, 3)))
case("u: torch_index_put with a list of index tensors", function(x, i, j) {
  torch_index_put(x, list(i, j), torch_tensor(9))
}, list(T(3, 3), ix(1L, 3L), ix(2L, 2L)), list(T(5, 4), ix(5L, 1L), ix(4L, 1L)))
case("u: x$index_put_(accumulate = TRUE) adds at repeated indices", function(x, i) {
  y <- torch_zeros_like(x)
  y$index_put_(list(i), torch_ones(i$size(1)), accumulate = TRUE)
}, list(T(4), ix(1L, 1L, 3L)), list(T(6), ix(2L, 2L, 2L, 6L)))
case("u: torch_take(x, idx) flat 1-based", function(x, i) torch_take(x, i),
     list(T(3, 4), ix(1L, 12L)), list(T(5, 4), ix(20L, 2L, 7L)))
case("u: x[idx] with a 2-d index tensor", function(x, i) x[i], list(T(6), torch_tensor(matrix(c(1L, 2L, 6L, 4L), 2))),
     list(T(8), torch_tensor(matrix(c(8L, 1L, 3L, 3L), 2))))
case("u: x[, c(TRUE, FALSE, TRUE)] logical columns", function(x) x[, c(TRUE, FALSE, TRUE)],
     list(T(2, 3)), list(T(5, 3)))
case("u: x$index_add(1, idx, src)", function(x, i, s) x$index_add(1, i, s),
     list(torch_zeros(3, 2), ix(1L, 3L), T(2, 2)), list(torch_zeros(5, 2), ix(5L, 1L), T(2, 2)))
case("u: torch_sort(descending = TRUE) indices gather back", function(x) {
  s <- torch_sort(x, dim = 2, descending = TRUE)
  torch_gather(x, 2, s[[2]]) - s[[1]]
}, list(T(3, 4)), list(T(5, 4)))
case("u: torch_argsort then x[order]", function(x) x[torch_argsort(x)], list(T(5)), list(T(8)))
case("u: torch_topk(largest = FALSE)", function(x) torch_topk(x, 2, largest = FALSE)[[1]],
     list(T(5)), list(T(8)))
case("u: torch_min(dim = 1) indices as positions", function(x) {
  r <- torch_min(x, dim = 1)
  list(r[[1]], r[[2]])
}, list(T(3, 4)), list(T(5, 4)))
case("u: torch_cummax indices", function(x) torch_cummax(x, dim = 1)[[2]], list(T(5)), list(T(8)))
case("u: torch_unique_consecutive", function(x) torch_unique_consecutive(x),
     list(torch_tensor(c(1, 1, 2, 2, 3))), list(torch_tensor(c(4, 4, 4, 1, 1, 2, 3))))
case("u: torch_bucketize 1-based boundaries", function(x, b) torch_bucketize(x, b),
     list(torch_tensor(c(0.5, 2.5)), torch_tensor(c(1, 2, 3))),
     list(torch_tensor(c(3.5, 0, 1.5)), torch_tensor(c(1, 2, 3))))
case("u: torch_searchsorted", function(s, v) torch_searchsorted(s, v),
     list(torch_tensor(c(1, 3, 5, 7)), torch_tensor(c(2, 6))),
     list(torch_tensor(c(1, 3, 5, 7)), torch_tensor(c(0, 8, 4))))

# ---- dtypes and logical ops -----------------------------------------------------------------
case("u: x$to(dtype = torch_long()) truncates", function(x) x$to(dtype = torch_long()),
     list(torch_tensor(c(1.7, -1.7))), list(torch_tensor(c(2.2, 3.9, -0.5))))
case("u: x$to(dtype = torch_int()) and back", function(x) x$to(dtype = torch_int())$to(dtype = torch_float()),
     list(T(3) * 10), list(T(5) * 10))
case("u: x$to(dtype = torch_bool())", function(x) x$to(dtype = torch_bool()),
     list(torch_tensor(c(0, 2, -1))), list(torch_tensor(c(0, 0, 1, 5))))
case("u: (x > 0)$sum() counts as int64", function(x) (x > 0)$sum(), list(T(5)), list(T(9)))
case("u: (x > 0)$to(dtype = torch_float())$mean()", function(x) (x > 0)$to(dtype = torch_float())$mean(),
     list(T(5)), list(T(9)))
case("u: !m, m & n, m | n, xor", function(a, b) {
  m <- a > 0
  n <- b > 0
  list(!m, m & n, m | n, torch_logical_xor(m, n))
}, list(T(4), T(4)), list(T(6), T(6)))
case("u: any / all of a logical tensor", function(x) list((x > 0)$any(), (x > -10)$all()),
     list(T(4)), list(T(6)))
case("u: integer %/% and %% on int64 (R's floor semantics)", function(x) list(x %/% 3L, x %% 3L),
     list(torch_tensor(c(-7L, 7L, 5L))), list(torch_tensor(c(-1L, 1L, -5L, 8L))))
case("u: integer / integer gives float", function(x) x / 2L, list(torch_tensor(c(1L, 3L))),
     list(torch_tensor(c(5L, 6L, 7L))))
case("u: x == 2L on an int64 tensor", function(x) x == 2L, list(torch_tensor(1:3)), list(torch_tensor(1:5)))
case("u: uint8 tensor arithmetic", function(x) x$to(dtype = torch_uint8()) + 1L,
     list(torch_tensor(c(1L, 254L))), list(torch_tensor(c(0L, 3L, 9L))))
case("u: float16 round trip", function(x) x$to(dtype = torch_float16())$to(dtype = torch_float()),
     list(torch_tensor(c(1.5, 2.25))), list(torch_tensor(c(0.125, 3, 4))))
case("u: torch_double() arithmetic keeps float64", function(x) x * 1e-10 + 1,
     list(torch_tensor(c(1, 2), dtype = torch_double())), list(torch_tensor(c(3, 4, 5), dtype = torch_double())),
     tol = 1e-12)
case("u: torch_isnan / torch_isinf / torch_isfinite", function(x) {
  list(torch_isnan(x), torch_isinf(x), torch_isfinite(x))
}, list(torch_tensor(c(1, NaN, Inf))), list(torch_tensor(c(-Inf, 0, NaN, 2))))
case("u: x[torch_isnan(x)] <- 0", function(x) {
  y <- x$clone()
  y[torch_isnan(y)] <- 0
  y
}, list(torch_tensor(c(1, NaN, 3))), list(torch_tensor(c(NaN, NaN, 2, 5))))
case("u: log(0) is -Inf and 1/0 is Inf", function(x) list(torch_log(x * 0), 1 / (x * 0)),
     list(torch_ones(2)), list(torch_ones(4)))
case("u: x$clamp(max = Inf) and masked_fill(-Inf) then softmax", function(x) {
  nnf_softmax(x$masked_fill(x < 0, -Inf)$clamp(max = Inf), dim = 1)
}, list(torch_tensor(c(1, -1, 2))), list(torch_tensor(c(-1, 3, 2, -4))))
custom("u: torch_tensor(c(1, NA)) holds NaN, as_array gives NA back as NaN", function() {
  x <- torch_tensor(c(1, NA))
  list(is.na(as_array(x)), c(FALSE, TRUE))
})
custom("u: torch_tensor(c(TRUE, NA)) (logical NA) is refused clearly", function() {
  list(torch_tensor(c(TRUE, NA)), NULL)
}, error = "NA")
custom("u: torch_tensor(c(1L, NA)) (integer NA) is refused clearly", function() {
  list(torch_tensor(c(1L, NA)), NULL)
}, error = "NA")
custom("u: torch_tensor(c(Inf, -Inf, NaN)) keeps them", function() {
  list(as_array(torch_tensor(c(Inf, -Inf, NaN))), c(Inf, -Inf, NaN))
})
custom("u: as.numeric(NaN tensor) is NaN, is.nan() TRUE", function() {
  list(is.nan(as.numeric(torch_tensor(NaN))), TRUE)
})

# ---- empty tensors -----------------------------------------------------------------------------
custom("u: torch_tensor(numeric(0)) is a float tensor of size 0", function() {
  x <- torch_tensor(numeric(0))
  list(list(dim(x), x$dtype == torch_float(), as_array(x)), list(0L, TRUE, numeric(0)))
})
custom("u: torch_tensor(integer(0)) and logical(0) dtypes", function() {
  list(list(torch_tensor(integer(0))$dtype == torch_long(),
            torch_tensor(logical(0))$dtype == torch_bool()), list(TRUE, TRUE))
})
custom("u: torch_tensor(matrix(numeric(0), 0, 3)) keeps 0 x 3", function() {
  list(dim(torch_tensor(matrix(numeric(0), 0, 3))), c(0L, 3L))
})
custom("u: sum of an empty tensor is 0, mean is NaN", function() {
  x <- torch_zeros(0)
  list(c(as.numeric(x$sum()), as.numeric(x$mean())), c(0, NaN))
})
custom("u: as_array of an empty int64 / bool tensor", function() {
  list(list(as_array(torch_zeros(0, dtype = torch_long())), as_array(torch_zeros(0, dtype = torch_bool())),
            as_array(torch_zeros(2, 0))), list(integer(0), logical(0), matrix(numeric(0), 2, 0)))
})
case("u: torch_cat with an empty tensor", function(x) torch_cat(list(x, torch_zeros(0, 2)), dim = 1),
     list(T(3, 2)), list(T(5, 2)))
case("u: x[x > 100] empty selection", function(x) x[x > 100], list(T(3)), list(T(5)))
case("u: masked selection then sum (empty is 0)", function(x) x[x > 100]$sum() + x$sum(), list(T(3)),
     list(T(5)))
case("u: a 0-row input at another size", function(x) x$sum(dim = 1) + 1, list(T(3, 2)), list(T(0, 2)))
case("u: x$new_zeros(c(0, n))", function(x) x$new_zeros(c(0, x$size(2))), list(T(3, 2)), list(T(3, 4)))

# ---- view/reshape/indexing/assignment ------------------------------------------------------
case("u: x$view(c(-1, 2))", function(x) x$view(c(-1, 2)), list(T(3, 4)), list(T(5, 4)))
case("u: x$reshape(-1)", function(x) x$reshape(-1), list(T(3, 4)), list(T(5, 4)))
case("u: x$view(c(2, -1, 3))", function(x) x$view(c(2, -1, 3)), list(T(2, 2, 3)), list(T(2, 5, 3)))
case("u: x$reshape(c(x$size(1), -1))$t()", function(x) x$reshape(c(x$size(1), -1))$t(),
     list(T(3, 2, 2)), list(T(5, 2, 2)))
case("u: torch_reshape(x, list(-1, 1))", function(x) torch_reshape(x, list(-1, 1)), list(T(3)),
     list(T(6)))
case("u: x[-(1:2)] drops the first two", function(x) x[-(1:2)], list(T(4)), list(T(7)))
case("u: x[c(-1, -3)] negative vector", function(x) x[c(-1, -3)], list(T(4)), list(T(7)))
case("u: x[-1:-2] mlverse's last two (negative range)", function(x) x[-2:-1], list(T(4)), list(T(7)))
case("u: x[2, , drop = FALSE] on 3-d", function(x) x[2, , , drop = FALSE], list(T(3, 2, 2)),
     list(T(5, 2, 2)))
case("u: x[.., 1:2] on 3-d", function(x) x[.., 1:2], list(T(2, 3, 4)), list(T(5, 3, 4)))
case("u: x[1, .., 1] on 4-d", function(x) x[1, .., 1], list(T(2, 3, 4, 5)), list(T(3, 3, 4, 5)))
case("u: x[, , 2:3] missing args", function(x) x[, , 2:3], list(T(2, 3, 4)), list(T(5, 3, 4)))
case("u: x[newaxis, ] adds a dim", function(x) x[newaxis, ], list(T(3)), list(T(5)))
case("u: x[1, ] <- 0 on a clone", function(x) {
  y <- x$clone()
  y[1, ] <- 0
  y
}, list(T(3, 2)), list(T(5, 2)))
case("u: x[, 2] <- c(1, 2, 3) an R vector column", function(x) {
  y <- x$clone()
  y[, 2] <- c(1, 2, 3)
  y
}, list(T(3, 2)), list(T(3, 4)))
case("u: x[2:3, 2:3] <- matrix", function(x) {
  y <- x$clone()
  y[2:3, 2:3] <- matrix(c(1, 2, 3, 4), 2)
  y
}, list(T(3, 3)), list(T(5, 4)))
case("u: x[x > 0] <- x[x > 0] * 2 twice", function(x) {
  y <- x$clone()
  y[y > 0] <- y[y > 0] * 2
  y[y < 0] <- 0
  y
}, list(T(3, 3)), list(T(5, 4)))
case("u: x[.., N] <- 1", function(x) {
  y <- x$clone()
  y[.., N] <- 1
  y
}, list(T(2, 3)), list(T(4, 5)))
case("u: x[1, 1] <- NaN then torch_nansum-like sum", function(x) {
  y <- x$clone()
  y[1, 1] <- NaN
  torch_where(torch_isnan(y), torch_zeros_like(y), y)$sum()
}, list(T(3, 3)), list(T(5, 4)))
case("u: x[[1]] <- 5 single element", function(x) {
  y <- x$clone()
  y[[2]] <- 5
  y
}, list(T(3)), list(T(6)))

# ---- lists, cat/stack, seq_len over sizes --------------------------------------------------
case("u: torch_cat(list, dim = -1)", function(a, b) torch_cat(list(a, b), dim = -1),
     list(T(2, 3), T(2, 1)), list(T(5, 3), T(5, 1)))
case("u: torch_stack of 0-d tensors", function(x) torch_stack(list(x$sum(), x$mean(), x$max())),
     list(T(3)), list(T(5)))
case("u: torch_cat of a single-element list", function(x) torch_cat(list(x)), list(T(3)), list(T(5)))
case("u: torch_stack(dim = -1)", function(a, b) torch_stack(list(a, b), dim = -1), list(T(3, 2), T(3, 2)),
     list(T(5, 2), T(5, 2)))
case("u: torch_hstack / torch_vstack", function(a, b) list(torch_hstack(list(a, b)), torch_vstack(list(a, b))),
     list(T(3, 2), T(3, 2)), list(T(5, 2), T(5, 2)))
case("u: Map over two list inputs", function(l, k) {
  torch_stack(Map(function(a, b) a * b, l, k))
}, list(list(T(2), T(2)), list(T(2), T(2))), list(list(T(3), T(3)), list(T(3), T(3))))
case("u: a list output of a list input (identity structure)", function(l) lapply(l, function(t) t + 1),
     list(list(T(2), T(3))), list(list(T(4), T(5))))
case("u: nested named list input, strict = FALSE output", function(batch) {
  list(pred = batch$inputs$x * 2, n = batch$inputs$x$sum())
}, list(list(inputs = list(x = T(3)))), list(list(inputs = list(x = T(6)))),
trace_args = list(strict = FALSE))
case("u: seq_len(n) over a traced size builds a cumulative mask (guard)", function(x) {
  n <- x$size(1)
  torch_stack(lapply(seq_len(n), function(i) x[1:i]$sum()))
}, list(T(3)), list(T(4)), guard = TRUE)
case("u: torch_arange(1, n) as weights instead of seq_len", function(x) {
  x * torch_arange(1, x$size(1))$to(dtype = torch_float())
}, list(T(3)), list(T(6)))
case("u: torch_meshgrid(indexing = \"ij\")", function(a, b) torch_meshgrid(list(a, b), indexing = "ij")[[1]],
     list(T(3), T(2)), list(T(5), T(4)))
case("u: torch_split(x, c(1, 2)) sizes", function(x) torch_split(x, c(1, 2), dim = 2)[[2]],
     list(T(3, 3)), list(T(5, 3)))
case("u: torch_chunk into 3 of a list out", function(x) torch_chunk(x, 3, dim = 2),
     list(T(2, 6)), list(T(4, 6)))

# ---- more tensor methods --------------------------------------------------------------------
case("u: x$mean(dim = 1, keepdim = TRUE) centring", function(x) x - x$mean(dim = 1, keepdim = TRUE),
     list(T(3, 4)), list(T(5, 4)))
case("u: (x - mu) / sd standardise", function(x) {
  (x - x$mean(dim = 1)) / x$std(dim = 1)
}, list(T(4, 3)), list(T(6, 3)))
case("u: x$var(unbiased = FALSE)", function(x) x$var(dim = 1, unbiased = FALSE), list(T(4, 3)),
     list(T(6, 3)))
case("u: torch_logsumexp(dim = 2)", function(x) torch_logsumexp(x, dim = 2), list(T(3, 4)), list(T(5, 4)))
case("u: torch_cumprod / torch_flip / torch_roll(dims)", function(x) {
  list(torch_cumprod(x, dim = 1), torch_flip(x, 1), torch_roll(x, 1, dims = 2))
}, list(T(3, 2)), list(T(5, 2)))
case("u: torch_diff / torch_diag_embed / torch_triu(1)", function(x) {
  list(torch_diff(x), torch_diag_embed(x), torch_triu(torch_diag_embed(x) + 1, diagonal = 1))
}, list(T(3)), list(T(5)))
case("u: torch_repeat_interleave(x, 2L, dim = 1)", function(x) torch_repeat_interleave(x, 2L, dim = 1),
     list(T(3, 2)), list(T(5, 2)))
case("u: x$movedim(1, 3)", function(x) x$movedim(1, 3), list(T(2, 3, 4)), list(T(5, 3, 4)))
case("u: torch_outer / torch_dot / torch_mv", function(a, b, m) {
  list(torch_outer(a, b), torch_dot(a, b), torch_mv(m, a))
}, list(T(3), T(3), T(2, 3)), list(T(5), T(5), T(2, 5)))
case("u: torch_cdist", function(a, b) torch_cdist(a, b), list(T(3, 2), T(4, 2)), list(T(5, 2), T(6, 2)),
     tol = 1e-4)
case("u: torch_clamp(x, min = tensor, max = tensor)", function(x, lo, hi) torch_clamp(x, lo, hi),
     list(T(3), -torch_ones(3) * 0.1, torch_ones(3) * 0.1), list(T(5), -torch_ones(5) * 0.1, torch_ones(5) * 0.1))
case("u: torch_lerp and torch_addcmul(value =)", function(a, b, c) {
  torch_lerp(a, b, 0.3) + torch_addcmul(a, b, c, value = 0.5)
}, list(T(3), T(3), T(3)), list(T(5), T(5), T(5)))
case("u: torch_remainder and torch_fmod signs", function(x) list(torch_remainder(x, 3), torch_fmod(x, 3)),
     list(torch_tensor(c(-5, 5))), list(torch_tensor(c(-7, 7, -1))))
case("u: x$round(decimals = 1)", function(x) x$round(decimals = 1), list(T(3)), list(T(5)))
case("u: R's round(x) / abs(x) / exp(x) on tensors (Math group)", function(x) {
  list(round(x), abs(x), exp(x), sqrt(abs(x)), log1p(abs(x)))
}, list(T(3)), list(T(5)))
case("u: R's sum(x), mean(x), max(x) on tensors (Summary)", function(x) {
  list(sum(x), mean(x), max(x), min(x))
}, list(T(3, 2)), list(T(5, 2)))
case("u: x$t() %*% x via torch_mm", function(x) torch_mm(x$t(), x), list(T(3, 2)), list(T(5, 2)))
case("u: torch_einsum(\"bij,bjk->bik\")", function(a, b) torch_einsum("bij,bjk->bik", list(a, b)),
     list(T(2, 3, 4), T(2, 4, 2)), list(T(5, 3, 4), T(5, 4, 2)), tol = 1e-4)
case("u: torch_trace / torch_det of a square input", function(a) list(torch_trace(a), torch_det(a)),
     list(spd(3)), list(spd(4)), tol = 1e-4)

# ---- printing and str ----------------------------------------------------------------------------
custom("u: print() of a float tensor names its type and shape", function() {
  out <- capture.output(print(torch_ones(2, 3)))
  list(c(out[[1]], out[[length(out)]]), c("torch_tensor", "[ CPUFloatType{2,3} ]"))
})
custom("u: print() of a long tensor", function() {
  out <- capture.output(print(torch_tensor(1:3)))
  list(out[[length(out)]], "[ CPULongType{3} ]")
})
custom("u: print() of a bool tensor", function() {
  out <- capture.output(print(torch_tensor(c(TRUE, FALSE))))
  list(out[[length(out)]], "[ CPUBoolType{2} ]")
})
custom("u: print() of a 0-d tensor", function() {
  out <- capture.output(print(torch_tensor(3)$squeeze()))
  list(out[[length(out)]], "[ CPUFloatType{} ]")
})
custom("u: str() of a tensor says its type and shape", function() {
  out <- capture.output(str(torch_ones(2, 3)))
  list(grepl("Float", out[[1]]) && grepl("2", out[[1]]) && grepl("3", out[[1]]), TRUE)
})
custom("u: print() of a traced module mentions script_module", function() {
  tm <- jit_trace(nn_linear(2, 2), torch_ones(1, 2))
  out <- paste(capture.output(print(tm)), collapse = "\n")
  list(grepl("script_module", out, ignore.case = TRUE), TRUE)
})
custom("u: print() of an nn_module lists its parameter count", function() {
  out <- paste(capture.output(print(nn_linear(2, 3))), collapse = "\n")
  list(grepl("9", out), TRUE)
})
custom("u: the traced graph prints as text", function() {
  tr <- jit_trace(function(x) torch_relu(x) * 2, torch_ones(2))
  out <- paste(capture.output(print(tr$graph)), collapse = "\n")
  list(grepl("relu", out), TRUE)
})
# dtypes print with Python's names here (torch_float32, as.character() "float32"), where
# mlverse prints torch_Float: a documented difference, not counted.
custom("u: dtypes compare with == across their aliases", function() {
  list(c(torch_ones(1)$dtype == torch_float32(), torch_long() == torch_int64(),
         torch_tensor(1:2)$dtype != torch_float()), c(TRUE, TRUE, TRUE))
})
custom("u: x$device prints as torch_device(type='cpu')", function() {
  out <- capture.output(print(torch_ones(1)$device))
  list(grepl("cpu", out[[1]]), TRUE)
})

# ---- conversions back to R ------------------------------------------------------------------
custom("u: as.numeric / as.integer / as.logical of a float tensor", function() {
  x <- torch_tensor(c(1.5, 0, -2))
  list(list(as.numeric(x), as.integer(x), as.logical(x)), list(c(1.5, 0, -2), c(1L, 0L, -2L),
                                                             c(TRUE, FALSE, TRUE)))
})
custom("u: as_array of int64 gives R integers", function() {
  list(as_array(torch_tensor(c(3L, -1L))), c(3L, -1L))
})
custom("u: as_array of int32, int16, int8, uint8 gives R integers", function() {
  v <- c(1L, 2L)
  l <- lapply(list(torch_int(), torch_int16(), torch_int8(), torch_uint8()),
              function(d) as_array(torch_tensor(v, dtype = d)))
  list(l, rep(list(v), 4))
})
custom("u: as_array of float64 keeps the precision", function() {
  list(as_array(torch_tensor(1 + 1e-12, dtype = torch_double())) - 1, 1e-12)
}, tol = 1e-6)
custom("u: as_array of float16 gives doubles", function() {
  list(as_array(torch_tensor(c(0.5, 2), dtype = torch_float16())), c(0.5, 2))
})
custom("u: as_array of a bool matrix keeps the layout", function() {
  m <- matrix(c(TRUE, FALSE, FALSE, TRUE, TRUE, FALSE), 2)
  list(as_array(torch_tensor(m)), m)
})
custom("u: as_array of a 3-d array keeps [i, j, k]", function() {
  a <- array(1:24, c(2, 3, 4)) * 1.0
  list(as_array(torch_tensor(a)), a)
})
custom("u: as.integer of a bool tensor", function() {
  list(as.integer(torch_tensor(c(TRUE, FALSE, TRUE))), c(1L, 0L, 1L))
})
custom("u: as.numeric of a 0-d tensor and $item()", function() {
  x <- torch_tensor(2.5)$squeeze()
  list(c(as.numeric(x), x$item()), c(2.5, 2.5))
})
custom("u: $item() of an int64 is an R integer-valued number", function() {
  list(torch_tensor(7L)$item(), 7L)
})
custom("u: $item() of a bool is TRUE", function() {
  list(torch_tensor(TRUE)$item(), TRUE)
})
custom("u: $item() of a 2-element tensor is a clear error", function() {
  list(torch_ones(2)$item(), NULL)
}, error = "2 elements cannot be converted")
custom("u: as.vector() of a tensor", function() {
  list(as.vector(as_array(torch_tensor(matrix(1:4, 2)))), 1:4)
})
custom("u: as.matrix of a 2-d tensor", function() {
  m <- matrix(1:6, 2) * 1
  list(as.matrix(torch_tensor(m)), m)
})

# ---- autograd ---------------------------------------------------------------------------------
custom("u: y$backward() fills x$grad", function() {
  x <- torch_tensor(c(1, 2, 3), requires_grad = TRUE)
  (x^2)$sum()$backward()
  list(as.numeric(x$grad), c(2, 4, 6))
})
custom("u: gradients accumulate until zeroed", function() {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  (x * 3)$sum()$backward()
  (x * 3)$sum()$backward()
  g2 <- as.numeric(x$grad)
  x$grad$zero_()
  list(list(g2, as.numeric(x$grad)), list(c(6, 6), c(0, 0)))
})
custom("u: with_no_grad() result does not require grad", function() {
  x <- torch_ones(2, requires_grad = TRUE)
  y <- with_no_grad(x * 2)
  list(y$requires_grad, FALSE)
})
custom("u: with_enable_grad() inside with_no_grad()", function() {
  x <- torch_ones(2, requires_grad = TRUE)
  y <- with_no_grad(with_enable_grad(x * 2))
  list(y$requires_grad, TRUE)
})
custom("u: autograd_grad(list(y), list(x))", function() {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  y <- (x^3)$sum()
  g <- autograd_grad(list(y), list(x))
  list(as.numeric(g[[1]]), c(3, 12))
})
custom("u: autograd_grad(create_graph = TRUE) second derivative", function() {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  y <- (x^3)$sum()
  g <- autograd_grad(list(y), list(x), create_graph = TRUE)[[1]]
  g2 <- autograd_grad(list(g$sum()), list(x))[[1]]
  list(as.numeric(g2), c(6, 12))
})
custom("u: backward(retain_graph = TRUE) twice", function() {
  x <- torch_tensor(2, requires_grad = TRUE)
  y <- x^2
  y$backward(retain_graph = TRUE)
  y$backward()
  list(as.numeric(x$grad), 8)
})
custom("u: x$retain_grad() on an intermediate", function() {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  h <- x * 2
  h$retain_grad()
  (h^2)$sum()$backward()
  list(as.numeric(h$grad), c(4, 8))
})
custom("u: a gradient through a traced module matches eager", function() {
  m <- nn_sequential(nn_linear(3, 4), nn_tanh(), nn_linear(4, 1))
  tm <- jit_trace(m, torch_ones(2, 3))
  x1 <- torch_randn(5, 3, requires_grad = TRUE)
  x2 <- x1$detach()$clone()$requires_grad_(TRUE)
  tm(x1)$sum()$backward()
  m(x2)$sum()$backward()
  list(x1$grad, x2$grad)
})
custom("u: autograd_backward(list(a, b))", function() {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  autograd_backward(list((x * 2)$sum(), (x * 3)$sum()))
  list(as.numeric(x$grad), c(5, 5))
})
custom("u: x$detach() stops the gradient", function() {
  x <- torch_tensor(3, requires_grad = TRUE)
  (x * x$detach())$backward()
  list(as.numeric(x$grad), 3)
})
custom("u: backward() on a non-scalar is a clear error", function() {
  x <- torch_ones(2, requires_grad = TRUE)
  (x * 2)$backward()
  list(NULL, NULL)
}, error = "scalar|grad can be implicitly created only")
custom("u: backward(gradient =) of a non-scalar", function() {
  x <- torch_ones(2, requires_grad = TRUE)
  (x * 2)$backward(gradient = torch_tensor(c(1, 0.5)))
  list(as.numeric(x$grad), c(2, 1))
})
custom("u: x$requires_grad_() then x$is_leaf", function() {
  x <- torch_ones(2)$requires_grad_()
  list(c(x$requires_grad, x$is_leaf, (x * 2)$is_leaf), c(TRUE, TRUE, FALSE))
})

# ---- seeds and devices -------------------------------------------------------------------------
custom("u: torch_manual_seed makes torch_randn reproducible", function() {
  torch_manual_seed(123)
  a <- torch_randn(4)
  torch_manual_seed(123)
  b <- torch_randn(4)
  list(a, b)
})
custom("u: torch_manual_seed makes nn_linear init reproducible", function() {
  torch_manual_seed(9)
  a <- nn_linear(3, 2)
  torch_manual_seed(9)
  b <- nn_linear(3, 2)
  list(a$weight, b$weight)
})
custom("u: the same seed gives the same dropout mask", function() {
  x <- torch_ones(10)
  torch_manual_seed(4)
  a <- nnf_dropout(x, 0.5, training = TRUE)
  torch_manual_seed(4)
  b <- nnf_dropout(x, 0.5, training = TRUE)
  list(a, b)
})
custom("u: tracing does not move the random state", function() {
  torch_manual_seed(11)
  jit_trace(function(x) x * 2, torch_ones(2))
  a <- torch_randn(3)
  torch_manual_seed(11)
  b <- torch_randn(3)
  list(a, b)
})
custom("u: torch_randint(low, high) stays in [low, high)", function() {
  torch_manual_seed(1)
  v <- as.integer(torch_randint(1, 4, size = 200))
  list(c(min(v) >= 1, max(v) <= 3), c(TRUE, TRUE))
})
# As documented in mlverse: the values 0 to n - 1 (not positions), so + 1 for R's.
custom("u: torch_randperm(n) + 1 is a permutation of 1:n", function() {
  torch_manual_seed(1)
  list(sort(as.integer(torch_randperm(5) + 1L)), 1:5)
})
custom("u: cuda_is_available() is a logical", function() {
  list(is.logical(cuda_is_available()) && length(cuda_is_available()) == 1, TRUE)
})
custom("u: x$to(device = \"cuda\") without CUDA is a clear error", function() {
  if (cuda_is_available()) stop("CUDA is available: the error path is not tested")
  list(torch_ones(2)$to(device = "cuda"), NULL)
}, error = "CUDA|cuda")
custom("u: torch_device(\"cpu\") and x$device$type", function() {
  list(torch_ones(1, device = torch_device("cpu"))$device$type, "cpu")
})
custom("u: x$is_cuda is FALSE on CPU", function() {
  list(torch_ones(1)$is_cuda, FALSE)
})

# ---- traced calls as an R user makes them ---------------------------------------------------
case("u: the identity function (an input returned as it is)", function(x) x, list(T(3)), list(T(5)))
case("u: the same tensor returned twice", function(x) {
  y <- x * 2
  list(y, y)
}, list(T(3)), list(T(5)))
case("u: an input returned next to a result", function(x) list(x, x + 1), list(T(3)), list(T(5)))
case("u: a one-element list output", function(x) list(x * 2), list(T(3)), list(T(5)))
case("u: an int64 output", function(x) x$argmax(dim = 2), list(T(3, 4)), list(T(5, 4)))
case("u: a bool output", function(x) x > 0, list(T(3, 4)), list(T(5, 4)))
case("u: a 0-d output of a sum", function(x) x$sum(), list(T(3, 4)), list(T(5, 4)))
case("u: an in-place op on the input (x$add_(1))", function(x) x$add_(1), list(T(3)), list(T(5)))
case("u: in-place relu_ on an intermediate", function(x) (x * 2)$relu_(), list(T(3)), list(T(5)))
case("u: nnf_relu(inplace = TRUE) on an intermediate", function(x) nnf_relu(x * 1, inplace = TRUE),
     list(T(3)), list(T(5)))
case("u: a module whose forward has two outputs, one unused later", mod(function() {
  self$fc <- nn_linear(3, 2)
}, function(x) {
  h <- self$fc(x)
  list(h, torch_sigmoid(h))[[2]]
}), list(T(2, 3)), list(T(5, 3)))
case("u: jit_trace of a built-in nn_linear", module(function() nn_linear(3, 2)), list(T(2, 3)),
     list(T(6, 3)))
case("u: jit_trace of nn_sequential with a custom module inside", module(function() {
  Scale <- nn_module(initialize = function(s) self$s <- s, forward = function(x) x * self$s)
  m <- nn_sequential(nn_linear(3, 3), Scale(2), nn_relu())
  m
}), list(T(2, 3)), list(T(5, 3)))
case("u: jit_trace of nn_conv2d directly", module(function() nn_conv2d(1, 2, 3)),
     list(T(1, 1, 5, 5)), list(T(3, 1, 6, 7)), tol = 1e-4)
case("u: jit_trace of nn_lstm directly returns the list", module(function() nn_lstm(3, 4)),
     list(T(5, 2, 3)), list(T(6, 3, 3)), tol = 1e-4)
case("u: forward(x, y = NULL) with y NULL", mod(function() self$fc <- nn_linear(2, 2),
  function(x, y = NULL) if (is.null(y)) self$fc(x) else self$fc(x) + y),
  list(T(3, 2)), list(T(5, 2)))
case("u: forward(...) passing extra inputs on", mod(function() self$fc <- nn_linear(2, 2),
  function(...) {
    xs <- list(...)
    self$fc(xs[[1]]) + xs[[2]]
  }), list(T(3, 2), T(3, 2)), list(T(5, 2), T(5, 2)))
custom("u: a traced module called with a named argument", function() {
  Net <- nn_module(initialize = function() self$fc <- nn_linear(2, 2),
                   forward = function(input) self$fc(input))
  m <- Net()
  tm <- jit_trace(m, torch_ones(3, 2))
  x <- torch_randn(4, 2)
  list(tm(input = x), m(input = x))
})
custom("u: a traced function called with a named argument", function() {
  f <- function(a, b) a - b
  tr <- jit_trace(f, torch_ones(2), torch_zeros(2))
  x <- torch_randn(3)
  y <- torch_randn(3)
  list(tr(b = y, a = x), f(x, y))
})
custom("u: a traced function with no inputs is refused clearly", function() {
  f <- function() torch_ones(2) * 3
  tr <- jit_trace(f)
  list(tr(), f())
}, error = "at least one example input")
custom("u: random numbers inside a trace follow the seed", function() {
  f <- function(x) x + torch_randn(x$size(1))
  tr <- jit_trace(f, torch_zeros(3))
  torch_manual_seed(5)
  a <- tr(torch_zeros(4))
  torch_manual_seed(5)
  b <- f(torch_zeros(4))
  list(a, b)
})
custom("u: dropout in train mode inside a traced module follows the seed", function() {
  m <- nn_sequential(nn_linear(4, 4), nn_dropout(0.5))
  tm <- jit_trace(m, torch_ones(2, 4))
  m$train()
  tm$train()
  x <- torch_randn(3, 4)
  torch_manual_seed(8)
  a <- tm(x)
  torch_manual_seed(8)
  b <- m(x)
  list(a, b)
})
custom("u: $train() then $eval() on a loaded module switches dropout", function() {
  m <- nn_sequential(nn_linear(4, 4), nn_dropout(0.9))
  tm <- jit_trace(m, torch_ones(2, 4))
  path <- tempfile(fileext = ".pt")
  jit_save(tm, path)
  ld <- jit_load(path)
  ld$eval()
  m$eval()
  x <- torch_randn(3, 4)
  list(ld(x), m(x))
})
custom("u: a traced submodule inside an R nn_module trains", function() {
  torch_manual_seed(3)
  inner <- nn_linear(3, 3)
  tinner <- jit_trace(inner, torch_ones(2, 3))
  Outer <- nn_module(initialize = function(core) {
    self$core <- core
    self$head <- nn_linear(3, 1)
  }, forward = function(x) self$head(torch_relu(self$core(x))))
  m <- Outer(tinner)
  opt <- optim_sgd(m$parameters, lr = 0.1)
  before <- as_array(inner$weight)
  nnf_mse_loss(m(torch_randn(4, 3)), torch_ones(4, 1))$backward()
  opt$step()
  list(any(as_array(inner$weight) != before), TRUE)
})
custom("u: jit_trace_module with forward and another method", function() {
  Net <- nn_module(initialize = function() self$fc <- nn_linear(2, 2),
                   forward = function(x) self$fc(x),
                   embed = function(x) torch_tanh(self$fc(x)))
  m <- Net()
  tm <- jit_trace_module(m, forward = list(torch_ones(3, 2)), embed = list(torch_ones(3, 2)))
  x <- torch_randn(5, 2)
  list(list(tm(x), tm$embed(x)), list(m(x), m$embed(x)))
})
custom("u: tm$graph and tm$code are text", function() {
  tm <- jit_trace(nn_linear(2, 2), torch_ones(1, 2))
  list(c(is.character(tm$graph), nzchar(paste(tm$graph, collapse = "")),
         is.character(tm$code)), c(TRUE, TRUE, TRUE))
})
custom("u: a loaded module's parameters have the original names", function() {
  m <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  tm <- jit_trace(m, torch_ones(1, 2))
  path <- tempfile(fileext = ".pt")
  jit_save(tm, path)
  list(sort(names(jit_load(path)$parameters)), sort(names(m$parameters)))
})
custom("u: a loaded function called with too few inputs is a clear error", function() {
  tr <- jit_trace(function(a, b) a + b, torch_ones(2), torch_ones(2))
  path <- tempfile(fileext = ".pt")
  jit_save(tr, path)
  list(jit_load(path)(torch_ones(2)), NULL)
}, error = "input|argument|expected")
custom("u: jit_load of a missing file is a clear error", function() {
  list(jit_load(tempfile(fileext = ".pt")), NULL)
}, error = "no file|not exist|No such")
custom("u: jit_load of a non-artifact file is a clear error", function() {
  path <- tempfile(fileext = ".pt")
  writeLines("hello", path)
  list(jit_load(path), NULL)
}, error = "not|artifact|zip|archive")

# ---- more indexing ----------------------------------------------------------------------------
case("u: x[-1] on a matrix is the last row (mlverse)", function(x) x[-1], list(T(3, 2)), list(T(5, 2)))
case("u: x[1:2, -1] last column of two rows", function(x) x[1:2, -1], list(T(3, 2)), list(T(5, 4)))
case("u: x[1:N:2] every second", function(x) x[1:N:2], list(T(5)), list(T(8)))
case("u: x[.., newaxis]", function(x) x[.., newaxis], list(T(3, 2)), list(T(5, 2)))
case("u: x[NULL, ] adds a first dim", function(x) x[NULL, ], list(T(3)), list(T(5)))
case("u: x[[1]] on a matrix is refused clearly", function(x) x[[1]], list(T(3, 2)),
     error = "index other tensors with x\\[i, j\\]")
case("u: x[1, ][2] chained", function(x) x[1, ][2], list(T(3, 2)), list(T(5, 2)))
# Recycling needs the size as an R number: a guard.
case("u: x[c(TRUE, FALSE)] recycled along a dim (guard)", function(x) x[c(TRUE, FALSE)],
     list(T(4)), list(T(6)), guard = TRUE)
case("u: y[c(1, 3), c(1, 2)] <- 0 (outer product)", function(x) {
  y <- x$clone()
  y[c(1, 3), c(1, 2)] <- 0
  y
}, list(T(3, 3)), list(T(5, 4)))
case("u: y[i, ] <- 0 with a long tensor i", function(x, i) {
  y <- x$clone()
  y[i, ] <- 0
  y
}, list(T(4, 2), ix(1L, 4L)), list(T(6, 2), ix(2L, 6L, 3L)))
case("u: y[m2d] <- values (a 2-d mask)", function(x) {
  y <- x$clone()
  y[y > 0] <- torch_zeros_like(y)[y > 0] - 1
  y
}, list(T(3, 4)), list(T(5, 4)))
case("u: y[1, ] <- torch_tensor broadcast", function(x) {
  y <- x$clone()
  y[1, ] <- torch_tensor(c(7))
  y
}, list(T(3, 4)), list(T(5, 4)))
case("u: y[, 1] <- y[, 1] * 2 in a loop over columns", function(x) {
  y <- x$clone()
  for (j in 1:2) y[, j] <- y[, j] * j
  y
}, list(T(3, 2)), list(T(5, 2)))
case("u: y[2, 2:3] <- c(8, 9)", function(x) {
  y <- x$clone()
  y[2, 2:3] <- c(8, 9)
  y
}, list(T(3, 3)), list(T(5, 3)))
case("u: y[-1, -1] <- 0 (last row, last column)", function(x) {
  y <- x$clone()
  y[-1, -1] <- 0
  y
}, list(T(3, 3)), list(T(5, 4)))
case("u: y[.., 1:2] <- 0 on 3-d", function(x) {
  y <- x$clone()
  y[.., 1:2] <- 0
  y
}, list(T(2, 3, 4)), list(T(5, 3, 4)))
case("u: y[y$isnan()] <- 0 via a method mask", function(x) {
  y <- x$clone()
  y[y$isnan()] <- 0
  y
}, list(torch_tensor(c(NaN, 1))), list(torch_tensor(c(2, NaN, NaN))))
case("u: x$index_select(1, ix)$flip(1)", function(x) x$index_select(1, ix(3L, 1L))$flip(1),
     list(T(3, 2)), list(T(5, 2)))

# ---- types and R numbers --------------------------------------------------------------------
case("u: float tensor + 1L stays float", function(x) x + 1L, list(T(3)), list(T(5)))
case("u: int tensor + 0.5 becomes float", function(x) x + 0.5, list(torch_tensor(1:3)),
     list(torch_tensor(1:5)))
case("u: int tensor / 2 is float (R's /)", function(x) x / 2, list(torch_tensor(1:3)),
     list(torch_tensor(1:5)))
case("u: x^2L and 2^x", function(x) list(x^2L, 2^x), list(T(3)), list(T(5)))
case("u: int64 compared with a float", function(x) x > 1.5, list(torch_tensor(1:3)),
     list(torch_tensor(1:5)))
case("u: bool tensor summed per row", function(x) (x > 0)$sum(dim = 2), list(T(3, 4)), list(T(5, 4)))
case("u: bool * float", function(x) (x > 0) * x, list(T(3, 4)), list(T(5, 4)))
case("u: -x on an int tensor", function(x) -x, list(torch_tensor(1:3)), list(torch_tensor(1:5)))
case("u: x$abs()$sqrt() on int64 gives float", function(x) x$abs()$sqrt(), list(torch_tensor(c(-4L, 9L))),
     list(torch_tensor(c(1L, 16L, 25L))))
case("u: torch_mean of an int tensor after $to(float)", function(x) x$to(dtype = torch_float())$mean(),
     list(torch_tensor(1:3)), list(torch_tensor(1:6)))
custom("u: torch_mean of an int64 tensor is a clear error", function() {
  list(torch_mean(torch_tensor(1:3)), NULL)
}, error = "Long|int64|floating|dtype")
custom("u: torch_tensor(3.7, dtype = torch_long()) truncates toward 0", function() {
  list(as.integer(torch_tensor(c(3.7, -3.7), dtype = torch_long())), c(3L, -3L))
})
custom("u: an int64 beyond R's integer range comes back as a double", function() {
  x <- torch_tensor(2147483647L) + 1L
  v <- as_array(x)
  list(list(v == 2147483648, is.na(v)), list(TRUE, FALSE))
})
custom("u: as.integer of an int64 beyond R's range is NA with a warning, not wrapped", function() {
  x <- torch_tensor(c(1L, 2147483647L)) * 2L
  v <- suppressWarnings(as.integer(x))
  list(v[[1]] == 2L && (is.na(v[[2]]) || v[[2]] == 4294967294), TRUE)
})
custom("u: sum of a big int64 tensor is exact", function() {
  x <- torch_tensor(rep(2000000000L, 3))
  list(as.numeric(x$sum()), 6e9)
})
custom("u: float64 keeps 1e-300 and 1e300", function() {
  v <- c(1e-300, 1e300)
  list(as_array(torch_tensor(v, dtype = torch_double())), v)
}, tol = 1e-12)
custom("u: torch_tensor(2^31) as float32 is exact", function() {
  list(as_array(torch_tensor(2^31)), 2^31)
})
custom("u: x$item() of an int64 0-d is integral", function() {
  list(torch_tensor(5L)$sum()$item(), 5)
})
custom("u: torch_tensor(TRUE) + torch_tensor(TRUE) (bool add)", function() {
  list(as.integer(torch_tensor(c(TRUE, FALSE))$to(dtype = torch_long()) + torch_tensor(c(TRUE, TRUE))),
       c(2L, 1L))
})

# ---- autograd in R code ---------------------------------------------------------------------
custom("u: manual SGD with w$sub_() under with_no_grad()", function() {
  w <- torch_tensor(c(1, 1), requires_grad = TRUE)
  x <- torch_tensor(matrix(c(1, 2, 3, 4), 2))
  for (i in 1:2) {
    loss <- (torch_mv(x, w) - 1)$pow(2)$sum()
    loss$backward()
    with_no_grad({
      w$sub_(0.01 * w$grad)
      w$grad$zero_()
    })
  }
  # The same two steps in base R: grad = 2 X^T (X w - 1).
  wr <- c(1, 1)
  xr <- matrix(c(1, 2, 3, 4), 2)
  for (i in 1:2) wr <- wr - 0.01 * as.numeric(2 * t(xr) %*% (xr %*% wr - 1))
  list(as.numeric(w), wr)
}, tol = 1e-5)
custom("u: a traced loss function and its gradient", function() {
  loss_fn <- function(pred, y) ((pred - y)^2)$mean()
  tr <- jit_trace(loss_fn, torch_ones(3), torch_zeros(3))
  p <- torch_tensor(c(1, 2, 3, 4), requires_grad = TRUE)
  tr(p, torch_zeros(4))$backward()
  list(as.numeric(p$grad), 2 * c(1, 2, 3, 4) / 4)
})
custom("u: the output of a traced module requires grad, in no_grad it does not", function() {
  tm <- jit_trace(nn_linear(2, 2), torch_ones(1, 2))
  a <- tm(torch_ones(1, 2))$requires_grad
  b <- with_no_grad(tm(torch_ones(1, 2)))$requires_grad
  list(c(a, b), c(TRUE, FALSE))
})
custom("u: gradient of an indexed assignment", function() {
  x <- torch_tensor(c(1, 2, 3), requires_grad = TRUE)
  y <- x * 1
  y[2] <- 0
  y$sum()$backward()
  list(as.numeric(x$grad), c(1, 0, 1))
})
custom("u: w$data filled in place", function() {
  m <- nn_linear(2, 1, bias = FALSE)
  m$weight$data$fill_(2)
  list(as.numeric(m$weight), c(2, 2))
})
custom("u: grad of torch_where picks branches", function() {
  x <- torch_tensor(c(-1, 2), requires_grad = TRUE)
  torch_where(x > 0, x^2, -x)$sum()$backward()
  list(as.numeric(x$grad), c(-1, 4))
})
custom("u: autograd_function (custom forward/backward)", function() {
  Sq <- autograd_function(
    forward = function(ctx, x) {
      ctx$save_for_backward(x = x)
      x^2
    },
    backward = function(ctx, grad_output) {
      list(x = 2 * ctx$saved_variables$x * grad_output)
    })
  x <- torch_tensor(c(1, 3), requires_grad = TRUE)
  Sq(x)$sum()$backward()
  list(as.numeric(x$grad), c(2, 6))
})

# ---- data, more ------------------------------------------------------------------------------
custom("u: dataloader with a custom collate_fn", function() {
  dl <- dataloader(toy_ds(4), batch_size = 2, collate_fn = function(items) {
    torch_stack(lapply(items, function(it) it$x))$sum()
  })
  got <- numeric()
  for (b in enumerate(dl)) got <- c(got, as.numeric(b))
  list(got, c(1 + 2 + 3 + 4, 5 + 6 + 7 + 8))
})
custom("u: a dataset whose .getitem returns one tensor", function() {
  ds <- dataset(initialize = function() NULL, .getitem = function(i) torch_tensor(c(i, -i) * 1.0),
                .length = function() 3)()
  b <- dataloader_next(dataloader_make_iter(dataloader(ds, batch_size = 3)))
  list(as_array(b), cbind(c(1, 2, 3), c(-1, -2, -3)))
})
custom("u: a dataset with .getbatch", function() {
  ds <- dataset(initialize = function() self$x <- torch_arange(1, 10),
                .getbatch = function(i) self$x[i],
                .length = function() 10)()
  b <- dataloader_next(dataloader_make_iter(dataloader(ds, batch_size = 4)))
  list(as.numeric(b), c(1, 2, 3, 4))
})
custom("u: dataset of R data (numbers), batched into tensors", function() {
  ds <- dataset(initialize = function() self$v <- c(5, 6, 7),
                .getitem = function(i) list(x = self$v[i]), .length = function() 3)()
  b <- dataloader_next(dataloader_make_iter(dataloader(ds, batch_size = 3)))
  list(as.numeric(b$x), c(5, 6, 7))
})
custom("u: length(dl) with batch_size 3 over 7 items", function() {
  list(length(dataloader(toy_ds(7), batch_size = 3)), 3L)
})
custom("u: ds[i] with a vector i via .getbatch-less dataset is a list per item?", function() {
  ds <- toy_ds(4)
  list(as.numeric(ds[3]$x), c(5, 6))
})
custom("u: two passes over the same dataloader", function() {
  dl <- dataloader(toy_ds(4), batch_size = 2)
  count <- function() {
    n <- 0L
    for (b in enumerate(dl)) n <- n + 1L
    n
  }
  list(c(count(), count()), c(2L, 2L))
})

# ---- nn_module features of mlverse ----------------------------------------------------------
case("u: nn_module(inherit = Parent) with super$forward()", module(function() {
  Base <- nn_module(initialize = function() self$fc <- nn_linear(2, 2),
                    forward = function(x) self$fc(x))
  Child <- nn_module(inherit = Base,
                     initialize = function() {
                       super$initialize()
                       self$scale <- 3
                     },
                     forward = function(x) super$forward(x) * self$scale)
  Child()
}), list(T(3, 2)), list(T(5, 2)))
case("u: nn_module with private fields", module(function() {
  Net <- nn_module(initialize = function() {
    self$fc <- nn_linear(2, 2)
    private$k <- 2
  }, forward = function(x) self$fc(x) * private$k, private = list(k = NULL))
  Net()
}), list(T(3, 2)), list(T(5, 2)))
case("u: nn_module with an active binding", module(function() {
  Net <- nn_module(initialize = function() self$fc <- nn_linear(2, 2),
                   forward = function(x) self$fc(x) * self$twice,
                   active = list(twice = function() 2))
  Net()
}), list(T(3, 2)), list(T(5, 2)))
case("u: nn_module initialize with arguments and match.arg", module(function() {
  Net <- nn_module(initialize = function(d_in, d_out, act = c("relu", "tanh")) {
    self$fc <- nn_linear(d_in, d_out)
    self$act <- match.arg(act)
  }, forward = function(x) {
    h <- self$fc(x)
    if (self$act == "relu") torch_relu(h) else torch_tanh(h)
  })
  Net(3, 2, act = "tanh")
}), list(T(4, 3)), list(T(6, 3)))
case("u: register_buffer / register_parameter in initialize", module(function() {
  Net <- nn_module(initialize = function() {
    self$register_buffer("offset", torch_tensor(c(1, 2)))
    self$register_parameter("gain", nn_parameter(torch_ones(2) * 2))
  }, forward = function(x) x * self$gain + self$offset)
  Net()
}), list(T(3, 2)), list(T(5, 2)))
case("u: add_module in initialize", module(function() {
  Net <- nn_module(initialize = function() {
    for (i in 1:2) self$add_module(paste0("fc", i), nn_linear(2, 2))
  }, forward = function(x) self$fc2(self$fc1(x)))
  Net()
}), list(T(3, 2)), list(T(5, 2)))
case("u: nn_init_xavier_uniform_ in initialize", module(function() {
  Net <- nn_module(initialize = function() {
    self$fc <- nn_linear(3, 3)
    nn_init_xavier_uniform_(self$fc$weight)
    nn_init_zeros_(self$fc$bias)
  }, forward = function(x) self$fc(x))
  Net()
}), list(T(2, 3)), list(T(5, 3)))
custom("u: m$named_parameters() / m$buffers / m$named_buffers()", function() {
  m <- nn_batch_norm1d(2)
  list(list(names(m$named_parameters()), sort(names(m$buffers))),
       list(c("weight", "bias"), sort(c("running_mean", "running_var", "num_batches_tracked"))))
})
custom("u: m$parameters$fc.weight by name", function() {
  Net <- nn_module(initialize = function() self$fc <- nn_linear(2, 3), forward = function(x) x)
  m <- Net()
  list(dim(m$parameters$fc.weight), c(3L, 2L))
})
custom("u: m$train(FALSE) is eval", function() {
  m <- nn_dropout(0.5)
  m$train(FALSE)
  list(m$training, FALSE)
})
custom("u: m$cpu() and m$to(device = \"cpu\") return the module", function() {
  m <- nn_linear(2, 2)
  a <- m$cpu()
  b <- m$to(device = "cpu")
  x <- torch_ones(1, 2)
  list(list(a(x), b(x)), list(m(x), m(x)))
})
custom("u: print() of a custom nn_module lists its children", function() {
  Net <- nn_module("MyNet", initialize = function() {
    self$fc1 <- nn_linear(2, 3)
    self$fc2 <- nn_linear(3, 1)
  }, forward = function(x) self$fc2(self$fc1(x)))
  out <- paste(capture.output(print(Net())), collapse = "\n")
  list(c(grepl("fc1", out), grepl("fc2", out), grepl("13", out)), c(TRUE, TRUE, TRUE))
})
custom("u: parameter groups with their own lr", function() {
  Net <- nn_module(initialize = function() {
    self$a <- nn_linear(2, 2)
    self$b <- nn_linear(2, 2)
  }, forward = function(x) self$b(self$a(x)))
  m <- Net()
  opt <- optim_sgd(list(list(params = m$a$parameters, lr = 0.1),
                        list(params = m$b$parameters, lr = 0.01)), lr = 1)
  list(c(opt$param_groups[[1]]$lr, opt$param_groups[[2]]$lr), c(0.1, 0.01))
})
custom("u: lr_reduce_on_plateau lowers lr on a flat metric", function() {
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 1)
  sched <- lr_reduce_on_plateau(opt, patience = 1, factor = 0.5)
  for (i in 1:4) sched$step(1)
  list(opt$param_groups[[1]]$lr < 1, TRUE)
})
custom("u: lr_one_cycle over 10 steps starts low and ends low", function() {
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 0.1)
  sched <- lr_one_cycle(opt, max_lr = 1, total_steps = 10)
  lrs <- numeric()
  for (i in 1:9) {
    opt$step()
    sched$step()
    lrs <- c(lrs, opt$param_groups[[1]]$lr)
  }
  list(c(max(lrs) > lrs[[1]], lrs[[9]] < max(lrs)), c(TRUE, TRUE))
})
custom("u: optim_lbfgs with a closure", function() {
  torch_manual_seed(1)
  x <- torch_randn(20, 2)
  y <- torch_matmul(x, torch_tensor(c(2, -1)))$unsqueeze(2)
  m <- nn_linear(2, 1)
  opt <- optim_lbfgs(m$parameters, lr = 1)
  calc <- function() {
    opt$zero_grad()
    loss <- nnf_mse_loss(m(x), y)
    loss$backward()
    loss
  }
  for (i in 1:5) opt$step(calc)
  list(as.numeric(nnf_mse_loss(m(x), y)) < 1e-3, TRUE)
})
custom("u: nn_utils_clip_grad_value_", function() {
  m <- nn_linear(2, 1, bias = FALSE)
  (m(torch_ones(1, 2)) * 100)$sum()$backward()
  nn_utils_clip_grad_value_(m$parameters, 0.5)
  list(as.numeric(m$weight$grad), c(0.5, 0.5))
})

# ---- R control flow in traced code ------------------------------------------------------------
case("u: tryCatch inside the traced function", function(x) {
  tryCatch(x * 2, error = function(e) x)
}, list(T(3)), list(T(5)))
case("u: local() and <<- inside the traced function", function(x) {
  acc <- x * 0
  local({
    acc <<- acc + x
  })
  acc
}, list(T(3)), list(T(5)))
case("u: repeat with break on a counter", function(x) {
  i <- 0
  repeat {
    x <- x * 2
    i <- i + 1
    if (i >= 2) break
  }
  x
}, list(T(3)), list(T(5)))
case("u: on.exit in the traced function", function(x) {
  on.exit(NULL)
  x + 1
}, list(T(3)), list(T(5)))
case("u: stopifnot(dim(x)[2] == 2)", function(x) {
  stopifnot(dim(x)[2] == 2)
  x * 2
}, list(T(3, 2)), list(T(5, 2)))
case("u: which(dim(x) == 2) picks a dim (guard)", function(x) x$sum(dim = which(dim(x) == 2)),
     list(T(3, 2)), list(T(5, 2)), guard = TRUE)
case("u: rev(seq_len(x$dim())) permutation", function(x) x$permute(rev(seq_len(x$dim()))),
     list(T(3, 2)), list(T(5, 2)))
case("u: seq(2, n) positions (guard)", function(x) x[seq(2, x$size(1))], list(T(3)), list(T(5)),
     guard = TRUE)
case("u: Reduce with accumulate over layers", function(x) {
  fs <- list(function(t) t + 1, function(t) t * 2, torch_relu)
  Reduce(function(acc, f) f(acc), fs, x)
}, list(T(3)), list(T(5)))
case("u: a closure factory (function returning a function)", function(x) {
  make_scale <- function(k) function(t) t * k
  make_scale(3)(x)
}, list(T(3)), list(T(5)))
case("u: do.call with a named argument list", function(x) {
  do.call(nnf_softmax, list(input = x, dim = 2))
}, list(T(3, 4)), list(T(5, 4)))
case("u: purrr-like Map over columns", function(x) {
  cols <- lapply(seq_len(ncol(x)), function(j) x[, j] * j)
  torch_stack(cols, dim = 2)
}, list(T(3, 2)), list(T(5, 2)))
case("u: switch on x$dim() (guard-free: rank is fixed)", function(x) {
  switch(as.character(x$dim()), "2" = x$t(), "1" = x)
}, list(T(3, 2)), list(T(5, 2)))
case("u: if (x$requires_grad)", function(x) if (x$requires_grad) x * 2 else x * 3,
     list(T(3)), list(T(5)))
case("u: torch_cat(list(x, y), 1) positional dim", function(x, y) torch_cat(list(x, y), 1),
     list(T(2, 3), T(1, 3)), list(T(4, 3), T(2, 3)))
case("u: torch_split with a vector of sizes (guard)", function(x) torch_split(x, c(1, x$size(1) - 1))[[2]],
     list(T(3, 2)), list(T(5, 2)))
case("u: nnf_one_hot then float then matmul", function(i, w) {
  torch_matmul(nnf_one_hot(i, num_classes = 4)$to(dtype = torch_float()), w)
}, list(ix(1L, 4L), T(4, 2)), list(ix(2L, 2L, 3L), T(4, 2)))

# ---- base R on tensors --------------------------------------------------------------------------
case("u: round(x, 2) / trunc / floor / sign (Math)", function(x) {
  list(round(x, 2), trunc(x), floor(x), sign(x))
}, list(T(3)), list(T(5)))
case("u: cumsum(x) and log(x, base = 2) (Math)", function(x) list(cumsum(x), log(x$abs() + 1, base = 2)),
     list(T(3)), list(T(5)))
case("u: range(x) and prod(x) (Summary)", function(x) list(range(x), prod(x)), list(T(3)), list(T(5)))
case("u: any(x > 0) / all(x > 0) as tensors", function(x) list(any(x > 0), all(x > -10)), list(T(3)),
     list(T(5)))
case("u: sum(x > 0) counts", function(x) sum(x > 0), list(T(3)), list(T(5)))
case("u: t(x) on a matrix", function(x) t(x), list(T(3, 2)), list(T(5, 2)))
case("u: x %% 2 and x %/% 2 on floats", function(x) list(x %% 2, x %/% 2), list(T(3) * 5), list(T(5) * 5))
case("u: exp(int64) gives float", function(x) exp(x), list(torch_tensor(1:3)), list(torch_tensor(1:5)))
case("u: abs(int64) stays int64", function(x) abs(x), list(torch_tensor(c(-1L, 2L))),
     list(torch_tensor(c(-3L, 2L, -1L))))
case("u: is.na(x) of a float tensor", function(x) is.na(x), list(torch_tensor(c(1, NaN))),
     list(torch_tensor(c(NaN, 2, 3))))
case("u: mean(x) of a tensor", function(x) mean(x), list(T(3, 2)), list(T(5, 2)))
custom("u: all.equal() of two tensors", function() {
  x <- torch_tensor(c(1, 2))
  list(isTRUE(all.equal(x, x$clone())), TRUE)
})
custom("u: as.vector() of a float tensor", function() {
  list(as.vector(torch_tensor(c(1.5, 2))), c(1.5, 2))
})
custom("u: length(x) of a matrix is its number of elements", function() {
  list(length(torch_ones(3, 4)), 12L)
})
custom("u: dim(x) is an integer vector, nrow/ncol too", function() {
  x <- torch_ones(3, 4)
  list(list(dim(x), nrow(x), ncol(x)), list(c(3L, 4L), 3L, 4L))
})
custom("u: x$shape is an integer vector", function() {
  list(torch_ones(2, 5)$shape, c(2L, 5L))
})

# ---- what R users get wrong: the message must say what, in R terms ----------------------------
errs <- list(
  list("sum over a dim past the rank", function() torch_sum(torch_ones(3, 4), dim = 3),
       "expected to be in range of \\[-2, 2\\], but got 3"),
  list("dim = 0", function() torch_sum(torch_ones(3), dim = 0), "1-based"),
  list("x[5, ] past the rows", function() torch_ones(3, 4)[5, ], "index 5 is out of bounds for dimension 1 with size 3"),
  list("x[, 7] past the columns", function() torch_ones(3, 4)[, 7], "index 7 is out of bounds for dimension 2"),
  list("torch_cat of mismatched sizes", function() torch_cat(list(torch_ones(3, 4), torch_ones(2, 3))),
       "except in dimension 1.*tensor number 2"),
  list("cross entropy with class 5 of 4", function() {
    nnf_cross_entropy(torch_randn(3, 4), torch_tensor(c(1L, 5L, 2L)))
  }, "Target 5 is out of bounds"),
  list("cross entropy with class 0", function() {
    nnf_cross_entropy(torch_randn(3, 4), torch_tensor(c(1L, 0L, 2L)))
  }, "1-based"),
  list("gather index past the size", function() {
    torch_gather(torch_ones(3, 4), 2, torch_tensor(matrix(c(5L, 1L, 1L), 3)))
  }, "index 5 is out of bounds for dimension 2 with size 4"),
  list("select past the size", function() torch_ones(3, 4)$select(1, 5),
       "index 5 out of range .* at dimension 1"),
  list("embedding index past the rows", function() {
    nnf_embedding(torch_tensor(c(1L, 9L)), torch_randn(4, 2))
  }, "1-based in R"),
  list("one_hot class past num_classes", function() {
    nnf_one_hot(torch_tensor(c(1L, 6L)), num_classes = 4)
  }, "at most num_classes"),
  list("index_select past the size", function() torch_ones(3, 4)$index_select(1, torch_tensor(4L)),
       "1-based in R"),
  list("view to a shape of another size", function() torch_ones(3, 4)$view(c(5, -1)),
       "invalid for input of size 12"),
  list("matmul of mismatched shapes", function() torch_matmul(torch_ones(3, 4), torch_ones(3, 2)),
       "cannot be multiplied \\(3x4 and 3x2\\)"),
  list("transpose(1, 3) of a matrix", function() torch_ones(3, 4)$transpose(1, 3),
       "range of \\[-2, 2\\], but got 3"),
  list("stack of different shapes", function() torch_stack(list(torch_ones(3, 4), torch_ones(3, 5))),
       "at entry 1 and \\[3, 5\\] at entry 2"),
  list("broadcast mismatch", function() torch_ones(3, 4) + torch_ones(2, 4),
       "must match the size of tensor b \\(2\\) at non-singleton dimension 1"),
  list("take past the elements", function() torch_take(torch_ones(3, 4), torch_tensor(13L)),
       "index 13 on a tensor of 12"),
  list("nn_linear on the wrong width", function() nn_linear(3, 2)(torch_ones(4, 4)),
       "cannot be multiplied \\(4x4 and 3x2\\)"),
  list("conv2d with the wrong channels", function() {
    nnf_conv2d(torch_randn(1, 2, 5, 5), torch_randn(3, 1, 3, 3))
  }, "to have 1 channels, but got 2"),
  list("$item() of many elements", function() torch_ones(2, 2)$item(), "4 elements cannot be converted"),
  list("x[0]", function() torch_ones(3)[0], "1-based"),
  list("x[1.5]", function() torch_ones(3)[1.5], "whole numbers"),
  list("x[NA]", function() torch_ones(3)[NA], "NA"),
  list("torch_tensor of a character vector", function() torch_tensor(c("a", "b")), "character"),
  list("torch_tensor of a data.frame", function() torch_tensor(data.frame(a = 1:2)), "as.matrix\\(df\\)"),
  list("an unknown tensor method", function() torch_ones(2)$frobnicate(), "no method `frobnicate`"),
  list("narrow past the end", function() torch_ones(4, 2)$narrow(1, 3, 3), "exceeds dimension size"),
  list("an optimizer over no parameters", function() optim_adam(list()), "empty|parameter"),
  list("a dataset without .getitem", function() dataset(initialize = function() NULL)()[1],
       "has no `.getitem\\(\\)` method"),
  list("nn_module_list forward", function() nn_module_list(list(nn_relu()))(torch_ones(2)),
       "no forward\\(\\); call its elements"),
  list("backward twice without retain_graph", function() {
    x <- torch_ones(2, requires_grad = TRUE)
    y <- (x * x)$sum()
    y$backward()
    y$backward()
  }, "second time|retain_graph"),
  list("in-place on a leaf that requires grad", function() torch_ones(2, requires_grad = TRUE)$add_(1),
       "leaf Variable that requires grad"),
  list("jit_trace of a non-function", function() jit_trace(3, torch_ones(2)),
       "must be an R function or an nn_module"),
  list("torch_load of a missing file", function() torch_load(tempfile()), "no file")
)
for (e in errs) local({
  err <- e
  custom(paste("u: error:", err[[1]]), function() list(err[[2]](), NULL), error = err[[3]])
})

# ---- factories and tensor methods, more ----------------------------------------------------
custom("u: torch_ones(c(2, 3)) with a size vector, torch_randn(size = )", function() {
  list(list(dim(torch_ones(c(2, 3))), dim(torch_randn(size = c(4, 1)))), list(c(2L, 3L), c(4L, 1L)))
})
custom("u: torch_full(list(2, 3), 1) with a list size", function() {
  list(as_array(torch_full(list(2, 3), 1)), matrix(1, 2, 3))
})
custom("u: torch_arange(0, 1, 0.25) includes the end", function() {
  list(as.numeric(torch_arange(0, 1, 0.25)), seq(0, 1, 0.25))
})
custom("u: torch_linspace(0, 1, steps = 5)", function() {
  list(as.numeric(torch_linspace(0, 1, steps = 5)), seq(0, 1, length.out = 5))
})
custom("u: torch_eye(2, 3)", function() {
  list(as_array(torch_eye(2, 3)), diag(1, 2, 3))
})
custom("u: torch_zeros(2, dtype = torch_long()) and torch_empty(0)", function() {
  list(list(torch_zeros(2, dtype = torch_long())$dtype == torch_long(), dim(torch_empty(0))),
       list(TRUE, 0L))
})
custom("u: torch_multinomial returns 1-based categories", function() {
  torch_manual_seed(1)
  list(as.integer(torch_multinomial(torch_tensor(c(0, 0, 1)), 2, replacement = TRUE)), c(3L, 3L))
})
custom("u: torch_randint(1, 10, size = 100) in [1, 10)", function() {
  torch_manual_seed(2)
  v <- as.integer(torch_randint(1, 10, size = 100))
  list(c(min(v) >= 1, max(v) <= 9), c(TRUE, TRUE))
})
custom("u: x$uniform_(-1, 1) follows the seed", function() {
  torch_manual_seed(3)
  a <- torch_empty(5)$uniform_(-1, 1)
  torch_manual_seed(3)
  b <- torch_empty(5)$uniform_(-1, 1)
  list(list(a, all(as_array(a) >= -1 & as_array(a) <= 1)), list(b, TRUE))
})
custom("u: torch_normal(mean, std) with tensors", function() {
  torch_manual_seed(4)
  a <- torch_normal(torch_zeros(3), torch_ones(3))
  list(dim(a), 3L)
})
custom("u: x$bernoulli_(0.5) is 0 or 1", function() {
  torch_manual_seed(5)
  v <- as.numeric(torch_empty(50)$bernoulli_(0.5))
  list(all(v %in% c(0, 1)), TRUE)
})
custom("u: nnf_gumbel_softmax(hard = TRUE) rows are one-hot", function() {
  torch_manual_seed(6)
  y <- nnf_gumbel_softmax(torch_randn(4, 3), tau = 1, hard = TRUE)
  list(as.numeric(y$sum(dim = 2)), rep(1, 4))
})
case("u: x$type_as(y)", function(x, y) x$type_as(y), list(T(3), torch_tensor(1:3)),
     list(T(5), torch_tensor(1:5)))
case("u: x$contiguous() after a transpose", function(x) x$t()$contiguous()$view(-1), list(T(3, 2)),
     list(T(5, 2)))
case("u: x$sum(dim = c(1, 2)) keepdim", function(x) x$sum(dim = c(1, 2), keepdim = TRUE),
     list(T(2, 3, 4)), list(T(5, 3, 4)))
case("u: x$max() of all, x$max(dim = 1)", function(x) list(x$max(), x$max(dim = 1)[[2]]),
     list(T(3, 4)), list(T(5, 4)))
case("u: x$sort(descending = TRUE)", function(x) x$sort(descending = TRUE)[[1]], list(T(5)), list(T(7)))
case("u: x$lt(0) / x$eq(y) / x$ne(y)", function(x, y) list(x$lt(0), x$eq(y), x$ne(y)),
     list(T(3), T(3)), list(T(5), T(5)))
case("u: x$masked_fill_(m, 0) on a clone", function(x) x$clone()$masked_fill_(x > 0, 0),
     list(T(3, 4)), list(T(5, 4)))
case("u: x$index_fill_(2, idx, -1) on a clone", function(x) x$clone()$index_fill_(2, ix(1L), -1),
     list(T(3, 4)), list(T(5, 4)))
case("u: x$clamp_(min = 0) on a clone", function(x) x$clone()$clamp_(min = 0), list(T(3)), list(T(5)))
case("u: x$fill_diagonal_(0) in a trace is refused clearly (not in the op set)",
     function(x) x$clone()$fill_diagonal_(0), list(T(3, 3)), error = "not in tracebridge.s op set")
case("u: x$where(cond, y)", function(x, y) x$where(x > 0, y), list(T(3), T(3)), list(T(5), T(5)))
case("u: x$chunk(2) / x$split(2)", function(x) list(x$chunk(2)[[1]], x$split(2)[[2]]), list(T(4)),
     list(T(4)))
custom("u: x$unique() sorted values", function() {
  list(as.numeric(torch_tensor(c(3, 1, 3, 2))$unique()), c(1, 2, 3))
})
custom("u: x$stride() and x$is_contiguous()", function() {
  x <- torch_ones(2, 3)
  list(list(x$stride(), x$t()$is_contiguous()), list(c(3L, 1L), FALSE))
})
custom("u: x$ndimension() / x$dim() / x$numel()", function() {
  x <- torch_ones(2, 3, 4)
  list(c(x$ndimension(), x$dim(), x$numel()), c(3L, 3L, 24L))
})
custom("u: x$grad_fn is NULL for a leaf, set for a result", function() {
  x <- torch_ones(2, requires_grad = TRUE)
  list(c(is.null(x$grad_fn), !is.null((x * 2)$grad_fn)), c(TRUE, TRUE))
})
custom("u: torch_save/torch_load(device = \"cpu\")", function() {
  path <- tempfile(fileext = ".pt")
  torch_save(torch_ones(2), path)
  list(torch_load(path, device = "cpu")$device$type, "cpu")
})
custom("u: m$eval() returns the module for chaining", function() {
  m <- nn_linear(2, 2)
  out <- m$eval()
  list(inherits(out, "nn_module") && !m$training, TRUE)
})
custom("u: jit_trace(check_trace = FALSE) still runs right", function() {
  f <- function(x) x$cumsum(1)
  tr <- jit_trace(f, torch_ones(3), check_trace = FALSE)
  x <- torch_randn(6)
  list(tr(x), f(x))
})
custom("u: a loaded function's $graph mentions its ops", function() {
  tr <- jit_trace(function(x) torch_tanh(x) + 1, torch_ones(2))
  path <- tempfile(fileext = ".pt")
  jit_save(tr, path)
  list(grepl("tanh", jit_load(path)$graph), TRUE)
})

# ---- traced sizes in the R an R user writes around them -------------------------------------
case("u: x$view(c(x$size(1), prod(dim(x)[-1]))) flatten", function(x) {
  x$view(c(x$size(1), prod(dim(x)[-1])))
}, list(T(2, 3, 4)), list(T(5, 3, 2)))
case("u: Reduce(`*`, dim(x)[-1])", function(x) x$reshape(c(-1, Reduce(`*`, dim(x)[-1]))),
     list(T(2, 3, 4)), list(T(5, 2, 2)))
case("u: tail(dim(x), -1) and head(dim(x), 1)", function(x) {
  x$reshape(c(head(dim(x), 1), prod(tail(dim(x), -1))))
}, list(T(2, 3, 4)), list(T(5, 2, 2)))
case("u: dim(x)[2:3]", function(x) torch_zeros(dim(x)[2:3]) + x[1, , ], list(T(2, 3, 4)),
     list(T(5, 2, 2)))
case("u: dim(x)[length(dim(x))]", function(x) x / dim(x)[length(dim(x))], list(T(2, 3)),
     list(T(5, 4)))
case("u: nrow(x) * ncol(x)", function(x) x / (nrow(x) * ncol(x)), list(T(2, 3)), list(T(5, 4)))
case("u: NROW(x) and NCOL(x)", function(x) x / (NROW(x) + NCOL(x)), list(T(2, 3)), list(T(5, 4)))
case("u: ceiling(n / 2) and round(n / 2)", function(x) {
  x[1:ceiling(x$size(1) / 2)]$sum() + round(x$size(1) / 2)
}, list(T(4)), list(T(7)), guard = TRUE)
case("u: pmax(n, 3) (guard)", function(x) x * pmax(x$size(1), 3), list(T(4)), list(T(7)), guard = TRUE)
case("u: n^0.5", function(x) x / x$size(1)^0.5, list(T(4)), list(T(9)))
case("u: do.call(torch_zeros, as.list(dim(x)))", function(x) do.call(torch_zeros, as.list(dim(x))) + x,
     list(T(2, 3)), list(T(5, 4)))
case("u: x$new_zeros(dim(x))", function(x) x$new_zeros(dim(x)) + x, list(T(2, 3)), list(T(5, 4)))
case("u: x$view(c(-1, dim(x)[3]))", function(x) x$view(c(-1, dim(x)[3])), list(T(2, 3, 4)),
     list(T(5, 3, 2)))
case("u: sprintf(\"%d rows\", n) (guard)", function(x) {
  msg <- sprintf("%d rows", x$size(1))
  x * nchar(msg)
}, list(T(4)), list(T(12)), guard = TRUE)
case("u: dim(x) %/% 2 as a size", function(x) torch_zeros(dim(x) %/% 2)$sum() + x, list(T(4, 6)),
     list(T(8, 2)))
case("u: sum(seq_len(n)) (guard)", function(x) x * sum(seq_len(x$size(1))), list(T(4)), list(T(5)),
     guard = TRUE)
case("u: unlist(lapply(dims)) of sizes (guard)", function(x) {
  x$reshape(unlist(lapply(dim(x), function(d) d)))
}, list(T(2, 3)), list(T(5, 4)), guard = TRUE)
case("u: c(n, 2) * 2 as sizes", function(x) torch_zeros(c(x$size(1), 2) * 2)$sum() + x, list(T(2)),
     list(T(5)))
case("u: as.list(dim(x)) to a factory", function(x) torch_ones(as.list(dim(x))) * x,
     list(T(2, 3)), list(T(5, 4)))
case("u: x$size(1) / x$size(2) ratio", function(x) x * (x$size(1) / x$size(2)), list(T(2, 4)),
     list(T(6, 3)))
case("u: a size passed to a helper with a default", function(x) {
  pad_to <- function(t, n = t$size(1) + 2) nnf_pad(t, c(0, n - t$size(1)))
  pad_to(x)
}, list(T(3)), list(T(5)))
case("u: seq_len(x$dim()) loop over dims (rank fixed)", function(x) {
  s <- x
  for (d in seq_len(x$dim())) s <- s$cumsum(dim = d)
  s
}, list(T(2, 3)), list(T(4, 5)))
case("u: dims vector c(1, x$dim())", function(x) x$sum(dim = c(1, x$dim())), list(T(2, 3, 4)),
     list(T(5, 3, 2)))

# ---- tensors of positions with negative and zero entries ---------------------------------
case("u: y[i] <- 0 with i = -1 as a tensor (the last)", function(x, i) {
  y <- x$clone()
  y[i] <- 0
  y
}, list(T(4), torch_tensor(-1L)), list(T(6), torch_tensor(-2L)))
case("u: torch_index_put with a negative position tensor", function(x, i) {
  torch_index_put(x, list(i), torch_tensor(0))
}, list(T(4), torch_tensor(c(-1L, 1L))), list(T(6), torch_tensor(c(2L, -3L))))
case("u: torch_take with a negative position", function(x, i) torch_take(x, i),
     list(T(2, 3), torch_tensor(c(-1L, 2L))), list(T(4, 3), torch_tensor(c(-12L, 5L))))
case("u: x$index_fill(1, -1 tensor, 0)", function(x, i) x$index_fill(1, i, 0),
     list(T(4, 2), torch_tensor(-1L)), list(T(6, 2), torch_tensor(c(-1L, -6L))))
custom("u: a 0 in a tensor of positions is an error that says 0", function() {
  list(torch_tensor(c(1, 2, 3))$index_fill(1, torch_tensor(0L), 9), NULL)
}, error = "index 0 \\(positions are 1-based")
