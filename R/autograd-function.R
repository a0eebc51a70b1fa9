# autograd_function(): a differentiable operation with an R forward and an R backward, as
# in mlverse torch. Python's torch.autograd.Function runs them (rbridge.autograd_function
# calls back into R through r_function_py()), so gradients flow through it like any op,
# and the tracer records it as one node with its own backward (trace/autograd_function.py).

#' Custom autograd functions
#'
#' `autograd_function()` makes a function whose forward pass and gradient are R code, as
#' in mlverse torch. `forward(ctx, ...)` computes the result from its inputs (tensors and
#' other R values) and may keep what `backward` needs with `ctx$save_for_backward(name =
#' value, ...)`; `backward(ctx, grad_output)` (one gradient argument per output of
#' `forward`) returns a list of gradients named by `forward`'s inputs; inputs left out
#' get none.
#'
#' The context `ctx` has `$save_for_backward(...)`, `$saved_variables` (the named list
#' kept), `$needs_input_grad` (a named logical list, one per input),
#' `$mark_non_differentiable(...)` and `$mark_dirty(...)`.
#'
#' Inside [jit_trace()] the function is recorded as one node holding its forward and
#' backward graphs (each traced once), so a traced, saved or loaded model keeps its
#' gradient; a `backward` that reads tensor values into R (`$item()`, `as_array()`) is
#' refused there with a message that says so.
#'
#' @param forward A function `function(ctx, ...)` whose other arguments are the inputs;
#'   it returns a tensor or a list of tensors.
#' @param backward A function `function(ctx, ...)` taking the gradient of each output and
#'   returning a named list of gradients of the inputs.
#' @return A function taking `forward`'s inputs (without `ctx`).
#' @examples
#' if (torch_is_installed()) {
#'   exp2 <- autograd_function(
#'     forward = function(ctx, i) {
#'       result <- i$exp()
#'       ctx$save_for_backward(result = result)
#'       result
#'     },
#'     backward = function(ctx, grad_output) {
#'       list(i = grad_output * ctx$saved_variables$result)
#'     }
#'   )
#'   x <- torch_tensor(c(0, 1), requires_grad = TRUE)
#'   exp2(x)$sum()$backward()
#'   x$grad
#' }
#' @export
autograd_function <- function(forward, backward) {
  if (!is.function(forward) || !is.function(backward)) {
    tracebridge_abort("autograd_function(): `forward` and `backward` must be functions.",
                      "type_error")
  }
  inputs <- names(formals(forward))[-1]
  if (!length(formals(forward)) || "..." %in% inputs) {
    tracebridge_abort(paste(
      "autograd_function(): `forward` must take `ctx` and then its inputs by name,",
      "e.g. function(ctx, x, w) (not `...`)."), "value_error")
  }
  fwd <- function(ctx, ...) forward(autograd_context(ctx, inputs), ...)
  bwd <- function(ctx, ...) {
    grads <- backward(autograd_context(ctx, inputs), ...)
    unname(input_gradients(grads, inputs))
  }
  apply <- py_rb()$autograd_function(r_function_py(fwd, "the forward() of autograd_function()"),
                                     r_function_py(bwd, "the backward() of autograd_function()"))
  call <- function() {
    args <- lapply(mget(inputs, environment()), to_py)
    from_py(withCallingHandlers(do.call(tb_py_call, c(list(apply), unname(args))),
                                error = function(e) rethrow_python(e)))
  }
  formals(call) <- formals(forward)[-1]
  call
}

# The list backward() returned, in the order of forward()'s inputs (NULL: no gradient).
input_gradients <- function(grads, inputs) {
  if (inherits(grads, "torch_tensor")) grads <- list(grads)
  if (!is.list(grads)) {
    tracebridge_abort(sprintf(
      "autograd_function(): `backward` must return a list of gradients named by the inputs (%s), not %s.",
      paste0("`", inputs, "`", collapse = ", "), describe_value(grads)), "type_error")
  }
  if (is.null(names(grads))) {
    if (length(grads) > length(inputs)) {
      tracebridge_abort(sprintf(
        "autograd_function(): `backward` returned %d gradients for %d inputs.",
        length(grads), length(inputs)), "value_error")
    }
    names(grads) <- inputs[seq_along(grads)]
  }
  unknown <- setdiff(names(grads), inputs)
  if (length(unknown)) {
    tracebridge_abort(sprintf(
      "autograd_function(): `backward` returned a gradient for %s, which is not an input of `forward` (%s).",
      paste0("`", unknown, "`", collapse = ", "), paste0("`", inputs, "`", collapse = ", ")),
      "value_error")
  }
  lapply(inputs, function(nm) grads[[nm]])
}

# The `ctx` of forward() and backward(): R's view of Python's autograd context.
autograd_context <- function(ctx, inputs) {
  self <- new.env(parent = emptyenv())
  self$save_for_backward <- function(...) {
    values <- list(...)
    if (length(values) && (is.null(names(values)) || any(!nzchar(names(values))))) {
      tracebridge_abort("ctx$save_for_backward(): name each value, e.g. (x = x).",
                        "value_error")
    }
    py_rb()$save_for_backward(ctx, as.list(names(values)), unname(lapply(values, to_py)))
    invisible(NULL)
  }
  makeActiveBinding("saved_variables", function() from_py(py_rb()$saved_variables(ctx)), self)
  makeActiveBinding("needs_input_grad", function() {
    flags <- reticulate::py_get_attr(ctx, "needs_input_grad")
    stats::setNames(as.list(as.logical(reticulate::py_to_r(flags))), inputs)
  }, self)
  self$mark_non_differentiable <- function(...) {
    do.call(reticulate::py_get_attr(ctx, "mark_non_differentiable"),
            unname(lapply(list(...), to_py)))
    invisible(NULL)
  }
  self$mark_dirty <- function(...) {
    do.call(reticulate::py_get_attr(ctx, "mark_dirty"), unname(lapply(list(...), to_py)))
    invisible(NULL)
  }
  class(self) <- "autograd_context"
  self
}

#' @export
print.autograd_context <- function(x, ...) {
  cat("<autograd_context>\n")
  invisible(x)
}
