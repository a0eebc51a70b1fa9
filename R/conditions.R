# Error conditions, one constructor per class, as mlverse torch's R/conditions.R has them.
# Each signals an error of class c(<class>, "tracebridge_error", "error", "condition"),
# so that `tryCatch(..., value_error = )` and `expect_error(class = )` work as in mlverse.
# Errors that come from Python get their classes in rethrow_python() (R/python.R).

value_error <- function(message) tracebridge_abort(message, "value_error")

type_error <- function(message) tracebridge_abort(message, "type_error")

index_error <- function(message) tracebridge_abort(message, "index_error")

runtime_error <- function(message) tracebridge_abort(message, "runtime_error")

not_implemented_error <- function(message) tracebridge_abort(message, "not_implemented_error")

# The end of a pass over a data loader (mlverse: `iter$.next()` after the last batch).
stop_iteration_error <- function(message) tracebridge_abort(message, "stop_iteration_error")

# ---- messages in R terms -------------------------------------------------------------

# Messages that the Python core writes (guards, trace checks, warnings) name sizes and
# methods as Python code does: `x.shape[0] == 2`, `.eval()`, `check_trace=False`. An R user
# reads them here in R terms: `x$shape[1] == 2`, `$eval()`, `check_trace = FALSE`. Only
# patterns that are Python code are rewritten; a message about Python code (a location in
# a .py file) keeps its Python words for decisions and loops.
r_terms <- function(msg) {
  if (!length(msg)) return(msg)
  vapply(msg, r_terms_one, character(1), USE.NAMES = FALSE)
}

r_terms_one <- function(msg) {
  if (is.na(msg) || !nzchar(msg)) return(msg)
  # A 0 in a tensor of R positions (rbridge.r_positions()): named as the user wrote it.
  msg <- gsub("-(4611686018427387904|1073741824)\\b",
              "0 (positions are 1-based in R: 1 is the first, -1 the last)", msg, perl = TRUE)
  ident <- "([A-Za-z_][A-Za-z0-9_]*)"
  msg <- shift_numbers(msg, paste0("\\b", ident, "\\.shape\\[(\\d+)\\]"), "%s$shape[%d]")
  msg <- shift_numbers(msg, paste0("\\b", ident, "\\.size\\((\\d+)\\)"), "%s$size(%d)")
  msg <- shift_numbers(msg, "\\b(size)\\(dim (\\d+)\\)", "%s(dim %d)")
  # The check's probes of other sizes (check/dims.py, verify.py): dimensions and inputs
  # counted from 1.
  msg <- shift_numbers(msg, "\\b(dimension) (\\d+)(?= of the inputs)", "%s %d")
  msg <- shift_dimension_of_input(msg)
  # A call's inputs (runtime/support.py): "input 0 (x) must be a tensor".
  msg <- shift_numbers(msg, "\\b(input) (\\d+)(?= \\(\\w+\\) must be| is not what)", "%s %d")
  msg <- gsub(paste0("\\b", ident, "\\.(dim|numel|item|size)\\(\\)"), "\\1$\\2()", msg,
              perl = TRUE)
  msg <- gsub(paste0("\\b", ident, "\\.tolist\\(\\)"), "as_array(\\1)", msg, perl = TRUE)
  # The same after a call: `sum(x).item()`, `getitem(x, ...).shape[0]`, `detach(x).tolist()`.
  msg <- shift_numbers(msg, "(\\))\\.shape\\[(\\d+)\\]", "%s$shape[%d]")
  msg <- gsub("\\)\\.(dim|numel|item|size)\\(\\)", ")$\\1()", msg, perl = TRUE)
  msg <- call_tolist_terms(msg)
  msg <- gsub("(^|[\\s(`])\\.(train|eval)\\(\\)", "\\1$\\2()", msg, perl = TRUE)
  msg <- gsub("respect_mode=True", "respect_mode = TRUE", msg, fixed = TRUE)
  msg <- gsub("check_trace=False", "check_trace = FALSE", msg, fixed = TRUE)
  msg <- gsub("strict=(True|False)", "strict = \\U\\1", msg, perl = TRUE)
  msg <- gsub("raise check_tolerance", "raise check_tolerance (an argument of jit_trace())",
              msg, fixed = TRUE)
  msg <- gsub("(\\bis|==) (True|False)\\b", "is \\U\\2", msg, perl = TRUE)
  # Values a guard read (`[1.0, 2.0]`, `[True, False]`) as R writes them: c(1, 2).
  if (grepl("the trace assumed", msg, fixed = TRUE)) msg <- python_lists_terms(msg)
  # The lines of a guard message, joined into one by one_line().
  msg <- gsub("(\\S) (assumption made at|this call takes another path)", "\\1; \\2", msg,
              perl = TRUE)
  if (grepl("R.autograd_function", msg, fixed = TRUE)) msg <- autograd_function_terms(msg)
  if (!grepl("\\.py:\\d", msg)) {
    msg <- gsub("a Python (int|float)\\b", "an R number", msg, perl = TRUE)
    msg <- gsub("a Python bool\\b", "an R logical", msg, perl = TRUE)
    msg <- gsub("Python data", "R data", msg, fixed = TRUE)
    msg <- gsub("a Python loop", "an R loop", msg, fixed = TRUE)
    msg <- gsub("the Python-level decision", "the R-level decision (an `if` or a loop on a size)",
                msg, fixed = TRUE)
    msg <- gsub("instead of a Python int", "instead of an R number", msg, fixed = TRUE)
    msg <- sub("must be a tensor, got ndarray",
               "must be a tensor, got an R vector or array (make it one with torch_tensor())",
               msg, fixed = TRUE)
    msg <- sub("must be a tensor, got (tuple|list)$", "must be a tensor, got an unnamed list", msg)
    msg <- sub("must be a tensor, got dict$", "must be a tensor, got a named list", msg)
    msg <- gsub("numbers, strings, None and the structure of containers",
                "numbers, character strings, NULL and the structure of lists", msg, fixed = TRUE)
    # Python's refusals to bind a call (BindingError), as R says them: R's function has no
    # room for an unused argument, and names the one missing.
    msg <- sub("\\w+\\(\\) takes (\\d+) positional arguments? but (\\d+) were given",
               "the trace takes \\1 argument(s) but was given \\2 (unused arguments)", msg)
    msg <- sub("\\w+\\(\\) missing \\d+ required (positional|keyword-only) arguments?: ",
               "arguments of the trace missing, with no default: ", msg)
    # R lists: unnamed ones are tuples, named ones dicts (R/python.R).
    msg <- gsub("returns a list or dict", "returns a named list", msg, fixed = TRUE)
    msg <- gsub("tensors or (nested) tuples. Return a tuple,",
                "tensors or (nested) unnamed lists. Return an unnamed list,", msg, fixed = TRUE)
  }
  msg
}

