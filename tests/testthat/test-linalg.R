# The linalg_* family (rows of inst/surface.tsv) with mlverse torch's names, arguments and
# results: dims 1-based, tuple results as R lists (named where mlverse names them). The
# expected values are worked out by hand from the definitions, not computed by torch.

A2 <- function() torch_tensor(rbind(c(4, 1), c(1, 3)))
# mlverse's example: torch_arange(0, 8) - 4 is -4, ..., 4 (mlverse's arange includes the end).
norm_example <- function() (torch_arange(0, 8) - 4)$reshape(c(3, 3))

test_that("determinants, inverses and solutions of a 2 x 2 system", {
  skip_if_no_torch()
  A <- A2()
  expect_equal(as_array(linalg_det(A)), 11, tolerance = 1e-6)
  sl <- linalg_slogdet(A)
  expect_type(sl, "list")
  expect_length(sl, 2)
  expect_equal(as_array(sl[[1]]), 1)
  expect_equal(as_array(sl[[2]]), log(11), tolerance = 1e-6)
  expect_equal(as_array(linalg_inv(A)), rbind(c(3, -1), c(-1, 4)) / 11, tolerance = 1e-6)
  expect_equal(as_array(linalg_solve(A, torch_tensor(c(1, 2)))), c(1, 7) / 11, tolerance = 1e-6)
  inv_ex <- linalg_inv_ex(A)
  expect_named(inv_ex, c("inverse", "info"))
  expect_equal(as_array(inv_ex$info), 0L)
  expect_equal(as_array(linalg_matrix_power(A, 0)), diag(2))
  expect_equal(as_array(linalg_matrix_power(A, 2)), rbind(c(17, 7), c(7, 10)))
  expect_equal(as_array(linalg_matrix_power(A, -1)), rbind(c(3, -1), c(-1, 4)) / 11,
               tolerance = 1e-6)
  expect_equal(as_array(linalg_pinv(A)), rbind(c(3, -1), c(-1, 4)) / 11, tolerance = 1e-5)
  L <- rbind(c(2, 0), c(0.5, sqrt(2.75)))
  expect_equal(as_array(linalg_cholesky(A)), L, tolerance = 1e-6)
  expect_equal(as_array(linalg_cholesky(A, upper = TRUE)), t(L), tolerance = 1e-6)
  ch <- linalg_cholesky_ex(A)
  expect_named(ch, c("L", "info"))
  expect_equal(as_array(ch$L), L, tolerance = 1e-6)
  upper <- torch_tensor(rbind(c(2, 1), c(0, 4)))
  expect_equal(as_array(linalg_solve_triangular(upper, torch_tensor(rbind(4, 8)), upper = TRUE)),
               rbind(1, 2), tolerance = 1e-6)  # x2 = 8 / 4, then 2 x1 + x2 = 4
})

test_that("norms follow mlverse's examples, with 1-based dims", {
  skip_if_no_torch()
  b <- norm_example()
  expect_equal(as_array(linalg_norm(b)), sqrt(60), tolerance = 1e-6)
  expect_equal(as_array(linalg_norm(b, "fro")), sqrt(60), tolerance = 1e-6)
  # Inf: the largest row sum of |b| (rows -4 -3 -2 | -1 0 1 | 2 3 4).
  expect_equal(as_array(linalg_norm(b, Inf)), 9)
  expect_equal(as_array(linalg_norm(b, dim = 1, ord = 1)), c(7, 6, 7))
  expect_equal(as_array(linalg_vector_norm(b, ord = 1, dim = 1)), c(7, 6, 7))
  expect_equal(as_array(linalg_vector_norm(b, ord = 1, dim = 2)), c(9, 2, 9))
  expect_equal(as_array(linalg_vector_norm(b, ord = Inf, dim = -1, keepdim = TRUE)),
               matrix(c(4, 1, 4), 3, 1))
  expect_equal(as_array(linalg_matrix_norm(b, ord = 1)), 7)
  # mlverse: linalg_matrix_norm(b, dim = c(1, 3)) on a (2, 3, 3) batch: rows are dim 1 (two
  # copies of a row of b), columns dim 3, so each largest column sum is 2 * max |b[i, ]|.
  bb <- b$expand(c(2, -1, -1))
  expect_equal(as_array(linalg_matrix_norm(bb, ord = 1, dim = c(1, 3))), c(8, 2, 8))
  expect_error(linalg_vector_norm(b, dim = 0), "1-based")
  expect_error(linalg_vector_norm(b, dim = 3), "got 3")
})

