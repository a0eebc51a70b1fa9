# Autograd: grad-mode scopes and autograd_grad()/autograd_backward(). Tensor methods
# ($backward(), $detach(), $requires_grad_(), ...) come from the surface table.

#' Autograd
#'
#' `with_no_grad()` evaluates `code` without recording operations (as in an evaluation
#' loop or a manual parameter update); `with_enable_grad()` records them even inside
#' `with_no_grad()`. `autograd_grad()` returns the gradients of `outputs` with respect to
#' `inputs` without accumulating them in `$grad`.
#'
#' @param code R code to evaluate.
#' @param outputs,inputs A tensor or a list of tensors.
#' @param grad_outputs Gradients with respect to `outputs` (`NULL` for scalars).
#' @param retain_graph,create_graph Keep the graph for another backward pass; record
#'   the backward pass itself (for higher derivatives).
#' @param allow_unused Return `NULL`-filled gradients for inputs not used.
#' @param tensors,grad_tensors For `autograd_backward()`: outputs and their gradients.
#' @return `with_*`: the value of `code`. `autograd_grad()`: a list of tensors.
#' @name autograd
#' @examples
#' if (torch_is_installed()) {
#'   x <- torch_tensor(c(1, 2, 3), requires_grad = TRUE)
#'   y <- (x^2)$sum()
#'   autograd_grad(y, x)
#'   with_no_grad(x$mul_(2))
#' }
NULL

#' @rdname autograd
#' @export
with_no_grad <- function(code) with_grad_mode(FALSE, code)

#' @rdname autograd
#' @export
with_enable_grad <- function(code) with_grad_mode(TRUE, code)

# `code` evaluated with grad mode `enabled`: through src/surface.c (tb_grad_mode) where the C
# path is on, else through reticulate; on.exit() restores the mode on errors too. `code`
# stays a promise of the caller's until it is forced here.
with_grad_mode <- function(enabled, code) {
  prev <- .Call(tb_grad_mode, enabled)
  if (is.logical(prev)) {
    on.exit(.Call(tb_grad_mode, prev), add = TRUE)
    return(code)
  }
  if (identical(prev, quote(.tb_error))) c_error(one_based = FALSE)
  c_started()
  prev <- reticulate::py_to_r(py_torch()$is_grad_enabled())
  py_torch()$set_grad_enabled(enabled)
  on.exit(py_torch()$set_grad_enabled(prev), add = TRUE)
  force(code)
}

tensor_list_py <- function(x) {
  if (inherits(x, "torch_tensor")) x <- list(x)
  reticulate::r_to_py(lapply(unname(x), tensor_py), convert = FALSE)
}

#' @rdname autograd
#' @export
autograd_grad <- function(outputs, inputs, grad_outputs = NULL, retain_graph = create_graph,
                          create_graph = FALSE, allow_unused = FALSE) {
  go <- if (is.null(grad_outputs)) NULL else tensor_list_py(grad_outputs)
  out <- withCallingHandlers(
    py_torch()$autograd$grad(tensor_list_py(outputs), tensor_list_py(inputs),
                             grad_outputs = go, retain_graph = isTRUE(retain_graph),
                             create_graph = isTRUE(create_graph),
                             allow_unused = isTRUE(allow_unused)),
    error = function(e) rethrow_python(e)
  )
  reticulate::iterate(out, from_py, simplify = FALSE)
}

#' @rdname autograd
#' @export
autograd_backward <- function(tensors, grad_tensors = NULL, retain_graph = create_graph,
                              create_graph = FALSE) {
  gt <- if (is.null(grad_tensors)) NULL else tensor_list_py(grad_tensors)
  withCallingHandlers(
    py_torch()$autograd$backward(tensor_list_py(tensors), grad_tensors = gt,
                                 retain_graph = isTRUE(retain_graph),
                                 create_graph = isTRUE(create_graph)),
    error = function(e) rethrow_python(e)
  )
  invisible(NULL)
}
