# Optimizers and learning-rate schedulers: made from the surface table (`optim_sgd()`,
# `lr_step()`, ...) around torch.optim, with mlverse's methods.

#' Optimizers and learning-rate schedulers
#'
#' `optim_*()` wrap `torch.optim`; `lr_*()` wrap `torch.optim.lr_scheduler`. Arguments
#' follow mlverse torch; see [surface_table()] for each one's list.
#'
#' Optimizer methods: `$step(closure = NULL)` (with a closure, as `optim_lbfgs()` needs:
#' a function that zeroes the gradients, computes the loss, calls `$backward()` and
#' returns the loss; `$step()` then returns the loss), `$zero_grad()` (as in mlverse, it
#' sets gradients to zero in place; `set_to_none = TRUE` drops them), `$param_groups`
#' (read and assign), `$add_param_group()`, `$state_dict()` and `$load_state_dict()`.
#'
#' Scheduler methods: `$step()` (for `lr_reduce_on_plateau()`: `$step(metric)`, the
#' monitored value, a number or a one-element tensor), `$get_last_lr()`, `$last_epoch`,
#' `$state_dict()` and `$load_state_dict()`.
#'
#' `lr_lambda()` and `lr_multiplicative()` take `lr_lambda`, an R function of the epoch
#' (0 when the scheduler is made, then 1, 2, ... after each `$step()`) that returns a
#' factor, or a list of such functions, one per parameter group. As in mlverse torch
#' (and unlike `nn_*` layers), these schedulers have no `verbose` argument here.
#'
#' Python calls these R functions (and the closure of `$step(closure)`) back. An error
#' inside one stops the Python call and reaches the R caller as the R error it was, with
#' its class and message; Python itself sees a `RuntimeError` carrying the R message.
#' R runs on one thread, so an R function is refused (a clear error) when a Python
#' thread other than R's calls it.
#'
#' Warnings and messages signalled inside these R functions (and inside hooks given to
#' `$register_hook()`) do not reach handlers set around the call that made Python call
#' them (`withCallingHandlers()`, `tryCatch()`, `suppressWarnings()`,
#' `suppressMessages()`) when the C path runs them (the default): a message is printed
#' and a warning is shown at top level, as R does for code run on its own. Handle them
#' inside the function itself, e.g. `function(epoch) suppressWarnings(f(epoch))`.
#'
#' `$state_dict()` returns a list of tensors and R values that [torch_save()] writes and
#' [torch_load()] reads back, so that training can be resumed: an optimizer's has
#' `state` (one entry per parameter, named by its 1-based position in the parameter
#' groups) and `param_groups` (each with `params`, those 1-based positions, and its
#' settings); a scheduler's has its counters and learning rates. The tensors in it are
#' copies, so later steps do not change a saved state. `$load_state_dict()` restores it
#' into an optimizer (or scheduler) made the same way. The functions given to
#' `lr_lambda()` are not part of the state: make the new scheduler with the same ones.
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
#'   sched <- lr_step(opt, step_size = 1, gamma = 0.5)
#'   opt$zero_grad()
#'   loss$backward()
#'   opt$step()
#'   sched$step()
#'   opt$param_groups[[1]]$lr
#'
#'   # L-BFGS re-evaluates the loss through a closure.
#'   x <- torch_tensor(c(1, 2, 3, 4))
#'   y <- 2 * x + 1
#'   fit <- nn_linear(1, 1)
#'   lbfgs <- optim_lbfgs(fit$parameters, lr = 1, line_search_fn = "strong_wolfe")
#'   closure <- function() {
#'     lbfgs$zero_grad()
#'     l <- nnf_mse_loss(fit(x$unsqueeze(2)), y$unsqueeze(2))
#'     l$backward()
#'     l
#'   }
#'   for (i in 1:3) lbfgs$step(closure)
#'   closure()$item()
#'
#'   # Schedulers driven by an R function, or by a monitored metric.
#'   halve <- lr_lambda(opt, lr_lambda = function(epoch) 0.5^epoch)
#'   opt$step()
#'   halve$step()
#'   halve$get_last_lr()
#'   plateau <- lr_reduce_on_plateau(opt, patience = 0)
#'   plateau$step(1)
#'   plateau$step(2)
#'   opt$param_groups[[1]]$lr
#'
#'   # Save and resume: model, optimizer and scheduler state in one file.
#'   path <- tempfile(fileext = ".pt")
#'   torch_save(list(model = model$state_dict(), opt = opt$state_dict(),
#'                   sched = sched$state_dict()), path)
#'   state <- torch_load(path)
#'   model2 <- nn_linear(2, 1)
#'   model2$load_state_dict(state$model)
#'   opt2 <- optim_sgd(model2$parameters, lr = 0.1)
#'   opt2$load_state_dict(state$opt)
#'   sched2 <- lr_step(opt2, step_size = 1, gamma = 0.5)
#'   sched2$load_state_dict(state$sched)
#'   opt2$param_groups[[1]]$lr
#' }
NULL

