# Traced sizes behave as R integers. While jit_trace() runs, `x$size(1)`, `x$shape[i]` and
# `N` inside `[` are traced integers: a Python SymInt held unconverted in an environment of
# class `torch_sym_int` (see new_sym_int()). Arithmetic on them is recorded, so the graph
# stays shape-general; turning one into an R number (`as.integer()`, `if (n > 2)`,
# `seq_len(n)`) records a guard, as `int()` and `range()` do in Python.
#
# Note: positions. A traced size used as a position (`x[n]`, `torch_select(x, 1, n)`,
# `x$narrow(1, n - 1, 1)`) is 1-based like any R position; sym_position() makes it 0-based,
# once, at the boundary where plain numbers are shifted too (R/surface.R, R/indexing.R).
#
# Note: dispatch. R (before 4.3) refuses `x$sum() / x$size(1)` when the two classes have
# different Ops methods; they share one: Ops.torch_tensor() hands a call without a tensor
# to sym_int_ops(). This file collates after tensor.R, which defines that method.

#' @export
Ops.torch_sym_int <- Ops.torch_tensor

# Note: after the trace. A traced size that R code kept (in a global, on a module: `self$n
# <- x$size(1)`) outlives its trace; there it is the number it was on the example, an R
# integer (or double) again, read without a guard since no trace records it any more.
sym_settled <- function(v) {
  if (!inherits(v, "torch_sym_int") || isTRUE(.tb$tracing)) return(v)
  reticulate::py_to_r(py_rb()$concrete(.subset2(v, ".py")))
}

# `op` (an R operator) on traced integers and numbers. Whole doubles go to Python as ints,
# so `x$size(1) - 1` stays a traced integer, as 4L - 1 is a whole number in R.
sym_int_ops <- function(op, e1, e2 = NULL) {
  if (!isTRUE(.tb$tracing)) {
    f <- get(op, envir = baseenv(), mode = "function")
    return(if (is.null(e2)) f(sym_settled(e1)) else f(sym_settled(e1), sym_settled(e2)))
  }
  note_r_location()
  if (is.null(e2)) {
    if (op == "-") return(sym_from_py(py_rb()$binary("-", 0L, sym_operand(e1, op))))
    if (op == "+") return(e1)
    return(!as.logical(as.integer(e1)))
  }
  sym_from_py(py_rb()$binary(op, sym_operand(e1, op), sym_operand(e2, op)))
}

sym_operand <- function(v, op) {
  if (inherits(v, "torch_sym_int")) return(.subset2(v, ".py"))
  if (!is.numeric(v) && !is.logical(v) || length(v) != 1) {
    type_error(sprintf(paste(
      "A traced size (from x$size() or x$shape while tracing) can be combined with `%s`",
      "only with single numbers, not %s of length %d; use it in tensor operations instead."),
      op, if (is.numeric(v) || is.logical(v)) "a vector" else describe_value(v), length(v)))
  }
  if (is.double(v) && is.finite(v) && v == round(v)) return(reticulate::r_to_py(as.integer(v)))
  reticulate::r_to_py(v)
}

# A Python result of sized arithmetic: traced integers and floats stay traced (a float
# from `/` too), everything else (a comparison's logical) comes back as R's.
sym_from_py <- function(py) {
  cls <- class(py)
  if ("python.builtin.float" %in% cls && cls[[1]] != "python.builtin.float") {
    e <- new_sym_int(py)
    class(e) <- c("torch_sym_float", "torch_sym_int")
    return(e)
  }
  from_py(py)
}

