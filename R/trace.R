# jit_trace(), jit_trace_module(), jit_save(), jit_load(): thin wrappers over the Python
# core (tracebridge.trace, trace_module, save, load). Tracing happens in Python; R code
# runs inside it through callbacks, and every torch call it makes is recorded.

#' Trace a function or module into a `script_function` or `script_module`
#'
#' Runs `func` on the example inputs, records the tensor operations, checks the recording
#' against the real code and returns an executable object. Sizes read while tracing
#' (`x$size(1)`) stay symbolic, so the result works for other batch sizes; where the code
#' turned a size into an R number, the trace records a guard and a call that breaks it
#' fails with a `tracebridge_guard_error` instead of giving a wrong result.
#'
#' @param func An R function, or an [nn_module()] instance (its `forward` is traced).
#' @param ... Example inputs, unnamed and in order. One tensor works as is. Lists are
#'   passed as tuples (unnamed) or dicts (named).
#' @param strict Refuse list (named R list) outputs, as `torch.jit.trace` refuses mutable
#'   containers; unnamed R lists are returned as tuples and are always accepted.
#' @param respect_mode For a module: trace `forward` in training mode (`trainforward`) and
#'   in evaluation mode (`evalforward`); `$forward()` then follows `$train()` and
#'   `$eval()`. If `FALSE`, trace one `forward` in the current mode.
#' @param check_trace Run the code again on the example inputs and on inputs of another
#'   batch size, and compare with the trace (a `tracebridge_check_error` when they
#'   differ). `FALSE` skips the check, for code that only supports the example's sizes.
#' @param check_tolerance The largest relative difference the check accepts.
#' @return A `script_function` if `func` is a function, a `script_module` if it is a
#'   module.
#' @seealso [jit_trace_module()], [jit_save()], [jit_load()].
#' @examples
#' if (torch_is_installed()) {
#' fn <- function(x) {
#'   torch_relu(x)
#' }
#' input <- torch_tensor(c(-1, 0, 1))
#' tr_fn <- jit_trace(fn, input)
#' tr_fn(input)
#' }
#' @export
jit_trace <- function(func, ..., strict = TRUE, respect_mode = TRUE, check_trace = TRUE,
                      check_tolerance = 1e-5) {
  check <- check_args(check_trace, check_tolerance)
  args <- example_args(list(...), "jit_trace")
  if (inherits(func, "nn_module")) {
    target <- trace_target(func)
    restore <- prepare_module_trace(func)
    on.exit(restore(), add = TRUE)
    traced <- run_trace(py_core()$trace, target$py, args, strict = isTRUE(strict),
                        respect_mode = isTRUE(respect_mode), check_trace = check$check_trace,
                        check_tolerance = check$check_tolerance)
    return(new_script_module(traced))
  }
  if (!is.function(func)) {
    tracebridge_abort(sprintf("jit_trace(): `func` must be an R function or an nn_module, not %s.",
                              describe_value(func)))
  }
  fname <- substitute(func)
  name <- if (is.name(fname)) as.character(fname) else "forward"
  callback <- r_callback(trace_source(func, name), "the traced function")
  py_rb()$set_name(callback, name, as.list(simple_arg_names(func)))
  traced <- run_trace(py_core()$trace, callback, args, strict = isTRUE(strict),
                      check_trace = check$check_trace, check_tolerance = check$check_tolerance)
  new_script_function(traced)
}

