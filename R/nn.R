# Modules. An R module instance is a function (so `model(x)` works) whose "self"
# attribute is an environment holding its R methods, its R children and `.py`: the
# `torch.nn.Module` it lives in. Built-in modules (`nn_linear()`, ...) wrap the Python
# module of the same name; `nn_module()` classes live in a `tracebridge.frontends.rbridge.RModule`
# whose forward calls back into R. Children, parameters and buffers are registered on the
# Python module under their R names, so parameter paths read `fc1.weight` on both sides.

module_env <- function(x) if (is.environment(x)) x else attr(x, "self")
module_py <- function(x) get(".py", envir = module_env(x))

new_module_instance <- function(self, classes, call) {
  class(self) <- c(classes, "nn_module")
  inst <- structure(call, self = self, class = c(classes, "nn_module"))
  assign(".instance", inst, envir = self)
  .tb$instances[[module_key(get(".py", envir = self))]] <- inst
  inst
}

module_key <- function(py) as.character(reticulate::py_to_r(.tb$builtins$id(py)))

# A Python module seen from R: the R instance that made it, or a new wrapper.
wrap_py_module <- function(py) {
  inst <- .tb$instances[[module_key(py)]]
  if (!is.null(inst)) return(inst)
  name <- reticulate::py_to_r(py$`_get_name`())
  py_backed_module(py, paste0("nn_", tolower(name)))
}

py_backed_module <- function(py, class, forward = NULL) {
  self <- new.env(parent = emptyenv())
  assign(".py", py, envir = self)
  if (is.null(forward)) {
    forward <- function(...) {
      args <- lapply(list(...), to_py)
      from_py(do.call(tb_py_call, c(list(py), args)))
    }
  }
  assign("forward", forward, envir = self)
  new_module_instance(self, class, forward)
}

#' Define a module class
#'
#' `nn_module()` returns a generator: calling it runs `initialize` with `self` bound to the
#' new instance, and the instance runs `forward` when called. Assigning a module, an
#' [nn_parameter()] or an [nn_buffer()] to `self$name` registers it under `name`.
#'
#' @param classname The class name, shown when printing.
#' @param ... Methods: `initialize`, `forward` and any others. Inside them `self` is
#'   the instance.
#' @param parent_env The environment the methods see beyond `self`.
#' @return A generator function with class `nn_module_generator`.
#' @examples
#' if (torch_is_installed()) {
#'   Net <- nn_module("Net",
#'     initialize = function(n) {
#'       self$fc <- nn_linear(n, 1)
#'     },
#'     forward = function(x) torch_sigmoid(self$fc(x))
#'   )
#'   net <- Net(3)
#'   names(net$parameters)
#'   net(torch_ones(2, 3))
#' }
#' @export
nn_module <- function(classname = NULL, ..., parent_env = parent.frame()) {
  methods <- list(...)
  if (length(methods) && (is.null(names(methods)) || any(!nzchar(names(methods))))) {
    tracebridge_abort("nn_module(): methods in `...` must be named.")
  }
  classname <- classname %||% "nn_module"
  generator <- function(...) new_r_module(classname, methods, parent_env, list(...))
  structure(generator, classname = classname, methods = methods,
            class = "nn_module_generator")
}

#' @export
print.nn_module_generator <- function(x, ...) {
  cat("<nn_module_generator> ", attr(x, "classname"), "\n", sep = "")
  invisible(x)
}

new_r_module <- function(classname, methods, parent_env, args) {
  self <- new.env(parent = emptyenv())
  py <- py_rb()$new_module(classname, as.list(simple_arg_names(methods$forward)))
  assign(".py", py, envir = self)
  method_env <- new.env(parent = parent_env)
  assign("self", self, envir = method_env)
  for (nm in names(methods)) {
    f <- methods[[nm]]
    if (is.function(f)) environment(f) <- method_env
    assign(nm, f, envir = self)
  }
  call <- function(...) get("forward", envir = self)(...)
  inst <- new_module_instance(self, classname, call)
  what <- sprintf("forward() of <%s>", classname)
  reticulate::py_set_attr(py, "_r_forward", r_callback(call, what))
  if (is.function(methods$initialize)) do.call(get("initialize", envir = self), args)
  inst
}

# Argument names of an R function, when they can name a Python signature (no `...`).
simple_arg_names <- function(fn) {
  if (!is.function(fn)) return(character())
  nms <- names(formals(fn))
  if (is.null(nms) || "..." %in% nms) character() else nms
}

#' Parameters and buffers
#'
#' Mark a tensor so that assigning it to `self$name` in a module registers it as a
#' parameter (trained) or a buffer (state that is saved but not trained).
#'
#' @param x A `torch_tensor`.
#' @param requires_grad Whether the parameter is trained.
#' @param persistent Whether the buffer is part of the saved state.
#' @return `x`, marked.
#' @name nn_parameter
#' @examples
#' if (torch_is_installed()) {
#'   Scale <- nn_module("Scale",
#'     initialize = function() self$s <- nn_parameter(torch_ones(1)),
#'     forward = function(x) x * self$s
#'   )
#'   names(Scale()$parameters)
#' }
NULL

