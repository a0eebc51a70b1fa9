# Autograd, losses, optimizers, schedulers and data loading: an R user trains a model.

test_that("autograd: backward, grad, grad_fn, detach, no_grad, autograd_grad", {
  x <- torch_tensor(c(1, 2, 3), requires_grad = TRUE)
  y <- (x^2)$sum()
  expect_equal(y$grad_fn$name, "SumBackward0")
  y$backward()
  expect_equal(as_array(x$grad), c(2, 4, 6))
  expect_null(torch_ones(2)$grad_fn)
  expect_false(x$detach()$requires_grad)
  expect_true(torch_ones(2)$requires_grad_()$requires_grad)
  z <- with_no_grad(x * 2)
  expect_false(z$requires_grad)
  inner <- with_no_grad(with_enable_grad(x * 2))
  expect_true(inner$requires_grad)
  g <- autograd_grad((x^3)$sum(), x)
  expect_equal(as_array(g[[1]]), c(3, 12, 27))
  w <- torch_ones(2)
  w$requires_grad <- TRUE
  expect_true(w$requires_grad)
  expect_s3_class(x$data, "torch_tensor")
  expect_false(x$data$requires_grad)
})

test_that("losses match their definitions", {
  p <- torch_tensor(c(1, 2, 3))
  t <- torch_tensor(c(1, 1, 1))
  expect_equal(nnf_mse_loss(p, t)$item(), 5 / 3, tolerance = 1e-6)
  expect_equal(nnf_l1_loss(p, t)$item(), 1, tolerance = 1e-6)
  expect_equal(nn_mse_loss(reduction = "sum")(p, t)$item(), 5, tolerance = 1e-6)
  bce <- nnf_binary_cross_entropy(torch_tensor(c(0.5, 0.5)), torch_tensor(c(0, 1)))
  expect_equal(bce$item(), log(2), tolerance = 1e-6)
  expect_equal(nn_bce_with_logits_loss()(torch_zeros(2), torch_ones(2))$item(), log(2),
               tolerance = 1e-6)
})

test_that("optimizers and schedulers train a model; lr follows lr_step and lr_one_cycle", {
  torch_manual_seed(0)
  X <- torch_randn(64, 3)
  Y <- X$matmul(torch_tensor(c(1, -2, 0.5)))$unsqueeze(2)
  for (make in list(function(p) optim_sgd(p, lr = 0.1), function(p) optim_adam(p, lr = 0.05),
                    function(p) optim_adamw(p, lr = 0.05), function(p) optim_rmsprop(p, lr = 0.01),
                    function(p) optim_adagrad(p, lr = 0.5))) {
    model <- nn_linear(3, 1)
    opt <- make(model$parameters)
    first <- nnf_mse_loss(model(X), Y)$item()
    for (i in 1:60) {
      opt$zero_grad()
      loss <- nnf_mse_loss(model(X), Y)
      loss$backward()
      opt$step()
    }
    expect_lt(loss$item(), first / 4)
  }
  opt <- optim_sgd(nn_linear(1, 1)$parameters, lr = 1)
  sched <- lr_step(opt, step_size = 2, gamma = 0.1)
  lrs <- numeric()
  for (i in 1:4) {
    opt$step()
    sched$step()
    lrs <- c(lrs, opt$param_groups[[1]]$lr)
  }
  expect_equal(lrs, c(1, 0.1, 0.1, 0.01), tolerance = 1e-9)
  opt2 <- optim_sgd(nn_linear(1, 1)$parameters, lr = 0.1)
  oc <- lr_one_cycle(opt2, max_lr = 1, total_steps = 10)
  expect_equal(opt2$param_groups[[1]]$lr, 1 / 25, tolerance = 1e-9)
  groups <- opt2$param_groups
  groups[[1]]$lr <- 0.5
  opt2$param_groups <- groups
  expect_equal(opt2$param_groups[[1]]$lr, 0.5)
})

