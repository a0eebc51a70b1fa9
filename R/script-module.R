# script_function and script_module: R closures over a Python TracedFunction or
# TracedModule. Calling one converts the inputs, calls Python once, and wraps the output;
# nothing else runs per call (see benchmarks/bench_r.R).

traced_py <- function(x) attr(x, "py")

# The program of a traced or loaded object, under its private name where it has one:
# `program` itself breaks a loaded object's seal (python/tracebridge/runtime/sealed.py),
# and binding a call's named arguments only reads its graphs' signatures.
traced_program <- function(py) {
  if (reticulate::py_has_attr(py, "_tb_program")) py[["_tb_program"]] else py$program
}

call_traced <- function(py, args, program = NULL, method = "forward") {
  # What a traced model costs per call from R beyond the Python call itself: convert the
  # inputs, one call, wrap the output. One tensor in goes through src/call.c where it
  # started (call_c()); the rest through reticulate, under a calling handler (cheaper than
  # tryCatch()): rethrow_python() classifies the Python exception and signals it.
  if (length(args) == 1L && inherits(args[[1L]], "torch_tensor")) {
    out <- call_c(py, args[[1L]])
    if (!is.null(out)) return(out)
    out <- withCallingHandlers(reticulate::py_call(py, .subset2(args[[1L]], ".py")),
                               error = rethrow_python)
  } else {
    if (!is.null(names(args)) && any(nzchar(names(args)))) {
      args <- bind_call(args, program %||% traced_program(py), method)
    }
    # Through the callable's R wrapper, whose only formal is `...`: named inputs reach
    # Python as keywords whatever their names (py_call() would take `x` as its own).
    pyargs <- lapply(args, to_py)
    out <- withCallingHandlers(
      do.call(py$`__call__`, pyargs),
      error = rethrow_python
    )
  }
  if (inherits(out, "torch.Tensor")) return(wrap_tensor(out))
  from_py(out)
}

# A call's arguments as the graph takes them: those named after a keyword argument the
# graph was traced with stay keywords, in the call's order (Python matches them by name,
# and checks the order of those that a `**kwargs` collects); the others are put in the
# order of the graph's positional inputs.
bind_call <- function(args, program, method) {
  graph <- reticulate::py_get_item(program$methods, method)
  names_ <- reticulate::py_to_r(py_rb()$call_names(graph))
  keywords <- unlist(names_[[2]])
  nms <- names(args)
  by_keyword <- nzchar(nms) & nms %in% keywords
  positional <- unlist(names_[[1]]) %||% character(0)
  bound <- bind_named(args[!by_keyword], positional, keywords)
  if (any(by_keyword)) c(bound, args[by_keyword]) else bound
}

bind_named <- function(args, inputs, keywords = character(0)) {
  nms <- names(args)
  unknown <- setdiff(nms[nzchar(nms)], inputs)
  if (length(unknown)) {
    tracebridge_abort(sprintf(
      "The traced function has no input named %s; its inputs are %s.",
      paste0("`", unknown, "`", collapse = ", "),
      paste0("`", c(inputs, keywords), "`", collapse = ", ")),
      "value_error")
  }
  out <- vector("list", length(inputs))
  filled <- logical(length(inputs))
  for (k in which(nzchar(nms))) {
    at <- match(nms[[k]], inputs)
    out[at] <- list(args[[k]])
    filled[[at]] <- TRUE
  }
  for (a in args[!nzchar(nms)]) {
    at <- which(!filled)[1]
    out[at] <- list(a)
    filled[[at]] <- TRUE
  }
  missing <- inputs[!filled]
  if (length(missing)) {
    tracebridge_abort(sprintf("Missing input %s.", paste0("`", missing, "`", collapse = ", ")),
                      "value_error")
  }
  out
}

# The call itself: one tensor in, one tensor out is the common case and takes the
# shortest path, all of it in src/call.c once that has started (the first call starts it,
# through call_traced()); everything else goes through call_traced().
fast_call <- function(py) {
  function(...) {
    if (...length() == 1L) {
      out <- .Call(tb_call_tensor, py, ..1)
      if (inherits(out, "torch_tensor")) return(out)
      if (!is.null(out)) return(c_result(out))
    }
    call_traced(py, list(...))
  }
}

new_script_function <- function(py) {
  f <- fast_call(py)
  structure(f, py = py, class = "script_function")
}

