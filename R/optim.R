# Optimizers and learning-rate schedulers: made from the surface table (`optim_sgd()`,
# `lr_step()`, ...) around torch.optim, with mlverse's methods.

#' Optimizers and learning-rate schedulers
#'
#' `optim_*()` wrap `torch.optim`; `lr_*()` wrap `torch.optim.lr_scheduler`. Arguments
#' follow mlverse torch; see [surface_table()] for each one's list. Methods:
#' `$step()`, `$zero_grad()`, `$param_groups`, `$state_dict()` (optimizers) and `$step()`,
#' `$get_last_lr()` (schedulers).
#'
#' @param x An optimizer or scheduler.
#' @param name A method or field.
#' @param ... Ignored.
#' @return A method (function) or a field.
#' @name optim
#' @examples
#' if (torch_is_installed()) {
#'   model <- nn_linear(2, 1)
#'   opt <- optim_sgd(model$parameters, lr = 0.1)
#'   loss <- nnf_mse_loss(model(torch_ones(4, 2)), torch_zeros(4, 1))
#'   opt$zero_grad()
#'   loss$backward()
#'   opt$step()
#'   sched <- lr_step(opt, step_size = 1, gamma = 0.5)
#'   sched$step()
#'   opt$param_groups[[1]]$lr
#' }
NULL

new_optimizer <- function(py, class) structure(list(.py = py), class = c(class, "torch_optimizer"))
new_scheduler <- function(py, class) structure(list(.py = py), class = c(class, "lr_scheduler"))

optimizer_py <- function(x) {
  if (!inherits(x, "torch_optimizer")) {
    tracebridge_abort("`optimizer` must be made by an optim_*() function.", "type_error")
  }
  .subset2(x, ".py")
}

#' @rdname optim
#' @export
`$.torch_optimizer` <- function(x, name) {
  py <- .subset2(x, ".py")
  checked <- function(f) function(...) {
    withCallingHandlers(f(...), error = function(e) rethrow_python(e))
    invisible(x)
  }
  switch(name,
    step = checked(function(closure = NULL) {
      if (is.null(closure)) py$step() else py$step(reticulate::r_to_py(function() {
        loss <- closure()
        tensor_py(loss)
      }))
    }),
    zero_grad = checked(function(set_to_none = TRUE) py$zero_grad(isTRUE(set_to_none))),
    param_groups = lapply(reticulate::iterate(py$param_groups, identity, simplify = FALSE),
                          param_group_r),
    py = py,
    tracebridge_abort(sprintf("Optimizers have no method or field `%s`.", name))
  )
}

param_group_r <- function(g) {
  keys <- unlist(reticulate::iterate(g$keys(), reticulate::py_to_r, simplify = FALSE))
  out <- lapply(keys, function(k) {
    v <- reticulate::py_get_item(g, k)
    if (k == "params") return(reticulate::iterate(v, wrap_tensor, simplify = FALSE))
    reticulate::py_to_r(v)
  })
  names(out) <- keys
  out
}

#' @rdname optim
#' @param value A new value (for `param_groups`: a list as returned, with changed `lr`).
#' @export
`$<-.torch_optimizer` <- function(x, name, value) {
  if (name != "param_groups") {
    tracebridge_abort(sprintf("Optimizer field `%s` can not be assigned.", name))
  }
  py <- .subset2(x, ".py")
  groups <- reticulate::iterate(py$param_groups, identity, simplify = FALSE)
  for (k in seq_along(value)) {
    for (nm in setdiff(names(value[[k]]), "params")) {
      reticulate::py_set_item(groups[[k]], nm, value[[k]][[nm]])
    }
  }
  x
}

#' @rdname optim
#' @export
print.torch_optimizer <- function(x, ...) {
  cat("<", class(x)[[1]], ">\n", sep = "")
  invisible(x)
}

#' @rdname optim
#' @export
`$.lr_scheduler` <- function(x, name) {
  py <- .subset2(x, ".py")
  switch(name,
    step = function() {
      withCallingHandlers(py$step(), error = function(e) rethrow_python(e))
      invisible(x)
    },
    get_last_lr = function() unlist(reticulate::py_to_r(py$get_last_lr())),
    last_epoch = reticulate::py_to_r(py$last_epoch),
    py = py,
    tracebridge_abort(sprintf("Schedulers have no method or field `%s`.", name))
  )
}