test_that("datasets and data loaders batch, shuffle and collate", {
  ds <- tensor_dataset(x = torch_tensor(matrix(as.double(1:20), 10)), y = torch_tensor(1:10))
  expect_equal(length(ds), 10L)
  expect_equal(as_array(ds[3]$x), c(3, 13))
  expect_equal(as_array(ds[3]$y), 3L)
  dl <- dataloader(ds, batch_size = 4)
  expect_equal(length(dl), 3L)
  it <- dataloader_make_iter(dl)
  b1 <- dataloader_next(it)
  expect_equal(dim(b1$x), c(4L, 2L))
  expect_equal(as_array(b1$y), 1:4)
  dataloader_next(it)
  b3 <- dataloader_next(it)
  expect_equal(as_array(b3$y), 9:10)
  expect_null(dataloader_next(it))
  expect_equal(dataloader_next(it, completed = "done"), "done")
  expect_equal(length(dataloader(ds, batch_size = 4, drop_last = TRUE)), 2L)
  torch_manual_seed(1)
  sh <- dataloader(ds, batch_size = 10, shuffle = TRUE)
  ys <- as_array(dataloader_next(dataloader_make_iter(sh))$y)
  expect_setequal(ys, 1:10)
  expect_false(identical(ys, 1:10))
  Squares <- dataset("Squares",
    initialize = function(n) self$n <- n,
    .getitem = function(i) list(x = torch_tensor(i), y = i^2),
    .length = function() self$n
  )
  sq <- dataloader(Squares(5), batch_size = 2)
  b <- dataloader_next(dataloader_make_iter(sq))
  expect_equal(as_array(b$x), matrix(c(1, 2), 2))
  expect_equal(as_array(b$y), c(1, 4))
})

test_that("torch_save and torch_load round-trip tensors, lists and module state, no pickle", {
  path <- tempfile(fileext = ".pt")
  obj <- list(w = torch_tensor(matrix(c(1.5, 2, 3, 4), 2)), i = torch_tensor(1:3),
              nested = list(torch_tensor(c(TRUE, FALSE)), "text", 2L), none = NULL)
  torch_save(obj, path)
  back <- torch_load(path)
  expect_equal(as_array(back$w), matrix(c(1.5, 2, 3, 4), 2))
  expect_equal(as_array(back$i), 1:3)
  expect_equal(as_array(back$nested[[1]]), c(TRUE, FALSE))
  expect_equal(back$nested[[2]], "text")
  expect_equal(back$nested[[3]], 2L)
  expect_true(back$w$dtype == torch_float())
  files <- utils::unzip(path, list = TRUE)$Name
  expect_setequal(files, c("torch_save.json", "tensors.safetensors"))
  model <- nn_sequential(nn_linear(3, 2), nn_relu())
  torch_save(model, path)
  model2 <- nn_sequential(nn_linear(3, 2), nn_relu())
  model2$load_state_dict(torch_load(path))
  x <- torch_randn(4, 3)
  expect_equal(as_array(model2(x)), as_array(model(x)))
  bad <- tempfile()
  writeLines("not a torch_save file", bad)
  expect_error(torch_load(bad), class = "tracebridge_artifact_error")
})

test_that("devices: device arguments, torch_device(), cuda_is_available()", {
  d <- torch_device("cpu")
  expect_equal(d$type, "cpu")
  x <- torch_zeros(2, device = d)
  expect_true(x$device == "cpu")
  expect_true(torch_tensor(1, device = "cpu")$device == d)
  expect_type(cuda_is_available(), "logical")
  expect_s3_class(x$to(device = "cpu"), "torch_tensor")
  if (!cuda_is_available()) expect_error(x$cuda(), class = "tracebridge_error")
})

# ---- mlverse exports added last: embedding bags, CTC, L-BFGS, three schedulers ----------

