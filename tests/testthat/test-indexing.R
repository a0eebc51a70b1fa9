# `[` and `[<-` with mlverse's meaning. Expected values are those of mlverse torch's
# indexing article and its own indexing tests.

test_that("single elements: 1-based, negative from the end", {
  x <- torch_tensor(0:9)
  expect_equal(as_array(x[1]), 0L)
  expect_equal(as_array(x[-1]), 9L)
  m <- torch_tensor(rbind(c(1, 2, 3, 4, 5), c(6, 7, 8, 9, 10)))
  expect_equal(as_array(m[1, 3]), 3)
  expect_equal(as_array(m[1, -1]), 5)
  # Fewer indices than dimensions: the rest are taken whole (not R's flattening).
  expect_equal(as_array(m[1]), c(1, 2, 3, 4, 5))
  expect_error(x[0], class = "index_error")
  expect_error(x[11], class = "index_error")
})

test_that("slices: inclusive a:b, steps a:b:s, N, negative bounds", {
  x <- torch_tensor(0:9)
  expect_equal(as_array(x[2:5]), 1:4)
  expect_equal(as_array(x[1:(-7)]), 0:3)
  expect_equal(as_array(x[1:5:2]), c(0L, 2L, 4L))
  expect_equal(as_array(x[1:10:2]), c(0L, 2L, 4L, 6L, 8L))
  expect_equal(as_array(x[-2:10]), c(8L, 9L))
  expect_equal(as_array(x[2:N]), 1:9)
  expect_equal(as_array(x[(N - 1):N]), c(8L, 9L))
  expect_equal(as_array(x[slc(start = 1, end = 5, step = 2)]), c(0L, 2L, 4L))
  a <- array(as.double(1:1000), c(10, 10, 10))
  t <- torch_tensor(a)
  expect_equal(as_array(t[1:10:2, , ]), a[seq(1, 10, by = 2), , ])
})

test_that("empty indices, `..` and drop", {
  a <- array(as.double(1:120), c(2, 3, 4, 5))
  x <- torch_tensor(a)
  expect_equal(as_array(x[1, ..]), a[1, , , ])
  expect_equal(as_array(x[1, 1, ..]), a[1, 1, , ])
  expect_equal(as_array(x[.., 1]), a[, , , 1])
  expect_equal(as_array(x[.., 1, 1]), a[, , 1, 1])
  expect_equal(as_array(x[, 2, , 3]), a[, 2, , 3])
  expect_equal(dim(x[1, , , , drop = FALSE]), c(1L, 3L, 4L, 5L))
  expect_equal(dim(x[1, 2, .., drop = FALSE]), c(1L, 1L, 4L, 5L))
})

test_that("newaxis and NULL add a dimension", {
  x <- torch_tensor(c(10))
  expect_equal(x[, newaxis]$shape, c(1L, 1L))
  expect_equal(x[, newaxis, newaxis]$shape, c(1L, 1L, 1L))
  expect_equal(x[, NULL]$shape, c(1L, 1L))
})

test_that("vectors index each dimension on its own, as in R", {
  y <- 1:10
  x <- torch_tensor(y)
  expect_equal(as_array(x[c(1, 3, 2, 5)]), y[c(1, 3, 2, 5)])
  index <- 1:3
  expect_equal(as_array(x[index]), y[index])
  m <- matrix(as.double(1:100), 10)
  t <- torch_tensor(m)
  expect_equal(as_array(t[c(2, 3, 1), c(3, 2, 1)]), m[c(2, 3, 1), c(3, 2, 1)])
  expect_equal(as_array(t[c(TRUE, FALSE), 1]), m[seq(1, 10, 2), 1])
  expect_equal(as_array(t[c(-1, 1), 2]), m[c(10, 1), 2])
  expect_equal(as_array(t[torch_tensor(c(2L, 4L)), 1]), m[c(2, 4), 1])
})

test_that("masks select in torch's order", {
  x <- torch_tensor(rbind(c(1, 2, 3), c(4, 5, 6)))
  expect_equal(as_array(x[x > 3]), c(4, 5, 6))
  expect_equal(as_array(x[x$gt(1) & x$lt(6)]), c(2, 3, 4, 5))
})

test_that("assignment uses the same indices", {
  x <- torch_zeros(3, 4)
  x[1, ] <- 1
  x[, -1] <- 2
  x[2:3, 1:2] <- torch_tensor(rbind(c(5, 6), c(7, 8)))
  expect_equal(as_array(x), rbind(c(1, 1, 1, 2), c(5, 6, 0, 2), c(7, 8, 0, 2)))
  y <- torch_zeros(3, 3)
  y[c(1, 3), c(1, 3)] <- 9
  expect_equal(as_array(y), rbind(c(9, 0, 9), c(0, 0, 0), c(9, 0, 9)))
  z <- torch_tensor(c(1, -2, 3))
  z[z < 0] <- 0
  expect_equal(as_array(z), c(1, 0, 3))
  v <- torch_zeros(10)
  v[1:10:3] <- 1
  expect_equal(as_array(v), c(1, 0, 0, 1, 0, 0, 1, 0, 0, 1))
})

test_that("indexing inside a traced function records the 1-based meaning", {
  f <- function(x) x[2:N, -1]
  x <- torch_tensor(matrix(as.double(1:12), 3))
  tr <- jit_trace(f, x)
  y <- torch_tensor(matrix(as.double(1:20), 5))
  expect_equal(as_array(tr(y)), as_array(y)[2:5, 4])
})

test_that("x[[i]] is an element of a vector (it once returned the shape), or a field", {
  x <- torch_tensor(c(5, 6, 7))
  expect_equal(as_array(x[[2]]), 6)
  expect_equal(as_array(x[[-1]]), 7)
  expect_true(x[["dtype"]] == torch_float())
  expect_error(torch_zeros(2, 2)[[1]], class = "index_error")
})