test_that("decompositions come back as R lists, as in mlverse", {
  skip_if_no_torch()
  A <- A2()
  lam <- c(7 - sqrt(5), 7 + sqrt(5)) / 2  # trace 7, determinant 11; ascending, as eigh returns them
  eh <- linalg_eigh(A)
  expect_type(eh, "list")
  expect_length(eh, 2)
  expect_equal(as_array(eh[[1]]), lam, tolerance = 1e-6)
  V <- as_array(eh[[2]])
  expect_equal(V %*% diag(lam) %*% t(V), as_array(A), tolerance = 1e-5)
  expect_equal(as_array(linalg_eigvalsh(A)), lam, tolerance = 1e-6)
  expect_equal(sort(Re(as_array(linalg_eigvals(A)))), lam, tolerance = 1e-6)
  expect_length(linalg_eig(A), 2)

  expect_equal(as_array(linalg_svdvals(torch_diag(torch_tensor(c(3, 1, 2))))), c(3, 2, 1))
  m <- torch_tensor(rbind(c(1, 2, 3), c(4, 5, 6)))
  s <- linalg_svd(m, full_matrices = FALSE)
  expect_length(s, 3)
  expect_equal(dim(s[[1]]), c(2L, 2L))
  expect_equal(as_array(s[[1]]) %*% diag(as_array(s[[2]])) %*% as_array(s[[3]]), as_array(m),
               tolerance = 1e-5)
  expect_equal(dim(linalg_svd(m)[[3]]), c(3L, 3L))

  # mlverse's linalg_qr() example: Q R gives back a, and Q is orthogonal.
  a <- rbind(c(12, -51, 4), c(6, 167, -68), c(-4, 24, -41))
  qr <- linalg_qr(torch_tensor(a))
  expect_length(qr, 2)
  expect_equal(as_array(torch_mm(qr[[1]], qr[[2]])$round()), a)
  expect_equal(as_array(torch_mm(qr[[1]]$t(), qr[[1]])$round()), diag(3))
  expect_equal(dim(linalg_qr(torch_randn(4, 2), mode = "complete")[[1]]), c(4L, 4L))
})

test_that("least squares returns mlverse's named list", {
  skip_if_no_torch()
  A <- torch_tensor(rbind(c(1, 0), c(0, 1), c(1, 1)))
  B <- torch_tensor(rbind(1, 2, 4))
  ls <- linalg_lstsq(A, B)
  expect_named(ls, c("solution", "residuals", "rank", "singular_values"))
  # Normal equations: [2 1; 1 2] x = [5; 6] gives x = (4, 7) / 3.
  expect_equal(as_array(ls$solution), rbind(4, 7) / 3, tolerance = 1e-5)
  expect_equal(as_array(linalg_lstsq(A, B, driver = "gelsd")$rank), 2L)
})

test_that("rank, products, cross products and tensor inverses", {
  skip_if_no_torch()
  expect_equal(as_array(linalg_matrix_rank(torch_eye(10))), 10L)
  expect_equal(as_array(linalg_matrix_rank(torch_tensor(rbind(c(1, 2), c(2, 4))))), 1L)
  m <- torch_tensor(rbind(c(1, 2, 3, 4, 5), c(2, 1, 0, 1, 2), c(0, 1, 1, 0, 1)))
  expect_equal(as_array(torch_mm(torch_mm(m, linalg_pinv(m)), m)), as_array(m), tolerance = 1e-4)
  # mlverse's linalg_multi_dot() example: (1, 2) . (2, 3) = 8.
  expect_equal(as_array(linalg_multi_dot(list(torch_tensor(c(1, 2)), torch_tensor(c(2, 3))))), 8)
  expect_equal(as_array(linalg_multi_dot(list(torch_eye(2), A2(), torch_eye(2)))), as_array(A2()))
  expect_equal(as_array(linalg_cross(torch_tensor(c(1, 0, 0)), torch_tensor(c(0, 1, 0)))),
               c(0, 0, 1))
  # dim = 1: the vectors are the columns of a 3 x 2 matrix.
  x <- torch_tensor(cbind(c(1, 0, 0), c(0, 1, 0)))
  y <- torch_tensor(cbind(c(0, 1, 0), c(0, 0, 1)))
  expect_equal(as_array(linalg_cross(x, y, dim = 1)), cbind(c(0, 0, 1), c(1, 0, 0)))
  expect_equal(as_array(linalg_vecdot(x, y, dim = 1)), c(0, 0))
  expect_equal(as_array(linalg_matrix_exp(torch_zeros(2, 2))), diag(2))
  expect_equal(as_array(linalg_cond(torch_diag(torch_tensor(c(4, 2))))), 2, tolerance = 1e-6)
  # mlverse's linalg_tensorinv() example: ind = 3 (1-based) splits (4, 6 | 8, 3).
  Ainv <- linalg_tensorinv(torch_eye(4 * 6)$reshape(c(4, 6, 8, 3)), ind = 3)
  expect_equal(dim(Ainv), c(8L, 3L, 4L, 6L))
})

