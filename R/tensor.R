# Tensors: creation, conversion back to R, printing, operators, `$` methods and `[`.

wrap_tensor <- function(py) {
  x <- list(.py = py)
  class(x) <- "torch_tensor"
  x
}

tensor_py <- function(x) {
  if (!inherits(x, "torch_tensor")) {
    tracebridge_abort(sprintf("Expected a torch_tensor, got %s.", describe_value(x)))
  }
  .subset2(x, ".py")
}

as_tensor <- function(x) {
  if (inherits(x, "torch_tensor")) return(x)
  # A tensor that `c(a_list, tensor)` took apart (R/tensor-lists.R): its Python object is
  # the same tensor, gradient history included.
  if (inherits(x, "torch.Tensor")) return(wrap_tensor(x))
  torch_tensor(x)
}

#' Data types
#'
#' Data types for `dtype =` arguments, as in mlverse torch.
#'
#' @return A `torch_dtype` object.
#' @name torch_dtype
#' @examples
#' if (torch_is_installed()) {
#'   torch_tensor(1:3, dtype = torch_float())
#' }
NULL

make_dtype <- function(name) {
  force(name)
  function() {
    # Made once (a reticulate call); dtypes are constants.
    if (is.null(.tb$dtype_cache)) .tb$dtype_cache <- new.env(parent = emptyenv())
    d <- .tb$dtype_cache[[name]]
    if (is.null(d)) {
      d <- structure(list(.py = reticulate::py_get_attr(py_torch(), name)),
                     name = name, class = "torch_dtype")
      .tb$dtype_cache[[name]] <- d
    }
    d
  }
}

#' @rdname torch_dtype
#' @export
torch_float <- make_dtype("float32")
#' @rdname torch_dtype
#' @export
torch_float32 <- make_dtype("float32")
#' @rdname torch_dtype
#' @export
torch_double <- make_dtype("float64")
#' @rdname torch_dtype
#' @export
torch_float64 <- make_dtype("float64")
#' @rdname torch_dtype
#' @export
torch_long <- make_dtype("int64")
#' @rdname torch_dtype
#' @export
torch_int64 <- make_dtype("int64")
#' @rdname torch_dtype
#' @export
torch_int <- make_dtype("int32")
#' @rdname torch_dtype
#' @export
torch_int32 <- make_dtype("int32")
#' @rdname torch_dtype
#' @export
torch_bool <- make_dtype("bool")
#' @rdname torch_dtype
#' @export
torch_float16 <- make_dtype("float16")
#' @rdname torch_dtype
#' @export
torch_half <- make_dtype("float16")
#' @rdname torch_dtype
#' @export
torch_int16 <- make_dtype("int16")
#' @rdname torch_dtype
#' @export
torch_short <- make_dtype("int16")
#' @rdname torch_dtype
#' @export
torch_int8 <- make_dtype("int8")
#' @rdname torch_dtype
#' @export
torch_uint8 <- make_dtype("uint8")

dtype_from_py <- function(py) {
  structure(list(.py = py), name = sub("torch.", "", reticulate::py_str(py), fixed = TRUE),
            class = "torch_dtype")
}

#' @export
Ops.torch_dtype <- function(e1, e2) {
  name <- function(d) if (inherits(d, "torch_dtype")) attr(d, "name") else as.character(d)
  switch(.Generic,
    "==" = identical(name(e1), name(e2)),
    "!=" = !identical(name(e1), name(e2)),
    tracebridge_abort(sprintf("`%s` is not defined for dtypes.", .Generic), "type_error")
  )
}

#' @export
as.character.torch_dtype <- function(x, ...) attr(x, "name")

#' @export
print.torch_dtype <- function(x, ...) {
  cat("torch_", attr(x, "name"), "\n", sep = "")
  invisible(x)
}

dtype_py <- function(dtype) {
  if (is.null(dtype)) return(reticulate::py_none())
  if (inherits(dtype, "torch_dtype")) return(.subset2(dtype, ".py"))
  if (is.character(dtype)) return(reticulate::py_get_attr(py_torch(), dtype))
  tracebridge_abort("`dtype` must be a torch_dtype such as torch_float().")
}