test_that("nn_embedding_bag: 1-based indices and padding_idx, 0-based offsets (as mlverse)", {
  torch_manual_seed(1)
  e <- nn_embedding_bag(10, 3, mode = "sum")
  w <- as_array(e$weight)
  input <- torch_tensor(c(1, 2, 4, 5, 4, 3, 2, 9), dtype = torch_long())
  out <- as_array(e(input, torch_tensor(c(0, 4), dtype = torch_long())))
  expect_equal(out[1, ], colSums(w[c(1, 2, 4, 5), ]), tolerance = 1e-6)
  expect_equal(out[2, ], colSums(w[c(4, 3, 2, 9), ]), tolerance = 1e-6)
  # Offsets as an R vector; bags of a 2-d input; the mean mode (the default).
  expect_equal(as_array(e(c(1, 2, 4, 5, 4, 3, 2, 9), offsets = c(0, 4))), out, tolerance = 1e-6)
  m <- nn_embedding_bag(10, 3)
  wm <- as_array(m$weight)
  o2 <- as_array(m(torch_tensor(rbind(c(1, 2, 4, 5), c(4, 3, 2, 9)), dtype = torch_long())))
  expect_equal(o2[2, ], colMeans(wm[c(4, 3, 2, 9), ]), tolerance = 1e-6)
  p <- nn_embedding_bag(10, 3, mode = "sum", padding_idx = 1)
  expect_equal(as_array(p$weight[1, ]), c(0, 0, 0))
  wp <- as_array(p$weight)
  op <- as_array(p(torch_tensor(rbind(c(1, 3, 1, 6)), dtype = torch_long())))
  expect_equal(op[1, ], colSums(wp[c(3, 6), ]), tolerance = 1e-6)
  f <- nnf_embedding_bag(input, e$weight, offsets = c(0, 4), mode = "max")
  expect_equal(as_array(f)[1, ], apply(w[c(1, 2, 4, 5), ], 2, max), tolerance = 1e-6)
  expect_error(e(c(0, 1), offsets = 0), class = "index_error")
})

test_that("nn_ctc_loss / nnf_ctc_loss: blank = 0 is the first class, labels as mlverse", {
  # Two classes (blank = 0, label 1), uniform probabilities. One step, target "1": one
  # alignment, loss log(2). Two steps: alignments 11, 01, 10 of probability 1/4 each.
  lp1 <- torch_log(torch_full(c(1, 1, 2), 0.5))
  expect_equal(nnf_ctc_loss(lp1, torch_tensor(matrix(1L)), 1, 1)$item(), log(2),
               tolerance = 1e-6)
  lp2 <- torch_log(torch_full(c(2, 1, 2), 0.5))
  expect_equal(nnf_ctc_loss(lp2, 1, 2, 1, reduction = "sum")$item(), -log(3 / 4),
               tolerance = 1e-6)
  # The same with the blank moved to the last class (index 1 here) and label 0.
  expect_equal(nn_ctc_loss(blank = 1)(lp2, torch_tensor(matrix(0L)), torch_tensor(2L),
                                      torch_tensor(1L))$item(), -log(3 / 4), tolerance = 1e-6)
  expect_error(nnf_ctc_loss(lp2, torch_tensor(matrix(1)), 2, 1), class = "type_error")
})

test_that("optim_lbfgs steps with a closure and returns the loss; errors in it stay R's", {
  x <- torch_tensor(c(1, 2, 3, 4))$unsqueeze(2)
  y <- 2 * x + 1
  torch_manual_seed(3)
  fit <- nn_linear(1, 1)
  opt <- optim_lbfgs(fit$parameters, line_search_fn = "strong_wolfe")
  closure <- function() {
    opt$zero_grad()
    loss <- nnf_mse_loss(fit(x), y)
    loss$backward()
    loss
  }
  first <- opt$step(closure)
  expect_s3_class(first, "torch_tensor")
  for (i in 1:4) opt$step(closure)
  expect_equal(as_array(fit$weight)[1, 1], 2, tolerance = 1e-4)
  expect_equal(as_array(fit$bias), 1, tolerance = 1e-4)
  expect_error(opt$step(function() stop("my closure failed")), "my closure failed")
  expect_error(opt$step(function() 1), class = "type_error")
  expect_null(optim_sgd(fit$parameters, lr = 0.1)$step())
})

