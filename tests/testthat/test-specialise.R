# Size specialisation where two lengths decide together (check/specialise.py in Python,
# which runs the traces that R makes): an encoder-decoder asks `len > 1` of the source and
# of the target, and a trace made with both above 1 serves both at 1, before and after
# jit_save()/jit_load().

test_that("a trace with two lengths above 1 serves both at 1, after save and load too", {
  skip_if_no_torch()
  mix <- function(x) if (x$size(2) > 1) torch_cumsum(x, 2) else x * 2
  f <- function(src, tgt) mix(src)$sum(2) + mix(tgt)$sum(2)
  tr <- jit_trace(f, torch_randn(2, 6, 3), torch_randn(2, 4, 3))
  path <- tempfile(fileext = ".tb")
  on.exit(unlink(path))
  jit_save(tr, path)
  loaded <- jit_load(path)
  for (batch in c(1, 3)) for (s in c(1, 5)) for (t in c(1, 4)) {
    src <- torch_randn(batch, s, 3)
    tgt <- torch_randn(batch, t, 3)
    want <- arr(f(src, tgt))
    expect_equal(arr(tr(src, tgt)), want, tolerance = 1e-6)
    expect_equal(arr(loaded(src, tgt)), want, tolerance = 1e-6)
  }
  # Length 0 takes the `else` branch too, but no graph was traced for it: refused.
  empty <- torch_randn(1, 0, 3)
  expect_error(tr(empty, torch_randn(1, 1, 3)), "GuardError", class = "tracebridge_guard_error")
  expect_error(loaded(empty, torch_randn(1, 1, 3)), class = "tracebridge_guard_error")
})
