# Every function and method that takes or returns indices or dimensions is 1-based.
# Expected values follow mlverse torch's documented (1-based) meaning; each is written out
# by hand from the inputs.

test_that("argmax/argmin return 1-based positions (mlverse: torch_argmax)", {
  x <- torch_tensor(c(1, 9, 3))
  expect_equal(as_array(x$argmax()), 2)
  expect_equal(as_array(torch_argmax(x)), 2)
  expect_equal(as_array(x$argmin()), 1)
  m <- torch_tensor(rbind(c(1, 5, 2), c(7, 0, 3)))
  expect_equal(as_array(torch_argmax(m, dim = 2)), c(2, 1))
  expect_equal(as_array(torch_argmin(m, dim = 1)), c(1, 2, 1))
  expect_equal(as_array(m$argmax(dim = -1, keepdim = TRUE)), matrix(c(2, 1), 2))
})

test_that("max/min/sort/topk/kthvalue/mode/cummax with dim return 1-based indices", {
  m <- torch_tensor(rbind(c(1, 5, 2), c(7, 0, 3)))
  mx <- m$max(dim = 2)
  expect_equal(as_array(mx[[1]]), c(5, 7))
  expect_equal(as_array(mx[[2]]), c(2, 1))
  mn <- torch_min(m, dim = 1)
  expect_equal(as_array(mn[[1]]), c(1, 0, 2))
  expect_equal(as_array(mn[[2]]), c(1, 2, 1))
  expect_equal(as_array(torch_max(m)), 7)
  expect_equal(as_array(torch_max(torch_tensor(c(1, 4)), other = torch_tensor(c(3, 2)))), c(3, 4))
  s <- torch_tensor(c(3, 1, 2))$sort()
  expect_equal(as_array(s[[1]]), c(1, 2, 3))
  expect_equal(as_array(s[[2]]), c(2, 3, 1))
  sd <- torch_sort(torch_tensor(c(3, 1, 2)), descending = TRUE)
  expect_equal(as_array(sd[[2]]), c(1, 3, 2))
  expect_equal(as_array(torch_argsort(torch_tensor(c(3, 1, 2)))), c(2, 3, 1))
  tk <- torch_tensor(c(1, 9, 3, 7))$topk(2)
  expect_equal(as_array(tk[[1]]), c(9, 7))
  expect_equal(as_array(tk[[2]]), c(2, 4))
  kv <- torch_kthvalue(torch_tensor(c(5, 1, 4)), 2)
  expect_equal(as_array(kv[[1]]), 4)
  expect_equal(as_array(kv[[2]]), 3)
  md <- torch_mode(torch_tensor(c(2, 2, 3)))
  expect_equal(as_array(md[[1]]), 2)
  expect_true(as_array(md[[2]]) %in% c(1, 2))
  cm <- torch_cummax(torch_tensor(c(1, 3, 2)), dim = 1)
  expect_equal(as_array(cm[[2]]), c(1, 2, 2))
})

test_that("nonzero and one-argument torch_where give 1-based positions", {
  x <- torch_tensor(c(0, 1, 0, 1))
  expect_equal(as_array(torch_nonzero(x)), matrix(c(2, 4), 2))
  expect_equal(as_array(x$nonzero()), matrix(c(2, 4), 2))
  w <- torch_where(torch_tensor(rbind(c(FALSE, TRUE), c(TRUE, FALSE))))
  expect_length(w, 2)
  expect_equal(as_array(w[[1]]), c(1, 2))
  expect_equal(as_array(w[[2]]), c(2, 1))
  # With three arguments it selects values: nothing to shift.
  expect_equal(as_array(torch_where(torch_tensor(c(TRUE, FALSE)), torch_tensor(c(1, 2)),
                                    torch_tensor(c(8, 9)))), c(1, 9))
})

