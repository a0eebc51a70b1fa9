# jit_inspect(): read an artifact with base R and jsonlite only. No Python starts, nothing
# in the file runs: the archive is listed, program.json is parsed, and only the header of
# tensors.safetensors is read (the weights themselves are never loaded).
#
# Note: the graph text. `render_graph()` re-creates python/tracebridge/ir/printer.py line for
# line (names %x, %conv.weight, %0..., types f32[s0, 3], Python's repr() of literals), so
# that `jit_inspect(path)$graphs[["forward"]]` is the same string as Python's `.graph`. The
# literals are rendered from their JSON encoding (ir.encode); `py_float_repr()` re-creates
# Python's shortest round-trip float repr. tests/testthat/test-inspect.R compares the two
# texts on artifacts made in the test and on the golden vectors.

inspect_format_version <- 2L
inspect_opset_version <- 2L

# The one dtype table (inst/shared_ir/dtypes.json, generated from
# python/tracebridge/ir/dtypes.py): one column as a named vector, dtype name -> value.
dtype_column <- function(field) {
  table <- tb_tables()[["dtypes"]]
  values <- lapply(table, `[[`, field)
  unlist(values[!vapply(values, is.null, TRUE)])
}

# safetensors dtype code -> program.json dtype name.
st_code_names <- function() {
  codes <- dtype_column("safetensors")
  stats::setNames(names(codes), codes)
}

#' Look inside a saved artifact without starting Python
#'
#' Reads a file written by [jit_save()] (or Python's `tracebridge.save()`) with base R and
#' 'jsonlite' only: the ZIP archive is listed, `program.json` is parsed and the header of
#' `tensors.safetensors` is read, and a report is printed. Python is never started and nothing in the file is
#' executed, so it is safe on a file from anywhere and works where Python is not installed.
#'
#' The printed report shows the format version, the producer (language, tracebridge and
#' torch versions), the kind (function or module), the methods and, for a module traced
#' with `respect_mode`, how `forward` dispatches; the state (parameters, buffers and
#' constants with dtypes and shapes); the guards (the assumptions the trace made, checked
#' on every call); and the text of each method's graph, the same text as `$graph` of the
#' loaded object and Python's `.graph`.
#'
#' The state is described twice in a file: in `program.json` and in the safetensors header.
#' `jit_inspect()` checks that both agree (names, dtypes, shapes, byte sizes and offsets).
#' It checks the CRC-32 of `program.json`, the JSON grammar (the same as Python's), the
#' schema and the names of methods, state and dispatch entries: the document rules, and
#' refuses a `prim.setting` name it does not know (it would show it as a guard). It does
#' not check the sha256 checksum of the tensor data, nor the execution rules (the op set,
#' argument kinds, sizes, limits), which live once, in Python's checker; [jit_load()] runs
#' them (through Python) and checks the data. Text from the file is printed with control
#' characters and bidirectional marks escaped.
#'
#' @param path Path to an artifact (any file name).
#' @param quiet If `FALSE` (the default), print the report.
#' @return Invisibly, a list of class `tracebridge_inspection` with parts `file`, `bytes`,
#'   `format_version`, `opset_version`, `producer` (a list: `name`, `version`, `language`,
#'   `torch`), `kind`, `class` (the module's class name, or `NA`), `training`, `methods`
#'   (character), `dispatch` (a list: method -> `c(train =, eval =)`), `graphs` (named
#'   character: the text of each method's graph), `inputs` (named list of data frames:
#'   `name`, `type`), `state` (data frame: `name`, `kind`, `dtype`, `shape` (a list
#'   column), `type`, `numel`, `bytes`, `requires_grad`), `guards` (data frame: `method`,
#'   `value`, `expect`, `what`, `kind`, `loc`, `text`), `ops` (named list: op counts per
#'   method) and `compiled` (`NULL`, or the entry of the file's optional compiled package, a
#'   list: `format`, `member`, `method`, `device`, `torch`, `platform`, `size`; R never
#'   opens the package). `print()` shows it; `print(x, graphs = FALSE)` leaves out the
#'   graphs.
#' @section Errors:
#' A missing file, a file that is not a ZIP archive, an archive without `program.json`, a
#' `program.json` that is not JSON or not a tracebridge program, a newer format or op-set
#' version than this package reads, and a state that does not match its tensors all signal
#' an error of class `tracebridge_artifact_error` (also `tracebridge_error`).
#' @seealso [jit_save()], [jit_load()]; the `tracebridge inspect` command does the same from
#'   a shell.
#' @examples
#' if (torch_is_installed()) {
#'   f <- jit_trace(function(x) torch_relu(x) * 2, torch_ones(3))
#'   path <- tempfile(fileext = ".tb")
#'   jit_save(f, path)
#'   jit_inspect(path)
#'   info <- jit_inspect(path, quiet = TRUE)
#'   info$state
#'   cat(info$graphs[["forward"]])
#' }
#' \dontrun{
#' # On a machine without Python: any artifact, from R or from Python.
#' jit_inspect("model.tb")
#' }
#' @export
jit_inspect <- function(path, quiet = FALSE) {
  if (!is.character(path) || length(path) != 1L || is.na(path)) {
    inspect_abort("jit_inspect(): `path` must be one file path.")
  }
  file <- path.expand(path)
  doc <- read_program(file)
  state <- read_state(file, doc)
  check_settings(doc, file)
  methods <- names(doc$methods)
  graphs <- vapply(methods, function(m) {
    text <- tryCatch(
      render_graph(doc$methods[[m]], m),
      error = function(e) {
        inspect_abort(sprintf("%s: method '%s': the graph is malformed (%s).", file, m,
                              conditionMessage(e)))
      }
    )
    text
  }, character(1))
  guards <- do.call(rbind, c(
    list(empty_guards()),
    lapply(methods, function(m) guard_rows(doc$methods[[m]], m))
  ))
  rownames(guards) <- NULL
  producer <- doc$producer
  out <- list(
    file = normalizePath(file),
    bytes = file.size(file),
    format_version = as.integer(doc$format_version),
    opset_version = as.integer(doc$opset_version),
    producer = list(
      name = producer$name %||% NA_character_,
      version = producer$version %||% NA_character_,
      language = producer$language %||% NA_character_,
      torch = producer$torch %||% NA_character_
    ),
    kind = doc$kind,
    class = root_class(doc$module_classes),
    training = isTRUE(doc$training),
    methods = methods,
    dispatch = lapply(doc$dispatch, function(d) c(train = d$train, eval = d$eval)),
    graphs = graphs,
    inputs = lapply(doc$methods, function(g) {
      data.frame(
        name = vapply(g$inputs, function(v) v$name %||% "", character(1)),
        type = vapply(g$inputs, type_str, character(1)),
        stringsAsFactors = FALSE
      )
    }),
    state = state,
    guards = guards,
    ops = lapply(doc$methods, function(g) {
      op_counts(vapply(g$nodes, function(n) n$op, character(1)))
    }),
    compiled = compiled_entry(doc$compiled)
  )
  out <- structure(out, class = "tracebridge_inspection")
  if (!isTRUE(quiet)) print(out)
  invisible(out)
}