# A traced size used as a 1-based position, made 0-based: `n - 1` for a positive one, `n`
# for a negative one (counted from the end, -1 the last). The sign is recorded as a guard,
# so a call where it differs stops instead of shifting the wrong way.
sym_position <- function(v, what = "position") {
  if (!isTRUE(.tb$tracing)) {
    n <- as.integer(sym_settled(v))
    if (n == 0L) index_error(sprintf("The %s is 0: positions are 1-based in R.", what))
    return(reticulate::r_to_py(if (n > 0L) n - 1L else n))
  }
  py <- .subset2(v, ".py")
  if (isTRUE(reticulate::py_to_r(py_rb()$binary(">", py, 0L)))) {
    return(py_rb()$binary("-", py, 1L))
  }
  if (isTRUE(reticulate::py_to_r(py_rb()$binary("==", py, 0L)))) {
    index_error(sprintf("The traced %s is 0 here: positions are 1-based in R (1 is the first).",
                        what))
  }
  py
}

#' @export
as.integer.torch_sym_int <- function(x, ...) {
  if (!isTRUE(.tb$tracing)) return(as.integer(sym_settled(x)))
  note_r_location()
  reticulate::py_to_r(py_rb()$to_int(.subset2(x, ".py")))
}

#' @export
as.numeric.torch_sym_int <- function(x, ...) {
  if (!isTRUE(.tb$tracing)) return(as.numeric(sym_settled(x)))
  note_r_location()
  reticulate::py_to_r(py_rb()$to_float(.subset2(x, ".py")))
}

#' @export
as.double.torch_sym_int <- function(x, ...) as.numeric.torch_sym_int(x)

#' @export
as.logical.torch_sym_int <- function(x, ...) as.integer(x) != 0L

# sqrt(), exp(), log(), floor(), ... of a traced size: recorded where the tracer records
# the same Python function (trace/patches.py), so `1 / sqrt(x$size(2))` stays general;
# any other (or `log(n, base)`) reads the value, recording a guard, and applies R's own.
#' @export
Math.torch_sym_int <- function(x, ...) {
  if (!isTRUE(.tb$tracing)) {
    return(get(.Generic, envir = baseenv(), mode = "function")(sym_settled(x), ...))
  }
  note_r_location()
  recorded <- c("sqrt", "exp", "log", "log2", "log10", "floor", "ceiling", "trunc", "abs")
  if (.Generic %in% recorded && !...length()) {
    return(sym_from_py(py_rb()$r_math(.Generic, .subset2(x, ".py"))))
  }
  get(.Generic, envir = baseenv(), mode = "function")(as.numeric(x), ...)
}

#' @export
Summary.torch_sym_int <- function(..., na.rm = FALSE) {
  sym_summary(.Generic, list(...))
}

# max(), min(), sum(), prod() of traced sizes and numbers: recorded (max and min compare,
# so they record which was larger as a guard).
sym_summary <- function(generic, items) {
  items <- do.call(c, lapply(items, function(v) {
    if (inherits(v, "torch_sym_int")) list(v) else if (is.list(v)) unclass(v) else as.list(v)
  }))
  step <- switch(generic,
    sum = function(a, b) a + b,
    prod = function(a, b) a * b,
    max = function(a, b) if (isTRUE(a >= b)) a else b,
    min = function(a, b) if (isTRUE(a <= b)) a else b,
    type_error(sprintf("%s() is not supported for traced sizes; use max, min, sum or prod.",
                       generic))
  )
  Reduce(step, items)
}

#' @export
print.torch_sym_int <- function(x, ...) {
  if (!isTRUE(.tb$tracing)) return(print(sym_settled(x), ...))
  cat(if (inherits(x, "torch_sym_float")) "<traced number>\n" else "<traced integer>\n")
  invisible(x)
}

# ---- the sizes of a tensor while tracing (`x$shape`, `x$size()`) -------------------------

#' @export
`[.torch_sym_sizes` <- function(x, i) {
  out <- unclass(x)[i]
  if (length(out) == 1L) return(out[[1L]])
  class(out) <- "torch_sym_sizes"
  out
}

#' @export
Summary.torch_sym_sizes <- function(..., na.rm = FALSE) sym_summary(.Generic, list(...))

