# R functions that Python calls back (R/callbacks.R, src/callback.c): the callable made in
# C against reticulate's (TRACEBRIDGE_C_CALL=0's path): the same results, classes and
# errors; R errors reach Python with their message and the R caller as they were; the R
# function lives as long as the callable; no growth over 10,000 calls; gctorture().

with_path <- function(on, code) {
  tracebridge:::set_c_call(on)
  on.exit(tracebridge:::set_c_call(TRUE))
  force(code)
}

callback_calls <- function() tracebridge:::r_function_calls()

# What an everyday use of each callback gives, in a form identical() compares.
callback_uses <- function() {
  canon_err <- function(expr) {
    tryCatch({
      force(expr)
      "no error"
    }, error = function(e) list(class(e), conditionMessage(e)))
  }
  seen <- NULL
  x <- torch_ones(3, requires_grad = TRUE)
  x$register_hook(function(g) {
    seen <<- as_array(g)
    g * 2
  })
  (x * torch_tensor(c(1, 2, 3)))$sum()$backward()
  hook <- list(seen, as_array(x$grad))
  hook_errors <- lapply(list(function(g) stop("hook failed"), function(g) "no"), function(h) {
    z <- torch_ones(2, requires_grad = TRUE)
    z$register_hook(h)
    canon_err((z * 1)$sum()$backward())
  })
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 1)
  sched <- lr_lambda(opt, function(epoch) 0.5^epoch)
  lrs <- vapply(1:3, function(i) {
    sched$step()
    opt$param_groups[[1]]$lr
  }, numeric(1))
  mult <- lr_multiplicative(optim_sgd(m$parameters, lr = 1), list(function(epoch) 0.9))
  lambda_errors <- list(canon_err(lr_lambda(opt, function(epoch) stop("no factor"))),
                        canon_err(lr_lambda(opt, function(epoch) "a")))
  w <- torch_zeros(2, requires_grad = TRUE)
  target <- torch_tensor(c(1, -2))
  lbfgs <- optim_lbfgs(list(w), lr = 1)
  losses <- vapply(1:3, function(i) {
    lbfgs$step(function() {
      lbfgs$zero_grad()
      l <- ((w - target)^2)$sum()
      l$backward()
      l
    })$item()
  }, numeric(1))
  closure_errors <- list(canon_err(lbfgs$step(function() stop("closure failed"))),
                         canon_err(lbfgs$step(function() 1)))
  Twice <- nn_module("Twice", forward = function(x) x * 2)
  Bad <- nn_module("Bad", forward = function(x) stop("bad forward"))
  Odd <- nn_module("Odd", forward = function(x) "text")
  seq_out <- as_array(nn_sequential(Twice(), nn_relu())(torch_tensor(c(-1, 2))))
  module_errors <- list(canon_err(nn_sequential(Bad())(torch_ones(1))),
                        canon_err(nn_sequential(Odd())(torch_ones(1))))
  f <- function(x) x * 2 + 1
  traced <- as_array(jit_trace(f, torch_ones(2))(torch_tensor(c(1, 2, 3))))
  list(hook = hook, hook_errors = hook_errors, lrs = lrs, mult = mult$step,
       lambda_errors = lambda_errors, w = round(as_array(w), 4), losses = round(losses, 4),
       closure_errors = closure_errors, seq_out = seq_out, module_errors = module_errors,
       traced = traced)
}

test_that("R callbacks give the same results and errors through C and through reticulate", {
  skip_if_no_torch()
  before <- callback_calls()
  via_c <- with_path(TRUE, callback_uses())
  c_calls <- callback_calls() - before
  via_r <- with_path(FALSE, callback_uses())
  expect_identical(callback_calls() - before, c_calls) # none of the second through C
  expect_gt(c_calls, 10)
  via_c$mult <- via_r$mult <- NULL # a closure of the scheduler (compared by use above)
  expect_identical(via_c, via_r)
  expect_equal(via_c$hook[[1]], c(1, 2, 3))
  expect_equal(via_c$hook[[2]], c(2, 4, 6))
  expect_equal(via_c$lrs, c(0.5, 0.25, 0.125))
  expect_equal(via_c$w, c(1, -2))
  expect_equal(via_c$seq_out, c(0, 4))
  expect_equal(via_c$traced, c(3, 5, 7))
  expect_identical(via_c$hook_errors[[1]], list(c("simpleError", "error", "condition"),
                                                "hook failed"))
  expect_identical(via_c$hook_errors[[2]][[1]],
                   c("type_error", "tracebridge_error", "error", "condition"))
  expect_match(via_c$hook_errors[[2]][[2]], "the hook returned an object of class <character>")
  expect_identical(via_c$lambda_errors[[1]][[2]], "no factor")
  expect_match(via_c$lambda_errors[[2]][[2]], "`lr_lambda` must return one number")
  expect_identical(via_c$closure_errors[[1]][[2]], "closure failed")
  expect_match(via_c$closure_errors[[2]][[2]], "the closure must return the loss tensor")
  expect_identical(via_c$module_errors[[1]][[2]], "bad forward")
  expect_match(via_c$module_errors[[2]][[2]], "forward\\(\\) of <Odd> returned")
})

