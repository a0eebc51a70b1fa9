# Devices: `torch_device()`, `cuda_is_available()`, and the conversion of `device =`
# arguments (a torch_device or a string such as "cpu" or "cuda:0").

#' Devices
#'
#' @param type `"cpu"`, `"cuda"`, `"meta"`, or a string with an index (`"cuda:1"`).
#' @param index The (0-based, as in mlverse torch) device index, or `NULL`.
#' @return `torch_device()`: a `torch_device`. `cuda_is_available()`: `TRUE` when a CUDA
#'   device can be used. `cuda_device_count()`: the number of CUDA devices.
#' @name torch_device
#' @examples
#' if (torch_is_installed()) {
#'   torch_device("cpu")
#'   cuda_is_available()
#'   torch_zeros(2, device = torch_device("cpu"))$device
#' }
NULL

#' @rdname torch_device
#' @export
torch_device <- function(type, index = NULL) {
  if (inherits(type, "torch_device")) return(type)
  py <- if (is.null(index)) py_torch()$device(as.character(type)) else
    py_torch()$device(as.character(type), as.integer(index))
  device_from_py(py)
}

#' @rdname torch_device
#' @export
cuda_is_available <- function() reticulate::py_to_r(py_torch()$cuda$is_available())

#' @rdname torch_device
#' @export
cuda_device_count <- function() reticulate::py_to_r(py_torch()$cuda$device_count())

device_from_py <- function(py) {
  structure(list(.py = py, type = reticulate::py_to_r(py$type),
                 index = reticulate::py_to_r(py$index)), class = "torch_device")
}

device_py <- function(device) {
  if (is.null(device)) return(reticulate::py_none())
  if (inherits(device, "torch_device")) return(.subset2(device, ".py"))
  if (is.character(device) && length(device) == 1) {
    return(withCallingHandlers(py_torch()$device(device),
                               error = function(e) rethrow_python(e)))
  }
  tracebridge_abort("`device` must be a torch_device() or a string such as \"cpu\".",
                    "type_error")
}

#' @export
as.character.torch_device <- function(x, ...) reticulate::py_str(.subset2(x, ".py"))

#' @export
print.torch_device <- function(x, ...) {
  cat(sprintf("torch_device(type='%s'%s)\n", x$type,
              if (is.null(x$index)) "" else sprintf(", index=%d", x$index)))
  invisible(x)
}

#' @export
Ops.torch_device <- function(e1, e2) {
  s <- function(d) if (inherits(d, "torch_device")) as.character(d) else as.character(d)
  switch(.Generic,
    "==" = identical(s(e1), s(e2)),
    "!=" = !identical(s(e1), s(e2)),
    tracebridge_abort(sprintf("`%s` is not defined for devices.", .Generic), "type_error")
  )
}