#' Trace several methods of a module
#'
#' @param mod An [nn_module()] instance.
#' @param ... Named: for each method to trace, its example inputs (a tensor or an unnamed
#'   list of inputs), e.g. `forward = list(x), encode = list(y)`.
#' @param strict As in [jit_trace()].
#' @param respect_mode As in [jit_trace()]; applies to `forward`. Off by default here, as
#'   in mlverse torch.
#' @param check_trace,check_tolerance As in [jit_trace()].
#' @return A `script_module` with one method per name.
#' @examples
#' if (torch_is_installed()) {
#'   Net <- nn_module("Net",
#'     initialize = function() self$fc <- nn_linear(3, 2),
#'     forward = function(x) self$fc(x),
#'     double_it = function(x) 2 * self$fc(x)
#'   )
#'   x <- torch_ones(1, 3)
#'   tm <- jit_trace_module(Net(), forward = list(x), double_it = list(x))
#'   tm$methods
#'   tm$double_it(x)
#' }
#' @export
jit_trace_module <- function(mod, ..., strict = TRUE, respect_mode = FALSE, check_trace = TRUE,
                             check_tolerance = 1e-5) {
  check <- check_args(check_trace, check_tolerance)
  if (!inherits(mod, "nn_module")) {
    tracebridge_abort("jit_trace_module(): `mod` must be an nn_module instance.")
  }
  methods <- list(...)
  nms <- names(methods)
  if (!length(methods) || is.null(nms) || any(!nzchar(nms))) {
    tracebridge_abort(paste(
      "jit_trace_module(): name each example input by its method, e.g.",
      "`jit_trace_module(mod, forward = list(x))`."
    ))
  }
  py <- module_py(mod)
  self <- module_env(mod)
  inputs <- list()
  for (nm in nms) {
    example <- methods[[nm]]
    if (inherits(example, "torch_tensor")) example <- list(example)
    inputs[[nm]] <- example_args(example, "jit_trace_module")
    expose_r_method(self, py, nm)
  }
  restore <- prepare_module_trace(mod)
  on.exit(restore(), add = TRUE)
  dict <- reticulate::py_dict(nms, unname(inputs), convert = FALSE)
  traced <- run_trace(py_core()$trace_module, py, dict, strict = isTRUE(strict),
                      respect_mode = isTRUE(respect_mode), check_trace = check$check_trace,
                      check_tolerance = check$check_tolerance)
  new_script_module(traced)
}

check_args <- function(check_trace, check_tolerance) {
  if (!is.logical(check_trace) || length(check_trace) != 1L || is.na(check_trace)) {
    type_error("`check_trace` must be TRUE or FALSE.")
  }
  if (!is.numeric(check_tolerance) || length(check_tolerance) != 1L ||
      is.na(check_tolerance) || check_tolerance < 0) {
    value_error("`check_tolerance` must be one number, 0 or more.")
  }
  list(check_trace = check_trace, check_tolerance = as.double(check_tolerance))
}

# The Python core looks methods up with getattr(); R methods live in R, so put a
# callback under the method's name on the Python module.
expose_r_method <- function(self, py, name) {
  if (name == "forward") return(invisible())
  fn <- get0(name, envir = self, inherits = FALSE)
  if (!is.function(fn)) {
    if (reticulate::py_has_attr(py, name)) return(invisible())
    tracebridge_abort(sprintf("jit_trace_module(): the module has no method `%s`.", name))
  }
  bind_method_py(py, name)
}

# What jit_trace() records for a module. A built-in module whose R forward converts its
# inputs (nn_embedding()'s 1-based indices) is traced through an R wrapper that owns the
# same parameters, so the conversion is part of the graph, as it is inside R modules.
trace_target <- function(func) {
  self <- module_env(func)
  spec <- get0(".forward_spec", envir = self, inherits = FALSE)
  if (is.null(spec)) return(list(py = module_py(func), keep = func))
  inner <- module_py(func)
  names <- vapply(spec, function(a) a$name, character(1))
  py <- py_rb()$new_module(class(func)[[1]], as.list(names))
  for (what in c("parameters", "buffers")) {
    state <- py_rb()$state_names(inner, what)
    keys <- unlist(reticulate::py_to_r(reticulate::py_get_item(state, 0L)))
    values <- reticulate::iterate(reticulate::py_get_item(state, 1L), identity,
                                  simplify = FALSE)
    for (k in seq_along(keys)) {
      if (what == "parameters") py$register_parameter(keys[[k]], values[[k]])
      else py$register_buffer(keys[[k]], values[[k]])
    }
  }
  py$train(reticulate::py_to_r(inner$training))
  wself <- new.env(parent = emptyenv())
  assign(".py", py, envir = wself)
  assign("forward", function(...) func(...), envir = wself)
  wrapper <- new_module_instance(wself, class(func)[[1]], function(...) func(...))
  .tb$rmod$set_forward(py, dispatcher())
  list(py = py, keep = wrapper)
}

# The function that jit_trace() runs: the user's, with its source lines kept and with
# seq_len(), `:` and friends that read traced sizes (R/traced-sizes.R) bound in an
# environment between it and its own.
#
# Note: source lines. Graph nodes and guard messages name the R line that made them
# (note_r_location()). R keeps the lines of a function only when it was parsed with
# `keep.source` (interactive sessions, testthat, `source(keep.source = TRUE)`); under
# Rscript it has none. Then the function is parsed again from its deparsed text, under
# the file name `<R function NAME>`, and Python is given those lines to quote.
trace_source <- function(func, name) {
  helpers <- traced_size_helpers()
  env <- list2env(helpers, parent = environment(func) %||% globalenv())
  if (is.null(attr(func, "srcref"))) func <- reparse_with_source(func, name, env)
  environment(func) <- env
  bind_user_callees(func, env, helpers)
  func
}