test_that("linalg_tensorsolve moves 1-based dims to the end", {
  skip_if_no_torch()
  b <- c(1, 2, 3, 4, 5, 6)
  A0 <- torch_eye(6)$reshape(c(6, 2, 3))
  expect_equal(as_array(linalg_tensorsolve(A0, torch_tensor(b))), rbind(1:3, 4:6))
  # Dim 1 of (2, 6, 3) moved to the end gives (6, 3, 2): X[j, i] = b[(i - 1) * 3 + j].
  moved <- A0$permute(c(2, 1, 3))
  expect_equal(as_array(linalg_tensorsolve(moved, torch_tensor(b), dims = 1)),
               matrix(b, nrow = 3))
})

test_that("linalg functions trace, and the traced graph works at another size", {
  skip_if_no_torch()
  f <- function(x) {
    s <- linalg_slogdet(x)
    list(linalg_vector_norm(x, dim = 2), s[[2]])
  }
  tr <- jit_trace(f, torch_eye(2) * 2)
  out <- tr(A2())
  expect_equal(as_array(out[[1]]), sqrt(c(17, 10)), tolerance = 1e-6)
  expect_equal(as_array(out[[2]]), log(11), tolerance = 1e-6)
  out3 <- tr(torch_eye(3) * 2)
  expect_equal(as_array(out3[[2]]), log(8), tolerance = 1e-6)
})

test_that("linalg_matrix_rank(tol = ) and linalg_pinv(rcond = ) as mlverse has them", {
  skip_if_no_torch()
  A <- torch_tensor(rbind(c(1, 0), c(0, 1e-4)))
  pyA <- A$py
  torch <- reticulate::import("torch", convert = FALSE)
  py_rank <- function(...) reticulate::py_to_r(torch$linalg$matrix_rank(pyA, ...)$item())
  # tol: the old PyTorch argument, atol = tol with rtol = 0; positional as in mlverse.
  expect_equal(as_array(linalg_matrix_rank(A, tol = 1e-3)), py_rank(tol = 1e-3))
  expect_equal(as_array(linalg_matrix_rank(A, tol = 1e-3)), 1L)
  expect_equal(as_array(linalg_matrix_rank(A, 1e-5)), 2L)
  expect_equal(as_array(linalg_matrix_rank(A, tol = torch_tensor(1e-3))), 1L)
  expect_equal(as_array(linalg_matrix_rank(A, atol = 1e-3)), py_rank(atol = 1e-3))
  expect_error(linalg_matrix_rank(A, tol = 1e-3, rtol = 0.1), "give `tol`, or `atol`",
               class = "value_error")
  # rcond: mlverse's name of rtol, 1e-15 by default.
  expect_equal(as_array(linalg_pinv(A, rcond = 1e-3)), rbind(c(1, 0), c(0, 0)))
  expect_equal(as_array(linalg_pinv(A)), rbind(c(1, 0), c(0, 1e4)), tolerance = 1e-4)
  py_pinv <- reticulate::py_to_r(torch$linalg$pinv(pyA, rtol = 1e-3)$numpy())
  expect_equal(as_array(linalg_pinv(A, rcond = 1e-3)), py_pinv)
  expect_equal(as_array(linalg_pinv(A, atol = 1e-3)), rbind(c(1, 0), c(0, 0)))
  expect_equal(as_array(linalg_pinv(A, rcond = torch_tensor(1e-3))), rbind(c(1, 0), c(0, 0)))
  expect_error(linalg_pinv(A, rcond = 1e-3, rtol = 1e-5), "give `rcond`, or `atol`",
               class = "value_error")
  # Traced: the row's call is recorded, the tolerance with it.
  f <- function(a) linalg_pinv(a, rcond = 1e-3)
  expect_equal(as_array(jit_trace(f, A)(A)), rbind(c(1, 0), c(0, 0)))
})