# The tracer's refusals of a custom autograd function (trace/autograd_function.py), for
# one made by autograd_function() in R.
autograd_function_terms <- function(msg) {
  msg <- gsub("the custom autograd function R.autograd_function.apply", "the autograd_function()",
              msg, fixed = TRUE)
  msg <- gsub("R.autograd_function", "autograd_function()", msg, fixed = TRUE)
  msg <- gsub("into a Python value", "into an R value", msg, fixed = TRUE)
  msg <- gsub("on the arguments of apply and on what ctx.save_for_backward keeps",
              "on its inputs and on what ctx$save_for_backward() keeps", msg, fixed = TRUE)
  msg <- gsub("ctx.save_for_backward", "ctx$save_for_backward()", msg, fixed = TRUE)
  msg <- gsub("trace under torch.no_grad()", "trace inside with_no_grad()", msg, fixed = TRUE)
  gsub("prim.item at an unknown line", "$item() or as_array()", msg, fixed = TRUE)
}

python_lists_terms <- function(msg) {
  item <- "(?:True|False|-?[0-9][0-9.e+-]*)"
  pattern <- sprintf("(?<!, )(?<=[\\s(=])\\[(%s(?:, %s)+)\\]", item, item)
  m <- gregexpr(pattern, msg, perl = TRUE)[[1]]
  if (m[[1]] < 0) return(msg)
  found <- regmatches(msg, list(m))[[1]]
  r <- vapply(found, function(f) {
    inner <- gsub("\\bTrue\\b", "TRUE", gsub("\\bFalse\\b", "FALSE", substr(f, 2L, nchar(f) - 1L)))
    inner <- gsub("(\\d)\\.0\\b", "\\1", inner, perl = TRUE)
    paste0("c(", inner, ")")
  }, character(1))
  regmatches(msg, list(m)) <- list(r)
  msg
}