test_that("lr_lambda, lr_multiplicative and lr_reduce_on_plateau follow their definitions", {
  opt <- optim_sgd(nn_linear(1, 1)$parameters, lr = 1)
  sched <- lr_lambda(opt, lr_lambda = function(epoch) 0.5^epoch)
  lrs <- opt$param_groups[[1]]$lr
  for (i in 1:3) {
    opt$step()
    sched$step()
    lrs <- c(lrs, opt$param_groups[[1]]$lr)
  }
  expect_equal(lrs, c(1, 0.5, 0.25, 0.125))
  expect_equal(sched$get_last_lr(), 0.125)
  opt <- optim_sgd(nn_linear(1, 1)$parameters, lr = 1)
  mult <- lr_multiplicative(opt, lr_lambda = list(function(epoch) 0.9))
  for (i in 1:2) {
    opt$step()
    mult$step()
  }
  expect_equal(opt$param_groups[[1]]$lr, 0.81)
  # Patience 1: the second epoch in a row without improvement halves the rate.
  opt <- optim_sgd(nn_linear(1, 1)$parameters, lr = 1)
  plateau <- lr_reduce_on_plateau(opt, factor = 0.5, patience = 1)
  lrs <- numeric()
  for (v in c(1, 2, 2, 2, 2, 0.5)) {
    plateau$step(torch_tensor(v))
    lrs <- c(lrs, opt$param_groups[[1]]$lr)
  }
  expect_equal(lrs, c(1, 1, 0.5, 0.5, 0.25, 0.25))
  mx <- lr_reduce_on_plateau(opt, mode = "max", factor = 0.1, patience = 0)
  mx$step(1)
  mx$step(0.5)
  expect_equal(opt$param_groups[[1]]$lr, 0.025)
  expect_error(plateau$step("high"), class = "type_error")
  expect_error(lr_lambda(opt, function(epoch) "a"), class = "type_error")
  expect_error(lr_lambda(opt, 0.5), class = "type_error")
})

test_that("training resumes exactly from torch_save()d model, optimizer and scheduler state", {
  torch_manual_seed(7)
  X <- torch_randn(16, 3)
  Y <- X$matmul(torch_tensor(c(1, -2, 0.5)))$unsqueeze(2)
  init <- nn_linear(3, 1)$state_dict()
  setup <- function(make_opt) {
    model <- nn_linear(3, 1)
    model$load_state_dict(init)
    opt <- make_opt(model$parameters)
    list(model = model, opt = opt, sched = lr_step(opt, step_size = 2, gamma = 0.5))
  }
  train <- function(s, n) {
    for (i in seq_len(n)) {
      s$opt$zero_grad()
      loss <- nnf_mse_loss(s$model(X), Y)
      loss$backward()
      s$opt$step()
      s$sched$step()
    }
    s
  }
  makers <- list(adam = function(p) optim_adam(p, lr = 0.05),
                 sgd = function(p) optim_sgd(p, lr = 0.03, momentum = 0.9),
                 rmsprop = function(p) optim_rmsprop(p, lr = 0.01, centered = TRUE),
                 adagrad = function(p) optim_adagrad(p, lr = 0.3))
  for (nm in names(makers)) {
    straight <- train(setup(makers[[nm]]), 6)
    first <- train(setup(makers[[nm]]), 3)
    path <- tempfile(fileext = ".pt")
    torch_save(list(model = first$model$state_dict(), opt = first$opt$state_dict(),
                    sched = first$sched$state_dict()), path)
    train(first, 2)  # steps after saving change neither the file nor the saved state
    state <- torch_load(path)
    resumed <- setup(makers[[nm]])
    resumed$model$load_state_dict(state$model)
    resumed$opt$load_state_dict(state$opt)
    resumed$sched$load_state_dict(state$sched)
    resumed <- train(resumed, 3)
    expect_identical(as_array(resumed$model$weight), as_array(straight$model$weight),
                     label = nm)
    expect_identical(as_array(resumed$model$bias), as_array(straight$model$bias), label = nm)
    expect_identical(resumed$opt$param_groups[[1]]$lr, straight$opt$param_groups[[1]]$lr)
    expect_identical(resumed$sched$last_epoch, 6L)
  }
  sd <- optim_adam(nn_linear(2, 1)$parameters)$state_dict()
  expect_equal(sd$param_groups[[1]]$params, 1:2)
  expect_equal(length(sd$state), 0L)
  opt <- optim_adam(nn_linear(2, 1)$parameters)
  expect_error(opt$load_state_dict(list(1)), class = "value_error")
  plateau <- lr_reduce_on_plateau(optim_sgd(nn_linear(1, 1)$parameters, lr = 1))
  path <- tempfile(fileext = ".pt")
  torch_save(plateau$state_dict(), path)
  expect_identical(torch_load(path)$best, Inf)
})

