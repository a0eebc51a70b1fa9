# jit_inspect(): read an artifact with base R and jsonlite only. No Python starts, nothing
# in the file runs: the archive is listed, program.json is parsed, and only the header of
# tensors.safetensors is read (the weights themselves are never loaded).
#
# Note: the graph text. `render_graph()` re-creates python/tracebridge/printer.py line for
# line (names %x, %conv.weight, %0..., types f32[s0, 3], Python's repr() of literals), so
# that `jit_inspect(path)$graphs[["forward"]]` is the same string as Python's `.graph`. The
# literals are rendered from their JSON encoding (ir.encode); `py_float_repr()` re-creates
# Python's shortest round-trip float repr. tests/testthat/test-inspect.R compares the two
# texts on artifacts made in the test and on the golden vectors.

inspect_format_version <- 1L
inspect_opset_version <- 1L

inspect_dtype_short <- c(
  float32 = "f32", float64 = "f64", float16 = "f16", bfloat16 = "bf16", int64 = "i64",
  int32 = "i32", int16 = "i16", int8 = "i8", uint8 = "u8", bool = "b8", complex64 = "c64",
  complex128 = "c128"
)

# safetensors dtype code -> program.json dtype name, and bytes per element.
inspect_st_dtypes <- c(
  F32 = "float32", F64 = "float64", F16 = "float16", BF16 = "bfloat16", I64 = "int64",
  I32 = "int32", I16 = "int16", I8 = "int8", U8 = "uint8", BOOL = "bool", C64 = "complex64"
)
inspect_elt_size <- c(
  float32 = 4, float64 = 8, float16 = 2, bfloat16 = 2, int64 = 8, int32 = 4, int16 = 2,
  int8 = 1, uint8 = 1, bool = 1, complex64 = 8, complex128 = 16
)

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
#' It does not check the sha256 checksum of the tensor data nor the op set; [jit_load()]
#' does both.
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
#'   `value`, `expect`, `what`, `kind`, `loc`, `text`) and `ops` (named list: op counts per
#'   method). `print()` shows it; `print(x, graphs = FALSE)` leaves out the graphs.
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
    })
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
  p <- x$producer
  torch <- if (!is.na(p$torch)) paste0(", torch ", p$torch) else ""
  kind <- if (!is.na(x$class)) sprintf("module (%s)", x$class) else x$kind
  if (x$kind == "module" && x$training) kind <- paste0(kind, ", saved in training mode")
  cat("<tracebridge artifact> ", x$file, " (", format_int(x$bytes), " bytes)\n", sep = "")
  cat("format:     tracebridge format ", x$format_version, ", op set ", x$opset_version,
      "\n", sep = "")
  cat("producer:   ", p$name, " ", p$version, " (", p$language, torch, ")\n", sep = "")
  cat("kind:       ", kind, "\n", sep = "")
  cat("methods:    ", paste(x$methods, collapse = ", "), "\n", sep = "")
  for (m in names(x$dispatch)) {
    route <- x$dispatch[[m]]
    cat("dispatch:   ", m, " -> ", route[["train"]], " (train) / ", route[["eval"]],
        " (eval)\n", sep = "")
  }
  st <- x$state
  cat("\nstate: ", plural(nrow(st), "tensor"), ", ", format_int(sum(st$bytes)), " bytes\n",
      sep = "")
  if (nrow(st)) {
    lines <- sprintf("  %-10s %s  %s", st$kind, format(st$name), st$type)
    cat(paste0(sub("\\s+$", "", lines), "\n"), sep = "")
  }
  cat("\nguards: ", if (nrow(x$guards)) nrow(x$guards) else "none", "\n", sep = "")
  for (i in seq_len(nrow(x$guards))) {
    g <- x$guards[i, ]
    cat("  ", g$method, ": ", g$text, "  (", g$kind, " guard, at ", g$loc, ")\n", sep = "")
  }
  for (m in x$methods) {
    n_nodes <- sum(x$ops[[m]])
    n_guards <- sum(x$guards$method == m)
    cat("\nmethod ", m, ": ", plural(n_nodes, "node"), ", ", plural(n_guards, "guard"), "\n",
        sep = "")
    if (graphs) cat(x$graphs[[m]], "\n", sep = "")
  }
  invisible(x)
}

