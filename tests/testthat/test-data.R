# Loops over data loaders as mlverse torch documents them: dataloader_make_iter() and
# dataloader_next(), dl$.iter() with $.next(), and for (b in enumerate(dl)) (a list of
# the batches, as in mlverse).

five <- function(batch_size = 2, ...) {
  dataloader(tensor_dataset(x = torch_tensor(c(10, 20, 30, 40, 50))), batch_size = batch_size,
             ...)
}

test_that("dl$.iter() gives an iterator whose $.next() returns batches, then stops", {
  skip_if_no_torch()
  dl <- five()
  expect_equal(dl$.length(), 3L)
  it <- dl$.iter()
  expect_equal(as_array(it$.next()$x), c(10, 20))
  expect_true(it$.has_next())
  expect_equal(as_array(it$.next()[[1]]), c(30, 40))
  expect_equal(as_array(it$.next()$x), 50)
  expect_false(it$.has_next())
  expect_error(it$.next(), class = "stop_iteration_error")
  expect_error(it$.next(), "exhausted: all 3 batches were read")
  # a new pass starts from the beginning
  expect_equal(as_array(dl$.iter()$.next()$x), c(10, 20))
  expect_equal(dl$batch_size, 2L)
})

test_that("a plain loop over dataloader_next() sees every item once", {
  skip_if_no_torch()
  it <- dataloader_make_iter(five())
  seen <- c()
  while (!is.null(b <- dataloader_next(it))) seen <- c(seen, as_array(b$x))
  expect_equal(seen, c(10, 20, 30, 40, 50))
})

test_that("for (b in enumerate(dl)) loops over the batches in order", {
  skip_if_no_torch()
  dl <- five()
  batches <- enumerate(dl)
  expect_length(batches, 3)
  seen <- list()
  for (b in enumerate(dl)) seen[[length(seen) + 1]] <- as_array(b$x)
  expect_equal(seen, list(c(10, 20), c(30, 40), 50))
  seen <- c()
  for (b in enumerate(five(drop_last = TRUE))) seen <- c(seen, as_array(b[[1]]))
  expect_equal(seen, c(10, 20, 30, 40))
  expect_length(enumerate(dl, max_len = 2), 2)
  # shuffled: every item once, and reproducible with torch_manual_seed()
  pass <- function() {
    torch_manual_seed(3)
    unlist(lapply(enumerate(five(shuffle = TRUE)), function(b) as_array(b$x)))
  }
  p1 <- pass()
  expect_equal(sort(p1), c(10, 20, 30, 40, 50))
  expect_equal(pass(), p1)
})

test_that("enumerate() gives the batches themselves, as mlverse does", {
  skip_if_no_torch()
  bs <- enumerate(five())
  expect_type(bs, "list")
  expect_type(bs[[1]], "list")
  expect_identical(names(bs[[2]]), "x")
  expect_length(bs[[3]], 1L)
  # In any order, any number of times: each is a batch, not a place in a pass.
  expect_equal(as_array(bs[[2]]$x), c(30, 40))
  expect_equal(as_array(bs[[1]][[1]]), c(10, 20))
  expect_equal(as_array(bs[[2]]$x), c(30, 40))
  expect_length(enumerate(five(), max_len = 0), 0)
  expect_error(enumerate(five(), max_len = -1), "`max_len` must be one number",
               class = "value_error")
  expect_error(enumerate(1:3), "must be a data loader", class = "type_error")
})

test_that("a for loop over the loader itself is an error, not a loop over its settings", {
  skip_if_no_torch()
  dl <- five()
  expect_error(for (b in dl) NULL, "invalid for")
})