#' Create a tensor from R data
#'
#' R vectors, matrices and arrays keep their shape and the meaning of each index:
#' `as_array(torch_tensor(m))[i, j] == m[i, j]`. Doubles become `float32` (the default
#' dtype: see [torch_set_default_dtype()]), integers
#' `int64`, logicals `bool`, unless `dtype` says otherwise.
#'
#' A list of single numbers is the vector of them (`torch_tensor(list(3L, 2L))` is
#' `torch_tensor(c(3L, 2L))`, also when an item is a traced size inside [jit_trace()]);
#' any other list (of tensors, vectors or lists of the same shape) is stacked along a new
#' first dimension, so `torch_tensor(list(c(1, 2), c(3, 4)))` has the rows `1 2` and
#' `3 4`.
#'
#' `print(x, n = 30)` shows at most `n` lines of values (`n = -1`: all), as mlverse does.
#'
#' @param data An R vector, matrix or array, a tensor, or a list (see above).
#' @param dtype A data type such as [torch_float()]; `NULL` chooses from `data`.
#' @param device A device, e.g. `"cpu"` or [torch_device()].
#' @param requires_grad Whether autograd records operations on the tensor.
#' @return A `torch_tensor`.
#' @examples
#' if (torch_is_installed()) {
#'   x <- torch_tensor(matrix(1:6, nrow = 2))
#'   x
#'   as_array(x)
#' }
#' @export
torch_tensor <- function(data, dtype = NULL, device = NULL, requires_grad = FALSE) {
  if (is.null(.tb$python_ready)) python_ready()  # R/startup.R: a clear error without Python
  if (is_sym_data(data)) {
    return(sym_tensor(data, dtype, device, requires_grad)) # R/traced-sizes.R
  }
  if (inherits(data, "torch.Tensor")) data <- wrap_tensor(data) # see as_tensor()
  if (inherits(data, "torch_tensor")) {
    # Tensor methods of the surface table (through C where it applies).
    out <- data$detach()$clone()
    return(tensor_to(out, dtype, device, requires_grad))
  }
  if (is.data.frame(data)) {
    tracebridge_abort(paste(
      "Cannot make a tensor from a data.frame; make a matrix of its numeric columns first:",
      "torch_tensor(as.matrix(df)) (rows stay rows)."), "type_error")
  }
  if (is.list(data)) {
    # A list of single numbers is the vector of them (as c() of them, and as Python's
    # torch.tensor([3, 2])), so that list(n, 2L) of traced sizes (R/traced-sizes.R) and of
    # R numbers give the same tensor; other lists are stacked along a new first dimension.
    if (is_number_list(data)) return(torch_tensor(unlist(data), dtype, device, requires_grad))
    if (!length(data)) {
      tracebridge_abort("Cannot make a tensor from an empty list; use torch_tensor(numeric(0)).",
                        "value_error")
    }
    return(tensor_to(surface_fn("torch_stack")(lapply(data, torch_tensor)), dtype, device,
                     requires_grad))
  }
  if (is.null(dtype)) {
    dtype <- if (is.logical(data)) torch_bool() else if (is.integer(data)) torch_long() else
      default_float() # R/dtype-info.R
  }
  if (!(is.numeric(data) || is.logical(data))) {
    tracebridge_abort(sprintf("Cannot make a tensor from %s.", describe_value(data)))
  }
  if (!is.double(data) && anyNA(data)) data <- na_data(data, dtype)
  # Plain vectors, matrices and arrays are copied into a new tensor in C (src/array.c);
  # the rest through NumPy.
  out <- .Call(tb_tensor_from_r, data, dtype)
  if (!is.symbol(out)) {
    if (is.null(device) && !isTRUE(requires_grad)) return(out)
    return(tensor_to(out, NULL, device, requires_grad))
  } else {
    if (identical(out, quote(.tb_error))) c_error(one_based = FALSE)
    c_started()
    arr <- if (is.null(dim(data))) {
      reticulate::np_array(as.vector(data))
    } else {
      reticulate::r_to_py(data)
    }
    py <- withCallingHandlers(py_rb()$tensor_from_r(arr, dtype_py(dtype), FALSE),
                              error = function(e) rethrow_python(e))
  }
  withCallingHandlers({
    if (!is.null(device)) py <- py$to(device_py(device))
    if (isTRUE(requires_grad)) py$requires_grad_(TRUE)
  }, error = function(e) rethrow_python(e))
  wrap_tensor(py)
}