# --- reading ----------------------------------------------------------------------------

inspect_abort <- function(message) {
  stop(structure(
    class = c("tracebridge_artifact_error", "tracebridge_error", "error", "condition"),
    list(message = message, call = NULL)
  ))
}

archive_members <- function(file) {
  if (!file.exists(file) || dir.exists(file)) {
    inspect_abort(sprintf("%s: no such file.", file))
  }
  magic <- readBin(file, "raw", n = 4L)
  is_zip <- length(magic) == 4L && identical(magic[1:2], as.raw(c(0x50, 0x4b)))
  listing <- if (is_zip) {
    tryCatch(utils::unzip(file, list = TRUE), error = function(e) NULL,
             warning = function(w) NULL)
  }
  if (is.null(listing)) {
    inspect_abort(sprintf(paste(
      "%s: not a tracebridge artifact (not a ZIP archive; tracebridge files are ZIP",
      "archives holding program.json)."
    ), file))
  }
  members <- listing$Length
  names(members) <- listing$Name
  members
}

read_member <- function(file, member, n) {
  con <- unz(file, member, open = "rb")
  on.exit(close(con))
  readBin(con, "raw", n = n)
}

read_program <- function(file) {
  members <- archive_members(file)
  if (!"program.json" %in% names(members)) {
    inspect_abort(sprintf("%s: not a tracebridge artifact (no program.json).", file))
  }
  raw <- tryCatch(read_member(file, "program.json", members[["program.json"]]),
                  error = function(e) {
                    inspect_abort(sprintf("%s: corrupt or truncated archive (%s).", file,
                                          conditionMessage(e)))
                  })
  text <- rawToChar(raw)
  Encoding(text) <- "UTF-8"
  # parse_json() only parses: unlike fromJSON(), it never takes the text for a file name or
  # a URL, which matters for a file from anywhere.
  doc <- tryCatch(
    jsonlite::parse_json(tag_big_ints(text), simplifyVector = FALSE),
    error = function(e) {
      inspect_abort(sprintf("%s: program.json is not valid JSON (%s).", file,
                            conditionMessage(e)))
    }
  )
  check_program(doc, file)
  doc$.members <- members
  doc
}

check_program <- function(doc, file) {
  if (!is.list(doc) || !identical(doc$format, "tracebridge")) {
    inspect_abort(sprintf("%s: not a tracebridge artifact (format field missing).", file))
  }
  version <- doc$format_version
  if (!is.numeric(version) || length(version) != 1L || version < 1 || version %% 1 != 0) {
    inspect_abort(sprintf("%s: invalid format_version %s.", file, deparse(version)))
  }
  if (version > inspect_format_version) {
    inspect_abort(sprintf(paste(
      "%s: format version %d is newer than this tracebridge reads (up to %d); upgrade the",
      "tracebridge R package to read it."
    ), file, as.integer(version), inspect_format_version))
  }
  opset <- doc$opset_version
  if (is.numeric(opset) && length(opset) == 1L && opset > inspect_opset_version) {
    inspect_abort(sprintf(paste(
      "%s: op-set version %d is newer than this tracebridge knows (%d); upgrade the",
      "tracebridge R package to read it."
    ), file, as.integer(opset), inspect_opset_version))
  }
  for (field in c("producer", "kind", "methods", "state")) {
    if (is.null(doc[[field]])) {
      inspect_abort(sprintf("%s: program.json has no '%s' field.", file, field))
    }
  }
  if (!length(doc$methods) || is.null(names(doc$methods))) {
    inspect_abort(sprintf("%s: program.json has no methods.", file))
  }
  invisible()
}