test_that("zero_grad() sets gradients to zero in place, as mlverse does", {
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 0.1)
  m(torch_ones(1, 2))$sum()$backward()
  opt$zero_grad()
  expect_equal(as_array(m$weight$grad), matrix(0, 1, 2))
  m(torch_ones(1, 2))$sum()$backward()
  m$zero_grad()
  expect_equal(as_array(m$bias$grad), 0)
  opt$zero_grad(set_to_none = TRUE)
  expect_null(m$bias$grad)
  # the methods kept in the optimizer (new_optimizer()) and those of what zero_grad() returns
  m(torch_ones(1, 2))$sum()$backward()
  again <- opt$zero_grad(set_to_none = FALSE)
  expect_equal(as_array(m$bias$grad), 0)
  m(torch_ones(1, 2))$sum()$backward()
  before <- as_array(m$bias)
  again$step()
  expect_equal(as_array(m$bias), before - 0.1, tolerance = 1e-6)
  expect_s3_class(again, "optim_sgd")
  expect_error(opt$no_such_method, "Optimizers have no method or field `no_such_method`")
})

test_that("zero_grad() in C leaves the state torch's own zero_grad(set_to_none=False) does", {
  skip_if_no_torch()
  # One state, zeroed by each path: src/optim.c, and Python's method through reticulate.
  state <- function(c_path) {
    torch_manual_seed(3)
    m <- nn_linear(3, 2)
    extra <- torch_ones(2, requires_grad = TRUE) # a second group, never given a gradient
    opt <- optim_adam(m$parameters, lr = 0.1)
    opt$add_param_group(list(params = list(extra)))
    # A gradient with a grad_fn (create_graph = TRUE): zero_grad() detaches it.
    x <- torch_ones(4, 3)
    m(x)$pow(2)$sum()$backward(create_graph = TRUE)
    had_fn <- !is.null(m$weight$grad$grad_fn)
    g <- m$weight$grad
    tracebridge:::set_c_call(c_path)
    on.exit(tracebridge:::set_c_call(TRUE))
    opt$zero_grad()
    list(had_fn = had_fn, weight = as_array(m$weight$grad), bias = as_array(m$bias$grad),
         fn = is.null(m$weight$grad$grad_fn), requires = m$weight$grad$requires_grad,
         same = identical(as_array(g), as_array(m$weight$grad)), extra = is.null(extra$grad))
  }
  in_c <- state(TRUE)
  in_py <- state(FALSE)
  expect_true(in_c$had_fn)
  expect_identical(in_c, in_py)
  expect_identical(in_c$weight, matrix(0, 2, 3))
  expect_true(in_c$fn)
  expect_false(in_c$requires)
  expect_true(in_c$same) # in place: the tensor R held is the one zeroed
  expect_true(in_c$extra)
  # The gradient of a training step after zero_grad() is that step's alone.
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 0.1)
  for (i in 1:3) {
    opt$zero_grad()
    m(torch_ones(1, 2))$sum()$backward()
  }
  expect_equal(as_array(m$weight$grad), matrix(1, 1, 2))
})

test_that("torch_save keeps requires_grad and doubles to the last bit", {
  path <- tempfile(fileext = ".pt")
  vals <- c(0.1 * 0.1, 1 / 3, -Inf, NaN, 1e-300)
  torch_save(list(w = torch_tensor(c(1, 2), requires_grad = TRUE), v = vals,
                  m = matrix(c(0.1, 0.2, 0.3, 2 / 3), 2)), path)
  back <- torch_load(path)
  expect_true(back$w$requires_grad)
  expect_identical(back$v, vals)
  expect_identical(back$m, matrix(c(0.1, 0.2, 0.3, 2 / 3), 2))
})

