# Tensor operations (`torch_*`) and their functional twins (`nnf_*`). Thin wrappers:
# convert at the boundary (tensors, 1-based dims, whole numbers to ints), call torch.

torch_fn <- function(name, ...) {
  fn <- reticulate::py_get_attr(py_torch(), name)
  from_py(tb_py_call(fn, ...))
}

nnf_fn <- function(name, ...) {
  fn <- reticulate::py_get_attr(py_torch()$nn$functional, name)
  from_py(tb_py_call(fn, ...))
}

tensors_py <- function(tensors) {
  reticulate::r_to_py(lapply(tensors, tensor_py), convert = FALSE)
}

opt_dim <- function(dim) if (is.null(dim)) NULL else dim_py(dim)

#' Elementwise functions
#'
#' @param self A `torch_tensor`.
#' @return A `torch_tensor` of the same shape.
#' @name torch_elementwise
#' @examples
#' if (torch_is_installed()) {
#'   torch_relu(torch_tensor(c(-1, 0, 2)))
#'   torch_sqrt(torch_tensor(c(4, 9)))
#' }
NULL

#' @rdname torch_elementwise
#' @export
torch_relu <- function(self) torch_fn("relu", tensor_py(self))
#' @rdname torch_elementwise
#' @export
torch_sigmoid <- function(self) torch_fn("sigmoid", tensor_py(self))
#' @rdname torch_elementwise
#' @export
torch_tanh <- function(self) torch_fn("tanh", tensor_py(self))
#' @rdname torch_elementwise
#' @export
torch_exp <- function(self) torch_fn("exp", tensor_py(self))
#' @rdname torch_elementwise
#' @export
torch_log <- function(self) torch_fn("log", tensor_py(self))
#' @rdname torch_elementwise
#' @export
torch_abs <- function(self) torch_fn("abs", tensor_py(self))
#' @rdname torch_elementwise
#' @export
torch_sqrt <- function(self) torch_fn("sqrt", tensor_py(self))

#' Matrix products
#'
#' @param self,other,mat2 Tensors.
#' @return A `torch_tensor`.
#' @name torch_matmul
#' @examples
#' if (torch_is_installed()) {
#'   a <- torch_tensor(matrix(1:6, 2))
#'   torch_mm(a, torch_eye(3, dtype = torch_long()))
#' }
NULL

#' @rdname torch_matmul
#' @export
torch_matmul <- function(self, other) torch_fn("matmul", tensor_py(self), tensor_py(other))
#' @rdname torch_matmul
#' @export
torch_mm <- function(self, mat2) torch_fn("mm", tensor_py(self), tensor_py(mat2))

#' Join tensors
#'
#' @param tensors A list of tensors.
#' @param dim The (1-based) dimension to join along.
#' @return A `torch_tensor`.
#' @name torch_cat
#' @examples
#' if (torch_is_installed()) {
#'   torch_cat(list(torch_ones(2, 2), torch_zeros(1, 2)), dim = 1)
#'   dim(torch_stack(list(torch_ones(2), torch_zeros(2)), dim = 2))
#' }
NULL

#' @rdname torch_cat
#' @export
torch_cat <- function(tensors, dim = 1) torch_fn("cat", tensors_py(tensors), dim_py(dim))
#' @rdname torch_cat
#' @export
torch_stack <- function(tensors, dim = 1) torch_fn("stack", tensors_py(tensors), dim_py(dim))

#' Reductions
#'
#' Without `dim`, reduce over all elements. With `dim` (1-based), `torch_max()` and
#' `torch_min()` return `list(values, indices)` with 1-based indices, as in mlverse torch.
#'
#' @param self A `torch_tensor`.
#' @param dim A (1-based) dimension, or `NULL`.
#' @param keepdim Whether to keep the reduced dimension with size 1.
#' @return A `torch_tensor`, or for `torch_max()`/`torch_min()` with `dim` a list.
#' @name torch_reductions
#' @examples
#' if (torch_is_installed()) {
#'   x <- torch_tensor(matrix(1:6, 2))
#'   torch_sum(x, dim = 1)
#'   torch_max(x, dim = 2)
#' }
NULL

#' @rdname torch_reductions
#' @export
torch_sum <- function(self, dim = NULL, keepdim = FALSE) {
  if (is.null(dim)) return(torch_fn("sum", tensor_py(self)))
  torch_fn("sum", tensor_py(self), arg_py(dim_py(dim)), keepdim = keepdim)
}

#' @rdname torch_reductions
#' @export
torch_mean <- function(self, dim = NULL, keepdim = FALSE) {
  if (is.null(dim)) return(torch_fn("mean", tensor_py(self)))
  torch_fn("mean", tensor_py(self), arg_py(dim_py(dim)), keepdim = keepdim)
}

max_min <- function(name, self, dim, keepdim) {
  if (is.null(dim)) return(torch_fn(name, tensor_py(self)))
  out <- torch_fn(name, tensor_py(self), dim_py(dim), keepdim = keepdim)
  list(out[[1]], out[[2]] + 1L)
}

#' @rdname torch_reductions
#' @export
torch_max <- function(self, dim = NULL, keepdim = FALSE) max_min("max", self, dim, keepdim)

#' @rdname torch_reductions
#' @export
torch_min <- function(self, dim = NULL, keepdim = FALSE) max_min("min", self, dim, keepdim)

#' Softmax
#'
#' @param input A `torch_tensor`.
#' @param dim The (1-based) dimension that sums to one.
#' @return A `torch_tensor`.
#' @examples
#' if (torch_is_installed()) {
#'   torch_softmax(torch_tensor(matrix(c(1, 2, 3, 4), 2)), dim = 2)
#' }
#' @export
torch_softmax <- function(input, dim) torch_fn("softmax", tensor_py(input), dim_py(dim))