# The user's own functions that traced code calls see the helpers too, so that seq_len()
# and `:` read traced sizes wherever the user's code runs during a trace, not only in the
# traced function: each function named in `func`'s body that is found from `env` and is
# the user's (not a package's) is bound in `env`, for this trace only, as a copy whose
# environment holds the helpers; and so on for the functions those call. `seen`: the
# copies made so far, by name (mutual recursion ends there). Returns the names bound in
# `env`.
bind_user_callees <- function(func, env, helpers, seen = new.env(parent = emptyenv())) {
  added <- character()
  for (nm in unique(all.names(body(func)))) {
    if (nm %in% names(helpers) || exists(nm, envir = env, inherits = FALSE)) next
    copy <- seen[[nm]]
    if (is.null(copy)) {
      f <- get0(nm, envir = env, mode = "function")
      if (!is_user_closure(f, nm)) next
      cenv <- list2env(helpers, parent = environment(f))
      copy <- f
      environment(copy) <- cenv
      # Under Rscript the user's functions have no source lines: quote the deparsed ones.
      if (is.null(attr(f, "srcref"))) copy <- reparse_with_source(copy, nm, cenv)
      seen[[nm]] <- copy
      bind_user_callees(copy, environment(copy), helpers, seen)
    }
    assign(nm, copy, envir = env)
    added <- c(added, nm)
  }
  invisible(added)
}

# A closure written by the user, found under `name`: not a package's function (one whose
# environment is a namespace, or that the namespace above its environment binds to
# `name`, as the surface table's functions). Tests' functions, whose environments have the
# package's namespace above them, are the user's.
is_user_closure <- function(f, name) {
  if (!is.function(f) || is.primitive(f) || inherits(f, "nn_module")) return(FALSE)
  env <- environment(f)
  if (is.null(env) || isNamespace(env) || identical(env, baseenv())) return(FALSE)
  top <- topenv(env)
  if (identical(top, baseenv())) return(FALSE)
  !(isNamespace(top) && identical(get0(name, envir = top, inherits = FALSE), f))
}

# The same for the R methods of a module and of its R submodules, while a trace runs:
# the helpers are bound in each method's environment and methods without sources are
# replaced by ones that have them. Returns the function that puts everything back.
prepare_module_trace <- function(mod) {
  helpers <- traced_size_helpers()
  visited <- list()
  bound <- list()     # environments given the helpers
  replaced <- list()  # list(self, name, original method)
  visit <- function(m) {
    self <- module_env(m)
    if (!is.environment(self) || any(vapply(visited, identical, logical(1), self))) return()
    visited[[length(visited) + 1L]] <<- self
    for (nm in ls(self, all.names = TRUE)) {
      v <- get(nm, envir = self)
      if (inherits(v, "nn_module")) {
        visit(v)
      } else if (is.list(v) && !is.object(v)) {
        for (item in v) if (inherits(item, "nn_module")) visit(item)
      } else if (is.function(v) && !is.primitive(v) && !inherits(v, "nn_module")) {
        env <- environment(v)
        if (!identical(get0("self", envir = env, inherits = FALSE), self)) next
        if (!any(vapply(bound, function(b) identical(b$env, env), logical(1)))) {
          new <- setdiff(names(helpers), ls(env, all.names = TRUE))
          list2env(helpers[new], envir = env)
          bound[[length(bound) + 1L]] <<- list(env = env, added = new)
        }
        # The user's functions the method calls, as for a traced function.
        b <- which(vapply(bound, function(b) identical(b$env, env), logical(1)))[[1]]
        callees <- bind_user_callees(v, env, helpers)
        bound[[b]]$added <<- union(bound[[b]]$added, callees)
        if (is.null(attr(v, "srcref"))) {
          fresh <- reparse_with_source(v, paste0(class(m)[[1]], "$", nm), env)
          if (!is.null(attr(fresh, "srcref"))) {
            assign(nm, fresh, envir = self)
            replaced[[length(replaced) + 1L]] <<- list(self, nm, v)
          }
        }
      }
    }
  }
  visit(mod)
  function() {
    for (b in bound) rm(list = b$added, envir = b$env)
    for (r in replaced) assign(r[[2]], r[[3]], envir = r[[1]])
    invisible()
  }
}

reparse_with_source <- function(func, name, env) {
  lines <- deparse(func)
  filename <- sprintf("<R function %s>", name)
  parsed <- tryCatch(
    parse(text = lines, keep.source = TRUE,
          srcfile = srcfilecopy(filename, lines, isFile = FALSE)),
    error = function(e) NULL
  )
  if (length(parsed) != 1L) return(func)
  fresh <- tryCatch(eval(parsed[[1L]], env), error = function(e) NULL)
  if (!is.function(fresh)) return(func)
  py_rb()$register_source(filename, lines)
  fresh
}

