# The cache of shifted index tensors (src/convert.c): a tensor of 1-based positions used
# twice is shifted once, and any write to it (or to what shares its memory) is seen.

cache <- function(reset = FALSE) tracebridge:::shift_cache_stats(reset)

with_c <- function(on, code) {
  tracebridge:::set_c_call(on)
  on.exit(tracebridge:::set_c_call(TRUE))
  force(code)
}

test_that("an index tensor used twice is shifted once, with the same results", {
  skip_if_no_torch()
  cache(reset = TRUE)
  m <- matrix(as.numeric(1:30), 10, 3)
  X <- torch_tensor(m)
  Y <- torch_tensor(101:110)
  idx <- torch_tensor(c(2L, 5L, 7L))
  before <- cache()
  xb <- X[idx, ]
  yb <- Y[idx]
  after <- cache()
  expect_equal(after$misses - before$misses, 1)
  expect_equal(after$hits - before$hits, 1)
  expect_equal(as_array(xb), m[c(2, 5, 7), ])
  expect_equal(as_array(yb), c(102L, 105L, 107L))
  # Class targets of a loss are shifted on their own (a negative target names no class,
  # where a negative position counts from the end), and cached too.
  logits <- torch_randn(3, 110)
  loss <- nnf_cross_entropy(logits, idx)
  expect_equal(cache()$hits - after$hits, 0)
  loss <- nnf_cross_entropy(logits, idx)
  expect_equal(cache()$hits - after$hits, 1)
  manual <- -mean(as_array(nnf_log_softmax(logits, 2))[cbind(1:3, c(2, 5, 7))])
  expect_equal(loss$item(), manual, tolerance = 1e-6)
})

test_that("a write to the index tensor after it was shifted gives the new positions", {
  skip_if_no_torch()
  cache(reset = TRUE)
  Y <- torch_tensor(101:110)
  idx <- torch_tensor(c(2L, 5L, 7L))
  expect_equal(as_array(Y[idx]), c(102L, 105L, 107L))
  idx[1] <- 9L # `[<-`
  expect_equal(as_array(Y[idx]), c(109L, 105L, 107L))
  v <- idx[2:3] # a view: its writes are the index tensor's
  v[1] <- 1L
  expect_equal(as_array(Y[idx]), c(109L, 101L, 107L))
  idx$detach()$copy_(torch_tensor(c(3L, 4L, 10L))) # $detach() shares its memory
  expect_equal(as_array(Y[idx]), c(103L, 104L, 110L))
  idx$clamp_(max = 9L) # an in-place method
  expect_equal(as_array(Y[idx]), c(103L, 104L, 109L))
  X <- torch_tensor(matrix(as.numeric(1:30), 10, 3))
  expect_equal(as_array(X[idx, ])[, 1], c(3, 4, 9))
  # The same answers with the C paths off (every call through reticulate).
  with_c(FALSE, expect_equal(as_array(Y[idx]), c(103L, 104L, 109L)))
  idx[3] <- 1L
  expect_equal(as_array(Y[idx]), c(103L, 104L, 101L))
  expect_false(cache()$off)
})

test_that("class targets written in place give the loss of the new targets", {
  skip_if_no_torch()
  cache(reset = TRUE)
  logits <- torch_randn(4, 3)
  target <- torch_tensor(c(1L, 2L, 3L, 1L))
  lp <- as_array(nnf_log_softmax(logits, 2))
  expect_equal(nnf_cross_entropy(logits, target)$item(),
               -mean(lp[cbind(1:4, c(1, 2, 3, 1))]), tolerance = 1e-6)
  target[4] <- 3L
  expect_equal(nnf_cross_entropy(logits, target)$item(),
               -mean(lp[cbind(1:4, c(1, 2, 3, 3))]), tolerance = 1e-6)
  # A target out of range is still refused after a cached shift.
  target[1] <- 4L
  expect_error(nnf_cross_entropy(logits, target), "out of bounds")
})

test_that("$data and $py of an integer tensor turn the cache off: their writes are not counted", {
  skip_if_no_torch()
  cache(reset = TRUE)
  Y <- torch_tensor(101:110)
  idx <- torch_tensor(c(2L, 5L, 7L))
  expect_equal(as_array(Y[idx]), c(102L, 105L, 107L))
  d <- idx$data # shares idx's memory, not its version counter
  expect_true(cache()$off)
  d[1] <- 10L
  expect_equal(as_array(Y[idx]), c(110L, 105L, 107L))
  misses <- cache()$misses
  expect_equal(as_array(Y[idx]), c(110L, 105L, 107L))
  expect_equal(cache()$misses - misses, 1) # shifted again: nothing is kept while off
  cache(reset = TRUE)
  expect_equal(as_array(Y[idx]), c(110L, 105L, 107L))
  invisible(idx$py)
  expect_true(cache()$off)
  # A float tensor's $data or $py leaves it on (floats are never shifted).
  cache(reset = TRUE)
  invisible(torch_randn(2)$py)
  invisible(torch_randn(2)$data)
  expect_false(cache()$off)
  # Assigning $data replaces the values without counting a write.
  expect_equal(as_array(Y[idx]), c(110L, 105L, 107L))
  idx$data <- torch_tensor(c(1L, 1L, 1L))
  expect_true(cache()$off)
  expect_equal(as_array(Y[idx]), c(101L, 101L, 101L))
  cache(reset = TRUE)
})