# The two methods of every training step, `$step()` and `$zero_grad()`, are made once
# and kept in the object, where `$` finds them with .subset2(): the S3 dispatch of `$` is
# already most of what R adds to such a call (a step made them anew each time, and tested
# the name with identical(), ~3,000 instructions a test).
new_optimizer <- function(py, class) {
  classes <- c(class, "torch_optimizer")
  x <- structure(list(.py = py), class = classes)
  structure(list(.py = py, step = optimizer_step(x), zero_grad = optimizer_zero_grad(x)),
            class = classes)
}
# A scheduler's `$step()` is made once too (the epoch loop calls it), and calls through C.
new_scheduler <- function(py, class) {
  classes <- c(class, "lr_scheduler")
  x <- structure(list(.py = py), class = classes)
  structure(list(.py = py, step = scheduler_step(x)), class = classes)
}

scheduler_step <- function(x) {
  function(metrics = NULL) {
    py <- .subset2(x, ".py")
    if (is.null(metrics)) {
      # Through src/surface.c (tb_call_method); reticulate where C does not apply.
      out <- .Call(tb_call_method, x, "step", list())
      if (!is.symbol(out) || !identical(c_answer(out, FALSE), quote(.tb_fallback))) {
        return(invisible(x))
      }
    }
    if (!is.null(metrics)) {
      # The monitored value is passed as a Python float even when whole (I(): see
      # any_kind() in src/convert.c); as an int, ReduceLROnPlateau would keep an int as
      # its best value.
      metric <- metric_value(metrics)
      out <- .Call(tb_call_method, x, "step", list(I(metric)))
      if (!is.symbol(out) || !identical(c_answer(out, FALSE), quote(.tb_fallback))) {
        return(invisible(x))
      }
    }
    withCallingHandlers(
      if (is.null(metrics)) py$step() else py$step(reticulate::r_to_py(metric)),
      error = function(e) rethrow_python(e))
    invisible(x)
  }
}

optimizer_py <- function(x) {
  if (!inherits(x, "torch_optimizer")) {
    tracebridge_abort("`optimizer` must be made by an optim_*() function.", "type_error")
  }
  .subset2(x, ".py")
}

#' @rdname optim
#' @export
`$.torch_optimizer` <- function(x, name) {
  # `$step` and `$zero_grad` are in the object (new_optimizer()); the rest of the methods
  # are made by optimizer_member().
  f <- .subset2(x, name)
  if (is.null(f)) optimizer_member(x, name) else f
}

optimizer_step <- function(x) {
  function(closure = NULL) {
    if (is.null(closure)) {
      # Adam's step in C where it is torch's own (src/adam.c: the same ops, without
      # Python); then through src/surface.c (tb_call_method); reticulate where C does not
      # apply.
      out <- .Call(tb_adam_step, x)
      if (is.null(out)) return(invisible(NULL))
      if (identical(out, quote(.tb_error))) c_error(FALSE)
      out <- .Call(tb_call_method, x, "step", list())
      if (!is.symbol(out) || !identical(c_answer(out, FALSE), quote(.tb_fallback))) {
        return(invisible(NULL))
      }
      withCallingHandlers(.subset2(x, ".py")$step(), error = function(e) rethrow_python(e))
      return(invisible(NULL))
    }
    out <- withCallingHandlers(.subset2(x, ".py")$step(closure_py(closure)),
                               error = function(e) rethrow_python(e))
    invisible(from_py(out))
  }
}