#' Reshape tensors
#'
#' `torch_reshape()` uses the row-major order of torch (like `x$view()`), not R's
#' column-major `dim<-`.
#'
#' @param self A `torch_tensor`.
#' @param dim0,dim1 The (1-based) dimensions to swap.
#' @param start_dim,end_dim The (1-based) range of dimensions to flatten.
#' @param shape The new shape; `-1` once for "the rest".
#' @return A `torch_tensor`.
#' @name torch_reshape
#' @examples
#' if (torch_is_installed()) {
#'   x <- torch_arange(1, 6)$view(c(2, 3))
#'   torch_transpose(x, 1, 2)
#'   torch_flatten(x)
#'   torch_reshape(x, c(3, -1))
#' }
NULL

#' @rdname torch_reshape
#' @export
torch_transpose <- function(self, dim0, dim1) {
  torch_fn("transpose", tensor_py(self), dim_py(dim0), dim_py(dim1))
}

#' @rdname torch_reshape
#' @export
torch_flatten <- function(self, start_dim = 1, end_dim = -1) {
  torch_fn("flatten", tensor_py(self), dim_py(start_dim), dim_py(end_dim))
}

#' @rdname torch_reshape
#' @export
torch_reshape <- function(self, shape) {
  torch_fn("reshape", tensor_py(self), arg_py(as_shape(shape)))
}

as_shape <- function(shape) {
  if (is.list(shape)) return(reticulate::tuple(lapply(shape, arg_py), convert = FALSE))
  reticulate::tuple(as.list(as.integer(shape)), convert = FALSE)
}

#' Functional neural network operations
#'
#' The `nnf_*` functions mirror `torch.nn.functional`, with 1-based `dim`.
#'
#' @param input A `torch_tensor`.
#' @param dim A (1-based) dimension.
#' @param weight,bias Parameters.
#' @param p Dropout probability.
#' @param training Apply dropout (`TRUE`) or return the input (`FALSE`).
#' @param negative_slope Slope for negative inputs.
#' @param normalized_shape,eps Layer normalisation shape and epsilon.
#' @param stride,padding,dilation,groups Convolution settings.
#' @param start_dim,end_dim The (1-based) range of dimensions to flatten.
#' @param other,target A second tensor.
#' @return A `torch_tensor`.
#' @name nnf
#' @examples
#' if (torch_is_installed()) {
#'   nnf_relu(torch_tensor(c(-1, 1)))
#'   nnf_softmax(torch_tensor(c(1, 1)), dim = 1)
#' }
NULL

#' @rdname nnf
#' @export
nnf_relu <- function(input) nnf_fn("relu", tensor_py(input))
#' @rdname nnf
#' @export
nnf_sigmoid <- function(input) torch_fn("sigmoid", tensor_py(input))
#' @rdname nnf
#' @export
nnf_tanh <- function(input) torch_fn("tanh", tensor_py(input))
#' @rdname nnf
#' @export
nnf_gelu <- function(input) nnf_fn("gelu", tensor_py(input))
#' @rdname nnf
#' @export
nnf_leaky_relu <- function(input, negative_slope = 0.01) {
  nnf_fn("leaky_relu", tensor_py(input), negative_slope = as.double(negative_slope))
}
#' @rdname nnf
#' @export
nnf_softmax <- function(input, dim) nnf_fn("softmax", tensor_py(input), dim = dim_py(dim))
#' @rdname nnf
#' @export
nnf_log_softmax <- function(input, dim) {
  nnf_fn("log_softmax", tensor_py(input), dim = dim_py(dim))
}
#' @rdname nnf
#' @export
nnf_linear <- function(input, weight, bias = NULL) {
  nnf_fn("linear", tensor_py(input), tensor_py(weight), arg_py(bias))
}
#' @rdname nnf
#' @export
nnf_dropout <- function(input, p = 0.5, training = TRUE) {
  nnf_fn("dropout", tensor_py(input), p = as.double(p), training = isTRUE(training))
}
#' @rdname nnf
#' @export
nnf_layer_norm <- function(input, normalized_shape, weight = NULL, bias = NULL,
                           eps = 1e-5) {
  nnf_fn("layer_norm", tensor_py(input), as_shape(normalized_shape), arg_py(weight),
         arg_py(bias), as.double(eps))
}
#' @rdname nnf
#' @export
nnf_conv1d <- function(input, weight, bias = NULL, stride = 1, padding = 0,
                       dilation = 1, groups = 1) {
  nnf_fn("conv1d", tensor_py(input), tensor_py(weight), arg_py(bias), arg_py(stride),
         arg_py(padding), arg_py(dilation), arg_py(groups))
}
#' @rdname nnf
#' @export
nnf_conv2d <- function(input, weight, bias = NULL, stride = 1, padding = 0,
                       dilation = 1, groups = 1) {
  nnf_fn("conv2d", tensor_py(input), tensor_py(weight), arg_py(bias), arg_py(stride),
         arg_py(padding), arg_py(dilation), arg_py(groups))
}
#' @rdname nnf
#' @export
nnf_mse_loss <- function(input, target) {
  nnf_fn("mse_loss", tensor_py(input), tensor_py(target))
}
#' @rdname nnf
#' @export
nnf_flatten <- function(input, start_dim = 1, end_dim = -1) {
  torch_flatten(input, start_dim, end_dim)
}
#' @rdname nnf
#' @export
nnf_matmul <- function(input, other) torch_matmul(input, other)
