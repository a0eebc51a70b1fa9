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
