# Set-up of the Python side, and the conversions at the R/Python boundary.
#
# Note: the boundary. Everything that crosses to Python goes through `to_py()` (values)
# or `arg_py()` (arguments of torch ops: whole doubles become Python ints, the way
# mlverse torch treats sizes); everything that comes back goes through `from_py()`.
# Python objects are always held unconverted (`convert = FALSE`), so a traced integer
# never becomes an R number by accident.

.tb <- new.env(parent = emptyenv())

# Note: a lazy start. library(tracebridge) neither starts Python nor loads reticulate (whose
# namespace alone takes a second or more: it loads Matrix and its S4 methods). The modules
# below are promises, forced by the first use (`.tb$torch`), which loads reticulate and
# imports them; Python itself starts at the first call into it.
.onLoad <- function(libname, pkgname) {
  python <- tracebridge_python()
  started <- "reticulate" %in% loadedNamespaces() &&
    reticulate::py_available(initialize = FALSE)
  if (!is.null(python) && !started) {
    Sys.setenv(RETICULATE_PYTHON = python)
  }
  # A failed import says what to set up (R/startup.R), not reticulate's configuration dump.
  # reticulate imports at once (no delay, no hook) when Python already runs by the time a
  # promise is forced, so a failed import goes to the same hook either way.
  lazy_module <- function(field, module, hook) {
    force(module)
    force(hook)
    delayedAssign(field, {
      hooks <- python_load_hooks(hook)
      import_torch_own_blas()
      tryCatch(reticulate::import(module, convert = FALSE, delay_load = hooks),
               error = hooks$on_error)
    }, assign.env = .tb)
  }
  lazy_module("torch", "torch", "torch")
  lazy_module("rb", "tracebridge.frontends.rbridge", "tracebridge")
  lazy_module("core", "tracebridge", "tracebridge")
  lazy_module("builtins", "builtins", "builtins")
  lazy_module("rmod", "tracebridge.frontends.r_modules", "tracebridge")
  .tb$live <- new.env(parent = emptyenv())
  load_surface(topenv(environment(load_surface)))
  register_matmul()
}

# A function built from the surface table (they are assigned when the package loads).
surface_fn <- function(name) get(name, envir = topenv(environment(surface_fn)))

#' Find the Python that tracebridge uses
#'
#' The `TRACEBRIDGE_PYTHON` environment variable wins, then `RETICULATE_PYTHON`, then a
#' `.venv/bin/python` found by walking up from the working directory, then one found by
#' walking up from where the package is installed (`make setup` installs it into the
#' project's `.Rlib/`, beside the project's `.venv/`, so it works from any directory).
#'
#' @param start Directory to start the walk from.
#' @return The path to a Python executable, or `NULL` if none was found.
#' @examples
#' tracebridge_python()
#' @export
tracebridge_python <- function(start = getwd()) {
  for (var in c("TRACEBRIDGE_PYTHON", "RETICULATE_PYTHON")) {
    value <- Sys.getenv(var, "")
    if (nzchar(value)) return(value)
  }
  installed <- system.file(package = "tracebridge")
  for (from in c(start, if (nzchar(installed)) installed)) {
    found <- venv_above(from)
    if (!is.null(found)) return(found)
  }
  NULL
}

venv_above <- function(start) {
  dir <- normalizePath(start, mustWork = FALSE)
  repeat {
    candidate <- file.path(dir, ".venv", "bin", "python")
    if (file.exists(candidate)) return(candidate)
    parent <- dirname(dir)
    if (identical(parent, dir)) return(NULL)
    dir <- parent
  }
}

#' Is the Python side available?
#'
#' @return `TRUE` when Python torch and the `tracebridge` Python package import.
#' @examples
#' torch_is_installed()
#' @export
torch_is_installed <- function() {
  ok <- tryCatch({
    import_torch_own_blas()
    reticulate::py_module_available("torch") &&
      reticulate::py_module_available("tracebridge.frontends.rbridge")
  }, error = function(e) FALSE)
  isTRUE(ok)
}

# Note: torch's own BLAS in an R process. R's libR.so links R's BLAS and LAPACK
# (libblas.so.3, liblapack.so.3), so their symbols are in the process's global scope before
# Python starts. libtorch_cpu.so carries MKL and exports its Fortran entry points too
# (sgemm_, strsm_, sdot_, ... 29 of them), and the dynamic linker binds libtorch_cpu's own
# calls to the first definition in that scope: R's BLAS. With R's reference BLAS a 32x64 by
# 64x64 torch.mm took 46 us in R's process against 4.5 us in a Python process, and a small
# MLP's training step (forward, backward, Adam) 45% longer, for Python code run inside R as
# much as for R's. Importing torch with RTLD_DEEPBIND makes its libraries look up their
# own symbols first, as they do in a Python process. So every path that may import torch
# (the lazy modules, torch_is_installed(), the C paths) calls this first; a torch imported
# before tracebridge touched Python (e.g. by reticulate::import("torch") in user code)
# keeps R's BLAS, and `.tb$torch_blas` says so.
import_torch_own_blas <- function() {
  if (!is.null(.tb$torch_blas)) return(invisible(.tb$torch_blas))
  .tb$torch_blas <- tryCatch(
    reticulate::py_to_r(reticulate::py_run_string(torch_import_code, local = TRUE,
                                                  convert = FALSE)$how),
    error = function(e) "not imported" # the import below fails with the message to show
  )
  invisible(.tb$torch_blas)
}

