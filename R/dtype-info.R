# Data types and scalars as mlverse torch names them: the default dtype, the limits of a
# dtype (torch_finfo(), torch_iinfo()), 0-d tensors and the class test. Small R functions
# over Python torch; they are not table rows because their results are R lists or R
# values that no row kind describes.

#' Default dtype, dtype limits, 0-d tensors
#'
#' `torch_get_default_dtype()` is the floating point type that R doubles become (float32
#' unless `torch_set_default_dtype()` changed it). `torch_finfo()` and `torch_iinfo()`
#' give the limits of a floating point or an integer type as a list, as PyTorch's
#' `torch.finfo` and `torch.iinfo` do. `torch_scalar_tensor()` makes a 0-d tensor (no
#' dimension) from one value; `is_torch_tensor()` tells a tensor from other R values.
#'
#' @param dtype A dtype such as [torch_float()] (`torch_set_default_dtype()`: a floating
#'   point one).
#' @param value One number, logical, or a tensor of one element.
#' @param device A device, e.g. `"cpu"`.
#' @param requires_grad Whether autograd records operations on the tensor.
#' @param x Any R value.
#' @return `torch_get_default_dtype()`: a dtype. `torch_finfo()`: a list with `bits`,
#'   `eps`, `max`, `min`, `tiny` and `resolution`. `torch_iinfo()`: a list with `bits`,
#'   `max` and `min` (doubles: int64's limits are past R's integers).
#'   `torch_scalar_tensor()`: a 0-d tensor. `is_torch_tensor()`: `TRUE` or `FALSE`.
#' @examples
#' if (torch_is_installed()) {
#'   torch_get_default_dtype()
#'   torch_finfo(torch_float32())$eps
#'   torch_iinfo(torch_int32())$max
#'   x <- torch_scalar_tensor(3)
#'   dim(x)
#'   is_torch_tensor(x)
#' }
#' @name torch_finfo
NULL

#' @rdname torch_finfo
#' @export
torch_get_default_dtype <- function() {
  if (is.null(.tb$python_ready)) python_ready()
  dtype_from_py(py_torch()$get_default_dtype())
}

#' @rdname torch_finfo
#' @export
torch_set_default_dtype <- function(dtype) {
  if (is.null(.tb$python_ready)) python_ready()
  checked_dtype(dtype, "torch_set_default_dtype()")
  withCallingHandlers(py_torch()$set_default_dtype(dtype_py(dtype)),
                      error = function(e) rethrow_python(e))
  .tb$default_float <- dtype # what R doubles become (default_float())
  invisible(NULL)
}

# The dtype that R doubles become where no dtype is given (torch_tensor(), torch_arange(),
# traced numbers), as Python's torch.tensor(1.5) is torch.get_default_dtype(): float32
# unless torch_set_default_dtype() said otherwise.
default_float <- function() {
  d <- .tb$default_float
  if (is.null(d)) torch_float() else d
}

#' @rdname torch_finfo
#' @export
torch_finfo <- function(dtype) {
  if (is.null(.tb$python_ready)) python_ready()
  checked_dtype(dtype, "torch_finfo()")
  if (!reticulate::py_to_r(dtype_py(dtype)$is_floating_point)) {
    value_error(sprintf(
      "torch_finfo(): %s is not a floating point type; use torch_iinfo() for integer types.",
      attr(dtype, "name")))
  }
  info <- py_torch()$finfo(dtype_py(dtype))
  fields <- c("bits", "eps", "max", "min", "tiny", "resolution")
  stats::setNames(lapply(fields, function(f) py_number(info, f)), fields)
}

#' @rdname torch_finfo
#' @export
torch_iinfo <- function(dtype) {
  if (is.null(.tb$python_ready)) python_ready()
  checked_dtype(dtype, "torch_iinfo()")
  name <- attr(dtype, "name")
  if (reticulate::py_to_r(dtype_py(dtype)$is_floating_point) || name == "bool") {
    value_error(sprintf(
      "torch_iinfo(): %s is not an integer type; use torch_finfo() for floating point types.",
      name))
  }
  info <- py_torch()$iinfo(dtype_py(dtype))
  fields <- c("bits", "max", "min")
  stats::setNames(lapply(fields, function(f) py_number(info, f)), fields)
}

#' @rdname torch_finfo
#' @export
torch_scalar_tensor <- function(value, dtype = NULL, device = NULL, requires_grad = FALSE) {
  if (inherits(value, "torch_tensor")) {
    value <- value$detach()
    if (value$numel() != 1) {
      value_error(sprintf("torch_scalar_tensor(): `value` has %d elements; give one.",
                          value$numel()))
    }
    out <- value$reshape(integer(0))$clone()
    if (!is.null(dtype) || !is.null(device)) out <- out$to(dtype = dtype, device = device)
  } else {
    if (length(value) != 1 || !(is.numeric(value) || is.logical(value))) {
      value_error(sprintf("torch_scalar_tensor(): `value` must be one number or logical, not %s.",
                          describe_value(value)))
    }
    out <- torch_tensor(value, dtype = dtype, device = device)$reshape(integer(0))
  }
  if (isTRUE(requires_grad)) out$requires_grad_(TRUE)
  out
}

#' @rdname torch_finfo
#' @export
is_torch_tensor <- function(x) inherits(x, "torch_tensor")

# A number field of a Python object as an R double, read from its text: int64's limits
# do not fit R's integers, and Python prints a float so that it reads back exactly.
py_number <- function(obj, field) {
  as.numeric(reticulate::py_str(reticulate::py_get_attr(obj, field)))
}

checked_dtype <- function(dtype, where) {
  if (!inherits(dtype, "torch_dtype")) {
    type_error(sprintf("%s: `dtype` must be a dtype such as torch_float32(), not %s.", where,
                       describe_value(dtype)))
  }
}