test_that("positions all above 0 (one op) and the rest (r_positions) read as R's path does", {
  skip_if_no_torch()
  cache(reset = TRUE)
  m <- matrix(as.numeric(1:30), 10, 3)
  X <- torch_tensor(m)
  read <- function(idx, cols = FALSE) {
    out <- try(if (cols) X[, idx] else X[idx, ], silent = TRUE)
    if (inherits(out, "try-error")) conditionMessage(attr(out, "condition")) else as_array(out)
  }
  cases <- list(
    torch_tensor(c(2L, 5L, 7L)),                         # all above 0: t - 1
    torch_tensor(c(2L, 5L, 7L), dtype = torch_int32()),  # int32 stays int32
    torch_tensor(c(10L, 1L, 10L)),                       # repeated, the last row
    torch_tensor(c(-1L, 2L)),                            # a negative counts from the end
    torch_tensor(c(0L, 2L)),                             # 0 names no position: an error
    torch_tensor(c(11L, 2L)),                            # past the end: an error
    torch_tensor(integer(0)),                            # empty: no min, r_positions
    torch_tensor(c(2L, 3L), dtype = torch_int16())       # index_select refuses int16
  )
  for (idx in cases) expect_identical(read(idx), with_c(FALSE, read(idx)))
  # A later dimension: x[, idx].
  cols <- list(torch_tensor(c(3L, 1L)), torch_tensor(c(-1L, 1L)), torch_tensor(c(4L)),
               torch_tensor(c(2L, 3L), dtype = torch_int32()))
  for (idx in cols) {
    expect_identical(read(idx, cols = TRUE), with_c(FALSE, read(idx, cols = TRUE)))
  }
  expect_identical(read(torch_tensor(c(3L, 1L)), cols = TRUE), m[, c(3, 1)])
  expect_identical(read(torch_tensor(c(2L, 5L, 7L))), m[c(2, 5, 7), ])
  expect_identical(read(torch_tensor(c(-1L, 2L))), m[c(10, 2), ])
  expect_match(read(torch_tensor(c(0L, 2L))), "index 0 .*1-based")
  expect_match(read(torch_tensor(c(11L, 2L))), "index 11 is out of bounds for dimension 1")
  # The shifted positions keep the dtype (an index_select of int32 positions is int32's).
  idx32 <- torch_tensor(c(3L, 1L), dtype = torch_int32())
  expect_identical(as_array(torch_index_select(X, 1, idx32)), m[c(3, 1), ])
})

test_that("positions read from memory (slices of a permutation) give what R's path gives", {
  skip_if_no_torch()
  cache(reset = TRUE)
  m <- matrix(as.numeric(1:30), 10, 3)
  X <- torch_tensor(m)
  Y <- torch_tensor(101:110)
  read <- function(idx) {
    out <- try(X[idx, ], silent = TRUE)
    if (inherits(out, "try-error")) conditionMessage(attr(out, "condition")) else as_array(out)
  }
  torch_manual_seed(3)
  perm <- torch_randperm(10) + 1L
  before <- cache()$in_memory
  # Contiguous slices at several storage offsets (a training loop's `idx`), int64 and
  # int32: read from memory, with the results of R's path and of base R.
  for (s in c(1L, 4L, 7L)) {
    idx <- perm[s:(s + 3L)]
    expect_identical(read(idx), with_c(FALSE, read(idx)))
    expect_identical(read(idx), m[as_array(idx), ])
    expect_identical(as_array(Y[idx]), (101:110)[as_array(idx)])
    idx32 <- idx$to(dtype = torch_int32())
    expect_identical(read(idx32), m[as_array(idx), ])
  }
  expect_gt(cache()$in_memory, before)
  # A strided view (every other position) is not read from memory: the same results.
  strided <- perm[1:10:2]
  expect_identical(read(strided), with_c(FALSE, read(strided)))
  expect_identical(read(strided), m[as_array(perm)[seq(1, 10, 2)], ])
  # A 0 or a negative position anywhere, int64 and int32 (read from memory): R's meaning
  # and R's errors, as R's path gives them.
  for (dtype in list(torch_long(), torch_int32())) {
    for (v in list(c(3L, 4L, 0L), c(0L, 4L), c(3L, -1L), c(-2L, 5L, 1L))) {
      idx <- torch_tensor(v, dtype = dtype)
      expect_identical(read(idx), with_c(FALSE, read(idx)))
    }
  }
  expect_match(read(torch_tensor(c(3L, 4L, 0L))), "index 0 .*1-based")
  expect_identical(read(torch_tensor(c(3L, -1L))), m[c(3, 10), ])
})