test_that("index arguments are 1-based: index_select, gather, scatter, index_add, index_put, take", {
  x <- torch_tensor(c(10, 20, 30))
  expect_equal(as_array(x$index_select(1, torch_tensor(c(1L, 3L)))), c(10, 30))
  expect_equal(as_array(torch_index_select(x, 1, c(3, 2))), c(30, 20))
  m <- torch_tensor(rbind(c(1, 2), c(3, 4)))
  g <- torch_gather(m, 2, torch_tensor(rbind(c(1L, 1L), c(2L, 1L))))
  expect_equal(as_array(g), rbind(c(1, 1), c(4, 3)))
  sc <- torch_zeros(3)$scatter(1, torch_tensor(c(3L, 1L)), torch_tensor(c(5, 6)))
  expect_equal(as_array(sc), c(6, 0, 5))
  ia <- torch_zeros(3)$index_add(1, torch_tensor(c(2L, 2L)), torch_tensor(c(1, 2)))
  expect_equal(as_array(ia), c(0, 3, 0))
  ip <- torch_index_put(torch_zeros(2, 2), list(torch_tensor(2L), torch_tensor(1L)),
                        torch_tensor(7))
  expect_equal(as_array(ip), rbind(c(0, 0), c(7, 0)))
  expect_equal(as_array(torch_take(m, torch_tensor(c(1L, 4L)))), c(1, 4))
  expect_equal(as_array(torch_select(m, 1, 2)), c(3, 4))
  expect_equal(as_array(torch_narrow(x, 1, 2, 2)), c(20, 30))
  expect_error(torch_index_select(x, 1, c(0, 1)), class = "index_error")
})

test_that("unique's inverse is 1-based", {
  u <- torch_tensor(c(3, 1, 3))$unique(return_inverse = TRUE)
  expect_equal(as_array(u[[1]]), c(1, 3))
  expect_equal(as_array(u[[2]]), c(2, 1, 2))
  uc <- torch_unique_consecutive(torch_tensor(c(1, 1, 2, 2, 1)), return_inverse = TRUE,
                                 return_counts = TRUE)
  expect_equal(as_array(uc[[1]]), c(1, 2, 1))
  expect_equal(as_array(uc[[2]]), c(1, 1, 2, 2, 3))
  expect_equal(as_array(uc[[3]]), c(2, 2, 1))
})

test_that("dimensions are 1-based everywhere and negative ones count from the end", {
  m <- torch_tensor(rbind(c(1, 2, 3), c(4, 5, 6)))
  expect_equal(as_array(torch_sum(m, dim = 1)), c(5, 7, 9))
  expect_equal(as_array(m$sum(dim = 2)), c(6, 15))
  expect_equal(as_array(m$mean(dim = -1)), c(2, 5))
  expect_equal(dim(m$unsqueeze(1)), c(1L, 2L, 3L))
  expect_equal(dim(torch_transpose(m, 1, 2)), c(3L, 2L))
  expect_equal(dim(m$permute(c(2, 1))), c(3L, 2L))
  expect_equal(as_array(torch_cumsum(m, dim = 2)), rbind(c(1, 3, 6), c(4, 9, 15)))
  expect_equal(as_array(torch_flip(m, 2)), rbind(c(3, 2, 1), c(6, 5, 4)))
  expect_equal(lapply(torch_split(torch_tensor(1:5), 2), as_array), list(1:2, 3:4, 5L))
  expect_equal(length(torch_unbind(m, 2)), 3L)
  expect_equal(m$size(2), 3L)
  expect_equal(dim(torch_cat(list(m, m), dim = 2)), c(2L, 6L))
  expect_equal(as_array(nnf_softmax(torch_tensor(rbind(c(0, 0), c(1, 1))), dim = 2)),
               rbind(c(0.5, 0.5), c(0.5, 0.5)))
  expect_error(m$sum(dim = 0), class = "index_error")
  expect_error(m$sum(dim = 0), "1-based")
})