example_args <- function(dots, caller) {
  nms <- names(dots)
  if (!is.null(nms) && any(nzchar(nms))) {
    tracebridge_abort(sprintf(
      paste(
        "%s(): example inputs in `...` can not be named (got %s);",
        "pass them unnamed, in the order of the function's arguments."
      ),
      caller, paste0("`", nms[nzchar(nms)], "`", collapse = ", ")
    ), "tracebridge_named_inputs_error")
  }
  if (!length(dots)) tracebridge_abort(sprintf("%s(): give at least one example input.", caller))
  for (k in seq_along(dots)) check_example(dots[[k]], caller, k)
  reticulate::tuple(lapply(dots, to_py), convert = FALSE)
}

# Example inputs are tensors, or lists of them (NULL too). An R vector would reach Python
# as a tuple of numbers: the trace would bake it in and every call would fail. Say so now.
check_example <- function(v, caller, k) {
  if (is.null(v) || inherits(v, c("torch_tensor", "nn_module"))) return(invisible())
  if (is.list(v) && !is.object(v)) {
    for (item in v) check_example(item, caller, k)
    return(invisible())
  }
  if (is.atomic(v) && !is.null(dim(v))) {
    type_error(sprintf(paste(
      "%s(): example input %d is an R %s array (%s); example inputs must be tensors (or lists",
      "of tensors): pass torch_tensor() of it."),
      caller, k, typeof(v), paste(dim(v), collapse = " x ")))
  }
  shown <- if (is.atomic(v)) {
    text <- paste(deparse(v, width.cutoff = 60L), collapse = " ")
    if (nchar(text) > 60L) paste0(substr(text, 1L, 57L), "...") else text
  } else NULL
  # A setting (a character or logical) is code, not data: a tensor of it means nothing.
  setting <- is.character(v) || is.logical(v) && length(v) == 1L
  fix <- if (setting) {
    sprintf(paste(
      "fix it in the traced code instead, e.g. `jit_trace(function(x) f(x, %s), x)`, and",
      "trace once per value"), shown)
  } else if (!is.null(shown)) {
    sprintf("pass torch_tensor(%s)", shown)
  } else "pass a tensor made with torch_tensor()"
  type_error(sprintf(paste(
    "%s(): example input %d is %s%s; example inputs must be tensors (or lists of",
    "tensors): %s."),
    caller, k, if (is.atomic(v)) sprintf("an R %s vector", typeof(v)) else describe_value(v),
    if (!is.null(shown)) sprintf(" (%s)", shown) else "", fix))
}

run_trace <- function(fn, target, args, ...) {
  .tb$pending_r_error <- NULL
  .tb$tracing <- TRUE
  on.exit({
    .tb$pending_r_error <- NULL
    .tb$tracing <- FALSE
    py_rb()$set_location("")
  }, add = TRUE)
  out <- tryCatch(
    py_rb()$call_recording_warnings(fn, target, args, ...),
    error = function(e) rethrow_python(e)
  )
  for (msg in reticulate::py_to_r(reticulate::py_get_item(out, 1L))) {
    warning(tracebridge_warning(msg))
  }
  traced <- reticulate::py_get_item(out, 0L)
  # The program says which language its code was written in (R: 1-based indices).
  reticulate::py_set_attr(reticulate::py_get_attr(traced, "program"), "language", "r")
  traced
}

tracebridge_warning <- function(msg) {
  structure(class = c("tracebridge_warning", "warning", "condition"),
            list(message = r_terms(msg), call = NULL))
}