torch_import_code <- paste(
  "import os, sys",
  "if 'torch' in sys.modules:",
  "    how = 'imported before tracebridge (the first BLAS in the process)'",
  "elif not (hasattr(os, 'RTLD_DEEPBIND') and hasattr(sys, 'setdlopenflags')):",
  "    import torch",
  "    how = 'default'",
  "else:",
  "    flags = sys.getdlopenflags()",
  "    sys.setdlopenflags(flags | os.RTLD_DEEPBIND)",
  "    try:",
  "        import torch",
  "    finally:",
  "        sys.setdlopenflags(flags)",
  "    how = 'own'",
  sep = "\n")

py_torch <- function() .tb$torch
py_rb <- function() .tb$rb
py_core <- function() .tb$core

is_py <- function(x) inherits(x, "python.builtin.object")

# Python -> R. Tensors are wrapped, containers are walked, traced integers are kept.
from_py <- function(x) {
  if (!is_py(x)) return(x)
  cls <- class(x)
  if ("torch.Tensor" %in% cls) return(wrap_tensor(x))
  first <- cls[[1]]
  # A dataclass or a named tuple (a class of the user's, not a builtin): a named list.
  if (!startsWith(first, "python.builtin.") && !startsWith(first, "torch.")) {
    fields <- py_rb()$record_fields(x)
    if (!inherits(fields, "python.builtin.NoneType")) {
      values <- reticulate::iterate(reticulate::py_get_item(fields, 1L), from_py,
                                    simplify = FALSE)
      names(values) <- reticulate::py_to_r(reticulate::py_get_item(fields, 0L))
      return(values)
    }
  }
  if (any(c("python.builtin.tuple", "python.builtin.list") %in% cls)) {
    return(reticulate::iterate(x, from_py, simplify = FALSE))
  }
  if ("python.builtin.dict" %in% cls) {
    kv <- py_rb()$dict_items(x)
    keys <- reticulate::py_to_r(reticulate::py_get_item(kv, 0L))
    values <- reticulate::iterate(reticulate::py_get_item(kv, 1L), from_py, simplify = FALSE)
    names(values) <- keys
    return(values)
  }
  if ("python.builtin.int" %in% cls && first != "python.builtin.int" &&
      first != "python.builtin.bool") {
    return(new_sym_int(x))
  }
  if ("torch.nn.modules.module.Module" %in% cls) return(wrap_py_module(x))
  if (first == "python.builtin.NoneType") return(NULL)
  reticulate::py_to_r(x)
}

# A traced integer (a size read while tracing). An environment rather than a list, so that
# `c(x$size(1), -1)` keeps it whole whichever side it is on.
new_sym_int <- function(py) {
  e <- new.env(parent = emptyenv())
  assign(".py", py, envir = e)
  class(e) <- "torch_sym_int"
  e
}

# R -> Python for values that are inputs or outputs of traced code.
to_py <- function(x) {
  if (inherits(x, "torch_tensor")) return(.subset2(x, ".py"))
  if (is.null(x)) return(reticulate::py_none())
  if (is_py(x)) return(x)
  if (inherits(x, "torch_sym_int")) return(.subset2(x, ".py"))
  if (inherits(x, "nn_module")) return(module_py(x))
  if (is.list(x)) {
    items <- lapply(x, to_py)
    if (!is.null(names(x)) && all(nzchar(names(x)))) {
      return(reticulate::py_dict(names(x), unname(items), convert = FALSE))
    }
    return(reticulate::tuple(unname(items), convert = FALSE))
  }
  reticulate::r_to_py(x, convert = FALSE)
}

# Like to_py() for what an R function returns to the tracer: tensors and lists only.
output_to_py <- function(x, what = "the traced function") to_py(check_output(x, what))

# `x` if it is a tensor or a (nested) list of tensors, else an error naming `what`.
check_output <- function(x, what = "the traced function") {
  bad <- function(v) {
    tracebridge_abort(
      sprintf(
        "%s returned %s; outputs must be tensors or (nested) lists of tensors.",
        what, describe_value(v)
      ),
      "tracebridge_output_error"
    )
  }
  check <- function(v) {
    if (inherits(v, "torch_tensor")) return(invisible())
    if (is.list(v) && !inherits(v, "nn_module")) return(invisible(lapply(v, check)))
    bad(v)
  }
  check(x)
  x
}