# The state from program.json, cross-checked against the safetensors header.
read_state <- function(file, doc) {
  info <- doc$state
  header <- read_safetensors_header(file, doc$.members)
  declared <- names(info) %||% character(0)
  stored <- setdiff(names(header$tensors) %||% character(0), "__metadata__")
  missing <- setdiff(declared, stored)
  extra <- setdiff(stored, declared)
  if (length(missing)) {
    inspect_abort(sprintf("%s: state %s has no tensor in tensors.safetensors.", file,
                          paste0("'", missing, "'", collapse = ", ")))
  }
  if (length(extra)) {
    inspect_abort(sprintf("%s: tensors.safetensors holds %s, which program.json does not list.",
                          file, paste0("'", extra, "'", collapse = ", ")))
  }
  count <- doc$tensors$count
  if (!is.null(count) && count != length(declared)) {
    inspect_abort(sprintf("%s: tensors.count is %d but the state has %d tensors.", file,
                          as.integer(count), length(declared)))
  }
  rows <- lapply(declared, function(name) {
    entry <- info[[name]]
    tensor <- header$tensors[[name]]
    shape <- as.numeric(unlist(entry$shape))
    st_shape <- as.numeric(unlist(tensor$shape))
    st_dtype <- inspect_st_dtypes[tensor$dtype %||% ""]
    offsets <- as.numeric(unlist(tensor$data_offsets))
    numel <- prod(shape)
    bytes <- numel * (inspect_elt_size[entry$dtype %||% ""] %||% NA)
    mismatch <- function(what) {
      inspect_abort(sprintf("%s: state '%s': %s.", file, name, what))
    }
    if (is.na(st_dtype) || !identical(unname(st_dtype), entry$dtype)) {
      mismatch(sprintf("program.json says dtype %s, tensors.safetensors says %s",
                       entry$dtype %||% "(none)", tensor$dtype %||% "(none)"))
    }
    if (!identical(shape, st_shape)) {
      mismatch(sprintf("program.json says shape [%s], tensors.safetensors says [%s]",
                       paste(shape, collapse = ", "), paste(st_shape, collapse = ", ")))
    }
    if (length(offsets) != 2L || offsets[1] < 0 || offsets[2] < offsets[1] ||
        offsets[2] > header$data_bytes) {
      mismatch("its data offsets in tensors.safetensors are out of range")
    }
    if (offsets[2] - offsets[1] != bytes) {
      mismatch(sprintf("%s bytes in tensors.safetensors do not fit shape [%s] of %s",
                       format_int(offsets[2] - offsets[1]), paste(shape, collapse = ", "),
                       entry$dtype))
    }
    data.frame(
      name = name, kind = entry$kind %||% NA_character_, dtype = entry$dtype,
      shape = I(list(shape)), type = type_str(list(kind = "Tensor", dtype = entry$dtype,
                                                   shape = entry$shape)),
      numel = numel, bytes = unname(bytes),
      requires_grad = isTRUE(entry$requires_grad), stringsAsFactors = FALSE
    )
  })
  state <- do.call(rbind, c(list(empty_state()), rows))
  rownames(state) <- NULL
  state
}

