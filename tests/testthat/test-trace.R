seed_004 <- '
if (torch_is_installed()) {
fn <- function(x) {
  torch_relu(x)
}
input <- torch_tensor(c(-1, 0, 1))
tr_fn <- jit_trace(fn, input)
tr_fn(input)
}
'

test_that("seed 004: the jit_trace example runs verbatim and prints as in mlverse torch", {
  skip_if_no_torch()
  out <- capture_output(
    source(exprs = parse(text = seed_004), local = new.env(), print.eval = TRUE)
  )
  expect_equal(out, "torch_tensor\n 0\n 0\n 1\n[ CPUFloatType{3} ]")
})

test_that("a script_function prints, calls, and shows its graph and code", {
  skip_if_no_torch()
  f <- jit_trace(function(x, y) torch_relu(x) * 2 + y, torch_ones(3), torch_ones(3))
  expect_output(print(f), "^<script_function>$")
  expect_s3_class(f, "script_function")
  expect_match(f$graph, "relu")
  # The graph's inputs carry the R argument names.
  expect_match(f$graph, "(%x: f32[s0], %y: f32[s1])", fixed = TRUE)
  expect_type(f$code, "character")
  expect_equal(arr(f(torch_tensor(c(-1, 2, 3)), torch_tensor(c(1, 1, 1)))), c(1, 5, 7))
  # Shapes are symbolic: another length works.
  expect_equal(arr(f(torch_tensor(c(-1, 2)), torch_tensor(c(0, 0)))), c(0, 4))
})

test_that("sizes read with x$size() stay symbolic: another batch size works", {
  skip_if_no_torch()
  flat <- function(x) x$view(c(x$size(1), -1))
  tr <- jit_trace(flat, torch_randn(2, 3, 4))
  x <- torch_randn(5, 3, 4)
  out <- tr(x)
  expect_equal(dim(out), c(5L, 12L))
  expect_equal(arr(out), arr(flat(x)))
  expect_match(tr$graph, "size")
})

test_that("a size turned into an R number records a guard, never a wrong shape", {
  skip_if_no_torch()
  baked <- function(x) x$view(c(as.integer(x$size(1)), -1))
  expect_warning(tr <- jit_trace(baked, torch_randn(2, 3, 4)), class = "tracebridge_warning")
  expect_equal(dim(tr(torch_randn(2, 3, 4))), c(2L, 12L))
  err <- tryCatch(tr(torch_randn(5, 3, 4)), error = function(e) e)
  expect_s3_class(err, "tracebridge_guard_error")
  expect_s3_class(err, "tracebridge_error")
  expect_match(conditionMessage(err), "GuardError: .*2.*5")
  expect_false(grepl("Traceback", conditionMessage(err)))
})

test_that("lists go in and come out; strict refuses named list outputs", {
  skip_if_no_torch()
  f <- jit_trace(function(l) list(l[[1]] + l[[2]], l[[1]] * l[[2]]),
                 list(torch_ones(2), torch_ones(2)))
  out <- f(list(torch_tensor(c(1, 2)), torch_tensor(c(3, 4))))
  expect_length(out, 2)
  expect_equal(arr(out[[1]]), c(4, 6))
  expect_equal(arr(out[[2]]), c(3, 8))

  named <- function(x) list(a = x + 1, b = x * 2)
  expect_error(jit_trace(named, torch_ones(2)), class = "tracebridge_error")
  expect_warning(g <- jit_trace(named, torch_ones(2), strict = FALSE),
                 class = "tracebridge_warning")
  res <- g(torch_tensor(c(1, 2)))
  expect_equal(arr(res$a), c(2, 3))
  expect_equal(arr(res$b), c(2, 4))
})

DropNet <- nn_module("DropNet",
  initialize = function() {
    self$fc <- nn_linear(4, 6)
    self$bn <- nn_batch_norm1d(6, momentum = 0)
    self$drop <- nn_dropout(0.5)
  },
  forward = function(x) self$drop(self$bn(self$fc(x)))
)

test_that("respect_mode traces both modes; $forward follows $train() and $eval()", {
  skip_if_no_torch()
  torch_manual_seed(10)
  net <- DropNet()
  x <- torch_randn(8, 4)
  mean_before <- arr(net$bn$running_mean)
  tm <- jit_trace(net, x)
  expect_s3_class(tm, "script_module")
  expect_setequal(tm$methods, c("trainforward", "evalforward"))
  expect_true(net$training)
  expect_equal(arr(net$bn$running_mean), mean_before)

  net$eval()
  eager_eval <- arr(net(x))
  net$train()
  tm$eval()
  expect_false(tm$training)
  expect_equal(arr(tm$forward(x)), eager_eval, tolerance = 1e-6)
  expect_equal(arr(tm(x)), eager_eval, tolerance = 1e-6)
  expect_equal(arr(tm$evalforward(x)), eager_eval, tolerance = 1e-6)

  tm$train()
  expect_true(tm$training)
  torch_manual_seed(3)
  traced_train <- arr(tm$forward(x))
  torch_manual_seed(3)
  net$train()
  eager_train <- arr(net(x))
  expect_equal(traced_train, eager_train, tolerance = 1e-6)
  expect_false(isTRUE(all.equal(traced_train, eager_eval)))
  expect_true(any(traced_train == 0))
})