test_that("an R error inside a callback reaches Python as a RuntimeError with its message", {
  skip_if_no_torch()
  py <- reticulate::py_run_string(paste(
    "def _tb_call_catching(f, *args):",
    "    try:",
    "        return ('ok', f(*args))",
    "    except BaseException as e:",
    "        return (type(e).__name__, str(e))",
    sep = "\n"), local = TRUE, convert = FALSE)
  catching <- function(f, ...) {
    out <- py$`_tb_call_catching`(f, ...)
    list(reticulate::py_to_r(reticulate::py_get_item(out, 0L)),
         reticulate::py_to_r(reticulate::py_get_item(out, 1L)))
  }
  fail <- tracebridge:::r_function_py(function(x) stop("boom: ", x), "my_fn()")
  expect_true(inherits(fail, "python.builtin.object")) # the C path made it
  expect_identical(catching(fail, 7L), list("RuntimeError", "R error in my_fn(): boom: 7"))
  # Python caught it: the next call's error is its own, not the one kept from before.
  other <- tracebridge:::r_function_py(function() stop("second"), "other()")
  expect_identical(catching(other)[[2]], "R error in other(): second")
  # An R result that R's own conversion refuses: its error, the same way.
  env_out <- tracebridge:::r_function_py(function() new.env(), "env_out()")
  utils::capture.output(refused <- catching(env_out)) # reticulate prints the object
  expect_match(refused[[2]], "^R error in env_out\\(\\): Unable to convert R object")
  # Arguments and results cross in C: tensors, numbers, strings, NULL, lists, keywords.
  echo <- tracebridge:::r_function_py(function(...) list(...), "echo()")
  out <- reticulate::py_call(echo, torch_ones(2)$py, 3L, 2.5, "a", TRUE, NULL,
                             reticulate::tuple(1L, 2L), key = 4L)
  expect_identical(class(out)[[1]], "python.builtin.tuple") # not all named: a tuple
  out <- reticulate::py_to_r(out)
  expect_length(out, 8L)
  expect_identical(out[2:8], list(3L, 2.5, "a", TRUE, NULL, list(1L, 2L), 4L))
  named <- tracebridge:::r_function_py(function(...) list(...), "named()")
  out <- reticulate::py_call(named, a = 1L, b = torch_ones(1)$py)
  expect_identical(class(out)[[1]], "python.builtin.dict")
  expect_identical(reticulate::py_to_r(reticulate::py_get_item(out, "a")), 1L)
  # A Python object C does not convert goes through R's from_py() (a dict: a named list).
  keys <- tracebridge:::r_function_py(function(d) names(d), "keys()")
  expect_identical(reticulate::py_to_r(reticulate::py_call(keys, reticulate::dict(a = 1, b = 2))),
                   c("a", "b"))
})

test_that("an interrupt inside a callback reaches the R caller as an interrupt", {
  skip_if_no_torch()
  w <- torch_zeros(2, requires_grad = TRUE)
  opt <- optim_lbfgs(list(w), lr = 1)
  got <- tryCatch(opt$step(function() rlang::interrupt()),
                  interrupt = function(e) "interrupt", error = function(e) conditionMessage(e))
  expect_identical(got, "interrupt")
  # Nothing is left pending: the next error is the closure's own.
  expect_error(opt$step(function() stop("after")), "after")
})