#' @rdname nn_parameter
#' @export
nn_parameter <- function(x, requires_grad = TRUE) {
  structure(list(.py = tensor_py(x)), requires_grad = requires_grad,
            class = c("nn_parameter", "torch_tensor"))
}

#' @rdname nn_parameter
#' @export
nn_buffer <- function(x, persistent = TRUE) {
  structure(list(.py = tensor_py(x)), persistent = persistent,
            class = c("nn_buffer", "torch_tensor"))
}

#' @export
`$<-.nn_module` <- function(x, name, value) {
  self <- module_env(x)
  py <- get(".py", envir = self)
  if (inherits(value, "nn_module")) {
    py$add_module(name, module_py(value))
    assign(name, value, envir = self)
  } else if (inherits(value, "nn_parameter")) {
    param <- py_torch()$nn$Parameter(tensor_py(value),
                                     requires_grad = isTRUE(attr(value, "requires_grad")))
    py$register_parameter(name, param)
  } else if (inherits(value, "nn_buffer")) {
    py$register_buffer(name, tensor_py(value),
                       persistent = isTRUE(attr(value, "persistent")))
  } else if (inherits(value, "torch_tensor") &&
             reticulate::py_to_r(py_rb()$has_state(py, name))) {
    reticulate::py_set_attr(py, name, tensor_py(value))
  } else {
    assign(name, value, envir = self)
  }
  invisible(x)
}

#' @export
`[[<-.nn_module` <- function(x, name, value) `$<-.nn_module`(x, name, value)

#' @export
`$.nn_module` <- function(x, name) {
  self <- module_env(x)
  if (exists(name, envir = self, inherits = FALSE)) return(get(name, envir = self))
  py <- get(".py", envir = self)
  inst <- get(".instance", envir = self)
  switch(name,
    training = reticulate::py_to_r(py$training),
    parameters = named_tensors(py$named_parameters()),
    buffers = named_tensors(py$named_buffers()),
    modules = lapply(named_py_list(py$named_children()), wrap_py_module),
    children = lapply(named_py_list(py$named_children()), wrap_py_module),
    train = function(mode = TRUE) {
      py$train(isTRUE(mode))
      invisible(inst)
    },
    eval = function() {
      py$eval()
      invisible(inst)
    },
    state_dict = function() named_tensors(py$state_dict()$items()),
    zero_grad = function() {
      py$zero_grad()
      invisible(inst)
    },
    py = py,
    {
      if (reticulate::py_has_attr(py, name)) from_py(reticulate::py_get_attr(py, name))
      else NULL
    }
  )
}

#' @export
`[[.nn_module` <- function(x, i) {
  if (is.numeric(i)) {
    kids <- get0(".children", envir = module_env(x), inherits = FALSE)
    if (is.null(kids)) tracebridge_abort("Only nn_sequential() modules index by number.")
    return(kids[[i]])
  }
  `$.nn_module`(x, i)
}

#' @export
length.nn_module <- function(x) {
  kids <- get0(".children", envir = module_env(x), inherits = FALSE)
  if (is.null(kids)) 1L else length(kids)
}

named_tensors <- function(pairs) {
  nv <- py_rb()$named_tensors(pairs)
  keys <- reticulate::py_to_r(reticulate::py_get_item(nv, 0L))
  values <- reticulate::iterate(reticulate::py_get_item(nv, 1L), wrap_tensor, simplify = FALSE)
  names(values) <- unlist(keys)
  values
}

named_py_list <- function(pairs) {
  nv <- py_rb()$named_tensors(pairs)
  keys <- reticulate::py_to_r(reticulate::py_get_item(nv, 0L))
  values <- reticulate::iterate(reticulate::py_get_item(nv, 1L), identity, simplify = FALSE)
  names(values) <- unlist(keys)
  values
}

#' @export
print.nn_module <- function(x, ...) {
  py <- module_py(x)
  n <- reticulate::py_to_r(py_rb()$count_parameters(py))
  cat("An `nn_module` containing ", format(n, big.mark = ","), " parameters.\n", sep = "")
  kids <- named_py_list(py$named_children())
  if (length(kids)) {
    cat("\n-- Modules --\n")
    for (nm in names(kids)) {
      k <- kids[[nm]]
      cat("* ", nm, ": <", reticulate::py_to_r(k$`_get_name`()), "> #",
          format(reticulate::py_to_r(py_rb()$count_parameters(k)), big.mark = ","),
          " parameters\n", sep = "")
    }
  }
  invisible(x)
}

