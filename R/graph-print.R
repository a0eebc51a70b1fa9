# --- the graph text (python/tracebridge/ir/printer.py) -------------------------------------

# Text from a file, made safe to print (python/tracebridge/ir/printable.py, the same
# characters escaped the same way): C0 controls, DEL and C1 controls become \xNN (\t, \n,
# \r as such), bidirectional marks (U+061C, U+200E/F, U+202A-202E, U+2066-2069) \uNNNN.
# Every printer of file text calls it: a producer version or a loc could otherwise drive
# the terminal (ESC, U+009B) or make text read reversed (U+202E).
printable_unsafe <- paste0("(*UTF8)[\\x{00}-\\x{1f}\\x{7f}-\\x{9f}\\x{061c}\\x{200e}\\x{200f}",
                           "\\x{202a}-\\x{202e}\\x{2066}-\\x{2069}]")

printable <- function(text) {
  text <- enc2utf8(as.character(text))
  bad <- !is.na(text) & grepl(printable_unsafe, text, perl = TRUE)
  text[bad] <- vapply(text[bad], function(t) {
    codes <- utf8ToInt(t)
    chars <- intToUtf8(codes, multiple = TRUE)
    hit <- grepl(printable_unsafe, chars, perl = TRUE)
    chars[hit] <- ifelse(codes[hit] == 9L, "\\t", ifelse(codes[hit] == 10L, "\\n",
                  ifelse(codes[hit] == 13L, "\\r", ifelse(codes[hit] < 256L,
                  sprintf("\\x%02x", codes[hit]), sprintf("\\u%04x", codes[hit])))))
    paste(chars, collapse = "")
  }, character(1), USE.NAMES = FALSE)
  text
}

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
  short <- if (dtype %in% names(dtype_column("short"))) {
    dtype_column("short")[[dtype]]
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
    generator = paste0("generator(", py_str_repr(body), ")"),
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
  if (!grepl(":", loc, fixed = TRUE)) return(printable(paste0(":", loc)))
  path <- sub(":[^:]*$", "", loc)
  line <- sub("^.*:", "", loc)
  printable(paste0(sub("^.*/", "", path), ":", line))
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
  paste(printable(c(
    sprintf("graph %s(%s) {", name, paste(body$inputs, collapse = ", ")),
    body$nodes,
    paste0("  return ", render_outputs(p, graph)),
    "}"
  )), collapse = "\n")
}