# Integer and logical NA: a float tensor holds them as NaN (as a double NA is); an
# integer or bool tensor has no such value, so it is refused rather than made
# -2147483648 or TRUE.
na_data <- function(data, dtype) {
  name <- if (inherits(dtype, "torch_dtype")) attr(dtype, "name") else as.character(dtype)
  if (name %in% c("float32", "float64", "float16", "bfloat16", "float", "double", "half")) {
    storage.mode(data) <- "double" # NA_integer_ and NA become NA_real_; dims are kept
    return(data)
  }
  at <- which(is.na(data))
  tracebridge_abort(sprintf(paste(
    "torch_tensor(): `data` has NA at position %s, which a tensor of dtype %s can not hold.",
    "Replace the NAs first, or make a float tensor, where NA becomes NaN:",
    "torch_tensor(as.numeric(data)) or dtype = torch_float()."),
    paste(utils::head(at, 5), collapse = ", "), name), "value_error")
}

# A plain list whose items are all single R numbers or logicals (no tensors, no vectors).
is_number_list <- function(data) {
  !is.object(data) && length(data) > 0L && all(vapply(data, function(v) {
    (is.numeric(v) || is.logical(v)) && !is.object(v) && length(v) == 1L && is.null(dim(v))
  }, logical(1)))
}

# A new tensor `x` moved to `dtype` and `device` (NULL: as it is), requiring gradients if
# asked: `$to()` and `$requires_grad_()` rows (device strings and all through C).
tensor_to <- function(x, dtype, device, requires_grad) {
  if (!is.null(dtype)) x <- x$to(dtype = dtype)
  if (!is.null(device)) x <- x$to(device = device)
  if (isTRUE(requires_grad)) x$requires_grad_(TRUE)
  x
}

#' Convert a tensor to an R array
#'
#' @param x A `torch_tensor`.
#' @return An R vector (1-d), matrix or array with the tensor's shape and values.
#' @examples
#' if (torch_is_installed()) {
#'   as_array(torch_ones(2, 3))
#' }
#' @export
as_array <- function(x) UseMethod("as_array")

#' @export
as_array.torch_tensor <- function(x) {
  if (isTRUE(.tb$tracing)) note_r_location() # the guard it records names the R line
  # src/array.c reads the values of a CPU tensor from its memory; R converts the rest.
  out <- .Call(tb_as_array, x)
  if (!is.symbol(out)) return(out)
  if (identical(out, quote(.tb_error))) c_error(one_based = FALSE)
  c_started()
  out <- reticulate::py_to_r(py_rb()$tensor_to_r(tensor_py(x)))
  d <- dim(out)
  if (length(d) <= 1) out <- as.vector(out)
  out
}

#' @export
as.array.torch_tensor <- function(x, ...) as_array(x)

#' @export
as.numeric.torch_tensor <- function(x, ...) as.numeric(as_array(x))

#' @export
as.double.torch_tensor <- function(x, ...) as.double(as_array(x))

#' @export
as.integer.torch_tensor <- function(x, ...) as.integer(as_array(x))

#' @export
as.logical.torch_tensor <- function(x, ...) as.logical(as_array(x))

#' @export
as.matrix.torch_tensor <- function(x, ...) as.matrix(as_array(x))

#' @export
print.torch_tensor <- function(x, n = 30, ...) {
  py <- tensor_py(x)
  # The text through src/surface.c (a string comes back as R's); reticulate otherwise.
  text <- .Call(tb_call_method_r, py_rb(), "format_tensor", list(x))
  if (!is.character(text)) text <- reticulate::py_to_r(py_rb()$format_tensor(py))
  text <- truncate_lines(text, n)
  if (isTRUE(x$requires_grad)) {
    # As mlverse prints it: results of recorded operations name their backward function.
    fn <- py$grad_fn
    footer <- if (inherits(fn, "python.builtin.NoneType")) "[ requires_grad = TRUE ]" else
      sprintf("[ grad_fn = <%s> ]", reticulate::py_to_r(fn$name()))
    if (!grepl(footer, text, fixed = TRUE)) text <- paste0(text, footer)
  }
  cat(text, "\n", sep = "")
  invisible(x)
}

