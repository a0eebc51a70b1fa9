# State dicts through C (src/state.c, src/fields.c) against R's reticulate path
# (TRACEBRIDGE_C_CALL=0's): the same lists, the same loaded state, the same errors; no
# growth; gctorture().

with_c_state <- with_path <- function(on, code) {
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
       unnamed = err(net2$load_state_dict(stats::setNames(sd, c("", names(sd)[-1])))),
       not_tensors = err(net2$load_state_dict(list(weight = 1))),
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

test_that("printing and $data agree between C and R; $data tells the shift cache", {
  skip_if_no_torch()
  uses <- function() {
    torch_manual_seed(4)
    x <- torch_randn(2, 3, requires_grad = TRUE)
    net <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
    printed <- utils::capture.output(print(x), print(x * 2), print(torch_ones(2)),
                                     print(net), print(nn_linear(2, 2)))
    p <- torch_zeros(2, 2, requires_grad = TRUE)
    d <- p$data
    d$add_(1) # through the alias: the parameter sees it
    p$data <- torch_ones(2, 2) * 5
    bad <- tryCatch({
      p$data <- 1
      "no error"
    }, error = function(e) class(e))
    list(printed, class(d), d$requires_grad, as_array(p), p$requires_grad, bad)
  }
  via_c <- with_c_state(TRUE, uses())
  via_r <- with_c_state(FALSE, uses())
  expect_identical(via_c, via_r)
  expect_true(any(grepl("grad_fn = <MulBackward0>", via_c[[1]], fixed = TRUE)))
  expect_true(any(grepl("containing 13 parameters", via_c[[1]], fixed = TRUE)))
  expect_equal(via_c[[4]], matrix(5, 2, 2))
  expect_true(via_c[[5]])
  # `$data` of an integer tensor hands out writes torch does not count: the cache of
  # shifted positions turns off on the C path too (src/convert.c).
  tracebridge:::shift_cache_stats(reset = TRUE)
  idx <- torch_tensor(c(2L, 1L))
  invisible(idx$data)
  expect_true(tracebridge:::shift_cache_stats()$off)
  tracebridge:::shift_cache_stats(reset = TRUE)
})

test_that("state dicts through C are safe under gctorture()", {
  skip_if_no_torch()
  m <- nn_linear(3, 2)
  opt <- optim_sgd(m$parameters, lr = 0.1, momentum = 0.9)
  opt$zero_grad()
  m(torch_ones(2, 3))$sum()$backward()
  opt$step()
  x <- torch_ones(2, requires_grad = TRUE)
  gctorture(TRUE)
  sd <- m$state_dict()
  osd <- opt$state_dict()
  m$load_state_dict(sd)
  opt$load_state_dict(osd)
  printed <- utils::capture.output(print(x), print(m))
  d <- x$data
  x$data <- torch_zeros(2)
  gctorture(FALSE)
  expect_identical(printed[[2]], " 1")
  expect_match(printed[[5]], "containing 8 parameters")
  expect_equal(as_array(d), c(1, 1)) # the old values: `$data <-` gave x new ones
  expect_equal(as_array(x), c(0, 0))
  expect_identical(names(sd), c("weight", "bias"))
  expect_equal(as_array(sd$weight), as_array(m$weight))
  expect_identical(osd$param_groups[[1]]$momentum, 0.9)
  expect_equal(dim(osd$state[["1"]]$momentum_buffer), c(2L, 3L))
})

# A list nested deeper than C converts (TB_MAX_DEPTH in src/pyapi.h): C leaves it to R's
# conversion, which stops with R's own error; C's stack never overflows (a crash before).
nested <- function(levels) {
  v <- list(1)
  for (i in seq_len(levels)) v <- list(v)
  v
}

test_that("deeply nested state goes to R's conversion: R's own error, no crash", {
  skip_if_no_torch()
  deep <- nested(300000)
  msg <- function(on) {
    with_path(on, tryCatch({
      tracebridge:::state_to_py(deep)
      "no error"
    }, error = conditionMessage))
  }
  expect_match(msg(TRUE), "C stack usage|nested too deeply|infinite recursion")
  expect_match(msg(FALSE), "C stack usage|nested too deeply|infinite recursion")
})

test_that("a state string with an embedded NUL is R's error on both paths, never cut", {
  skip_if_no_torch()
  main <- reticulate::py_run_string("d_nul = {'key\\x00hidden': 'val'}; v_nul = ['a\\x00b']",
                                    convert = FALSE)
  for (on in c(TRUE, FALSE)) {
    expect_error(with_path(on, tracebridge:::state_to_r(main$d_nul)), "Embedded NUL")
    expect_error(with_path(on, tracebridge:::state_to_r(main$v_nul)), "Embedded NUL")
  }
})