describe_value <- function(v) {
  if (is.null(v)) return("NULL")
  sprintf("an object of class <%s>", paste(class(v), collapse = "/"))
}

# R -> Python for arguments of torch ops: whole doubles become ints.
arg_py <- function(x) {
  if (inherits(x, "torch_tensor")) return(.subset2(x, ".py"))
  if (inherits(x, "torch_sym_int")) return(.subset2(x, ".py"))
  if (inherits(x, "torch_dtype")) return(.subset2(x, ".py"))
  if (is.null(x)) return(reticulate::py_none())
  if (is_py(x)) return(x)
  if (inherits(x, "nn_module")) return(module_py(x))
  if (is.list(x)) {
    items <- lapply(x, arg_py)
    if (!is.null(names(x)) && all(nzchar(names(x)))) {
      return(reticulate::py_dict(names(x), unname(items), convert = FALSE))
    }
    return(reticulate::r_to_py(unname(items), convert = FALSE))
  }
  if (is.double(x) && is.null(dim(x)) && all(is.finite(x)) && all(x == round(x))) {
    x <- as.integer(x)
  }
  if (is.atomic(x) && is.null(dim(x)) && length(x) > 1) {
    return(reticulate::r_to_py(as.list(x), convert = FALSE))
  }
  reticulate::r_to_py(x, convert = FALSE)
}

# Call Python torch. While tracing, first tell the tracer which line of R code is
# running, so graph nodes, warnings and guard messages point at the user's R source.
tb_py_call <- function(fn, ...) {
  if (isTRUE(.tb$tracing)) note_r_location()
  reticulate::py_call(fn, ...)
}

# The innermost frame that is not tracebridge's or another package's is the user's; the
# call it made carries its source line when R keeps sources (interactive sessions,
# testthat, `options(keep.source = TRUE)`).
note_r_location <- function() {
  calls <- sys.calls()
  ns <- topenv(environment(note_r_location))
  for (i in rev(seq_len(length(calls) - 1L))) {
    env <- environment(sys.function(i))
    if (is.null(env)) next
    top <- topenv(env)
    if (identical(top, ns) || isNamespace(top)) next
    src <- attr(calls[[i + 1L]], "srcref")
    # A body without braces has no srcref of its own (R gives its calls the function's):
    # its line is the function's last (`function(x) x[-1, ]`, or the second line of one
    # deparsed under Rscript), not the line of `function (x)`.
    b <- body(sys.function(i))
    fsrc <- attr(sys.function(i), "srcref")
    if (!is.null(fsrc) && !(is.call(b) && identical(b[[1L]], quote(`{`))) &&
        (is.null(src) || identical(as.integer(src)[c(1L, 3L)], as.integer(fsrc)[c(1L, 3L)]))) {
      src <- srcref(attr(fsrc, "srcfile"), rep(fsrc[[3L]], 4L))
    }
    loc <- if (is.null(src)) "" else {
      sprintf("%s:%d", utils::getSrcFilename(src, full.names = TRUE), src[[1L]])
    }
    py_rb()$set_location(loc)
    return(invisible())
  }
  py_rb()$set_location("")
}

# Call a Python function; turn a Python exception into a classed R condition.
py_call_checked <- function(fn, ...) {
  tryCatch(
    py_rb()$call(fn, ...),
    error = function(e) rethrow_python(e)
  )
}

rethrow_python <- function(e, one_based = FALSE) {
  # An R error raised inside an R callback wins: it is the user's own error.
  pending <- .tb$pending_r_error
  if (!is.null(pending)) {
    .tb$pending_r_error <- NULL
    # The Python error that the R error caused is answered by it: forget it, or the next
    # unrelated Python error would be reported with its message.
    tryCatch(py_rb()$take_last_error(), error = function(e2) NULL)
    if (inherits(pending, "interrupt")) rlang::interrupt()
    stop(pending)
  }
  if (inherits(e, "tracebridge_error")) stop(e)
  err <- tryCatch(py_rb()$take_last_error(), error = function(e2) NULL)
  if (!is.null(err) && !inherits(err, "python.builtin.NoneType")) {
    info <- reticulate::py_to_r(py_rb()$error_info(err))
  } else {
    # Called without rbridge.call(): only the type name is known; find its class.
    last <- reticulate::py_last_error()
    if (is.null(last)) stop(e)
    info <- reticulate::py_to_r(py_rb()$error_info_by_name(last$type, conditionMessage(e)))
    err <- NULL
  }
  type <- info[[1]]
  mro <- unlist(info[[3]])
  message <- one_line(info[[2]])
  if (one_based) message <- one_based_terms(one_based_message(message))
  message <- r_terms(message)  # R/conditions.R
  cond <- structure(
    class = c(error_classes(mro), "error", "condition"),
    list(message = paste0(type, ": ", message), call = NULL, python_type = type,
         python_error = err)
  )
  stop(cond)
}