read_safetensors_header <- function(file, members) {
  if (!"tensors.safetensors" %in% names(members)) {
    return(list(tensors = list(), data_bytes = 0))
  }
  size <- members[["tensors.safetensors"]]
  if (size == 0) return(list(tensors = list(), data_bytes = 0))
  con <- unz(file, "tensors.safetensors", open = "rb")
  on.exit(close(con))
  words <- readBin(con, "integer", n = 2L, size = 4L, endian = "little")
  if (length(words) < 2L) inspect_abort(sprintf("%s: tensors.safetensors is truncated.", file))
  low <- if (words[1] < 0) words[1] + 2^32 else words[1]
  head_len <- low + words[2] * 2^32
  if (words[2] != 0L || head_len > size - 8) {
    inspect_abort(sprintf("%s: tensors.safetensors header runs past the end of the data.",
                          file))
  }
  head <- rawToChar(readBin(con, "raw", n = head_len))
  tensors <- tryCatch(
    jsonlite::parse_json(head, simplifyVector = FALSE),
    error = function(e) {
      inspect_abort(sprintf("%s: tensors.safetensors has a corrupt header.", file))
    }
  )
  list(tensors = tensors, data_bytes = size - 8 - head_len)
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

# Whole numbers too large for a 32-bit integer would come back from the JSON parser as
# doubles and lose digits past 2^53 (a slice end of sys.maxsize, say); they are kept as
# text, tagged, and printed as written.
big_int_tag <- "\037tbint:"

tag_big_ints <- function(text) {
  if (!grepl("[0-9]{10}", text)) return(text)
  pattern <- "\"(?:[^\"\\\\]|\\\\.)*\"|-?[0-9]+(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
  m <- gregexpr(pattern, text, perl = TRUE)
  tokens <- regmatches(text, m)[[1]]
  big <- grepl("^-?[0-9]{10,}$", tokens) & abs(suppressWarnings(as.numeric(tokens))) >= 2^31
  if (!any(big)) return(text)
  tokens[big] <- paste0("\"\\u001ftbint:", tokens[big], "\"")
  regmatches(text, m) <- list(tokens)
  text
}

is_big_int <- function(x) is.character(x) && length(x) == 1L && startsWith(x, big_int_tag)

# --- the graph text (python/tracebridge/printer.py) -------------------------------------

new_printer <- function() {
  p <- new.env(parent = emptyenv())
  p$names <- list()
  p$counter <- 0L
  p
}

define <- function(p, value, named = FALSE) {
  if (named && is.character(value$name) && nzchar(value$name)) {
    name <- paste0("%", value$name)
  } else {
    name <- paste0("%", p$counter)
    p$counter <- p$counter + 1L
  }
  p$names[[as.character(value$id)]] <- name
  name
}

type_str <- function(value) {
  if (!identical(value$kind, "Tensor")) return(as.character(value$kind))
  dtype <- value$dtype %||% ""
  short <- if (dtype %in% names(inspect_dtype_short)) {
    inspect_dtype_short[[dtype]]
  } else if (nzchar(dtype)) dtype else "?"
  dims <- vapply(value$shape, py_str, character(1))
  paste0(short, "[", paste(dims, collapse = ", "), "]")
}

# Python's str() of a JSON scalar (shape entries: ints or symbols such as "s0").
py_str <- function(x) {
  if (is_big_int(x)) return(substring(x, nchar(big_int_tag) + 1L))
  if (is.character(x)) return(x)
  py_repr(x)
}

# Python's repr() of a value as JSON holds it (spec constants and dict keys).
py_repr <- function(x) {
  if (is.null(x)) return("None")
  if (is_big_int(x)) return(substring(x, nchar(big_int_tag) + 1L))
  if (is.logical(x)) return(if (isTRUE(x)) "True" else "False")
  if (is.integer(x)) return(as.character(x))
  if (is.double(x)) return(py_float_repr(x))
  if (is.character(x)) return(py_str_repr(x))
  if (is.list(x) && !is.null(names(x))) {
    items <- vapply(names(x), function(k) paste0(py_str_repr(k), ": ", py_repr(x[[k]])),
                    character(1))
    return(paste0("{", paste(items, collapse = ", "), "}"))
  }
  if (is.list(x)) return(paste0("[", paste(vapply(x, py_repr, character(1)), collapse = ", "), "]"))
  stop("unexpected JSON value")
}

# A literal argument from its JSON encoding (ir.encode): plain JSON for None, bools,
# numbers, strings and lists; a one-key object for everything else.
py_literal <- function(p, x) {
  if (!is.list(x) || is.null(names(x))) {
    if (is.list(x)) {
      inner <- vapply(x, function(a) py_literal(p, a), character(1))
      return(paste0("[", paste(inner, collapse = ", "), "]"))
    }
    return(py_repr(x))
  }
  if (length(x) != 1L) stop("malformed literal")
  tag <- names(x)
  body <- x[[1]]
  items <- function() vapply(body, function(a) py_literal(p, a), character(1))
  switch(tag,
    ref = {
      id <- as.character(body)
      p$names[[id]] %||% paste0("%?", id)
    },
    float = as.character(body),
    tuple = {
      inner <- items()
      if (length(inner) == 1L) paste0("(", inner, ",)") else
        paste0("(", paste(inner, collapse = ", "), ")")
    },
    dict = {
      pairs <- vapply(body, function(kv) {
        paste0(py_literal(p, kv[[1]]), ": ", py_literal(p, kv[[2]]))
      }, character(1))
      paste0("{", paste(pairs, collapse = ", "), "}")
    },
    slice = {
      parts <- vapply(body, function(a) if (is.null(a)) "" else py_literal(p, a), character(1))
      paste(if (is.null(body[[3]])) parts[1:2] else parts, collapse = ":")
    },
    ellipsis = "...",
    dtype = ,
    memory_format = ,
    layout = as.character(body),
    device = paste0("device(", py_str_repr(body), ")"),
    complex = py_complex_repr(as.numeric(body[[1]]), as.numeric(body[[2]])),
    stop(sprintf("unknown literal tag '%s'", tag))
  )
}

# Python's repr() of a float: the shortest decimal that reads back to the same double,
# positional for exponents -4 to 15, scientific (1e-05, 1.5e+16) otherwise.
py_float_repr <- function(x, point_zero = TRUE) {
  if (is.nan(x)) return("nan")
  if (is.infinite(x)) return(if (x > 0) "inf" else "-inf")
  if (x == 0) return(paste0(if (1 / x < 0) "-" else "", if (point_zero) "0.0" else "0"))
  a <- abs(x)
  for (d in 1:17) {
    s <- sprintf("%.*e", d - 1L, a)
    if (as.numeric(s) == a) break
  }
  exponent <- as.integer(sub(".*e", "", s))
  digits <- sub("0+$", "", gsub(".", "", sub("e.*", "", s), fixed = TRUE))
  n <- nchar(digits)
  out <- if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      paste0("0.", strrep("0", -exponent - 1L), digits)
    } else if (n <= exponent + 1L) {
      paste0(digits, strrep("0", exponent + 1L - n), if (point_zero) ".0" else "")
    } else {
      paste0(substr(digits, 1L, exponent + 1L), ".", substr(digits, exponent + 2L, n))
    }
  } else {
    mantissa <- if (n == 1L) digits else paste0(substr(digits, 1L, 1L), ".", substring(digits, 2L))
    sprintf("%se%s%02d", mantissa, if (exponent < 0) "-" else "+", abs(exponent))
  }
  paste0(if (x < 0) "-" else "", out)
}