#' Save and load traced objects
#'
#' The file is the artifact that Python's `tracebridge.save()` writes and
#' `tracebridge.load()` reads: one archive with the program as JSON and the tensors in
#' safetensors layout. Nothing in it is executed when loading.
#'
#' @param obj A `script_function` or `script_module`.
#' @param path A file path.
#' @param weights For `jit_load()`: `NULL`, or the weights to bind the state to, by name:
#'   a `.safetensors` file, a character vector of them, or a Hugging Face sharded index
#'   (`model.safetensors.index.json`). Needed for a program traced on the meta device,
#'   which is saved without tensor data; missing, extra or mis-shaped weights are refused.
#' @param map_location For `jit_load()`: `NULL` (default) puts each tensor back on the
#'   device it was saved from, as `torch.jit.load` does; a device string (`"cpu"`,
#'   `"cuda:0"`) puts every tensor there, and a named list maps saved devices to devices
#'   (`list("cuda:0" = "cpu")`). A file saved from a device this machine lacks needs
#'   `map_location = "cpu"` (the error says so).
#' @param progress Show what is being done and how long it took for files of 64 MiB or
#'   more (through cli): `NULL` (default) in an interactive session or on a terminal unless
#'   `options(tracebridge.progress = FALSE)` or `TRACEBRIDGE_PROGRESS=0`; `TRUE` or `FALSE`
#'   to say so.
#' @return `jit_save()`: `path`, invisibly. `jit_load()`: a `script_function` or a
#'   `script_module`.
#' @examples
#' if (torch_is_installed()) {
#'   f <- jit_trace(function(x) torch_relu(x) * 2, torch_ones(3))
#'   path <- tempfile(fileext = ".tb")
#'   jit_save(f, path)
#'   g <- jit_load(path)
#'   g(torch_tensor(c(-1, 1, 2)))
#' }
#' @export
jit_save <- function(obj, path, progress = NULL) {
  if (!inherits(obj, c("script_function", "script_module"))) {
    tracebridge_abort(sprintf(
      "jit_save(): `obj` must be a script_function or script_module (from jit_trace()), not %s.",
      describe_value(obj)
    ))
  }
  path <- path.expand(path)
  bytes <- reticulate::py_to_r(py_core()$progress$state_nbytes(traced_py(obj)))
  with_progress_step("Saving", path, bytes, progress = progress,
                     py_call_checked(py_core()$save, traced_py(obj), path))
  invisible(path)
}

#' @rdname jit_save
#' @export
jit_load <- function(path, weights = NULL, map_location = NULL, progress = NULL) {
  path <- path.expand(path)
  if (!file.exists(path)) {
    tracebridge_abort(sprintf("jit_load(): no file at '%s'.", path), "tracebridge_artifact_error")
  }
  if (!is.null(weights)) {
    if (!is.character(weights) || !length(weights) || anyNA(weights)) {
      tracebridge_abort(paste("jit_load(): `weights` must be a .safetensors file, a character",
                              "vector of them, or a sharded index (model.safetensors.index.json)."),
                        "tracebridge_artifact_error")
    }
    weights <- path.expand(weights)
    weights <- if (length(weights) == 1L) weights else as.list(weights)
  }
  if (is.list(map_location)) map_location <- reticulate::dict(map_location)
  # Python's load runs every rule of the spec (one checker, check/program.py) before any
  # runtime sees the program; R's document rules (R/check.R) are for jit_inspect().
  loaded <- with_progress_step("Loading", path, file.size(path), progress = progress,
                               py_call_checked(py_core()$load, normalizePath(path),
                                               weights = weights, map_location = map_location))
  if (reticulate::py_to_r(py_rb()$kind(loaded)) == "module") {
    new_script_module(loaded)
  } else {
    new_script_function(loaded)
  }
}

#' Forget the values traced code keeps from module state
#'
#' Traced and loaded graphs keep some values computed from their module's state alone
#' (constants folded at the first call in evaluation mode, memos keyed on state tensors);
#' each is computed again at its next use after this call. It is needed only after a
#' write that torch does not record and tracebridge cannot see: an in-place op through a
#' buffer's `$data` (`b$data$zero_()`: `$data` has a version counter of its own, so the
#' buffer's does not move). Writes torch records are seen without it:
#' `$load_state_dict()`, optimizer steps, `p$copy_(w)` inside [with_no_grad()],
#' `p$data <- w`; so are writes through a parameter's `$data` (`p$data$zero_()`):
#' taking it drops the values kept from that parameter.
#'
#' @return `NULL`, invisibly.
#' @examples
#' if (torch_is_installed()) {
#'   Scaled <- nn_module("Scaled",
#'     initialize = function() self$scale <- nn_buffer(torch_ones(2)),
#'     forward = function(x) x * (self$scale * 2)
#'   )
#'   net <- Scaled()
#'   net$eval()
#'   f <- jit_trace(net, torch_ones(1, 2))
#'   with_no_grad(f(torch_ones(1, 2)))  # `scale * 2` is folded
#'   invisible(net$scale$data$zero_()) # torch does not record this write
#'   invalidate_caches()
#'   with_no_grad(f(torch_ones(1, 2)))  # zeros, computed from the new buffer
#' }
#' @export
invalidate_caches <- function() {
  withCallingHandlers(py_core()$invalidate_caches(), error = function(e) rethrow_python(e))
  invisible(NULL)
}