#' Built-in layers
#'
#' Layers backed by the `torch.nn` module of the same name. Arguments follow mlverse
#' torch. `nn_embedding()` takes 1-based indices, as in R.
#'
#' @param in_features,out_features Input and output sizes.
#' @param bias Whether to learn an additive bias.
#' @param in_channels,out_channels,kernel_size,stride,padding,dilation,groups
#'   Convolution settings.
#' @param p Dropout probability.
#' @param num_features Number of features (channels).
#' @param eps,momentum,affine,track_running_stats Batch normalisation settings.
#' @param normalized_shape,elementwise_affine Layer normalisation settings.
#' @param num_embeddings,embedding_dim,padding_idx Embedding settings (`padding_idx`
#'   1-based).
#' @param ... For `nn_sequential()`, the modules in order.
#' @return An `nn_module`.
#' @name nn_layers
#' @examples
#' if (torch_is_installed()) {
#'   model <- nn_sequential(nn_linear(4, 8), nn_relu(), nn_dropout(0.1), nn_linear(8, 2))
#'   model
#'   dim(model(torch_randn(3, 4)))
#' }
NULL

nn_py <- function(name, ...) reticulate::py_call(reticulate::py_get_attr(py_torch()$nn, name), ...)

#' @rdname nn_layers
#' @export
nn_linear <- function(in_features, out_features, bias = TRUE) {
  py_backed_module(nn_py("Linear", as.integer(in_features), as.integer(out_features),
                         bias = isTRUE(bias)), "nn_linear")
}

conv <- function(name, class, in_channels, out_channels, kernel_size, stride, padding,
                 dilation, groups, bias) {
  py_backed_module(nn_py(name, as.integer(in_channels), as.integer(out_channels),
                         arg_py(kernel_size), stride = arg_py(stride),
                         padding = arg_py(padding), dilation = arg_py(dilation),
                         groups = as.integer(groups), bias = isTRUE(bias)), class)
}

#' @rdname nn_layers
#' @export
nn_conv1d <- function(in_channels, out_channels, kernel_size, stride = 1, padding = 0,
                      dilation = 1, groups = 1, bias = TRUE) {
  conv("Conv1d", "nn_conv1d", in_channels, out_channels, kernel_size, stride, padding,
       dilation, groups, bias)
}

#' @rdname nn_layers
#' @export
nn_conv2d <- function(in_channels, out_channels, kernel_size, stride = 1, padding = 0,
                      dilation = 1, groups = 1, bias = TRUE) {
  conv("Conv2d", "nn_conv2d", in_channels, out_channels, kernel_size, stride, padding,
       dilation, groups, bias)
}

#' @rdname nn_layers
#' @export
nn_relu <- function() py_backed_module(nn_py("ReLU"), "nn_relu")

#' @rdname nn_layers
#' @export
nn_dropout <- function(p = 0.5) {
  py_backed_module(nn_py("Dropout", p = as.double(p)), "nn_dropout")
}

batch_norm <- function(name, class, num_features, eps, momentum, affine,
                       track_running_stats) {
  py_backed_module(nn_py(name, as.integer(num_features), eps = as.double(eps),
                         momentum = as.double(momentum), affine = isTRUE(affine),
                         track_running_stats = isTRUE(track_running_stats)), class)
}

#' @rdname nn_layers
#' @export
nn_batch_norm1d <- function(num_features, eps = 1e-5, momentum = 0.1, affine = TRUE,
                            track_running_stats = TRUE) {
  batch_norm("BatchNorm1d", "nn_batch_norm1d", num_features, eps, momentum, affine,
             track_running_stats)
}

#' @rdname nn_layers
#' @export
nn_batch_norm2d <- function(num_features, eps = 1e-5, momentum = 0.1, affine = TRUE,
                            track_running_stats = TRUE) {
  batch_norm("BatchNorm2d", "nn_batch_norm2d", num_features, eps, momentum, affine,
             track_running_stats)
}

#' @rdname nn_layers
#' @export
nn_layer_norm <- function(normalized_shape, eps = 1e-5, elementwise_affine = TRUE) {
  py_backed_module(nn_py("LayerNorm", as_shape(normalized_shape), eps = as.double(eps),
                         elementwise_affine = isTRUE(elementwise_affine)), "nn_layer_norm")
}

#' @rdname nn_layers
#' @export
nn_embedding <- function(num_embeddings, embedding_dim, padding_idx = NULL) {
  pad <- if (is.null(padding_idx)) NULL else as.integer(padding_idx) - 1L
  py <- nn_py("Embedding", as.integer(num_embeddings), as.integer(embedding_dim),
              padding_idx = pad)
  # R indices are 1-based; the shift is part of the recorded computation.
  forward <- function(input) from_py(tb_py_call(py, tensor_py(as_tensor(input) - 1L)))
  py_backed_module(py, "nn_embedding", forward)
}

#' @rdname nn_layers
#' @export
nn_sequential <- function(...) {
  mods <- list(...)
  if (!all(vapply(mods, inherits, logical(1), "nn_module"))) {
    tracebridge_abort("nn_sequential(): every argument must be an nn_module.")
  }
  py <- do.call(py_torch()$nn$Sequential, unname(lapply(mods, module_py)))
  inst <- py_backed_module(py, "nn_sequential")
  self <- module_env(inst)
  assign(".children", unname(mods), envir = self)
  for (k in seq_along(mods)) assign(as.character(k - 1L), mods[[k]], envir = self)
  inst
}
