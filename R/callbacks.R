# R functions that Python calls back: a scheduler's lr_lambda, `$register_hook()`, the
# closure of `$step(closure)`, the forward and methods of R modules run from Python, and
# the function jit_trace() records.
#
# Note: one wrapper, two paths. r_function_py() makes the Python callable: through C
# (src/callback.c: arguments and the result converted by the C path's converters, no
# reticulate on a call) where the C paths run, else through reticulate's r_to_py(). Either
# way `fn` takes R values (from_py()'s) and returns an R value (to_py() converts it), and
# the checks and messages of each kind of callback live in `fn`, so both paths give the
# same results and errors. An R error or interrupt inside `fn` is kept
# (`.tb$pending_r_error`); Python gets an exception carrying its message, and when the
# Python call returns to R, rethrow_python() raises the R condition itself.

keep_r_condition <- function(e) .tb$pending_r_error <- e

# A Python callable that calls the R function `fn`; `what` names it in messages
# ("lr_lambda()").
r_function_py <- function(fn, what) {
  run <- keeping_conditions(fn)
  if (c_started()) {
    out <- .Call(tb_r_function, run, what)
    if (!is.symbol(out)) return(out)
    if (identical(out, quote(.tb_error))) c_error(FALSE)
  }
  reticulate::r_to_py(function(...) to_py(do.call(run, lapply(list(...), from_py))),
                      convert = FALSE)
}

# `fn`, its R errors and interrupts kept. Made here, apart from r_function_py()'s frame:
# the callable holds (preserves) this function, and its environment must not hold the
# callable, or neither would ever be freed.
keeping_conditions <- function(fn) {
  force(fn)
  function(...) {
    withCallingHandlers(fn(...), error = keep_r_condition, interrupt = keep_r_condition)
  }
}

# What src/callback.c leaves to R: an argument it does not convert (a wrapper of class
# "python.builtin.object") and a result it does not convert.
callback_arg_r <- function(wrapper) {
  withCallingHandlers(from_py(c_other(wrapper)), error = keep_r_condition)
}
callback_value_py <- function(value) withCallingHandlers(to_py(value), error = keep_r_condition)

# How many calls Python made to R functions through C, and how many R functions C holds
# for Python now (tests).
r_function_calls <- function() .Call(tb_r_function_calls)[[1]]
r_functions_held <- function() .Call(tb_r_function_calls)[[2]]