test_that("a shuffled data loader follows torch_manual_seed(), as in mlverse", {
  ds <- tensor_dataset(torch_tensor(1:20))
  pass <- function() {
    torch_manual_seed(11)
    as_array(dataloader_next(dataloader_make_iter(dataloader(ds, batch_size = 20,
                                                            shuffle = TRUE)))[[1]])
  }
  first <- pass()
  expect_identical(pass(), first)
  expect_setequal(first, 1:20)
  torch_manual_seed(11)
  expect_equal(as_array(torch_randperm(20)) + 1L, first)
})

test_that("an optimizer given a module instead of its parameters says so", {
  expect_error(optim_sgd(nn_linear(1, 1), lr = 0.1), "model\\$parameters")
  expect_error(optim_adam(nn_linear(1, 1)), class = "type_error")
})

test_that("dataloader() takes mlverse's arguments: num_workers etc. run in-process", {
  ds <- tensor_dataset(torch_tensor(1:6))
  dl <- dataloader(ds, batch_size = 4, num_workers = 2, pin_memory = TRUE,
                   worker_init_fn = function(id) NULL, drop_last = TRUE)
  expect_equal(length(dl), 1L)
  expect_equal(as_array(dataloader_next(dataloader_make_iter(dl))[[1]]), 1:4)
  expect_error(dataloader(ds, sampler = 1:6), class = "not_implemented_error")
})

test_that("x$register_hook() sees and can replace the gradient; its R errors stay R's", {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  seen <- NULL
  x$register_hook(function(g) {
    seen <<- as_array(g)
    g * 10
  })
  (x * 3)$sum()$backward()
  expect_equal(seen, c(3, 3))
  expect_equal(as_array(x$grad), c(30, 30))
  y <- torch_tensor(1, requires_grad = TRUE)
  y$register_hook(function(g) stop("hook failed"))
  expect_error((y * 2)$backward(), "hook failed")
  z <- torch_tensor(1, requires_grad = TRUE)
  z$register_hook(function(g) "no")
  expect_error((z * 2)$backward(), class = "type_error")
})

test_that("a scheduler refuses a state that is not one", {
  sched <- lr_step(optim_sgd(nn_linear(1, 1)$parameters, lr = 1), step_size = 1)
  expect_error(sched$load_state_dict(list(1, 2)), class = "type_error")
  expect_output(print(sched), "<lr_step> last_epoch: 0")
})

test_that("a training loop in R ends with the weights the same loop gives in Python", {
  skip_if_no_torch()
  # benchmarks/bench_r.R's loop, small: 1-based positions and class targets in R, 0-based
  # in Python; the same seeds, so the same initial weights and permutations.
  n <- 200L
  torch_manual_seed(2)
  X <- torch_randn(n, 20)
  Y <- (X[, 1] > 0)$long() + 1L
  torch_manual_seed(1)
  model <- nn_sequential(nn_linear(20, 64), nn_relu(), nn_linear(64, 64), nn_relu(),
                         nn_linear(64, 2))
  opt <- optim_adam(model$parameters, lr = 1e-3)
  adam_in_c <- .Call(tracebridge:::tb_adam_calls)
  for (epoch in 1:2) {
    perm <- torch_randperm(n) + 1L
    for (s in seq(1L, n, by = 32L)) {
      idx <- perm[s:min(s + 31L, n)]
      xb <- X[idx, ]
      yb <- Y[idx]
      opt$zero_grad()
      loss <- nnf_cross_entropy(model(xb), yb)
      loss$backward()
      opt$step()
    }
  }
  train_py <- reticulate::py_run_string("
import torch
import torch.nn.functional as F
def _tb_train(X, Y, n):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        perm = torch.randperm(n)
        for s in range(0, n, 32):
            idx = perm[s:s + 32]
            opt.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(X[idx]), Y[idx])
            loss.backward()
            opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]
", local = FALSE, convert = FALSE)$`_tb_train`
  weights_py <- reticulate::py_to_r(train_py(X$clone()$py, (Y - 1L)$py, n))
  weights_r <- lapply(unname(model$parameters), as_array)
  # Every step but the first (which makes Adam's state) ran in C (src/adam.c).
  expect_equal(.Call(tracebridge:::tb_adam_calls) - adam_in_c, 2 * 7 - 1)
  expect_length(weights_r, 6)
  for (k in seq_along(weights_r)) {
    expect_identical(as.vector(weights_r[[k]]), as.vector(weights_py[[k]]))
  }
})