py_complex_repr <- function(re, im) {
  imag <- paste0(py_float_repr(im, point_zero = FALSE), "j")
  if (re == 0 && 1 / re > 0) return(imag)
  sign <- if (is.nan(im) || im > 0 || (im == 0 && 1 / im > 0)) "+" else ""
  paste0("(", py_float_repr(re, point_zero = FALSE), sign, imag, ")")
}

# Python's repr() of a str: single quotes unless the text has one and no double quote.
py_str_repr <- function(s) {
  quote <- if (grepl("'", s, fixed = TRUE) && !grepl("\"", s, fixed = TRUE)) "\"" else "'"
  chars <- strsplit(enc2utf8(s), "")[[1]]
  codes <- vapply(chars, utf8ToInt, integer(1))
  out <- chars
  out[chars == "\\"] <- "\\\\"
  out[chars == quote] <- paste0("\\", quote)
  out[chars == "\n"] <- "\\n"
  out[chars == "\r"] <- "\\r"
  out[chars == "\t"] <- "\\t"
  control <- (codes < 32L | codes == 127L) & !chars %in% c("\n", "\r", "\t")
  out[control] <- sprintf("\\x%02x", codes[control])
  paste0(quote, paste(out, collapse = ""), quote)
}

short_loc <- function(loc) {
  if (is.null(loc) || !nzchar(loc)) return("?")
  if (!grepl(":", loc, fixed = TRUE)) return(paste0(":", loc))
  path <- sub(":[^:]*$", "", loc)
  line <- sub("^.*:", "", loc)
  paste0(sub("^.*/", "", path), ":", line)
}

