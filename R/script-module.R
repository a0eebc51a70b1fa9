# script_function and script_module: R closures over a Python TracedFunction or
# TracedModule. Calling one converts the inputs, calls Python once, and wraps the output;
# nothing else runs per call (see benchmarks/bench_r.R).

traced_py <- function(x) attr(x, "py")

call_traced <- function(py, args) {
  # What a traced model costs per call from R beyond the Python call itself: convert the
  # inputs, one reticulate::py_call(), wrap the output. The handler is a calling handler
  # (cheaper than tryCatch()); rethrow_python() classifies the Python exception by its
  # type name and signals the R condition from there.
  if (length(args) == 1L && inherits(args[[1L]], "torch_tensor")) {
    out <- withCallingHandlers(
      reticulate::py_call(py, .subset2(args[[1L]], ".py")),
      error = rethrow_python
    )
  } else {
    pyargs <- lapply(args, to_py)
    out <- withCallingHandlers(
      do.call(reticulate::py_call, c(list(py), pyargs)),
      error = rethrow_python
    )
  }
  if (inherits(out, "torch.Tensor")) return(wrap_tensor(out))
  from_py(out)
}

new_script_function <- function(py) {
  f <- function(...) call_traced(py, list(...))
  structure(f, py = py, class = "script_function")
}

new_script_module <- function(py) {
  f <- function(...) call_traced(py, list(...))
  structure(f, py = py, class = "script_module")
}

py_text <- function(x) reticulate::py_to_r(x)

#' Traced functions and modules
#'
#' `jit_trace()` and `jit_load()` return these. Call them like the original. Fields:
#' `$graph` (the graph as text), `$code` (the generated Python), `$guards` (the
#' assumptions the trace made), `$save(path)`. Modules also have `$forward()`, `$train()`,
#' `$eval()`, `$training`, `$parameters`, `$buffers`, `$methods` and one function per
#' traced method (`$trainforward()`, `$evalforward()`, ...).
#'
#' @param x A `script_function` or `script_module`.
#' @param name A field or method name.
#' @param ... Ignored.
#' @return The field, or a function for methods.
#' @name script_function
#' @examples
#' if (torch_is_installed()) {
#'   f <- jit_trace(function(x) torch_relu(x), torch_ones(2))
#'   f
#'   cat(f$graph)
#' }
NULL

#' @rdname script_function
#' @export
`$.script_function` <- function(x, name) {
  py <- traced_py(x)
  switch(name,
    graph = py_text(py$graph),
    code = py_text(py$code),
    guards = unlist(py_text(py$guards)),
    save = function(path) jit_save(x, path),
    py = py,
    tracebridge_abort(sprintf("A script_function has no field `%s`.", name))
  )
}

#' @rdname script_function
#' @export
print.script_function <- function(x, ...) {
  cat("<script_function>\n")
  invisible(x)
}

#' @rdname script_function
#' @export
`$.script_module` <- function(x, name) {
  py <- traced_py(x)
  switch(name,
    graph = py_text(py$graph),
    code = py_text(py$code),
    guards = unlist(py_text(py$guards)),
    save = function(path) jit_save(x, path),
    forward = function(...) call_traced(py, list(...)),
    train = function(mode = TRUE) {
      py$train(isTRUE(mode))
      invisible(x)
    },
    eval = function() {
      py$eval()
      invisible(x)
    },
    training = py_text(py$training),
    methods = unlist(py_text(py$methods)),
    parameters = state_list(py, "parameters"),
    buffers = state_list(py, "buffers"),
    py = py,
    {
      if (name %in% unlist(py_text(py$methods)) ||
          reticulate::py_has_attr(py, name)) {
        method <- reticulate::py_get_attr(py, name)
        function(...) call_traced(method, list(...))
      } else {
        tracebridge_abort(sprintf("This script_module has no method or field `%s`.", name))
      }
    }
  )
}

state_list <- function(py, what) {
  nv <- py_rb()$state_names(py, what)
  keys <- unlist(reticulate::py_to_r(reticulate::py_get_item(nv, 0L)))
  values <- reticulate::iterate(reticulate::py_get_item(nv, 1L), wrap_tensor,
                                simplify = FALSE)
  names(values) <- keys
  values
}

#' @rdname script_function
#' @export
print.script_module <- function(x, ...) {
  py <- traced_py(x)
  name <- py_text(py$`_get_name`())
  params <- state_list(py, "parameters")
  n <- sum(vapply(params, function(p) prod(dim(p)), numeric(1)))
  cat("<script_module> ", name, "\n", sep = "")
  cat("  methods:    ", paste(x$methods, collapse = ", "), "\n", sep = "")
  cat("  parameters: ", format(n, big.mark = ","), " in ", length(params), " tensors",
      if (length(params)) paste0(" (", paste(names(params), collapse = ", "), ")"), "\n",
      sep = "")
  cat("  mode:       ", if (isTRUE(x$training)) "train" else "eval", "\n", sep = "")
  invisible(x)
}

#' @export
.DollarNames.script_module <- function(x, pattern = "") {
  nms <- c("graph", "code", "guards", "save", "forward", "train", "eval", "training",
           "methods", "parameters", "buffers", x$methods)
  nms[grepl(pattern, nms)]
}
