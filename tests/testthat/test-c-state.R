# State dicts through C (src/state.c, src/fields.c) against R's reticulate path
# (TRACEBRIDGE_C_CALL=0's): the same lists, the same loaded state, the same errors; no
# growth; gctorture().

with_path <- function(on, code) {
  tracebridge:::set_c_call(on)
  on.exit(tracebridge:::set_c_call(TRUE))
  force(code)
}

# Tensors as their values and classes, so that identical() compares the rest.
canon_state <- function(v) {
  if (inherits(v, "torch_tensor")) {
    return(list("tensor", class(.subset2(v, ".py")), as.character(v$dtype), as_array(v)))
  }
  if (is.list(v)) return(lapply(v, canon_state))
  v
}

state_uses <- function() {
  torch_manual_seed(3)
  net <- nn_sequential(nn_linear(3, 4), nn_batch_norm1d(4), nn_linear(4, 2))
  opt <- optim_adam(net$parameters, lr = 0.01, betas = c(0.8, 0.9))
  sched <- lr_step(opt, step_size = 2, gamma = 0.5)
  for (i in 1:2) {
    opt$zero_grad()
    net(torch_randn(5, 3))$sum()$backward()
    opt$step()
    sched$step()
  }
  sd <- net$state_dict()
  osd <- opt$state_dict()
  ssd <- sched$state_dict()
  net2 <- nn_sequential(nn_linear(3, 4), nn_batch_norm1d(4), nn_linear(4, 2))
  net2$load_state_dict(sd)
  opt2 <- optim_adam(net2$parameters, lr = 0.5)
  opt2$load_state_dict(osd)
  err <- function(expr) tryCatch({
    force(expr)
    "no error"
  }, error = function(e) list(class(e), conditionMessage(e)))
  list(sd = canon_state(sd), osd = canon_state(osd), ssd = canon_state(ssd),
       loaded = canon_state(net2$state_dict()), opt_loaded = canon_state(opt2$state_dict()),
       missing = err(net2$load_state_dict(sd[-1])),
       not_strict = err(net2$load_state_dict(sd[-1], strict = FALSE)),
       bad_opt = err(opt2$load_state_dict(list(state = list(), param_groups = list(list(lr = 1))))))
}

test_that("state dicts agree between C and R, and load back", {
  skip_if_no_torch()
  via_c <- with_path(TRUE, state_uses())
  via_r <- with_path(FALSE, state_uses())
  expect_identical(via_c, via_r)
  expect_identical(names(via_c$sd), c("0.weight", "0.bias", "1.weight", "1.bias",
                                      "1.running_mean", "1.running_var",
                                      "1.num_batches_tracked", "2.weight", "2.bias"))
  expect_identical(via_c$loaded, via_c$sd)
  expect_identical(via_c$opt_loaded, via_c$osd)
  expect_identical(names(via_c$osd$state), as.character(1:6))
  expect_identical(via_c$osd$param_groups[[1]]$betas, list(0.8, 0.9))
  expect_identical(via_c$osd$param_groups[[1]]$params, 1:6)
  expect_identical(via_c$osd$state[["1"]]$step[[1]], "tensor")
  expect_match(via_c$missing[[2]], "Missing key\\(s\\) in state_dict: \"0.weight\"")
  expect_identical(via_c$not_strict, "no error")
})

test_that("an optimizer's state_dict() is a copy; C's state paths leave nothing behind", {
  skip_if_no_torch()
  m <- nn_linear(4, 2)
  opt <- optim_adam(m$parameters)
  step <- function() {
    opt$zero_grad()
    m(torch_ones(3, 4))$sum()$backward()
    opt$step()
  }
  step()
  osd <- opt$state_dict()
  before <- as_array(osd$state[["1"]]$exp_avg)
  step()
  expect_identical(as_array(osd$state[["1"]]$exp_avg), before)
  round_trip <- function() {
    opt$load_state_dict(opt$state_dict())
    m$load_state_dict(m$state_dict())
  }
  round_trip()
  invisible(gc())
  live <- py_live_count("Tensor")
  for (i in 1:300) round_trip()
  invisible(gc())
  expect_lte(py_live_count("Tensor") - live, 20)
})

test_that("state dicts through C are safe under gctorture()", {
  skip_if_no_torch()
  m <- nn_linear(3, 2)
  opt <- optim_sgd(m$parameters, lr = 0.1, momentum = 0.9)
  opt$zero_grad()
  m(torch_ones(2, 3))$sum()$backward()
  opt$step()
  gctorture(TRUE)
  sd <- m$state_dict()
  osd <- opt$state_dict()
  m$load_state_dict(sd)
  opt$load_state_dict(osd)
  gctorture(FALSE)
  expect_identical(names(sd), c("weight", "bias"))
  expect_equal(as_array(sd$weight), as_array(m$weight))
  expect_identical(osd$param_groups[[1]]$momentum, 0.9)
  expect_equal(dim(osd$state[["1"]]$momentum_buffer), c(2L, 3L))
})