test_that("a callback called from another Python thread is refused with a clear error", {
  skip_if_no_torch()
  py <- reticulate::py_run_string(paste(
    "import threading",
    "def _tb_call_in_thread(f):",
    "    out = {}",
    "    def run():",
    "        try:",
    "            f(1)",
    "        except RuntimeError as e:",
    "            out['msg'] = str(e)",
    "    t = threading.Thread(target=run)",
    "    t.start()",
    "    t.join()",
    "    return out.get('msg')",
    sep = "\n"), local = FALSE, convert = TRUE)
  ran <- FALSE
  f <- tracebridge:::r_function_py(function(x) ran <<- TRUE, "f()")
  expect_match(py$`_tb_call_in_thread`(f), "called from a thread other than R's")
  expect_false(ran)
})

test_that("the R function lives as long as its callable, and calls leave nothing behind", {
  skip_if_no_torch()
  released <- new.env()
  for (i in 1:3) invisible(gc())
  held <- tracebridge:::r_functions_held()
  # The functions' environment holds `state`, not the callables (which hold the
  # functions: an environment that held both could never be freed, by either side).
  on_release <- function(name) {
    force(name)
    function(e) released[[name]] <- TRUE
  }
  functions_of <- function(name) {
    state <- new.env()
    reg.finalizer(state, on_release(name))
    list(call = function() {
      state$called <- TRUE
      NULL
    }, hook = function(g) {
      state$seen <- TRUE
      g
    }, state = state)
  }
  local({
    fns <- functions_of("made")
    f <- tracebridge:::r_function_py(fns$call, "f()")
    invisible(reticulate::py_call(f)) # Python holds no reference after the call
    fns <- functions_of("hook")
    x <- torch_ones(2, requires_grad = TRUE)
    x$register_hook(fns$hook)
    (x * 1)$sum()$backward()
    expect_true(fns$state$seen)
  })
  for (i in 1:3) invisible(gc())
  expect_true(isTRUE(released$made))
  expect_true(isTRUE(released$hook))
  expect_identical(tracebridge:::r_functions_held(), held)
  # While the tensor lives, its hook does.
  fns <- functions_of("kept")
  x <- torch_ones(2, requires_grad = TRUE)
  x$register_hook(fns$hook)
  fns <- NULL
  for (i in 1:3) invisible(gc())
  expect_false(isTRUE(released$kept))
  (x * 1)$sum()$backward()
  x <- NULL
  for (i in 1:3) invisible(gc())
  expect_true(isTRUE(released$kept))

  x <- torch_ones(4, requires_grad = TRUE)
  hook <- function(g) g * 1
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 1)
  sched <- lr_lambda(opt, function(epoch) 1 / (1 + epoch))
  echo <- tracebridge:::r_function_py(function(t) t, "echo()")
  t8 <- torch_ones(8)$py
  loop <- reticulate::py_run_string(paste(
    "def _tb_loop(f, x, n):",
    "    for _ in range(n):",
    "        f(x)",
    sep = "\n"), local = TRUE, convert = FALSE)$`_tb_loop`
  step <- function(n) {
    for (i in seq_len(n)) {
      h <- x$register_hook(hook)
      (x * 2)$sum()$backward()
      h$remove()
      sched$step()
    }
    reticulate::py_call(loop, echo, t8, as.integer(10 * n))
  }
  step(10)
  invisible(gc())
  live <- py_live_count("Tensor")
  cells <- gc()[1, 1]
  before <- callback_calls()
  step(1000) # 12,000 calls of R functions from Python
  expect_identical(callback_calls() - before, 12000)
  invisible(gc())
  expect_lte(py_live_count("Tensor") - live, 20)
  expect_lte(gc()[1, 1] - cells, 2000)
})

test_that("callbacks through C are safe under gctorture()", {
  skip_if_no_torch()
  x <- torch_ones(3, requires_grad = TRUE)
  w <- torch_zeros(2, requires_grad = TRUE)
  target <- torch_tensor(c(1, -2))
  m <- nn_linear(2, 1)
  opt <- optim_sgd(m$parameters, lr = 1)
  lbfgs <- optim_lbfgs(list(w), lr = 1, max_iter = 2L)
  Twice <- nn_module("Twice", forward = function(x) list(x * 2, list(a = x)))
  seq <- nn_sequential(Twice())
  gctorture(TRUE)
  sched <- lr_lambda(opt, function(epoch) 0.5^epoch)
  x$register_hook(function(g) g * 3)
  (x * 1)$sum()$backward()
  sched$step()
  loss <- lbfgs$step(function() {
    lbfgs$zero_grad()
    l <- ((w - target)^2)$sum()
    l$backward()
    l
  })
  err <- tryCatch(lbfgs$step(function() stop("in torture")), error = conditionMessage)
  out <- seq(torch_ones(2))
  gctorture(FALSE)
  expect_equal(as_array(x$grad), c(3, 3, 3))
  expect_equal(opt$param_groups[[1]]$lr, 0.5)
  expect_equal(loss$item(), 5)
  expect_identical(err, "in torture")
  expect_equal(as_array(out[[1]]), c(2, 2))
  expect_equal(as_array(out[[2]]$a), c(1, 1))
})