#' @rdname jit_inspect
#' @param x A `tracebridge_inspection`.
#' @param graphs Print the graph of each method.
#' @param ... Ignored.
#' @export
print.tracebridge_inspection <- function(x, graphs = TRUE, ...) {
  # Every line is escaped to print (printable(), R/graph-print.R): a producer version, a
  # class or a loc from the file may hold terminal escapes or bidirectional marks.
  line <- function(...) cat(printable(paste0(...)), "\n", sep = "")
  p <- x$producer
  torch <- if (!is.na(p$torch)) paste0(", torch ", p$torch) else ""
  kind <- if (!is.na(x$class)) sprintf("module (%s)", x$class) else x$kind
  if (x$kind == "module" && x$training) kind <- paste0(kind, ", saved in training mode")
  line("<tracebridge artifact> ", x$file, " (", format_int(x$bytes), " bytes)")
  line("format:     tracebridge format ", x$format_version, ", op set ", x$opset_version)
  line("producer:   ", p$name, " ", p$version, " (", p$language, torch, ")")
  line("kind:       ", kind)
  line("methods:    ", paste(x$methods, collapse = ", "))
  if (!is.null(x$compiled)) {
    cc <- x$compiled
    line("compiled:   ", cc$format, " package of ", cc$method, " for ", cc$device, " (torch ",
         cc$torch, ", ", cc$platform, ", ", format_int(cc$size), " bytes); native code ",
         "that only Python's load_compiled(trust_compiled_code = TRUE) opens: R never does")
  }
  for (m in names(x$dispatch)) {
    route <- x$dispatch[[m]]
    line("dispatch:   ", m, " -> ", route[["train"]], " (train) / ", route[["eval"]], " (eval)")
  }
  st <- x$state
  cat("\n")
  line("state: ", plural(nrow(st), "tensor"), ", ", format_int(sum(st$bytes)), " bytes")
  if (nrow(st)) {
    lines <- sprintf("  %-10s %s  %s", st$kind, format(printable(st$name)), st$type)
    for (l in sub("\\s+$", "", lines)) line(l)
  }
  cat("\n")
  line("guards: ", if (nrow(x$guards)) nrow(x$guards) else "none")
  for (i in seq_len(nrow(x$guards))) {
    g <- x$guards[i, ]
    line("  ", g$method, ": ", g$text, "  (", g$kind, " guard, at ", g$loc, ")")
  }
  for (m in x$methods) {
    n_nodes <- sum(x$ops[[m]])
    n_guards <- sum(x$guards$method == m)
    cat("\n")
    line("method ", m, ": ", plural(n_nodes, "node"), ", ", plural(n_guards, "guard"))
    # cat() ends the last line too: a sep holding a newline is a terminator.
    if (graphs) cat(printable(strsplit(x$graphs[[m]], "\n", fixed = TRUE)[[1]]), sep = "\n")
  }
  invisible(x)
}