# `f(...).tolist()` as `as_array(f(...))`: the call is found by its balanced parentheses.
call_tolist_terms <- function(msg) {
  repeat {
    at <- regexpr("\\)\\.tolist\\(\\)", msg, perl = TRUE)
    if (at < 0) return(msg)
    chars <- strsplit(substr(msg, 1L, at), "")[[1]]
    depth <- 0L
    open <- 0L
    for (k in rev(seq_along(chars))) {
      depth <- depth + (chars[[k]] == ")") - (chars[[k]] == "(")
      if (depth == 0L) {
        open <- k
        break
      }
    }
    if (open == 0L) return(msg)
    start <- open
    while (start > 1L && grepl("[A-Za-z0-9_.]", chars[[start - 1L]])) start <- start - 1L
    msg <- paste0(substr(msg, 1L, start - 1L), "as_array(", substr(msg, start, at), ")",
                  substr(msg, at + attr(at, "match.length"), nchar(msg)))
  }
}

# Rewrite each match of `pattern` (group 1: a name, group 2: a 0-based number) with
# `format`, the number made 1-based.
shift_numbers <- function(msg, pattern, format) {
  m <- gregexpr(pattern, msg, perl = TRUE)[[1]]
  if (m[[1]] < 0) return(msg)
  starts <- attr(m, "capture.start")
  lens <- attr(m, "capture.length")
  pieces <- character()
  last <- 1L
  for (k in seq_along(m)) {
    name <- substr(msg, starts[k, 1], starts[k, 1] + lens[k, 1] - 1L)
    n <- as.integer(substr(msg, starts[k, 2], starts[k, 2] + lens[k, 2] - 1L))
    pieces <- c(pieces, substr(msg, last, m[[k]] - 1L), sprintf(format, name, n + 1L))
    last <- m[[k]] + attr(m, "match.length")[[k]]
  }
  paste0(c(pieces, substr(msg, last, nchar(msg))), collapse = "")
}

# "dimension 2 of input 0" (both 0-based) as "dimension 3 of input 1".
shift_dimension_of_input <- function(msg) {
  m <- regexec("dimension (\\d+) of input (\\d+)", msg)[[1]]
  if (m[[1]] < 0) return(msg)
  parts <- regmatches(msg, list(m))[[1]]
  sub(parts[[1]], sprintf("dimension %d of input %d", as.integer(parts[[2]]) + 1L,
                          as.integer(parts[[3]]) + 1L), msg, fixed = TRUE)
}

# Errors of ops whose positions are 1-based in R (R/surface.R, Ops on tensors): what
# PyTorch says about a class, a target or an entry of a list, in R's numbering. A class
# 0 in R is -1 by the time PyTorch sees it.
one_based_terms <- function(msg) {
  m <- regexec("[Tt]arget (-?\\d+) is out of bounds", msg)[[1]]
  if (m[[1]] > 0) {
    n <- as.integer(regmatches(msg, list(m))[[1]][[2]]) + 1L
    hint <- if (n < 1L) ": classes are 1-based in R (1 is the first class), so 0 is no class" else
      ": classes are 1-based in R, from 1 to the number of classes (the input's class dimension)"
    msg <- paste0(substr(msg, 1L, m[[1]] - 1L), "Target ", n, " is out of bounds",
                  hint, substr(msg, m[[1]] + attr(m, "match.length")[[1]], nchar(msg)))
  }
  msg <- sub("Class values must be non-negative.",
             paste("Class values must be 1 or more: classes are 1-based in R (1 is the first",
                   "class), so 0 is no class."), msg, fixed = TRUE)
  # index_select() on some layouts: torch's words from its kernel.
  msg <- sub("INDICES element is out of DATA bounds, id=(-?\\d+) axis_dim=(\\d+)",
             "index \\1 is out of bounds for a dimension of size \\2", msg)
  msg <- sub("Class values must be smaller than num_classes.",
             "Class values must be at most num_classes: classes are 1 to num_classes in R.",
             msg, fixed = TRUE)
  # torch_cat(x), torch_stack(x) of one tensor: R passes the tensor (an R list holding its
  # Python object) where a list of tensors goes, which Python sees as a dict.
  msg <- sub("argument '(\\w+)' \\(position \\d+\\) must be tuple of Tensors, not (dict|Tensor)",
             paste("argument `\\1` must be a list of tensors, such as list(x, y), not one tensor",
                   "(torch_cat(list(x, y)), torch_stack(list(x, y)))"), msg)
  # index_select(), embeddings: torch does not say which index or dimension.
  sub("index out of range in self", paste(
    "index out of range: an index is past the size of its dimension (indices are 1-based",
    "in R, from 1 to the size; an embedding's from 1 to its number of rows)"), msg,
    fixed = TRUE)
}