# As in mlverse, gradients are set to zero in place (not dropped), so `p$grad` stays a
# tensor; `set_to_none = TRUE` drops them as PyTorch does by default.
# In place, through src/optim.c (torch's method, less its Python); else through
# src/surface.c, or reticulate where C does not apply.
optimizer_zero_grad <- function(x) {
  in_place <- list(FALSE)
  function(set_to_none = FALSE) {
    if (missing(set_to_none) || isFALSE(set_to_none)) {
      out <- .Call(tb_zero_grad, x)
      if (is.null(out)) return(invisible(x))
      if (identical(out, quote(.tb_error))) c_error(FALSE)
    }
    args <- if (missing(set_to_none)) in_place else list(isTRUE(set_to_none))
    out <- .Call(tb_call_method, x, "zero_grad", args)
    if (is.symbol(out) && identical(c_answer(out, FALSE), quote(.tb_fallback))) {
      withCallingHandlers(.subset2(x, ".py")$zero_grad(isTRUE(set_to_none)),
                          error = function(e) rethrow_python(e))
    }
    invisible(x)
  }
}

optimizer_member <- function(x, name) {
  py <- .subset2(x, ".py")
  checked <- function(f) function(...) {
    withCallingHandlers(f(...), error = function(e) rethrow_python(e))
    invisible(x)
  }
  switch(name,
    step = optimizer_step(x),
    zero_grad = optimizer_zero_grad(x),
    param_groups = {
      # Through src/fields.c where it applies; reticulate for the rest.
      out <- .Call(tb_param_groups, x)
      if (is.symbol(out)) {
        out <- lapply(reticulate::iterate(py$param_groups, identity, simplify = FALSE),
                      param_group_r)
      }
      out
    },
    add_param_group = checked(function(param_group) {
      py$add_param_group(reticulate::py_get_item(params_arg(list(param_group)), 0L))
    }),
    state_dict = function() optimizer_state_dict(py),
    load_state_dict = function(state_dict) {
      optimizer_load_state_dict(py, state_dict)
      invisible(x)
    },
    py = py,
    tracebridge_abort(sprintf("Optimizers have no method or field `%s`.", name))
  )
}