# The optional compiled member's entry (SPEC section 1): what it is and where it runs, as
# data; the package itself is never read here.
compiled_entry <- function(info) {
  if (!is.list(info)) return(NULL)
  field <- function(key) {
    v <- info[[key]]
    if (is.null(v) || length(v) != 1L) NA_character_ else as.character(v)
  }
  list(format = field("format"), member = field("member"), method = field("method"),
       device = field("device"), torch = field("torch"), platform = field("platform"),
       size = suppressWarnings(as.numeric(field("size"))))
}

empty_state <- function() {
  data.frame(name = character(0), kind = character(0), dtype = character(0),
             shape = I(list()), type = character(0), numel = numeric(0), bytes = numeric(0),
             requires_grad = logical(0), stringsAsFactors = FALSE)
}

empty_guards <- function() {
  data.frame(method = character(0), value = character(0), expect = character(0),
             what = character(0), kind = character(0), loc = character(0),
             text = character(0), stringsAsFactors = FALSE)
}

# One row per prim.guard node. `text` is the guard in words, as the `tracebridge inspect`
# command writes it; `value` is the guarded value's name in the graph text.
guard_rows <- function(graph, method) {
  printer <- new_printer()
  render_body(printer, graph)
  rows <- lapply(Filter(function(n) identical(n$op, "prim.guard"), graph$nodes), function(n) {
    what <- n$kwargs$what %||% ""
    kind <- n$kwargs$kind %||% "value"
    expect <- py_literal(printer, n$kwargs$expect)
    text <- if (identical(kind, "branch") && is.logical(n$kwargs$expect)) {
      sprintf("(%s) is %s", what, expect)
    } else if (identical(kind, "count")) {
      sprintf("%s gives %s results", what, expect)
    } else {
      sprintf("%s == %s", what, expect)
    }
    data.frame(method = method, value = py_literal(printer, n$args[[1]]), expect = expect,
               what = what, kind = kind, loc = short_loc(n$loc), text = text,
               stringsAsFactors = FALSE)
  })
  do.call(rbind, c(list(empty_guards()), rows))
}

# The root module's class name: module_classes maps "" (the root) to it.
root_class <- function(classes) {
  root <- classes[names(classes) == ""]
  if (length(root) && is.character(root[[1]])) root[[1]] else NA_character_
}

# Most frequent first, ties by name in code-point order (as the CLI sorts them).
op_counts <- function(ops) {
  keys <- unique(ops)
  counts <- vapply(keys, function(k) sum(ops == k), integer(1), USE.NAMES = FALSE)
  o <- order(-counts, keys, method = "radix")
  out <- counts[o]
  names(out) <- keys[o]
  out
}

format_int <- function(x) format(x, big.mark = ",", scientific = FALSE, trim = TRUE)

plural <- function(n, word) sprintf("%d %s%s", as.integer(n), word, if (n == 1) "" else "s")