test_that("Adam's step in C gives Python's weights to the last bit, and leaves what it does not do to Python", {
  # src/adam.c runs torch.optim.Adam's step where it is torch's own and plain; every other
  # case runs Python's step. Both give the same weights and state as Python's step alone
  # (the C paths off: reticulate calls Adam.step()).
  adam_calls <- function() .Call(tracebridge:::tb_adam_calls)
  train <- function(c_on, make, steps = 6L, freeze = FALSE, sched = FALSE) {
    tracebridge:::set_c_call(c_on)
    on.exit(tracebridge:::set_c_call(TRUE))
    torch_manual_seed(1)
    model <- nn_sequential(nn_linear(5, 8), nn_relu(), nn_linear(8, 3))
    if (freeze) model[[1]]$bias$requires_grad_(FALSE) # a parameter without a gradient
    opt <- make(model)
    scheduler <- if (sched) lr_step(opt, step_size = 2, gamma = 0.5)
    torch_manual_seed(2)
    X <- torch_randn(40, 5)
    Y <- torch_randint(1, 4, 40)$long()
    before <- adam_calls()
    for (i in seq_len(steps)) {
      opt$zero_grad()
      loss <- nnf_cross_entropy(model(X), Y)
      loss$backward()
      opt$step()
      if (sched) scheduler$step()
    }
    state <- opt$state_dict()$state
    list(weights = lapply(model$parameters, as_array),
         exp_avg_sq = as_array(state[[length(state)]]$exp_avg_sq),
         step = as_array(state[[1]]$step), in_c = adam_calls() - before)
  }
  groups <- function(m) {
    optim_adam(list(list(params = m[[1]]$parameters, lr = 0.02),
                    list(params = m[[3]]$parameters, betas = c(0.8, 0.9))), lr = 0.01)
  }
  cases <- list(
    plain = list(make = function(m) optim_adam(m$parameters, lr = 0.05), in_c = TRUE),
    tuned = list(make = function(m) optim_adam(m$parameters, lr = 0.01, betas = c(0.5, 0.7),
                                               eps = 1e-4), in_c = TRUE),
    groups = list(make = groups, in_c = TRUE),
    frozen = list(make = function(m) optim_adam(m$parameters, lr = 0.05), freeze = TRUE,
                  in_c = TRUE),
    weight_decay = list(make = function(m) optim_adam(m$parameters, weight_decay = 0.1),
                        in_c = FALSE),
    amsgrad = list(make = function(m) optim_adam(m$parameters, amsgrad = TRUE), in_c = FALSE),
    scheduler = list(make = function(m) optim_adam(m$parameters, lr = 0.05), sched = TRUE,
                     in_c = FALSE)
  )
  for (nm in names(cases)) {
    case <- cases[[nm]]
    args <- list(make = case$make, freeze = isTRUE(case$freeze), sched = isTRUE(case$sched))
    in_c <- do.call(train, c(list(TRUE), args))
    in_py <- do.call(train, c(list(FALSE), args))
    expect_identical(in_c$weights, in_py$weights, label = nm)
    expect_identical(in_c$exp_avg_sq, in_py$exp_avg_sq, label = nm)
    expect_identical(in_c$step, 6, label = nm)
    # The first step makes the state in Python; the other five run in C where they can.
    expect_equal(in_c$in_c, if (case$in_c) 5 else 0, label = nm)
    expect_equal(in_py$in_c, 0, label = nm)
  }
})