# At most `n` lines of values (negative: all), as mlverse prints: the first line names the
# class and the last the type and shape.
truncate_lines <- function(text, n) {
  lines <- strsplit(text, "\n", fixed = TRUE)[[1]]
  if (n < 0 || length(lines) <= n + 2L) return(text)
  paste(c(lines[seq_len(n + 1L)], "... [the output was truncated (use n=-1 to disable)]",
          lines[[length(lines)]]), collapse = "\n")
}

#' @export
dim.torch_tensor <- function(x) {
  # Outside a trace, the `$size()` row gives R integers through C; while tracing, sizes
  # are traced integers, as `x$shape` gives them.
  if (!isTRUE(.tb$tracing)) {
    sizes <- x$size()
    if (is.integer(sizes)) return(sizes)
  }
  traced_dim(x) # R/traced-sizes.R
}

#' @export
length.torch_tensor <- function(x) {
  # While tracing, numel() is a traced integer: R's length() must be an R integer, so its
  # value is read, with a guard (as seq_len() of a traced size does).
  if (!isTRUE(.tb$tracing)) return(x$numel()) # the `numel` row, through C
  n <- from_py(tensor_py(x)$numel())
  if (inherits(n, "torch_sym_int")) as.integer(n) else n
}

#' @export
str.torch_tensor <- function(object, ...) {
  cat(reticulate::py_to_r(py_rb()$type_string(tensor_py(object))), "\n")
}

# ---- factories not in the table ------------------------------------------------

#' Ranges
#'
#' As in mlverse torch (and R's `seq()`), `end` is included. The other factories
#' (`torch_zeros()`, `torch_linspace()`, ...) come from the surface table: see
#' [surface].
#'
#' @param start,end,step The range.
#' @param dtype A data type; `NULL` chooses `int64` for integer arguments, else the default
#'   dtype (`float32` unless [torch_set_default_dtype()] changed it).
#' @param device A device, e.g. `"cpu"` or [torch_device()].
#' @param requires_grad Whether autograd records operations on the tensor.
#' @return A 1-d `torch_tensor`.
#' @name torch_arange
#' @examples
#' if (torch_is_installed()) {
#'   torch_arange(1, 5)
#'   torch_arange(0, 1, 0.25)
#' }
NULL

#' @rdname torch_arange
#' @export
torch_arange <- function(start, end, step = 1, dtype = NULL, device = NULL,
                         requires_grad = FALSE) {
  if (is_sym_arange(start, end, step)) {
    return(sym_arange(start, end, step, dtype, device, requires_grad)) # R/traced-sizes.R
  }
  if (is.null(dtype)) {
    dtype <- if (is.integer(start) && is.integer(end) && is.integer(step)) torch_long() else
      default_float()
  }
  last <- as.double(arange_end(start, end, step)) # R/traced-sizes.R
  # `requires_grad` only when TRUE: a trace records the keywords it is given, and the op
  # set has no `requires_grad` on factories (a traced arange would not save).
  grad <- if (isTRUE(requires_grad)) list(requires_grad = TRUE)
  # Through src/surface.c (tb_call_method); reticulate where C does not apply.
  out <- .Call(tb_call_method, py_torch(), "arange",
               c(list(as.double(start), last, as.double(step), dtype = dtype,
                      device = if (!is.null(device)) device_py(device)), grad))
  if (!is.symbol(out)) return(out)
  if (identical(out, quote(.tb_error))) c_error(one_based = FALSE)
  c_started()
  wrap_tensor(withCallingHandlers(
    do.call(tb_py_call, c(list(py_torch()$arange, as.double(start), last, as.double(step),
                               dtype = dtype_py(dtype), device = device_py(device)), grad)),
    error = function(e) rethrow_python(e)
  ))
}

