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

as_tensor <- function(x) if (inherits(x, "torch_tensor")) x else torch_tensor(x)

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
  function() structure(list(.py = reticulate::py_get_attr(py_torch(), name)),
                       name = name, class = "torch_dtype")
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
#' `as_array(torch_tensor(m))[i, j] == m[i, j]`. Doubles become `float32`, integers
#' `int64`, logicals `bool`, unless `dtype` says otherwise.
#'
#' @param data An R vector, matrix or array, or a tensor.
#' @param dtype A data type such as [torch_float()]; `NULL` chooses from `data`.
#' @param requires_grad Whether autograd records operations on the tensor.
#' @return A `torch_tensor`.
#' @examples
#' if (torch_is_installed()) {
#'   x <- torch_tensor(matrix(1:6, nrow = 2))
#'   x
#'   as_array(x)
#' }
#' @export
torch_tensor <- function(data, dtype = NULL, requires_grad = FALSE) {
  if (inherits(data, "torch_tensor")) {
    py <- tensor_py(data)$clone()
    if (!is.null(dtype)) py <- py$to(dtype_py(dtype))
    if (requires_grad) py$requires_grad_(TRUE)
    return(wrap_tensor(py))
  }
  if (is.null(dtype)) {
    dtype <- if (is.logical(data)) torch_bool() else if (is.integer(data)) torch_long() else
      torch_float()
  }
  if (!(is.numeric(data) || is.logical(data))) {
    tracebridge_abort(sprintf("Cannot make a tensor from %s.", describe_value(data)))
  }
  arr <- if (is.null(dim(data))) {
    reticulate::np_array(as.vector(data))
  } else {
    reticulate::r_to_py(data)
  }
  wrap_tensor(py_rb()$tensor_from_r(arr, dtype_py(dtype), isTRUE(requires_grad)))
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
print.torch_tensor <- function(x, ...) {
  cat(reticulate::py_to_r(py_rb()$format_tensor(tensor_py(x))), "\n", sep = "")
  invisible(x)
}

#' @export
dim.torch_tensor <- function(x) {
  as.integer(unlist(reticulate::py_to_r(py_rb()$plain_sizes(tensor_py(x)))))
}

#' @export
length.torch_tensor <- function(x) 1L

#' @export
str.torch_tensor <- function(object, ...) {
  cat(reticulate::py_to_r(py_rb()$type_string(tensor_py(object))), "\n")
}

# ---- factories -------------------------------------------------------------------

size_args <- function(...) {
  dims <- list(...)
  if (length(dims) == 1 && (is.list(dims[[1]]) || length(dims[[1]]) > 1)) dims <- dims[[1]]
  reticulate::tuple(lapply(dims, arg_py), convert = FALSE)
}

factory <- function(fn, size, dtype, requires_grad) {
  py <- tb_py_call(
    reticulate::py_get_attr(py_torch(), fn), size,
    dtype = dtype_py(dtype), requires_grad = isTRUE(requires_grad)
  )
  wrap_tensor(py)
}

#' Tensors filled with zeros, ones or random numbers
#'
#' `...` gives the sizes, as separate numbers or one vector: `torch_zeros(2, 3)` and
#' `torch_zeros(c(2, 3))` are the same.
#'
#' @param ... Sizes.
#' @param dtype A data type; `NULL` means `float32`.
#' @param requires_grad Whether autograd records operations on the tensor.
#' @return A `torch_tensor`.
#' @name torch_factories
#' @examples
#' if (torch_is_installed()) {
#'   torch_zeros(2, 3)
#'   torch_manual_seed(1)
#'   dim(torch_randn(c(4, 2)))
#' }
NULL

#' @rdname torch_factories
#' @export
torch_zeros <- function(..., dtype = NULL, requires_grad = FALSE) {
  factory("zeros", size_args(...), dtype, requires_grad)
}

#' @rdname torch_factories
#' @export
torch_ones <- function(..., dtype = NULL, requires_grad = FALSE) {
  factory("ones", size_args(...), dtype, requires_grad)
}

#' @rdname torch_factories
#' @export
torch_rand <- function(..., dtype = NULL, requires_grad = FALSE) {
  factory("rand", size_args(...), dtype, requires_grad)
}

#' @rdname torch_factories
#' @export
torch_randn <- function(..., dtype = NULL, requires_grad = FALSE) {
  factory("randn", size_args(...), dtype, requires_grad)
}

#' @rdname torch_factories
#' @param n,m Rows and columns of the identity matrix.
#' @export
torch_eye <- function(n, m = n, dtype = NULL, requires_grad = FALSE) {
  wrap_tensor(py_torch()$eye(
    arg_py(n), arg_py(m), dtype = dtype_py(dtype), requires_grad = isTRUE(requires_grad)
  ))
}

#' @rdname torch_factories
#' @param start,end,step The range. As in mlverse torch (and R's `seq()`), `end` is
#'   included.
#' @export
torch_arange <- function(start, end, step = 1, dtype = NULL, requires_grad = FALSE) {
  if (is.null(dtype)) {
    dtype <- if (is.integer(start) && is.integer(end) && is.integer(step)) torch_long() else
      torch_float()
  }
  wrap_tensor(py_torch()$arange(
    as.double(start), as.double(end) + as.double(step) / 2, as.double(step),
    dtype = dtype_py(dtype), requires_grad = isTRUE(requires_grad)
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
  py_torch()$manual_seed(as.integer(seed))
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
  if (missing(e2)) {
    if (.Generic == "-") return(wrap_tensor(tensor_py(e1)$neg()))
    if (.Generic == "!") return(wrap_tensor(tensor_py(e1)$logical_not()))
    if (.Generic == "+") return(e1)
  }
  wrap_tensor(py_rb()$binary(.Generic, scalar_py(e1), scalar_py(e2)))
}

#' @export
Math.torch_tensor <- function(x, ...) {
  fn <- switch(.Generic,
    abs = "abs", sqrt = "sqrt", exp = "exp", log = "log", cos = "cos", sin = "sin",
    tan = "tan", tanh = "tanh", floor = "floor", ceiling = "ceil", round = "round",
    sign = "sign", log2 = "log2", log10 = "log10", log1p = "log1p", expm1 = "expm1",
    cumsum = "cumsum",
    tracebridge_abort(sprintf("%s() is not supported for tensors.", .Generic))
  )
  if (fn == "cumsum") return(wrap_tensor(py_torch()$cumsum(tensor_py(x), 0L)))
  wrap_tensor(tb_py_call(reticulate::py_get_attr(py_torch(), fn), tensor_py(x)))
}

# ---- traced integers ---------------------------------------------------------------

#' @export
Ops.torch_sym_int <- function(e1, e2) {
  if (missing(e2)) {
    if (.Generic == "-") return(from_py(py_rb()$binary("-", 0L, .subset2(e1, ".py"))))
    return(e1)
  }
  from_py(py_rb()$binary(.Generic, scalar_py(e1), scalar_py(e2)))
}

#' @export
as.integer.torch_sym_int <- function(x, ...) {
  reticulate::py_to_r(py_rb()$to_int(.subset2(x, ".py")))
}

#' @export
as.numeric.torch_sym_int <- function(x, ...) as.numeric(as.integer(x))

#' @export
as.double.torch_sym_int <- function(x, ...) as.double(as.integer(x))

#' @export
print.torch_sym_int <- function(x, ...) {
  cat("<traced integer>\n")
  invisible(x)
}

# ---- methods through `$` -----------------------------------------------------------

# Positional arguments that are dimensions, by method; named ones are found by name.
dim_positions <- list(
  size = 1, transpose = 1:2, sum = 1, mean = 1, softmax = 1, log_softmax = 1,
  flatten = 1:2, squeeze = 1, unsqueeze = 1, max = 1, min = 1, argmax = 1, argmin = 1,
  cumsum = 1, cumprod = 1, prod = 1, select = 1, narrow = 1, chunk = 2, split = 2,
  std = 1, var = 1, norm = 2, movedim = 1:2, unbind = 1, flip = 1, permute = 1,
  amax = 1, amin = 1, logsumexp = 1, all = 1, any = 1, gather = 1, index_select = 1,
  repeat_interleave = 2, roll = 2, diff = 2, topk = 2, sort = 1, argsort = 1
)
dim_names <- c("dim", "dim0", "dim1", "start_dim", "end_dim", "dims", "source",
               "destination")

convert_method_args <- function(name, args) {
  pos <- dim_positions[[name]]
  nms <- names(args) %||% rep("", length(args))
  positional <- 0L
  for (i in seq_along(args)) {
    if (!nzchar(nms[[i]])) {
      positional <- positional + 1L
      if (positional %in% pos) args[[i]] <- dim_py(args[[i]])
    } else if (nms[[i]] %in% dim_names) {
      args[[i]] <- dim_py(args[[i]])
    }
  }
  args
}

`%||%` <- function(a, b) if (is.null(a)) b else a

call_method <- function(py, name, args) {
  args <- convert_method_args(name, args)
  method <- reticulate::py_get_attr(py, name)
  out <- do.call(tb_py_call, c(list(method), lapply(args, arg_py)))
  out <- from_py(out)
  if (name %in% c("size", "dim", "numel", "item", "tolist")) out <- simplify_sizes(out)
  out
}

# x$size() gives an R integer vector; traced sizes stay a list of traced integers.
simplify_sizes <- function(out) {
  if (is.list(out) && all(vapply(out, is.numeric, logical(1)))) {
    return(as.integer(unlist(out)))
  }
  out
}

#' @export
`$.torch_tensor` <- function(x, name) {
  py <- .subset2(x, ".py")
  switch(name,
    shape = return(simplify_sizes(from_py(py_rb()$sizes(py)))),
    dtype = return(structure(list(.py = py$dtype),
                             name = sub("torch.", "", reticulate::py_str(py$dtype),
                                        fixed = TRUE),
                             class = "torch_dtype")),
    requires_grad = return(reticulate::py_to_r(py$requires_grad)),
    grad = return(from_py(py$grad)),
    is_leaf = return(reticulate::py_to_r(py$is_leaf)),
    ndim = return(reticulate::py_to_r(py$ndim)),
    device = return(reticulate::py_str(py$device)),
    py = return(py)
  )
  force(name)
  function(...) call_method(py, name, list(...))
}

#' @export
`[[.torch_tensor` <- function(x, i) `$.torch_tensor`(x, i)

#' @importFrom utils .DollarNames
#' @export
.DollarNames.torch_tensor <- function(x, pattern = "") {
  nms <- reticulate::py_to_r(py_rb()$tensor_method_names())
  nms[grepl(pattern, nms)]
}

# ---- indexing ----------------------------------------------------------------------

index_spec <- function(i, size_missing) {
  if (size_missing) return(NULL)
  if (inherits(i, "torch_tensor")) {
    py <- tensor_py(i)
    if (reticulate::py_to_r(py$dtype$is_floating_point)) {
      tracebridge_abort("Index tensors must be integer or logical.")
    }
    if (reticulate::py_str(py$dtype) == "torch.bool") return(py)
    return(py$sub(1L))
  }
  if (is.logical(i)) return(tensor_py(torch_tensor(i)))
  if (!is.numeric(i)) tracebridge_abort("Indices must be numeric, logical or tensors.")
  if (any(i == 0)) tracebridge_abort("Indices are 1-based in R: 0 is not allowed.")
  i <- as.integer(i)
  zero <- ifelse(i > 0L, i - 1L, i)
  if (length(i) == 1) return(reticulate::r_to_py(zero))
  if (all(i > 0L) && all(diff(i) == 1L)) {
    return(reticulate::tuple("range", zero[[1]], zero[[length(zero)]] + 1L))
  }
  reticulate::r_to_py(as.list(zero))
}

build_index <- function(args, drop) {
  lapply(seq_along(args), function(k) {
    a <- args[[k]]
    if (is.null(a)) return(NULL)
    spec <- index_spec(a, FALSE)
    if (!drop && is.numeric(a) && length(a) == 1 && a > 0) {
      spec <- reticulate::tuple("range", as.integer(a) - 1L, as.integer(a))
    }
    spec
  })
}

dots_indices <- function(call_args, env) {
  # Missing arguments (x[1, ]) become NULL, "take everything".
  lapply(call_args, function(a) {
    if (identical(a, quote(expr = ))) return(NULL)
    v <- eval(a, env)
    if (is.null(v)) tracebridge_abort("NULL is not a valid index.")
    v
  })
}

#' @export
`[.torch_tensor` <- function(x, ..., drop = TRUE) {
  call_args <- as.list(sys.call())[-(1:2)]
  call_args <- call_args[names(call_args) %||% rep("", length(call_args)) != "drop"]
  idx <- dots_indices(call_args, parent.frame())
  spec <- reticulate::r_to_py(build_index(idx, drop), convert = FALSE)
  wrap_tensor(py_rb()$index(tensor_py(x), spec))
}

#' @export
`[<-.torch_tensor` <- function(x, ..., value) {
  call_args <- as.list(sys.call())[-(1:2)]
  call_args <- call_args[names(call_args) %||% rep("", length(call_args)) != "value"]
  idx <- dots_indices(call_args, parent.frame())
  spec <- reticulate::r_to_py(build_index(idx, TRUE), convert = FALSE)
  py_rb()$index(tensor_py(x), spec, scalar_py(value), TRUE)
  x
}
