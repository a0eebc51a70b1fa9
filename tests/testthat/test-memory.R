# R objects that wrap Python modules and tensors are freed when R collects them.

test_that("creating and dropping 10,000 modules keeps memory flat", {
  Tiny <- nn_module("Tiny", forward = function(x) x)
  count_py <- function() py_live_count("Module")
  live <- function() length(ls(tracebridge:::.tb$live))
  gc()
  before <- c(r = live(), py = count_py())
  for (i in 1:5000) Tiny()
  for (i in 1:5000) nn_relu()
  gc()
  after <- c(r = live(), py = count_py())
  expect_lte(after[["r"]] - before[["r"]], 50)
  expect_lte(after[["py"]] - before[["py"]], 50)
  # A module that is still used stays alive and callable.
  keep <- Tiny()
  gc()
  expect_equal(as_array(keep(torch_ones(2))), c(1, 1))
})

test_that("tensor wrappers do not accumulate", {
  count_tensors <- function() py_live_count("Tensor")
  gc()
  before <- count_tensors()
  for (i in 1:2000) torch_ones(3) + 1
  gc()
  expect_lte(count_tensors() - before, 50)
})
