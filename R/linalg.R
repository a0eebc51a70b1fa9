# The linalg_* family (linalg_norm(), linalg_svd(), linalg_lstsq(), ...) is made from rows
# of inst/surface.tsv like every torch_* function: dimensions are 1-based, and a Python
# tuple result comes back as an R list, as in mlverse torch. mlverse names three of those
# lists (linalg_lstsq(): solution, residuals, rank, singular_values; linalg_cholesky_ex():
# L, info; linalg_inv_ex(): inverse, info); their rows say so with the result kind
# `named_tensors(name:tensor;...)`, converted here.

# A tuple of results as an R list named as the row's result kind says. The names come from
# the table, not from Python's named tuple, because a traced call returns a plain tuple.
named_results <- function(out, fields) {
  items <- reticulate::iterate(out, from_py, simplify = FALSE)
  names(items) <- vapply(fields, function(f) f$name, character(1))[seq_along(items)]
  items
}

#' Matrix rank and pseudo-inverse with mlverse's arguments
#'
#' As in mlverse torch, `linalg_matrix_rank()` takes `tol`, and `linalg_pinv()` takes
#' `rcond` (with mlverse's default, `1e-15`), besides PyTorch's `atol` and `rtol`.
#' `tol` counts singular values (eigenvalues' absolute values when `hermitian = TRUE`)
#' above it: it is `atol = tol` with `rtol = 0`. `rcond` is `rtol`: singular values
#' smaller than `rcond` times the largest are taken as zero. Give either the old argument
#' or `atol`/`rtol`, not both.
#'
#' @param A A tensor of shape `(*, m, n)` (`*`: zero or more batch dimensions).
#' @param tol The tolerance of `linalg_matrix_rank()` (a number or a tensor), or `NULL`:
#'   `atol` and `rtol` decide (PyTorch's defaults when both are `NULL`).
#' @param rcond The relative tolerance of `linalg_pinv()` (a number or a tensor); it is
#'   left out when `atol` or `rtol` is given.
#' @param hermitian Whether `A` is Hermitian (symmetric if real).
#' @param atol,rtol PyTorch's absolute and relative tolerances.
#' @return `linalg_matrix_rank()`: an integer tensor; `linalg_pinv()`: a tensor of shape
#'   `(*, n, m)`.
#' @examples
#' if (torch_is_installed()) {
#'   A <- torch_tensor(rbind(c(1, 0), c(0, 1e-4)))
#'   linalg_matrix_rank(A)
#'   linalg_matrix_rank(A, tol = 1e-3)
#'   linalg_pinv(A, rcond = 1e-3)
#' }
#' @name linalg_matrix_rank
NULL

#' @rdname linalg_matrix_rank
#' @export
linalg_matrix_rank <- function(A, tol = NULL, hermitian = FALSE, atol = NULL, rtol = NULL) {
  if (!is.null(tol)) {
    if (!is.null(atol) || !is.null(rtol)) {
      value_error(paste(
        "linalg_matrix_rank(): give `tol`, or `atol` and `rtol`, not both",
        "(`tol` is `atol = tol` with `rtol = 0`)."))
    }
    atol <- tol
    # PyTorch takes a tensor atol only with a tensor rtol.
    rtol <- if (inherits(tol, "torch_tensor")) tol * 0 else 0
  }
  surface_row("torch.linalg.matrix_rank")(A, atol = atol, rtol = rtol, hermitian = hermitian)
}

#' @rdname linalg_matrix_rank
#' @export
linalg_pinv <- function(A, rcond = 1e-15, hermitian = FALSE, atol = NULL, rtol = NULL) {
  if (is.null(atol) && is.null(rtol)) {
    rtol <- rcond
  } else if (!missing(rcond)) {
    value_error(paste(
      "linalg_pinv(): give `rcond`, or `atol` and `rtol`, not both",
      "(`rcond` is `rtol`, mlverse's name for it)."))
  }
  out <- surface_row("torch.linalg.pinv")(A, atol = atol, rtol = rtol, hermitian = hermitian)
  # A tolerance tensor of one element (R has no 0-d values) broadcasts to a batch of one;
  # mlverse drops it.
  if (length(dim(out)) != length(dim(A))) out <- out$squeeze(1)
  out
}

#' Tensor contraction over dimensions
#'
#' As in mlverse torch, `dims` is either a number `d` (contract the last `d` dimensions of
#' `a` with the first `d` of `b`) or a list of two vectors of dimensions, 1-based
#' (negative counts from the end): `list(c(2, 3), c(1, 2))` contracts `a`'s dimensions 2
#' and 3 with `b`'s 1 and 2.
#'
#' @param a,b Tensors.
#' @param dims A whole number, or a list of two vectors of the same length.
#' @return A tensor: `a`'s dimensions left over, then `b`'s.
#' @examples
#' if (torch_is_installed()) {
#'   a <- torch_randn(3, 4, 5)
#'   b <- torch_randn(4, 5, 2)
#'   dim(torch_tensordot(a, b, dims = 2))
#'   dim(torch_tensordot(a, b, dims = list(c(2, 3), c(1, 2))))
#' }
#' @export
torch_tensordot <- function(a, b, dims = 2) {
  if (is.list(dims)) {
    if (length(dims) != 2 || length(dims[[1]]) != length(dims[[2]])) {
      value_error(paste(
        "torch_tensordot(): `dims` must be a number or a list of two vectors of the same",
        "length (the dimensions of `a` and of `b` to contract)."))
    }
    shifted <- lapply(dims, function(d) {
      lapply(d, function(k) dim_arg(k, "dims"))
    })
    dims <- reticulate::r_to_py(shifted, convert = FALSE)
  } else {
    check_whole(dims, "dims")
    if (length(dims) != 1 || dims < 0) {
      value_error(sprintf(paste(
        "torch_tensordot(): `dims` must be one whole number of dimensions to contract",
        "(0 or more), or a list of two vectors of dimensions; got %s."),
        paste(format(dims), collapse = ", ")))
    }
    dims <- as.integer(dims)
  }
  surface_row("torch.tensordot")(a, b, dims = dims)
}