test_that("respect_mode keeps the module's mode when it was in eval", {
  skip_if_no_torch()
  net <- DropNet()
  net$eval()
  tm <- jit_trace(net, torch_randn(8, 4))
  expect_false(net$training)
  expect_false(tm$training)
})

test_that("respect_mode = FALSE traces one forward in the current mode", {
  skip_if_no_torch()
  net <- DropNet()
  net$eval()
  x <- torch_randn(8, 4)
  eager_eval <- arr(net(x))
  tm <- jit_trace(net, x, respect_mode = FALSE)
  expect_equal(tm$methods, "forward")
  expect_equal(arr(tm(x)), eager_eval, tolerance = 1e-6)
  # Only the eval graph exists: in training mode the call is refused with a guard error
  # (dropout and batch norm would behave differently), never silently run in eval mode.
  tm$train()
  expect_error(tm(x), "traced in eval mode", class = "tracebridge_guard_error")
  tm$eval()
  expect_equal(arr(tm(x)), eager_eval, tolerance = 1e-6)
})

test_that("a script_module shares parameters and prints a summary", {
  skip_if_no_torch()
  net <- DropNet()
  tm <- jit_trace(net, torch_randn(8, 4))
  expect_equal(names(tm$parameters), names(net$parameters))
  expect_equal(names(tm$buffers), names(net$buffers))
  expect_equal(arr(tm$parameters[["fc.weight"]]), arr(net$fc$weight))
  out <- capture_output(print(tm))
  expect_match(out, "<script_module> DropNet")
  expect_match(out, "trainforward")
  expect_match(out, "fc.weight")
  expect_match(tm$graph, "fc.weight")
  expect_match(tm$graph, "forward(%x: ", fixed = TRUE)
})

test_that("jit_trace_module traces several methods", {
  skip_if_no_torch()
  Two <- nn_module("Two",
    initialize = function() self$fc <- nn_linear(3, 2),
    forward = function(x) self$fc(x),
    twice = function(x) self$fc(x) * 2
  )
  mod <- Two()
  x <- torch_randn(4, 3)
  tm <- jit_trace_module(mod, forward = list(x), twice = list(x))
  expect_setequal(tm$methods, c("forward", "twice"))
  expect_equal(arr(tm$twice(x)), arr(mod(x)) * 2, tolerance = 1e-6)
  expect_equal(arr(tm(x)), arr(mod(x)), tolerance = 1e-6)
  expect_error(jit_trace_module(mod, list(x)), "name each example input")
  expect_error(jit_trace_module(mod, nope = list(x)), "no method `nope`")
})

test_that("jit_save and jit_load round-trip functions and modules", {
  skip_if_no_torch()
  f <- jit_trace(function(x) torch_sigmoid(x) + 1, torch_ones(3))
  path <- tempfile(fileext = ".tb")
  jit_save(f, path)
  g <- jit_load(path)
  expect_s3_class(g, "script_function")
  x <- torch_tensor(c(-1, 0, 1))
  expect_equal(arr(g(x)), arr(f(x)))

  net <- DropNet()
  x <- torch_randn(8, 4)
  tm <- jit_trace(net, x)
  path2 <- tempfile(fileext = ".tb")
  tm$save(path2)
  lm <- jit_load(path2)
  expect_s3_class(lm, "script_module")
  expect_setequal(lm$methods, c("trainforward", "evalforward"))
  lm$eval()
  net$eval()
  expect_equal(arr(lm(x)), arr(net(x)), tolerance = 1e-6)
  expect_equal(names(lm$parameters), names(net$parameters))
})

test_that("artifacts cross between Python and R", {
  skip_if_no_torch()
  tb <- reticulate::import("tracebridge", convert = FALSE)
  pt <- reticulate::import("torch", convert = FALSE)
  pt$manual_seed(0L)
  lin <- pt$nn$Linear(3L, 2L)
  py_traced <- tb$trace(lin, pt$rand(4L, 3L))
  path <- tempfile(fileext = ".tb")
  tb$save(py_traced, path)
  from_py <- jit_load(path)
  x <- torch_randn(2, 3)
  w <- arr(from_py$parameters[["weight"]])
  b <- arr(from_py$parameters[["bias"]])
  expect_equal(arr(from_py(x)), arr(x) %*% t(w) + matrix(b, 2, 2, byrow = TRUE),
               tolerance = 1e-5)

  net <- DropNet()
  net$eval()
  r_path <- tempfile(fileext = ".tb")
  jit_save(jit_trace(net, torch_randn(8, 4)), r_path)
  loaded <- tb$load(r_path)
  loaded$eval()
  xin <- torch_randn(8, 4)
  py_out <- reticulate::py_call(loaded, xin$py)
  expect_equal(reticulate::py_to_r(py_out$detach()$numpy()), arr(net(xin)), tolerance = 1e-6)
})