param_group_r <- function(g) {
  keys <- unlist(reticulate::iterate(g$keys(), reticulate::py_to_r, simplify = FALSE))
  out <- lapply(keys, function(k) {
    v <- reticulate::py_get_item(g, k)
    if (k == "params") {
      params <- reticulate::iterate(v, wrap_tensor, simplify = FALSE)
      # The class vectors of their wrappers (torch.nn.Parameter's), for src/fields.c.
      for (p in params) .Call(tb_remember_class, .subset2(p, ".py"))
      return(params)
    }
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
print.lr_scheduler <- function(x, ...) {
  cat("<", class(x)[[1]], "> last_epoch: ", reticulate::py_to_r(.subset2(x, ".py")$last_epoch),
      "\n", sep = "")
  invisible(x)
}

#' @rdname optim
#' @export
`$.lr_scheduler` <- function(x, name) {
  py <- .subset2(x, ".py")
  switch(name,
    step = .subset2(x, "step") %||% scheduler_step(x), # made once (new_scheduler())
    get_last_lr = function() {
      # Through src/surface.c (a list of Python floats as R numbers); reticulate where C
      # does not apply.
      out <- .Call(tb_call_method_r, x, "get_last_lr", list())
      if (is.symbol(out) && identical(c_answer(out, FALSE), quote(.tb_fallback))) {
        out <- withCallingHandlers(reticulate::py_to_r(py$get_last_lr()),
                                   error = function(e) rethrow_python(e))
      } else {
        out <- c_answer(out, FALSE)
      }
      unlist(out)
    },
    state_dict = function() state_to_r(py$state_dict()),
    load_state_dict = function(state_dict) {
      if (!is.list(state_dict) || is.null(names(state_dict))) {
        tracebridge_abort(paste("load_state_dict(): `state_dict` must be a named list made by",
                                "a scheduler's $state_dict()."), "type_error")
      }
      sd <- state_to_py(state_dict)
      withCallingHandlers(py$load_state_dict(sd), error = function(e) rethrow_python(e))
      invisible(x)
    },
    last_epoch = {
      out <- .Call(tb_attr_r, x, "last_epoch") # src/fields.c; reticulate where C does not apply
      if (is.symbol(out)) reticulate::py_to_r(py$last_epoch) else out
    },
    py = py,
    tracebridge_abort(sprintf("Schedulers have no method or field `%s`.", name))
  )
}

# The monitored value of lr_reduce_on_plateau(): a number or a one-element tensor, as
# one R double.
metric_value <- function(v) {
  if (inherits(v, "torch_tensor")) v <- v$item()
  if (!is.numeric(v) || length(v) != 1 || is.na(v)) {
    tracebridge_abort(sprintf("step(): `metrics` must be one number, not %s.", describe_value(v)),
                      "type_error")
  }
  as.double(v)
}

# The closure of $step(closure): Python calls it (several times for L-BFGS) and needs the
# loss tensor back. An R error inside it is re-raised as it was.
closure_py <- function(closure) {
  if (!is.function(closure)) {
    tracebridge_abort("step(): `closure` must be a function that returns the loss.", "type_error")
  }
  r_function_py(function() {
    loss <- closure()
    if (!inherits(loss, "torch_tensor")) {
      callback_abort(sprintf("step(): the closure must return the loss tensor, not %s.",
                             describe_value(loss)), "type_error")
    }
    loss
  }, "the closure of step()")
}

# ---- state dicts -----------------------------------------------------------------------
# Python state -> R: dicts become named lists, lists and tuples unnamed lists, tensors are
# copied (an optimizer updates its state in place), scalars become R scalars. The reverse,
# state_to_py(), gives back what Python's load_state_dict() accepts; unnamed lists stay
# lists (so a one-element list of learning rates is not mistaken for a number).
# Both through src/state.c where it applies (every value one it converts as R does).
state_to_r <- function(x) {
  out <- .Call(tb_state_to_r, x)
  if (!is.symbol(out)) return(out)
  if (identical(out, quote(.tb_error))) c_error(FALSE)
  state_to_r_r(x)
}

state_to_r_r <- function(x) {
  if (inherits(x, "torch.Tensor")) return(wrap_tensor(x$detach()$clone()))
  if (inherits(x, "python.builtin.dict")) {
    keys <- reticulate::iterate(x$keys(), identity, simplify = FALSE)
    out <- lapply(keys, function(k) state_to_r_r(reticulate::py_get_item(x, k)))
    names(out) <- vapply(keys, function(k) reticulate::py_str(k), character(1))
    return(out)
  }
  if (inherits(x, c("python.builtin.list", "python.builtin.tuple"))) {
    return(reticulate::iterate(x, state_to_r_r, simplify = FALSE))
  }
  out <- reticulate::py_to_r(x)
  if (is_py(out)) {
    tracebridge_abort(sprintf("state_dict(): a value of Python type %s can not be kept in R.",
                              class(out)[[1]]), "type_error")
  }
  out
}

state_to_py <- function(x) {
  out <- .Call(tb_state_to_py, x)
  if (!is.symbol(out)) return(out)
  if (identical(out, quote(.tb_error))) c_error(FALSE)
  state_to_py_r(x)
}

state_to_py_r <- function(x) {
  if (inherits(x, "torch_tensor")) return(tensor_py(x))
  if (is.null(x)) return(reticulate::py_none())
  if (is.list(x)) {
    items <- lapply(x, state_to_py_r)
    if (length(x) && !is.null(names(x)) && all(nzchar(names(x)))) {
      return(reticulate::py_dict(names(x), unname(items), convert = FALSE))
    }
    return(reticulate::r_to_py(unname(items), convert = FALSE))
  }
  if (is.atomic(x) && length(x) == 1) return(reticulate::r_to_py(x, convert = FALSE))
  if (is.atomic(x)) return(reticulate::r_to_py(as.list(x), convert = FALSE))
  tracebridge_abort(sprintf("load_state_dict(): can not use %s.", describe_value(x)),
                    "type_error")
}

# Python numbers parameters 0, 1, ... across the groups; R shows them 1-based.
optimizer_state_dict <- function(py) {
  sd <- .Call(tb_call_method, py, "state_dict", list()) # src/surface.c
  if (!is.environment(sd)) sd <- py$state_dict()
  sd <- state_to_r(sd)
  state <- sd$state
  if (length(state)) names(state) <- as.character(as.integer(names(state)) + 1L)
  groups <- lapply(sd$param_groups, function(g) {
    g$params <- as.integer(unlist(g$params)) + 1L
    g
  })
  list(state = state, param_groups = groups)
}

# The Python state dict of load_state_dict() (0-based positions as int keys and params)
# through src/state.c, or NULL where C does not convert it.
optimizer_state_py <- function(state, ids, groups) {
  if (!is.list(groups)) return(NULL)
  groups <- lapply(groups, function(g) {
    if (!is.list(g) || is.null(g$params) || !all(nzchar(names(g)))) return(NULL)
    params <- as.list(as.integer(unlist(g$params)) - 1L)
    g$params <- NULL
    c(g, list(params = params)) # `params` last, as Python's own
  })
  if (any(vapply(groups, is.null, logical(1)))) return(NULL)
  st <- structure(unname(state), names = as.character(ids - 1L), tb_int_keys = TRUE)
  if (!length(state)) st <- structure(list(), tb_int_keys = TRUE)
  out <- .Call(tb_state_to_py, list(state = st, param_groups = unname(groups)))
  if (is.environment(out)) out else NULL
}

optimizer_load_state_dict <- function(py, state_dict) {
  bad <- function(what) {
    tracebridge_abort(sprintf(
      "load_state_dict(): %s; use a list made by an optimizer's $state_dict().", what),
      "value_error")
  }
  if (!is.list(state_dict) || !all(c("state", "param_groups") %in% names(state_dict))) {
    bad("`state_dict` must be a list with `state` and `param_groups`")
  }
  state <- state_dict$state
  ids <- suppressWarnings(as.integer(names(state)))
  if (length(state) && (anyNA(ids) || any(ids < 1L))) {
    bad("the names of `state` must be 1-based parameter positions")
  }
  # All of it in one call through src/state.c and src/surface.c where C converts every
  # value; reticulate below otherwise (and for the errors of malformed groups).
  sd <- optimizer_state_py(state, ids, state_dict$param_groups)
  if (!is.null(sd)) {
    out <- .Call(tb_call_method, py, "load_state_dict", list(sd))
    if (!is.symbol(out) || !identical(c_answer(out, FALSE), quote(.tb_fallback))) {
      return(invisible())
    }
  }
  st <- reticulate::py_dict(as.list(ids - 1L), unname(lapply(state, state_to_py)),
                            convert = FALSE)
  groups <- lapply(state_dict$param_groups, function(g) {
    if (!is.list(g) || is.null(g$params)) bad("each of `param_groups` must have `params`")
    params <- reticulate::r_to_py(as.list(as.integer(unlist(g$params)) - 1L), convert = FALSE)
    g$params <- NULL
    d <- state_to_py(g)
    if (!length(g)) d <- reticulate::py_dict(list(), list(), convert = FALSE)
    reticulate::py_set_item(d, "params", params)
    d
  })
  sd <- reticulate::py_dict(list("state", "param_groups"),
                            list(st, reticulate::r_to_py(groups, convert = FALSE)),
                            convert = FALSE)
  withCallingHandlers(py$load_state_dict(sd), error = function(e) rethrow_python(e))
  invisible()
}