#' Seed the random number generator
#'
#' @param seed An integer seed.
#' @return `NULL`, invisibly.
#' @examples
#' if (torch_is_installed()) torch_manual_seed(42)
#' @export
torch_manual_seed <- function(seed) {
  out <- .Call(tb_call_method, py_torch(), "manual_seed", list(as.integer(seed)))
  if (is.symbol(out) && identical(c_answer(out, FALSE), quote(.tb_fallback))) {
    py_torch()$manual_seed(as.integer(seed))
  }
  invisible(NULL)
}

# ---- operators -------------------------------------------------------------------

scalar_py <- function(x) {
  if (inherits(x, c("torch_tensor", "torch_sym_int"))) return(.subset2(x, ".py"))
  if (length(x) != 1) return(tensor_py(torch_tensor(x)))
  if (is.integer(x)) return(reticulate::r_to_py(x))
  reticulate::r_to_py(x)
}

#' @export
Ops.torch_tensor <- function(e1, e2) {
  # Traced sizes share this method (R/traced-sizes.R), so that R dispatches
  # `x$sum() / x$size(1)` to one method instead of refusing two.
  if (!inherits(e1, "torch_tensor") && (missing(e2) || !inherits(e2, "torch_tensor"))) {
    return(sym_int_ops(.Generic, e1, if (!missing(e2)) e2))
  }
  if (isTRUE(.tb$tracing)) note_r_location()
  if (missing(e2)) {
    # Through the surface rows (src/surface.c) like every op.
    if (.Generic == "-") return(surface_fn("torch_neg")(e1))
    if (.Generic == "!") return(surface_fn("torch_logical_not")(e1))
    if (.Generic == "+") return(e1)
  }
  # src/surface.c (tb_binary) for tensors and single numbers; R for the rest.
  out <- .Call(tb_binary, .Generic, e1, e2)
  if (!is.symbol(out)) return(if (is.environment(out)) wrap_tensor(c_other(out)) else out)
  if (identical(out, quote(.tb_error))) c_error()
  c_started()
  check_operand(.Generic, e1)
  check_operand(.Generic, e2)
  out <- withCallingHandlers(py_rb()$binary(.Generic, scalar_py(e1), scalar_py(e2)),
                             error = function(e) rethrow_python(e, one_based = TRUE))
  wrap_tensor(out)
}

# A character operand of `x + y` (R's arithmetic refuses it too): Python's own words would
# name its types, not R's. Other operands (a trace's Python numbers, complex) go on.
check_operand <- function(op, v) {
  if (!is.character(v)) return(invisible())
  type_error(sprintf(paste(
    "`%s` of a tensor and a character value: the other operand must be a tensor, numbers",
    "or logicals."), op))
}

# `x %*% y`: torch_matmul(), an R matrix or vector on either side made a tensor first.
# R dispatches `%*%` to S3 methods from R 4.3 on (the matrixOps group), registered at
# load. Before 4.3 it dispatches only when an argument is an S4 object, which a tensor
# is not: there `%*%` stays base R's ("requires numeric/complex matrix/vector
# arguments"), and torch_matmul() is the way.
tensor_matmul <- function(x, y) {
  if (!inherits(x, "torch_tensor")) x <- torch_tensor(x)
  if (!inherits(y, "torch_tensor")) y <- torch_tensor(y)
  torch_matmul(x, y)
}

register_matmul <- function() {
  if (getRversion() >= "4.3.0") {
    registerS3method("matrixOps", "torch_tensor",
                     function(x, y) tensor_matmul(x, y), envir = baseenv())
  }
  invisible()
}