# Calls a Python callable made from an R function, as Python does, and answers what Python
# saw: repr() of the result, or the exception's type and message.
py_calls <- function(fn, call) {
  main <- reticulate::import_main(convert = FALSE)
  main$tb_cb <- tracebridge:::r_function_py(fn, "probe()")
  on.exit(reticulate::py_run_string("del tb_cb"))
  reticulate::py_run_string(sprintf("
try:
    tb_seen = repr(%s)
except BaseException as e:
    tb_seen = type(e).__name__ + ': ' + str(e)
", call))$tb_seen
}

test_that("a deeply nested result goes to R's conversion: R's own error, no crash", {
  skip_if_no_torch()
  nested <- function(levels) {
    v <- list(1)
    for (i in seq_len(levels)) v <- list(v)
    v
  }
  deep <- nested(300000)
  for (on in c(TRUE, FALSE)) {
    expect_match(with_path(on, py_calls(function() deep, "tb_cb()")),
                 "^RuntimeError: .*(C stack usage|nested too deeply|infinite recursion)")
  }
})

test_that("a string argument with an embedded NUL is R's error on both paths, never cut", {
  skip_if_no_torch()
  for (on in c(TRUE, FALSE)) {
    expect_match(with_path(on, py_calls(function(x) nchar(x), "tb_cb('ab\\x00cd')")),
                 "^RuntimeError: .*Embedded NUL in string")
  }
})

test_that("an NA name in a callback's result is the key 'NA' on both paths", {
  skip_if_no_torch()
  fn <- function() structure(list(1, 2), names = c("a", NA))
  expect_identical(with_path(TRUE, py_calls(fn, "tb_cb()")), "{'a': 1.0, 'NA': 2.0}")
  expect_identical(with_path(FALSE, py_calls(fn, "tb_cb()")), "{'a': 1.0, 'NA': 2.0}")
})

test_that("an int beyond 64 bits passed to a callback gives its value, no SystemError", {
  skip_if_no_torch()
  on_c <- with_path(TRUE, py_calls(function(x) x, "tb_cb(2**70)"))
  expect_identical(on_c, with_path(FALSE, py_calls(function(x) x, "tb_cb(2**70)")))
  expect_false(grepl("SystemError", on_c))
})

test_that("a callback left by invokeRestart('abort') never reports an older error", {
  skip_if_no_torch()
  try(stop("an old, unrelated error"), silent = TRUE)
  p <- torch_ones(2, requires_grad = TRUE)
  opt <- optim_sgd(list(p), lr = 0.1)
  reported <- function(on) {
    with_path(on, tryCatch({
      lr_lambda(opt, lr_lambda = function(e) invokeRestart("abort"))
      "no error"
    }, error = conditionMessage))
  }
  on_c <- reported(TRUE)
  expect_match(on_c, "stopped without an R error", fixed = TRUE)
  expect_false(grepl("old, unrelated", on_c))
  expect_false(grepl("old, unrelated", reported(FALSE)))
})

test_that("lr_lambda() and lr_multiplicative() give their state_dict() on both paths", {
  skip_if_no_torch()
  state <- function(on, make) {
    with_path(on, {
      p <- torch_ones(2, requires_grad = TRUE)
      opt <- optim_sgd(list(p), lr = 0.1)
      s <- make(opt, lr_lambda = function(epoch) 0.5)
      s$step()
      sd <- s$state_dict()
      sd[order(names(sd))]
    })
  }
  for (make in list(lr_lambda, lr_multiplicative)) {
    on_c <- state(TRUE, make)
    expect_identical(on_c$lr_lambdas, list(NULL))
    expect_identical(on_c, state(FALSE, make))
  }
})