#' @export
as.integer.torch_sym_sizes <- function(x, ...) {
  vapply(unclass(x), function(v) as.integer(v), integer(1))
}

#' @export
print.torch_sym_sizes <- function(x, ...) {
  cat(sprintf("<traced sizes: %d dimensions>\n", length(x)))
  invisible(x)
}

# is.numeric() of a traced size is TRUE, as for the R integer it stands for (code that
# checks its arguments, `stopifnot(is.numeric(n))`, takes the same path as untraced).
#' @export
is.numeric.torch_sym_int <- function(x) TRUE

#' @export
is.numeric.torch_sym_sizes <- function(x) TRUE

# A traced size is never NA.
#' @export
is.na.torch_sym_int <- function(x) FALSE

# ---- R functions that need a plain integer -------------------------------------------

# While tracing an R function, `seq_len(n)`, `seq_along()` and `a:b` take traced sizes the
# way Python's range() does: the value is read (recording a guard, so a call with another
# size stops with a guard error) and the loop unrolls. They are bound in an environment
# between the traced function and its own (see trace_source()), so base R is untouched.
traced_size_helpers <- function() {
  plain <- function(v) {
    if (inherits(v, "torch_sym_float")) return(as.numeric(v))
    if (inherits(v, c("torch_sym_int", "torch_sym_sizes"))) return(as.integer(v))
    v
  }
  list(
    seq_len = function(length.out) base::seq_len(plain(length.out)),
    `:` = function(from, to) base::`:`(plain(from), plain(to)),
    seq = function(...) do.call(base::seq, lapply(list(...), plain)),
    rep = function(x, ...) {
      args <- lapply(list(...), plain)
      do.call(base::rep, c(list(x), args))
    },
    rep_len = function(x, length.out) base::rep_len(x, plain(length.out)),
    numeric = function(length = 0L) base::numeric(plain(length)),
    double = function(length = 0L) base::double(plain(length)),
    integer = function(length = 0L) base::integer(plain(length)),
    logical = function(length = 0L) base::logical(plain(length)),
    character = function(length = 0L) base::character(plain(length)),
    vector = function(mode = "logical", length = 0L) base::vector(mode, plain(length)),
    # Only the sizes given are passed: base::matrix() works out a missing one from the
    # length of `data` (matrix(1:4, 2) is 2 x 2), which a default of 1 would not.
    matrix = function(data = NA, nrow, ncol, ...) {
      sizes <- list()
      if (!missing(nrow)) sizes$nrow <- plain(nrow)
      if (!missing(ncol)) sizes$ncol <- plain(ncol)
      do.call(base::matrix, c(list(data), sizes, list(...)))
    },
    array = function(data = NA, dim = length(data), ...) {
      base::array(data, as.integer(lapply(dim, plain)), ...)
    },
    match = function(x, table, ...) base::match(plain(x), plain(table), ...),
    # sapply() of traced sizes gives traced sizes (sum(), max() of them are recorded), as
    # it gives an integer vector outside; vapply() reads them (its FUN.VALUE is R's).
    sapply = function(X, FUN, ..., simplify = TRUE, USE.NAMES = TRUE) {
      out <- base::sapply(X, FUN, ..., simplify = simplify, USE.NAMES = USE.NAMES)
      if (is.list(out) && length(out) &&
          any(base::vapply(out, inherits, logical(1), "torch_sym_int")) &&
          all(base::vapply(out, function(v) {
            inherits(v, "torch_sym_int") || is.numeric(v) && length(v) == 1L
          }, logical(1)))) {
        class(out) <- "torch_sym_sizes"
      }
      out
    },
    vapply = function(X, FUN, FUN.VALUE, ..., USE.NAMES = TRUE) {
      base::vapply(X, function(item, ...) plain(FUN(item, ...)), FUN.VALUE, ...,
                   USE.NAMES = USE.NAMES)
    },
    `%in%` = function(x, table) base::`%in%`(plain(x), plain(table)),
    # pmax()/pmin() and sprintf() are not generic: they read the values too.
    pmax = function(..., na.rm = FALSE) do.call(base::pmax, c(lapply(list(...), plain),
                                                            na.rm = na.rm)),
    pmin = function(..., na.rm = FALSE) do.call(base::pmin, c(lapply(list(...), plain),
                                                            na.rm = na.rm)),
    sprintf = function(fmt, ...) do.call(base::sprintf, c(list(fmt), lapply(list(...), plain)))
  )
}