new_script_module <- function(py) {
  f <- fast_call(py)
  structure(f, py = py, class = "script_module")
}

py_text <- function(x) reticulate::py_to_r(x)

#' Traced functions and modules
#'
#' `jit_trace()` and `jit_load()` return these. Call them like the original. Fields:
#' `$graph` (the graph as text), `$code` (the generated Python), `$guards` (the
#' assumptions the trace made), `$save(path)`. Modules also have `$forward()`, `$train()`,
#' `$eval()`, `$training`, `$parameters`, `$buffers`, `$methods`, one function per
#' traced method (`$trainforward()`, `$evalforward()`, ...), each sub-module by its
#' name, whose `$` gives its parameters and buffers (`$bn$running_mean`), and what a
#' module does: `$to()`, `$cpu()`, `$cuda()`, `$state_dict()`, `$load_state_dict()`,
#' `$zero_grad()`, `$named_parameters()`, `$named_buffers()`, `$children`, `$modules`,
#' `$apply()`, `$register_parameter()`, `$register_buffer()`, `$add_module()`. `[[` is
#' `$`; `$<-` and `[[<-` assign a parameter, buffer or sub-module, as on a module
#' (`m$bn$running_mean <- torch_zeros(4)`).
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
    guards = r_terms(unlist(py_text(py$guards))),
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
    guards = r_terms(unlist(py_text(py$guards))),
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
      if (name %in% module_fields && !(name %in% unlist(py_text(py$methods)))) {
        return(module_field(x, py, name))
      }
      if (reticulate::py_to_r(py_rb()$has_state(py, name))) {
        return(from_py(reticulate::py_get_attr(py, name)))  # a parameter or buffer
      }
      sub <- if (reticulate::py_has_attr(py, "_modules")) py[["_modules"]]$get(name)
      if (!is.null(sub) && !inherits(sub, "python.builtin.NoneType") &&
          !(name %in% unlist(py_text(py$methods)))) {
        # a sub-module (`tm$bn`): a module whose `$` gives its parameters and buffers
        return(wrap_py_module(sub))
      }
      if (name %in% unlist(py_text(py$methods)) ||
          reticulate::py_has_attr(py, name)) {
        method <- reticulate::py_get_attr(py, name)
        function(...) call_traced(method, list(...), traced_program(py), name)
      } else {
        tracebridge_abort(sprintf("This script_module has no method or field `%s`.", name))
      }
    }
  )
}

# What a script_module does as a module, through the code a sub-module's `$` runs
# (`$.nn_module`, R/nn.R): `m$to(dtype = torch_float64())`, `m$state_dict()`, ...; the
# functions among them return the script_module itself, as mlverse's return the module.
module_fields <- c("to", "cpu", "cuda", "state_dict", "load_state_dict", "zero_grad",
                   "named_parameters", "named_buffers", "children", "modules", "apply",
                   "register_parameter", "register_buffer", "register_module", "add_module")

module_field <- function(x, py, name) {
  field <- `$.nn_module`(wrap_py_module(py), name)
  if (!is.function(field)) return(field)
  function(...) {
    out <- field(...)
    if (inherits(out, "nn_module")) invisible(x) else out
  }
}

# Fields of a script_module that are not the module's to assign.
read_only_fields <- c("graph", "code", "guards", "save", "forward", "train", "eval",
                      "training", "methods", "parameters", "buffers", "py", module_fields)

#' @rdname script_function
#' @param value What to assign: a tensor (`nn_parameter()` for a parameter, a tensor for
#'   a buffer the module has), or a module for a sub-module.
#' @export
`$<-.script_module` <- function(x, name, value) {
  if (name %in% read_only_fields) {
    tracebridge_abort(sprintf(
      "`$%s` of a script_module cannot be assigned: it is not a parameter, buffer or sub-module.",
      name))
  }
  py <- traced_py(x)
  # As `$<-` on a sub-module (R/nn.R): R's `m$bn$running_mean <- v` assigns the changed
  # sub-module back here, which is the one the module holds already.
  `$<-.nn_module`(wrap_py_module(py), name, value)
  invisible(x)
}

#' @rdname script_function
#' @param i A name, as for `$`.
#' @export
`[[.script_module` <- function(x, i) `$.script_module`(x, i)

#' @rdname script_function
#' @export
`[[<-.script_module` <- function(x, i, value) `$<-.script_module`(x, i, value)

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