#' @export
Math.torch_tensor <- function(x, ...) {
  fn <- switch(.Generic,
    abs = "abs", sqrt = "sqrt", exp = "exp", log = "log", cos = "cos", sin = "sin",
    tan = "tan", tanh = "tanh", floor = "floor", ceiling = "ceil", round = "round",
    sign = "sign", log2 = "log2", log10 = "log10", log1p = "log1p", expm1 = "expm1",
    acos = "acos", asin = "asin", atan = "atan", cosh = "cosh", sinh = "sinh",
    trunc = "trunc", lgamma = "lgamma", digamma = "digamma", cumsum = "cumsum",
    cumprod = "cumprod",
    tracebridge_abort(sprintf("%s() is not supported for tensors.", .Generic))
  )
  py <- tensor_py(x)
  extra <- list(...)
  call <- function(f, ...) {
    withCallingHandlers(wrap_tensor(tb_py_call(f, ...)),
                        error = function(e) rethrow_python(e, one_based = TRUE))
  }
  # R's cumsum()/cumprod() run over the elements in R's (column-major) order, as for an
  # R array; a vector gives what it gives in R.
  if (fn %in% c("cumsum", "cumprod")) {
    nd <- length(dim(x))
    flat <- if (nd > 1) py$permute(as.list(rev(seq_len(nd) - 1L)))$reshape(-1L) else
      py$reshape(-1L)
    return(call(reticulate::py_get_attr(py_torch(), fn), flat, 0L))
  }
  # The second argument of round(x, digits) and log(x, base) is R's too.
  if (fn == "round" && length(extra)) {
    return(call(py_torch()$round, py, decimals = as.integer(extra[[1]])))
  }
  if (fn == "log" && length(extra)) {
    return(call(py_torch()$log, py) / log(extra[[1]]))
  }
  # The rest are rows of the surface table (torch_abs(), torch_sqrt(), ...): through C.
  surface_fn(paste0("torch_", fn))(x)
}

#' @export
Summary.torch_tensor <- function(..., na.rm = FALSE) {
  args <- list(...)
  x <- args[[1]]
  if (length(args) > 1) {
    x <- surface_fn("torch_cat")(lapply(args, function(a) as_tensor(a)$flatten()))
  }
  # The rows of the surface table (through C) where nothing is left out.
  row <- switch(.Generic, sum = "torch_sum", prod = "torch_prod", max = "torch_max",
                min = "torch_min", all = "torch_all", any = "torch_any", NULL)
  if (!is.null(row) && !isTRUE(na.rm)) return(surface_fn(row)(x))
  py <- tensor_py(x)
  # As in R, na.rm = TRUE leaves out NA/NaN (it was ignored, so sum() gave NaN).
  if (isTRUE(na.rm) && reticulate::py_to_r(py$dtype$is_floating_point)) {
    py <- py$masked_select(py$isnan()$logical_not())
  }
  withCallingHandlers(switch(.Generic,
    sum = wrap_tensor(tb_py_call(py$sum)),
    prod = wrap_tensor(tb_py_call(py$prod)),
    max = wrap_tensor(tb_py_call(py$max)),
    min = wrap_tensor(tb_py_call(py$min)),
    all = wrap_tensor(tb_py_call(py$all)),
    any = wrap_tensor(tb_py_call(py$any)),
    range = surface_fn("torch_stack")(list(wrap_tensor(py$min()), wrap_tensor(py$max()))),
    tracebridge_abort(sprintf("%s() is not supported for tensors.", .Generic))
  ), error = function(e) rethrow_python(e))
}

# Base R functions an R user calls on a tensor, with R's meaning. Without these, R's
# defaults would see the wrapper list and answer silently wrongly (rev() gave an empty
# tensor, is.na() FALSE, mean() NA).

#' @export
mean.torch_tensor <- function(x, ...) surface_fn("torch_mean")(x) # through C

#' @export
is.na.torch_tensor <- function(x) x$isnan() # the `isnan` row, through C

# A tensor is a list holding its Python object (`.py`) for R, but has no names for the
# user: NULL, as for an R array without dimnames and as in mlverse. (".py" made base R
# functions that drop names, such as median(), take the tensor apart.)
#' @export
names.torch_tensor <- function(x) NULL

# Setting NULL keeps the tensor whole (it would drop `.py`); other names are refused.
#' @export
`names<-.torch_tensor` <- function(x, value) {
  if (is.null(value)) return(x)
  tracebridge_abort(paste(
    "Tensors can not have names: keep them in an R vector beside the tensor,",
    "or convert with as_array() first."), "value_error")
}

# mlverse torch has no median() or quantile() method for tensors; R's defaults would
# sort and index the tensor as an R vector. Say what to call instead.
#' @exportS3Method stats::median
median.torch_tensor <- function(x, na.rm = FALSE, ...) {
  tracebridge_abort(paste(
    "median() is not defined for tensors (as in mlverse torch): use torch_median(x)",
    "(for an even count it gives the lower of the two middle values, not their mean),",
    "or median(as_array(x)) for R's median."), "not_implemented_error")
}