# `c(n, 2)`, `c(x$size(1), dim(x)[-1])`: traced sizes with numbers are sizes, as c() of R
# integers is an integer vector, so that `c(n, 2) * 2` and `torch_zeros(c(n, 2))` work.
# (R dispatches c() on its first argument only: `c(2, n)` stays a plain list, which the
# functions that take sizes and positions read the same way.)
#' @export
c.torch_sym_int <- function(...) {
  items <- lapply(list(...), function(v) {
    if (inherits(v, "torch_sym_int")) list(v) else if (is.list(v)) unclass(v) else as.list(v)
  })
  out <- do.call(base::c, unname(items))
  if (!isTRUE(.tb$tracing)) return(unlist(lapply(out, sym_settled)))
  sizes <- vapply(out, function(v) {
    inherits(v, "torch_sym_int") || (is.numeric(v) || is.logical(v)) && length(v) == 1L
  }, logical(1))
  if (all(sizes)) class(out) <- "torch_sym_sizes"
  out
}

#' @export
c.torch_sym_sizes <- c.torch_sym_int

# ---- more of R on traced sizes --------------------------------------------------------

# `dim(x)` (and so nrow(), ncol()) while tracing: the traced sizes, as `x$shape` gives
# them, so that `x$view(c(dim(x)[1], -1))` and `nrow(x)` stay general; reading one as an
# R number records a guard (dim.torch_tensor() in R/tensor.R calls this).
traced_dim <- function(x) simplify_sizes(from_py(py_rb()$sizes(tensor_py(x))))

# Text of a traced size (`paste("rows:", n)`, `sprintf("%d", n)`, a message): its value,
# read with a guard, as str() of a SymInt in Python.
#' @export
as.character.torch_sym_int <- function(x, ...) {
  as.character(if (inherits(x, "torch_sym_float")) as.numeric(x) else as.integer(x))
}

#' @export
format.torch_sym_int <- function(x, ...) format(as.character(x), ...)

# `dim(x) == c(3, 4)`, `x$shape * 2`, `dim(x)[-1] - 1`: element by element, as on an R
# integer vector (recycled as R recycles); comparisons give R logicals (with guards),
# arithmetic gives traced sizes.
#' @export
Ops.torch_sym_sizes <- function(e1, e2) {
  items <- function(v) if (inherits(v, "torch_sym_sizes")) unclass(v) else as.list(v)
  if (missing(e2)) {
    out <- lapply(items(e1), function(a) get(.Generic)(a))
  } else {
    a <- items(e1)
    b <- items(e2)
    n <- if (length(a) && length(b)) max(length(a), length(b)) else 0L
    if (n && (n %% length(a) || n %% length(b))) {
      warning("longer object length is not a multiple of shorter object length")
    }
    op <- get(.Generic)
    out <- lapply(seq_len(n), function(i) {
      op(a[[(i - 1L) %% length(a) + 1L]], b[[(i - 1L) %% length(b) + 1L]])
    })
  }
  if (all(vapply(out, function(v) is.atomic(v) && length(v) == 1L, logical(1)))) {
    return(unlist(out))
  }
  class(out) <- "torch_sym_sizes"
  out
}

#' @export
as.numeric.torch_sym_sizes <- function(x, ...) {
  vapply(unclass(x), function(v) as.numeric(v), numeric(1))
}