test_that("embedding, one_hot and cross-entropy targets take 1-based classes", {
  w <- torch_tensor(rbind(c(1, 1), c(2, 2), c(3, 3)))
  expect_equal(as_array(nnf_embedding(torch_tensor(c(3L, 1L)), w)), rbind(c(3, 3), c(1, 1)))
  expect_equal(as_array(nnf_one_hot(torch_tensor(c(1L, 3L)), 3)), rbind(c(1L, 0L, 0L), c(0L, 0L, 1L)))
  logits <- torch_tensor(rbind(c(0, 10, 0), c(10, 0, 0)))
  good <- nnf_cross_entropy(logits, torch_tensor(c(2L, 1L)))
  expect_lt(good$item(), 1e-3)
  bad <- nnf_cross_entropy(logits, torch_tensor(c(1L, 2L)))
  expect_gt(bad$item(), 5)
  # Targets equal to ignore_index are left out, as in mlverse.
  ign <- nnf_cross_entropy(logits, torch_tensor(c(2L, -100L)))
  expect_lt(ign$item(), 1e-3)
  expect_lt(nnf_nll_loss(nnf_log_softmax(logits, 2), torch_tensor(c(2L, 1L)))$item(), 1e-3)
  loss <- nn_cross_entropy_loss()
  expect_lt(loss(logits, torch_tensor(c(2L, 1L)))$item(), 1e-3)
})

test_that("a bare nn_embedding keeps the 1-based shift when traced", {
  torch_manual_seed(3)
  e <- nn_embedding(10, 2)
  i <- torch_tensor(c(1L, 10L))
  want <- as_array(e$weight)[c(1, 10), ]
  expect_equal(as_array(e(i)), want)
  tr <- jit_trace(e, i)
  expect_equal(as_array(tr(i)), want)
  expect_equal(as_array(tr(torch_tensor(c(2L, 3L, 4L)))), as_array(e$weight)[2:4, ])
  expect_equal(names(tr$parameters), "weight")
})

test_that("multi-margin loss takes 1-based targets (documented example: 0.325)", {
  x <- torch_tensor(rbind(c(0.1, 0.2, 0.4, 0.8)))
  expect_equal(nnf_multi_margin_loss(x, torch_tensor(4L))$item(), 0.325, tolerance = 1e-6)
})

test_that("init functions fill parameters in place", {
  w <- torch_empty(3, 4)
  nn_init_constant_(w, 2)
  expect_equal(as_array(w), matrix(2, 3, 4))
  nn_init_eye_(w)
  expect_equal(as_array(w), diag(1, 3, 4))
})

test_that("ignore_index is a class in the same 1-based numbering, for functions and modules", {
  # Each row's logits pick one class: row 1 class 2, row 2 class 1, row 3 class 3.
  logits <- torch_tensor(rbind(c(0, 10, 0), c(10, 0, 0), c(0, 0, 10)))
  ce <- function(...) as_array(nnf_cross_entropy(logits, ..., reduction = "none"))
  expect_equal(ce(c(1L, 1L, 3L))[[1]], 10, tolerance = 1e-3)
  # Ignoring class 1 drops the targets that are 1, and only those (class 2 once went too).
  ign <- ce(c(1L, 2L, 3L), ignore_index = 1)
  expect_equal(ign[1:2], c(0, 10), tolerance = 1e-3)
  mod <- nn_cross_entropy_loss(ignore_index = 1, reduction = "none")
  expect_equal(as_array(mod(logits, c(1L, 2L, 3L)))[1:2], c(0, 10), tolerance = 1e-3)
  # The default -100 is no class: such targets are left out, by modules too (an error once).
  expect_equal(as_array(nn_cross_entropy_loss(reduction = "none")(logits, c(-100L, 1L, 3L)))[1],
               0)
  expect_equal(as_array(nnf_nll_loss(nnf_log_softmax(logits, 2), c(-100L, 1L, 3L),
                                     reduction = "none"))[1], 0)
  nll <- nn_nll_loss(ignore_index = 3, reduction = "none")
  expect_equal(as_array(nll(nnf_log_softmax(logits, 2), c(3L, 3L, 2L))), c(0, 0, 10),
               tolerance = 1e-3)
  expect_error(nnf_cross_entropy(logits, c(1L, 2L, 3L), ignore_index = 0), class = "index_error")
})