#' @exportS3Method stats::quantile
quantile.torch_tensor <- function(x, ...) {
  tracebridge_abort(paste(
    "quantile() is not defined for tensors (as in mlverse torch): use torch_quantile(x, q)",
    "(q: a probability or a vector of them), or quantile(as_array(x)) for R's quantiles."),
    "not_implemented_error")
}

#' @export
t.torch_tensor <- function(x) {
  if (length(dim(x)) > 2) {
    tracebridge_abort(sprintf(
      "t() takes a tensor of at most 2 dimensions, not %d; use $permute() or $transpose().",
      length(dim(x))), "value_error")
  }
  x$t() # the `t` row, through C
}

# The elements in R's (column-major) order, as a 1-d tensor.
r_order_flat <- function(x) {
  nd <- length(dim(x))
  py <- tensor_py(x)
  if (nd > 1) py <- py$permute(as.list(rev(seq_len(nd) - 1L)))
  py$reshape(-1L)
}

#' @export
rev.torch_tensor <- function(x) wrap_tensor(py_torch()$flip(r_order_flat(x), list(0L)))

#' @export
unique.torch_tensor <- function(x, incomparables = FALSE, ...) {
  # R keeps the order of first appearance (torch sorts) and, for a matrix, unique rows.
  torch_tensor(unique(as_array(x), incomparables = incomparables, ...), dtype = x$dtype,
               device = x$device)
}

#' @export
as.vector.torch_tensor <- function(x, mode = "any") as.vector(as_array(x), mode = mode)

# ---- traced integers: R/traced-sizes.R ---------------------------------------------

# ---- fields and methods through `$` ------------------------------------------------

# Methods come from the surface table (inst/surface.tsv); these are fields.
tensor_fields <- c("shape", "dtype", "device", "requires_grad", "grad", "grad_fn", "data",
                   "is_cuda", "is_leaf", "ndim", "py", "register_hook")

`%||%` <- function(a, b) if (is.null(a)) b else a

# x$size() gives an R integer vector; traced sizes stay a list of traced integers, classed
# so that `x$shape[1]` is one traced integer, as it is one R integer (R/traced-sizes.R).
simplify_sizes <- function(out) {
  if (is.list(out) && !any(vapply(out, inherits, logical(1), "torch_sym_int"))) {
    return(as.integer(unlist(out)))
  }
  if (is.list(out)) class(out) <- "torch_sym_sizes"
  out
}

#' @export
`$.torch_tensor` <- function(x, name) {
  # Methods first (src/surface.c, tb_method()): they are what loops call.
  m <- .Call(tb_method, x, name)
  if (is.null(m)) tensor_field(x, name) else m
}

tensor_field <- function(x, name) {
  # Through src/fields.c where it applies (outside traces; `$data` tells the shift cache
  # there; not `$py`); R below for the rest.
  out <- .Call(tb_tensor_field, x, name)
  if (!is.symbol(out)) return(out)
  py <- .subset2(x, ".py")
  switch(name,
    shape = return(simplify_sizes(from_py(py_rb()$sizes(py)))),
    dtype = return(remember_field(x, name, dtype_from_py(py$dtype))),
    requires_grad = return(reticulate::py_to_r(py$requires_grad)),
    grad = return(from_py(py$grad)),
    grad_fn = return(grad_fn_from_py(py$grad_fn)),
    data = {
      .Call(tb_shift_untracked, x) # its writes are not counted (src/convert.c)
      return(wrap_tensor(py$data))
    },
    is_leaf = return(reticulate::py_to_r(py$is_leaf)),
    is_cuda = return(reticulate::py_to_r(py$is_cuda)),
    ndim = return(reticulate::py_to_r(py$ndim)),
    device = return(remember_field(x, name, device_from_py(py$device))),
    register_hook = return(function(hook) register_hook(py, hook)),
    py = {
      .Call(tb_shift_untracked, x) # Python code may write without counting it
      return(py)
    }
  )
  fn <- get0(name, envir = .tb$methods, inherits = FALSE)
  if (is.null(fn)) {
    tracebridge_abort(sprintf(paste(
      "Tensors have no method `%s` in tracebridge's R surface (inst/surface.tsv).",
      "For the raw Python method (0-based), use `x$py$%s`."), name, name),
      "tracebridge_no_method_error")
  }
  function(...) fn(x, ...)
}

