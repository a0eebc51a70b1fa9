# The C call paths (src/): starting them, turning them off, and what R does with their
# answers. See the notes in src/call.c (why), src/pyapi.c (how the C API is found, errors)
# and src/surface.c (the protocol: a result, `.tb_fallback` or `.tb_error`).
#
# Every C entry point answers `.tb_fallback` until the paths have started, and while R
# traces; the R code around each then does the call its own way, which starts the paths
# (c_started()) for the next call. TRACEBRIDGE_C_CALL=0 keeps them off.
#
# Note: what stays with reticulate. Printing and the other one-off calls. R functions that
# Python calls back (lr_lambda()'s and lr_multiplicative()'s functions, `$register_hook()`,
# the closure of `$step(closure)`, nn_module methods run from Python, jit_trace()'s
# function) are Python callables made in C (src/callback.c, R/callbacks.R); state dicts
# of modules, optimizers and schedulers are converted in C (src/state.c). Tensor fields (`$shape`, `$dtype`, `$grad`,
# ...), a plateau scheduler's `$step(metric)` (the metric passed as I(): a Python float),
# `$get_last_lr()`, `$last_epoch`, an optimizer's `$param_groups`, `x$requires_grad <-`,
# `x$grad <-`, a module's `$parameters`, `$buffers`, `$training`, `$train()`, `$eval()`
# and `$zero_grad()`, and the `params` of nn_utils_clip_grad_*() go through C
# (src/fields.c, src/surface.c, src/convert.c).

# Whether the C paths run, starting them on first use.
c_started <- function() {
  on <- .tb$c_call
  if (!is.null(on)) return(on)
  # Not while tracing: starting makes a tensor, which the tracer would record.
  if (isTRUE(.tb$tracing)) return(FALSE)
  .tb$c_call <- start_c_call()
}

start_c_call <- function() {
  if (identical(Sys.getenv("TRACEBRIDGE_C_CALL"), "0")) return(FALSE)
  isTRUE(tryCatch({
    import_torch_own_blas()
    torch <- reticulate::import("torch", convert = FALSE)
    rb <- reticulate::import("tracebridge.frontends.rbridge", convert = FALSE)
    lib <- reticulate::py_config()$libpython %||% ""
    ok <- isTRUE(.Call(tb_py_init, torch, rb, torch$empty(0L), lib, .tb))
    if (ok) {
      .Call(tb_callback_init, list(callback_arg_r, callback_value_py), .tb)
      dtypes <- lapply(c("float32", "float64", "int64", "int32", "int16", "int8", "uint8",
                         "bool"), function(n) reticulate::py_get_attr(torch, n))
      .Call(tb_as_array_init, dtypes, torch$strided)
    }
    ok
  }, error = function(e) FALSE))
}

# Turn the C paths on or off (calls go through reticulate).
set_c_call <- function(on) {
  if (isTRUE(on)) {
    # Started before: take up where it was; else start now (or never, if it can not).
    .tb$c_call <- if (isTRUE(.Call(tb_py_resume))) TRUE else NULL
    c_started()
  } else {
    .Call(tb_py_stop)
    .tb$c_call <- FALSE
  }
  invisible()
}

# A Python object C handed back unconverted (an environment of class
# "python.builtin.object"), wrapped by reticulate with its full class vector.
# rbridge.same is looked up once (a reticulate `$` costs more than the call).
c_other <- function(out) {
  same <- .tb$rb_same
  if (is.null(same)) same <- .tb$rb_same <- py_rb()$same
  reticulate::py_call(same, out)
}

# Python raised inside a C call: the exception is stored; raise it as R does.
c_error <- function(one_based = TRUE) {
  rethrow_python(simpleError("Python raised an exception"), one_based = one_based)
}

# py(x) for an R tensor through src/call.c (see the note there: reticulate's per-call
# conversions cost several times the traced call), started on first use; NULL where that
# path does not apply (it could not start, or TRACEBRIDGE_C_CALL=0).
call_c <- function(py, x) {
  if (!c_started()) return(NULL)
  c_result(.Call(tb_call_tensor, py, x))
}

# A result of tb_call_tensor as the call's result: an R tensor as it is; FALSE, the Python
# error, raised classified; any other Python object, wrapped by reticulate (its full class
# vector) and converted as every result is.
c_result <- function(out) {
  if (is.null(out) || inherits(out, "torch_tensor")) return(out)
  if (isFALSE(out)) rethrow_python(simpleError("Python raised an exception"))
  from_py(c_other(out))
}

# A C answer as a result: R's value as it is, a Python object converted by from_py(), the
# Python error raised; `.tb_fallback` (starting the C paths if they have not started).
c_answer <- function(out, one_based = TRUE) {
  if (!is.symbol(out)) {
    if (is.environment(out)) return(from_py(c_other(out)))
    return(out)
  }
  if (identical(out, quote(.tb_error))) c_error(one_based)
  c_started()
  out
}

# The cache of shifted index tensors (see the note in src/convert.c): hits, misses,
# whether it is off (after `$data` or `$py` of an integer tensor), and how many tensors of
# positions were read from memory; `reset = TRUE` empties it and turns it on again (tests
# run in one session).
shift_cache_stats <- function(reset = FALSE) {
  out <- .Call(tb_shift_cache, isTRUE(reset))
  list(hits = out[[1]], misses = out[[2]], off = out[[3]] == 1, in_memory = out[[4]])
}