render_targets <- function(p, node) {
  spec <- node$out_spec
  if (is.null(spec)) return("")
  outputs <- node$outputs
  index <- 0L
  build <- function(spec) {
    kind <- spec$t
    if (identical(kind, "leaf")) {
      index <<- index + 1L
      value <- outputs[[index]]
      name <- define(p, value, named = identical(node$op, "prim.state"))
      return(paste0(name, ": ", type_str(value)))
    }
    if (kind %in% c("none", "const")) return("_")
    inner <- vapply(spec$c, build, character(1))
    paste0("(", paste(inner, collapse = ", "), if (length(inner) == 1L) "," else "", ")")
  }
  paste0(build(spec), " = ")
}

render_node <- function(p, node) {
  if (identical(node$op, "prim.guard")) {
    return(sprintf("  guard %s == %s  # %s, at %s", py_literal(p, node$args[[1]]),
                   py_literal(p, node$kwargs$expect), py_str(node$kwargs$what %||% ""),
                   short_loc(node$loc)))
  }
  loc <- if (is.null(node$loc) || !nzchar(node$loc)) "" else paste0("  # ", short_loc(node$loc))
  args <- vapply(node$args, function(a) py_literal(p, a), character(1))
  kwargs <- vapply(names(node$kwargs) %||% character(0), function(k) {
    paste0(k, "=", py_literal(p, node$kwargs[[k]]))
  }, character(1))
  targets <- render_targets(p, node)
  paste0("  ", targets, node$op, "(", paste(c(args, kwargs), collapse = ", "), ")", loc)
}

render_outputs <- function(p, graph) {
  outputs <- graph$outputs
  index <- 0L
  build <- function(spec) {
    kind <- spec$t
    if (identical(kind, "leaf")) {
      index <<- index + 1L
      return(py_literal(p, outputs[[index]]))
    }
    if (identical(kind, "none")) return("None")
    if (identical(kind, "const")) return(py_repr(spec$v))
    inner <- vapply(spec$c, build, character(1))
    if (identical(kind, "dict")) {
      keys <- vapply(spec$keys, py_repr, character(1))
      return(paste0("{", paste(paste0(keys, ": ", inner), collapse = ", "), "}"))
    }
    if (identical(kind, "list")) return(paste0("[", paste(inner, collapse = ", "), "]"))
    prefix <- if (identical(kind, "namedtuple")) spec$name %||% "" else ""
    paste0(prefix, "(", paste(inner, collapse = ", "), if (length(inner) == 1L) "," else "",
           ")")
  }
  build(graph$out_spec)
}

render_body <- function(p, graph) {
  inputs <- vapply(graph$inputs, function(v) {
    paste0(define(p, v, named = TRUE), ": ", type_str(v))
  }, character(1))
  nodes <- vapply(graph$nodes, function(n) render_node(p, n), character(1))
  list(inputs = inputs, nodes = nodes)
}

render_graph <- function(graph, name) {
  p <- new_printer()
  body <- render_body(p, graph)
  paste(c(
    sprintf("graph %s(%s) {", name, paste(body$inputs, collapse = ", ")),
    body$nodes,
    paste0("  return ", render_outputs(p, graph)),
    "}"
  ), collapse = "\n")
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
