# Tensors in R lists. A tensor is an R list holding its Python object (`.py`), so base R
# functions that take lists apart see that object. As in mlverse, where a tensor is not
# a vector, `c()` of tensors is a list of the tensors; `c(a_list, tensor)`, which R
# dispatches on the list, splices the tensor's Python object into the list instead: the
# functions that take lists of tensors (torch_cat(), torch_stack(), ...) read that object
# back as the same tensor (as_tensor() in R/tensor.R).

#' @export
c.torch_tensor <- function(...) {
  parts <- lapply(list(...), function(a) {
    if (inherits(a, "torch_tensor") || is.null(a)) return(if (is.null(a)) list() else list(a))
    as.list(a)
  })
  do.call(base::c, unname(parts_named(parts, names(list(...)))))
}

# c(a = t) names the element "a", as c() names the elements of its arguments.
parts_named <- function(parts, nms) {
  if (is.null(nms)) return(parts)
  Map(function(p, nm) {
    if (nzchar(nm) && length(p) == 1 && is.null(names(p))) names(p) <- nm
    p
  }, parts, nms)
}