test_that("Adam's step in C raises Python's error and leaves grad mode as it was", {
  # A state tensor of the wrong shape: Python's step fails at lerp_(), and so does C's.
  spoil <- reticulate::py_run_string("
import torch
def _tb_spoil(opt):
    p = opt.param_groups[0]['params'][0]
    opt.state[p]['exp_avg'] = torch.zeros(5, 5)
", local = FALSE, convert = FALSE)$`_tb_spoil`
  failed_step <- function(c_on) {
    tracebridge:::set_c_call(c_on)
    on.exit(tracebridge:::set_c_call(TRUE))
    torch_manual_seed(1)
    lin <- nn_linear(3, 2)
    opt <- optim_adam(lin$parameters, lr = 0.1)
    nnf_mse_loss(lin(torch_randn(4, 3)), torch_zeros(4, 2))$backward()
    opt$step() # makes the state
    spoil(.subset2(opt, ".py"))
    before <- .Call(tracebridge:::tb_adam_calls)
    msg <- tryCatch({
      opt$step()
      "no error"
    }, error = function(e) conditionMessage(e))
    list(msg = msg, in_c = .Call(tracebridge:::tb_adam_calls) - before,
         weight = as_array(lin$weight))
  }
  in_c <- failed_step(TRUE)
  in_py <- failed_step(FALSE)
  expect_match(in_c$msg, "must match the size")
  expect_identical(in_c$msg, in_py$msg)
  expect_identical(in_c$weight, in_py$weight)
  expect_equal(in_c$in_c, 0)
  expect_true(.Call(tracebridge:::tb_grad_mode, NA))
})

test_that("a training step (positions, the loss's shift, Adam's step in C) is safe under gctorture()", {
  run <- function(torture) {
    torch_manual_seed(1)
    model <- nn_sequential(nn_linear(4, 3), nn_relu(), nn_linear(3, 2))
    opt <- optim_adam(model$parameters, lr = 0.1)
    torch_manual_seed(2)
    X <- torch_randn(10, 4)
    Y <- torch_randint(1, 3, 10)$long()
    perm <- torch_randperm(10) + 1L
    step <- function(s, e) {
      idx <- perm[s:e]
      xb <- X[idx, ]
      yb <- Y[idx]
      opt$zero_grad()
      loss <- nnf_cross_entropy(model(xb), yb)
      loss$backward()
      opt$step()
      loss$item()
    }
    step(1, 5) # makes Adam's state: the next steps run in C
    before <- .Call(tracebridge:::tb_adam_calls)
    if (torture) gctorture(TRUE)
    losses <- c(step(6, 10), step(1, 5))
    gctorture(FALSE)
    list(losses = losses, weights = lapply(model$parameters, as_array),
         in_c = .Call(tracebridge:::tb_adam_calls) - before)
  }
  tortured <- run(TRUE)
  expect_identical(tortured, run(FALSE))
  expect_equal(tortured$in_c, 2)
})

test_that("Adam's step in C holds no reference after it: 300 steps leave every count as it was", {
  sys <- reticulate::import("sys", convert = FALSE)
  torch_manual_seed(1)
  lin <- nn_linear(3, 2)
  opt <- optim_adam(lin$parameters, lr = 0.01, betas = c(0.8, 0.9), eps = 1e-6)
  loss <- nnf_mse_loss(lin(torch_randn(4, 3)), torch_zeros(4, 2))
  loss$backward()
  opt$step() # makes the state
  py_opt <- .subset2(opt, ".py")
  group <- reticulate::py_get_item(py_opt$param_groups, 0L)
  objects <- list(.subset2(lin$weight, ".py"), .subset2(lin$weight$grad, ".py"),
                  reticulate::py_get_item(group, "eps"), reticulate::py_get_item(group, "betas"))
  refs <- function() vapply(objects, function(o) reticulate::py_to_r(sys$getrefcount(o)), 1)
  # Each reading through reticulate keeps one more reference to what it passed: what one
  # reading adds is measured first, and 300 steps add nothing to it.
  first <- refs()
  before <- refs()
  in_c <- .Call(tracebridge:::tb_adam_calls)
  for (i in 1:300) opt$step()
  expect_equal(.Call(tracebridge:::tb_adam_calls) - in_c, 300)
  expect_equal(refs() - before, before - first)
})