# A dtype or device R made for `x$dtype` or `x$device`, handed to src/fields.c, which
# answers it again for the next tensor with that dtype or device.
remember_field <- function(x, name, value) {
  .Call(tb_field_remember, x, name, value)
  value
}

# x$register_hook(hook): `hook` gets the gradient and returns a replacement or NULL (keep
# it). An R error inside it is re-raised as it was when backward() returns.
register_hook <- function(py, hook) {
  if (!is.function(hook)) {
    tracebridge_abort("register_hook(): `hook` must be a function of the gradient.", "type_error")
  }
  fn <- r_function_py(checked_hook(hook), "the hook of register_hook()")
  # The handle (its `$remove()`) through src/surface.c; reticulate where C does not apply.
  out <- .Call(tb_call_method, py, "register_hook", list(fn))
  if (is.environment(out)) return(invisible(c_other(out)))
  if (identical(out, quote(.tb_error))) c_error(FALSE)
  invisible(py$register_hook(fn))
}

# The hook, its result checked. Made apart from register_hook()'s frame, which holds the
# callable (see keeping_conditions() in R/callbacks.R).
checked_hook <- function(hook) {
  force(hook)
  function(g) {
    out <- hook(g)
    if (!is.null(out) && !inherits(out, "torch_tensor")) {
      callback_abort(sprintf("register_hook(): the hook returned %s; return a tensor or NULL.",
                             describe_value(out)), "type_error")
    }
    out
  }
}

#' @export
`$<-.torch_tensor` <- function(x, name, value) {
  # `requires_grad` and `grad` through C (src/fields.c); R's path for the rest, and
  # where C does not apply or Python refused (R then does it, or raises, its way).
  out <- switch(name,
    requires_grad = .Call(tb_set_attr, x, name, isTRUE(value)),
    grad = .Call(tb_set_attr, x, name, value),
    quote(.tb_fallback))
  if (!is.symbol(out)) return(x)
  py <- .subset2(x, ".py")
  switch(name,
    requires_grad = py$requires_grad_(isTRUE(value)),
    grad = reticulate::py_set_attr(py, "grad", if (is.null(value)) NULL else tensor_py(value)),
    data = {
      .Call(tb_shift_untracked, x) # a new value torch does not count (src/convert.c)
      # Through src/fields.c (tb_set_attr); reticulate where C does not apply.
      if (is.symbol(.Call(tb_set_attr, x, name, value))) {
        reticulate::py_set_attr(py, "data", tensor_py(value))
      }
    },
    tracebridge_abort(sprintf("Tensor field `%s` can not be assigned.", name))
  )
  x
}

#' @export
`[[.torch_tensor` <- function(x, i) {
  if (is.character(i) && length(i) == 1) return(`$.torch_tensor`(x, i))
  # A number picks an element of a vector, as for R vectors (it once read the shape).
  if (is.numeric(i) && length(i) == 1 && length(dim(x)) == 1) return(x[i])
  tracebridge_abort(paste(
    "x[[i]] takes a field or method name, or one position of a 1-d tensor;",
    "index other tensors with x[i, j]."), "index_error")
}

#' @importFrom utils .DollarNames
#' @export
.DollarNames.torch_tensor <- function(x, pattern = "") {
  nms <- sort(c(tensor_fields, ls(.tb$methods)))
  nms[grepl(pattern, nms)]
}

# The backward function of a tensor that a recorded operation made (`x$grad_fn`).
grad_fn_from_py <- function(py) {
  if (inherits(py, "python.builtin.NoneType")) return(NULL)
  structure(list(.py = py, name = reticulate::py_to_r(py$name())), class = "torch_grad_fn")
}

#' @export
print.torch_grad_fn <- function(x, ...) {
  cat(x$name, "\n", sep = "")
  invisible(x)
}