#' @export
as.double.torch_sym_sizes <- as.numeric.torch_sym_sizes

#' @export
as.character.torch_sym_sizes <- function(x, ...) {
  vapply(unclass(x), function(v) as.character(v), character(1))
}

#' @export
format.torch_sym_sizes <- function(x, ...) format(as.character(x), ...)

# The exclusive end that makes Python's arange include R's `end`: with whole numbers, one
# past it (exact; an int64 range truncates a fractional end, so `end + 0.5` would drop
# `end`); else half a step past it, which includes `end` and not the next value.
arange_end <- function(start, end, step) {
  is_whole <- function(v) inherits(v, "torch_sym_int") && !inherits(v, "torch_sym_float") ||
    is.numeric(v) && length(v) == 1L && !is.na(v) && v == round(v)
  if (is_whole(start) && is_whole(step) && is_whole(end)) {
    return(if (isTRUE(step > 0)) end + 1L else end - 1L)
  }
  end + step / 2
}

# torch_arange() with a traced bound (`torch_arange(1, x$size(1))`): the same range as
# with R numbers (the end included, integer bounds and step giving int64), from Python's
# arange on the traced values, so the graph stays general. R/tensor.R calls this.
is_sym_arange <- function(start, end, step) {
  inherits(start, "torch_sym_int") || inherits(end, "torch_sym_int") ||
    inherits(step, "torch_sym_int")
}

sym_arange <- function(start, end, step, dtype, device, requires_grad) {
  whole <- function(v) {
    (inherits(v, "torch_sym_int") && !inherits(v, "torch_sym_float")) || is.integer(v)
  }
  if (is.null(dtype)) {
    dtype <- if (whole(start) && whole(end) && whole(step)) torch_long() else default_float()
  }
  last <- arange_end(start, end, step)
  py <- function(v) if (inherits(v, "torch_sym_int")) .subset2(v, ".py") else as.double(v)
  wrap_tensor(withCallingHandlers(
    do.call(tb_py_call, c(list(py_torch()$arange, py(start), py(last), py(step),
                               dtype = dtype_py(dtype), device = device_py(device)),
                          if (isTRUE(requires_grad)) list(requires_grad = TRUE))),
    error = function(e) rethrow_python(e)
  ))
}

# torch_tensor() of a traced size (`torch_tensor(x$size(1))`), of traced sizes
# (`torch_tensor(x$shape)`) or of sizes and numbers (`torch_tensor(c(n, 2))`, a list): the
# 1-d tensor the R numbers give (int64 for sizes, float when a number is double), made
# from the traced values so that the graph stays general. R/tensor.R calls this.
is_sym_data <- function(data) {
  inherits(data, c("torch_sym_int", "torch_sym_sizes")) ||
    is.list(data) && !is.object(data) && length(data) &&
      any(vapply(data, inherits, logical(1), "torch_sym_int")) &&
      all(vapply(data, function(v) {
        inherits(v, "torch_sym_int") || (is.numeric(v) || is.logical(v)) && length(v) == 1L
      }, logical(1)))
}

sym_tensor <- function(data, dtype, device, requires_grad) {
  items <- if (inherits(data, "torch_sym_int")) list(data) else unclass(data)
  # Each number is a full() of its own (not a tensor of R data, which a trace would keep
  # as a constant), with R's type: c(n, 2) is double, c(n, 2L) integer.
  one <- function(v) {
    d <- if (inherits(v, "torch_sym_float") || is.double(v)) default_float() else
      if (is.logical(v)) torch_bool() else torch_long()
    py <- if (inherits(v, "torch_sym_int")) .subset2(v, ".py") else v
    wrap_tensor(tb_py_call(py_torch()$full, list(1L), py, dtype = dtype_py(d)))
  }
  parts <- lapply(items, one)
  out <- if (length(parts) == 1L) parts[[1]] else torch_cat(parts)
  tensor_to(out, dtype, device, requires_grad)
}
