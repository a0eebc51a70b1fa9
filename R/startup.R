# What `library(tracebridge)` says when there is no usable Python, and the error the first
# torch call gives then: what is missing, the variable to set (TRACEBRIDGE_PYTHON) and the
# command that makes the environment (`make setup`), instead of reticulate's dump of its
# configuration.

.onAttach <- function(libname, pkgname) {
  # Without a configured Python, reticulate may still find one by itself: say nothing
  # until an import fails (python_load_hooks()).
  # Python already running (only possible when reticulate is loaded) needs no check; the
  # test keeps library() from loading reticulate, which costs a second (R/python.R).
  started <- "reticulate" %in% loadedNamespaces() && reticulate::py_available(initialize = FALSE)
  if (is.null(tracebridge_python()) || started) {
    return(invisible())
  }
  problem <- python_problem()
  if (!is.null(problem)) packageStartupMessage(python_setup_message(problem))
}

# For reticulate::import(delay_load = ): a failed import of a module is this error, and
# stays it on later calls (reticulate calls the hook only once).
python_load_hooks <- function(module) {
  list(on_error = function(e) {
    problem <- python_problem() %||% sprintf(
      "Python module %s could not be loaded: %s", module,
      strsplit(conditionMessage(e), "\n", fixed = TRUE)[[1]][[1]])
    .tb$python_error <- python_setup_message(problem)
    .tb$python_ready <- NULL  # later calls stop in python_ready() with the same message
    tracebridge_abort(.tb$python_error, "tracebridge_python_missing_error")
  })
}

# Load Python torch now, so that a first call that converts R data before touching a
# module (torch_tensor()) fails with the message above, not with reticulate's.
python_ready <- function() {
  if (!is.null(.tb$python_error)) {
    tracebridge_abort(.tb$python_error, "tracebridge_python_missing_error")
  }
  if (!is.null(tracebridge_python()) && !reticulate::py_available(initialize = FALSE)) {
    problem <- python_problem()
    if (!is.null(problem)) {
      .tb$python_error <- python_setup_message(problem)
      tracebridge_abort(.tb$python_error, "tracebridge_python_missing_error")
    }
  }
  .tb$python_ready <- TRUE
  invisible(TRUE)
}

python_setup_message <- function(problem) {
  paste0(
    "tracebridge needs a Python with torch and the tracebridge Python package. ", problem,
    ".\nSet TRACEBRIDGE_PYTHON to that Python's path before tracebridge loads (in ",
    "~/.Renviron, or Sys.setenv(TRACEBRIDGE_PYTHON = \"/path/to/.venv/bin/python\") in a ",
    "new R session), or make the environment with `make setup` in the tracebridge ",
    "repository (it creates .venv/, which tracebridge then finds by itself)."
  )
}

# Why the Python tracebridge would use is not usable, or NULL when it is. It starts that
# Python once (without importing torch) rather than initializing Python in this session.
# Without a configured one, reticulate's own search was used, and it found none with torch.
python_problem <- function() {
  python <- tracebridge_python()
  if (is.null(python)) {
    return(paste("No Python with torch was found: TRACEBRIDGE_PYTHON and RETICULATE_PYTHON",
                 "are not set, there is no .venv/bin/python above the working directory, and",
                 "reticulate found none"))
  }
  from <- python_source()
  if (!file.exists(python)) {
    return(sprintf("%s is %s, which does not exist", from, python))
  }
  probe <- paste("import importlib.util as u, sys; sys.exit(4 if u.find_spec('torch') is None",
                 "else 5 if u.find_spec('tracebridge') is None else 0)")
  status <- suppressWarnings(system2(python, c("-c", shQuote(probe)), stdout = FALSE,
                                     stderr = FALSE))
  switch(as.character(status),
    "0" = NULL,
    "4" = sprintf("The Python at %s (%s) has no module torch", python, from),
    "5" = sprintf("The Python at %s (%s) has no module tracebridge", python, from),
    sprintf("The Python at %s (%s) did not run", python, from)
  )
}

python_source <- function() {
  for (var in c("TRACEBRIDGE_PYTHON", "RETICULATE_PYTHON")) {
    if (nzchar(Sys.getenv(var, ""))) return(var)
  }
  "found in a .venv/ folder"
}