test_that("errors: named inputs, non-tensor outputs, bad objects and files", {
  skip_if_no_torch()
  x <- torch_ones(2)
  expect_error(jit_trace(function(x) x, x = x), "can not be named",
               class = "tracebridge_named_inputs_error")
  expect_error(jit_trace(function(x) 3, x), "returned an object of class <numeric>",
               class = "tracebridge_output_error")
  expect_error(jit_trace(42, x), "must be an R function or an nn_module")
  expect_error(jit_trace(function(x) x), "at least one example input")
  expect_error(jit_save(function(x) x, tempfile()), "script_function or script_module")
  expect_error(jit_load(tempfile()), class = "tracebridge_artifact_error")
  bad <- tempfile()
  writeLines("not an artifact", bad)
  expect_error(jit_load(bad), class = "tracebridge_artifact_error")
})

test_that("an R error while tracing reaches the user and leaves the tracer clean", {
  skip_if_no_torch()
  failing <- function(x) {
    y <- torch_relu(x)
    stop("custom failure in R code")
  }
  err <- tryCatch(jit_trace(failing, torch_ones(2)), error = function(e) e)
  expect_equal(conditionMessage(err), "custom failure in R code")
  expect_false(inherits(err, "tracebridge_python_error"))
  # The tracer is not left recording: eager code and a new trace work.
  expect_equal(arr(torch_relu(torch_tensor(c(-1, 1)))), c(0, 1))
  f <- jit_trace(function(x) x * 3, torch_ones(2))
  expect_equal(arr(f(torch_tensor(c(1, 2)))), c(3, 6))
  expect_false(grepl("relu", f$graph))
})

test_that("Python errors while calling arrive as classed R conditions", {
  skip_if_no_torch()
  lin <- nn_linear(3, 2)
  tm <- jit_trace(lin, torch_randn(4, 3))
  err <- tryCatch(tm(torch_randn(4, 5)), error = function(e) e)
  expect_s3_class(err, "tracebridge_python_error")
  expect_false(grepl("Traceback", conditionMessage(err)))
})

test_that("an nn_sequential mixing built-in and R modules traces with R paths", {
  skip_if_no_torch()
  Scale <- nn_module("Scale",
    initialize = function() self$s <- nn_parameter(torch_tensor(c(2, 3))),
    forward = function(x) x * self$s
  )
  model <- nn_sequential(nn_linear(3, 2), nn_relu(), Scale())
  x <- torch_randn(4, 3)
  tm <- jit_trace(model, x)
  expect_true(all(c("0.weight", "0.bias", "2.s") %in% names(tm$parameters)))
  x2 <- torch_randn(7, 3)
  expect_equal(arr(tm(x2)), arr(model(x2)), tolerance = 1e-6)
  expect_match(tm$graph, "2.s", fixed = TRUE)
})

test_that("graphs and guards traced from R point at the R source line", {
  skip_if_no_torch()
  path <- tempfile(fileext = ".R")
  writeLines(c(
    "f <- function(x) {",
    "  y <- torch_relu(x)",
    "  x$view(c(as.integer(x$size(1)), -1)) + y$sum()",
    "}"
  ), path)
  env <- new.env(parent = globalenv())  # user code: outside any package namespace
  sys.source(path, envir = env, keep.source = TRUE)
  tr <- suppressWarnings(jit_trace(env$f, torch_randn(2, 3, 4)))
  base <- basename(path)
  expect_match(tr$graph, sprintf("relu(%%x)  # %s:2", base), fixed = TRUE)
  expect_match(tr$guards, sprintf("x$shape[1] == 2 (at %s:3)", path), fixed = TRUE)
  expect_error(tr(torch_randn(3, 3, 4)), "x\\$view\\(c\\(as.integer",
               class = "tracebridge_guard_error")
})

test_that("a mode guard error says $train()/$eval() and respect_mode = TRUE, in R terms", {
  skip_if_no_torch()
  net <- DropNet()
  net$eval()
  tm <- jit_trace(net, torch_randn(8, 4), respect_mode = FALSE)
  tm$train()
  err <- tryCatch(tm(torch_randn(8, 4)), error = identity)
  expect_s3_class(err, "tracebridge_guard_error")
  expect_match(conditionMessage(err), "call $eval() first, or trace with respect_mode = TRUE",
               fixed = TRUE)
  expect_no_match(conditionMessage(err), "respect_mode=True", fixed = TRUE)
})
