# The call path of traced modules: src/call.c for one tensor in, reticulate for the rest.
# Both must give the same wrappers, values, errors and lifetimes.

with_c_call <- function(on, code) {
  tracebridge:::set_c_call(on)
  on.exit(tracebridge:::set_c_call(TRUE))
  force(code)
}

test_that("a one-tensor call goes through the C call path and matches reticulate's", {
  skip_if_no_torch()
  torch_manual_seed(1)
  net <- nn_sequential(nn_linear(4, 3), nn_relu(), nn_linear(3, 2))
  traced <- jit_trace(net, torch_randn(2, 4))
  x <- torch_randn(5, 4)
  fast <- traced(x)
  expect_true(tracebridge:::.tb$c_call)
  slow <- with_c_call(FALSE, traced(x))
  expect_identical(class(.subset2(fast, ".py")), class(.subset2(slow, ".py")))
  expect_equal(as_array(fast), as_array(slow), tolerance = 0)
  expect_equal(as_array(fast), as_array(net(x)), tolerance = 1e-6)
  # The wrapper is a full reticulate object: its methods, printing and conversions work.
  expect_equal(fast$shape, c(5, 2))
  expect_output(print(fast), "CPUFloatType")
  expect_equal(dim(as_array(fast$t())), c(2, 5))
})

test_that("results that are not a single tensor come back as through reticulate", {
  skip_if_no_torch()
  pair <- jit_trace(function(x) list(x + 1, x * 2), torch_zeros(2))
  out <- pair(torch_ones(2))
  expect_type(out, "list")
  expect_equal(as_array(out[[1]]), c(2, 2))
  expect_equal(as_array(out[[2]]), c(2, 2))
  count <- jit_trace(function(x) x$sum(), torch_zeros(2))
  expect_equal(as_array(count(torch_ones(3))), 3)
})

test_that("a Python error on the C call path is a classed one-line R error", {
  skip_if_no_torch()
  traced <- jit_trace(function(x) x$matmul(torch_ones(3, 2)), torch_ones(4, 3))
  err <- tryCatch(traced(torch_ones(4, 5)), error = identity)
  expect_s3_class(err, "tracebridge_error")
  expect_false(grepl("\n", conditionMessage(err)))
  slow <- with_c_call(FALSE, tryCatch(traced(torch_ones(4, 5)), error = identity))
  expect_identical(class(err), class(slow))
  expect_identical(conditionMessage(err), conditionMessage(slow))
  # The next call is fine: nothing is left behind.
  expect_equal(dim(as_array(traced(torch_ones(1, 3)))), c(1, 2))
})

test_that("results of the C call path are freed when R collects them", {
  skip_if_no_torch()
  traced <- jit_trace(function(x) x + 1, torch_zeros(2))
  weakref <- reticulate::import("weakref", convert = FALSE)
  out <- traced(torch_zeros(2))
  ref <- weakref$ref(.subset2(out, ".py"))
  rm(out)
  gc()
  expect_true(reticulate::py_is_null_xptr(ref) ||
                inherits(reticulate::py_call(ref), "python.builtin.NoneType"))
  count_tensors <- function() py_live_count("Tensor")
  x <- torch_zeros(2)
  gc()
  before <- count_tensors()
  for (i in 1:5000) traced(x)
  gc()
  expect_lte(count_tensors() - before, 50)
})

test_that("named arguments reach a Python-traced function's keywords by name", {
  skip_if_no_torch()
  # Traced in Python with keyword inputs: a keyword-only parameter and a **kwargs.
  dir <- tempfile("kwargs")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  reticulate::py_run_string(sprintf(paste(
    "import torch, tracebridge",
    "def named(x, *, a, b):",
    "    return torch.cat([x, a * 2, b])",
    "def collected(x, **kw):",
    "    return torch.cat([x, *kw.values()])",
    "example = {'a': torch.zeros(2), 'b': torch.ones(3)}",
    "tracebridge.trace(named, (torch.zeros(1),), example_kwarg_inputs=example).save(r'%s')",
    "tracebridge.trace(collected, (torch.zeros(1),), example_kwarg_inputs=example).save(r'%s')",
    sep = "\n"), file.path(dir, "named.tb"), file.path(dir, "collected.tb")))
  x <- torch_ones(1)
  a <- torch_tensor(c(1, 2))
  b <- torch_tensor(c(3, 4, 5))
  named <- jit_load(file.path(dir, "named.tb"))
  expect_equal(as_array(named(x, a = a, b = b)), c(1, 2, 4, 3, 4, 5))
  expect_equal(as_array(named(b = b, a = a, x = x)), c(1, 2, 4, 3, 4, 5))  # by name
  expect_error(named(x, a = a, c = b), "no input named `c`; its inputs are `x`, `a`, `b`")
  collected <- jit_load(file.path(dir, "collected.tb"))
  expect_equal(as_array(collected(x, a = a, b = b)), c(1, 1, 2, 3, 4, 5))
  # The keywords of **kwargs are iterated in the call's order: another order is refused.
  expect_error(collected(x, b = b, a = a), "in another order than the trace was made with")
})