# R condition classes for a Python exception, from the names of its class hierarchy:
# tracebridge's own first, then the Python kind (`IndexError` -> `index_error`).
error_classes <- function(mro) {
  own <- c(GuardError = "tracebridge_guard_error", TracingCheckError = "tracebridge_check_error",
           ArtifactError = "tracebridge_artifact_error",
           UnsupportedOpError = "tracebridge_unsupported_error")
  kinds <- c(IndexError = "index_error", ValueError = "value_error", TypeError = "type_error",
             KeyError = "key_error", NotImplementedError = "not_implemented_error",
             RuntimeError = "runtime_error")
  c(unname(own[intersect(names(own), mro)]), unname(kinds[intersect(names(kinds), mro)]),
    "tracebridge_error", "tracebridge_python_error")
}

# The first line of a message, without PyTorch's C++ stack trailer.
one_line <- function(msg) {
  msg <- sub("\n(Exception raised from|frame #)[\\s\\S]*$", "", msg, perl = TRUE)
  lines <- strsplit(trimws(msg), "\n")[[1]]
  lines <- lines[nzchar(trimws(lines))]
  if (!length(lines)) return("")
  paste(trimws(lines), collapse = " ")
}

# PyTorch names dimensions and positions 0-based; an R user reads them 1-based. Each
# pattern's numbered groups are 0-based numbers; the first pattern that matches is used.
one_based_patterns <- list(
  list("range of \\[-?\\d+, (\\d+)\\], but got (-?\\d+)", 1:2),
  list("index (-?\\d+) is out of bounds for dimension (\\d+)", 1:2),
  list("except in dimension (\\d+)", 1),
  list("at non-singleton dimension (\\d+)", 1),
  list("for tensor number (\\d+) in the list", 1),
  list("at entry (\\d+) and \\[[^]]*\\] at entry (\\d+)", 1:2),
  list("^start \\((-?\\d+)\\) \\+ length", 1),
  list("index (-?\\d+) out of range for tensor of size \\[[^]]*\\] at dimension (\\d+)", 1:2),
  list("tried to access index (-?\\d+) on a tensor", 1),
  list("INDICES element is out of DATA bounds, id=(-?\\d+)", 1)
)

one_based_message <- function(msg) {
  for (p in one_based_patterns) {
    m <- regexec(p[[1]], msg, perl = TRUE)[[1]]
    if (m[[1]] < 0) next
    starts <- m[-1][p[[2]]]
    lens <- attr(m, "match.length")[-1][p[[2]]]
    for (k in rev(order(starts))) {
      old <- substr(msg, starts[[k]], starts[[k]] + lens[[k]] - 1L)
      n <- suppressWarnings(as.numeric(old)) # a 0 of R's (rbridge.not_a_position()) is huge
      new <- if (!is.na(n) && n >= 0 && n < .Machine$integer.max) format(n + 1, scientific = FALSE) else old
      msg <- paste0(substr(msg, 1L, starts[[k]] - 1L), new,
                    substr(msg, starts[[k]] + lens[[k]], nchar(msg)))
    }
  }
  msg
}

tracebridge_abort <- function(message, class = NULL) {
  cond <- structure(
    class = c(class, "tracebridge_error", "error", "condition"),
    list(message = message, call = NULL)
  )
  stop(cond)
}

# An error of an R callback that Python called: kept for the caller, which re-raises it as
# it is (see rethrow_python()), and signalled.
callback_abort <- function(message, class) {
  e <- structure(class = c(class, "tracebridge_error", "error", "condition"),
                 list(message = message, call = NULL))
  .tb$pending_r_error <- e
  stop(e)
}

# Wrap an R function so Python can call it (R/callbacks.R): it returns tensors or lists
# of them, and the R error (if any) is kept so that the caller can re-raise it as it was.
# A functools.partial() around the callable: the tracer sets its name and signature (a
# builtin takes neither), and it adds no Python frame (the frames that are not
# tracebridge's or torch's are taken for the user's source line).
r_callback <- function(fn, what) {
  partial <- reticulate::import("functools", convert = FALSE)$partial
  reticulate::py_call(partial, r_function_py(checking_output(fn, what), what))
}

# `fn` whose result check_output() checks (made apart: see keeping_conditions()).
checking_output <- function(fn, what) {
  force(fn)
  force(what)
  function(...) check_output(fn(...), what)
}
