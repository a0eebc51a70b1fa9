# Modules. An R module instance is a function (so `model(x)` works) whose "self"
# attribute is an environment holding its R methods, its R children and `.py`: the
# `torch.nn.Module` it lives in. Built-in modules (`nn_linear()`, ...) come from the
# surface table and wrap the Python module of the same name; `nn_module()` classes live
# in a `tracebridge.frontends.rbridge.RModule` whose forward calls back into R. Children,
# parameters and buffers are registered on the Python module under their R names, so
# parameter paths read `fc1.weight` on both sides.
#
# Note: memory. R holds the Python module; the Python module holds only an integer key
# (`_r_key`) and one shared dispatcher, never the R instance. The key finds the instance
# through a weak reference, so an instance R no longer uses is collected by R, and then
# its Python module by Python. Nothing keeps instances alive in a registry.

module_env <- function(x) if (is.environment(x)) x else attr(x, "self")
module_py <- function(x) {
  if (inherits(x, "script_module")) return(attr(x, "py")) # a traced or loaded module
  get(".py", envir = module_env(x))
}

next_key <- function() .tb$next_key <- (.tb$next_key %||% 0L) + 1L

register_instance <- function(self, py, key = NULL) {
  if (is.null(key)) {
    key <- next_key()
    reticulate::py_set_attr(py, "_r_key", key)
  }
  skey <- as.character(key)
  assign(skey, rlang::new_weakref(self), envir = .tb$live)
  reg.finalizer(self, function(e) {
    ref <- get0(skey, envir = .tb$live, inherits = FALSE)
    if (!is.null(ref) && identical(rlang::wref_key(ref), e)) rm(list = skey, envir = .tb$live)
  })
  key
}

instance_for_key <- function(key) {
  ref <- get0(as.character(key), envir = .tb$live, inherits = FALSE)
  if (is.null(ref)) return(NULL)
  self <- rlang::wref_key(ref)
  if (is.null(self)) return(NULL)
  get0(".instance", envir = self, inherits = FALSE)
}

new_module_instance <- function(self, classes, call, key = NULL) {
  class(self) <- c(classes, "nn_module")
  inst <- structure(call, self = self, class = c(classes, "nn_module"))
  assign(".instance", inst, envir = self)
  register_instance(self, get(".py", envir = self), key)
  inst
}

# A Python module seen from R: the R instance that made it, or a new wrapper.
wrap_py_module <- function(py) {
  if (reticulate::py_has_attr(py, "_r_key")) {
    inst <- instance_for_key(reticulate::py_to_r(reticulate::py_get_attr(py, "_r_key")))
    if (!is.null(inst)) return(inst)
  }
  name <- reticulate::py_to_r(py$`_get_name`())
  py_backed_module(py, paste0("nn_", tolower(name)))
}

# One R function that every R module's Python forward (and traced method) calls, with
# the instance's key: Python never holds an R instance.
# One per call path (R/callbacks.R): C's, or reticulate's where the C paths are off.
dispatcher <- function() {
  slot <- if (isTRUE(c_started())) "dispatch_c" else "dispatch_r"
  if (is.null(.tb[[slot]])) {
    fn <- function(key, method, ...) {
      inst <- instance_for_key(key)
      if (is.null(inst)) stop("The R module behind this Python module no longer exists.")
      self <- module_env(inst)
      what <- sprintf("%s() of <%s>", method, class(inst)[[1]])
      f <- get(method, envir = self)
      check_output(f(...), what)
    }
    .tb[[slot]] <- r_function_py(fn, "a method of an R module")
  }
  .tb[[slot]]
}

bind_method_py <- function(py, method) {
  .tb$rmod$bind_method(py, method, dispatcher())
  invisible()
}

py_backed_module <- function(py, class, forward = NULL, forward_spec = NULL) {
  self <- new.env(parent = emptyenv())
  assign(".py", py, envir = self)
  if (is.null(forward)) {
    # The kinds of the forward's arguments, for src/surface.c (tb_call_forward); -1: a
    # kind C does not convert (R then does the call).
    spec_names <- vapply(forward_spec, function(a) a$name, character(1))
    spec_kinds <- match(vapply(forward_spec, function(a) a$kind, character(1)), c_arg_kinds,
                        nomatch = -1L)
    forward <- function(...) {
      args <- list(...)
      # Tensors (and 1-based indices and class targets, shifted) in, through
      # src/surface.c (tb_call_args, tb_call_forward); the rest through reticulate.
      out <- if (length(forward_spec)) {
        .Call(tb_call_forward, py, args, spec_names, spec_kinds)
      } else {
        .Call(tb_call_args, py, args, FALSE)
      }
      if (!is.symbol(out) && !is.environment(out)) return(out)
      out <- c_answer(out)
      if (!identical(out, quote(.tb_fallback))) return(out)
      if (length(forward_spec)) args <- convert_forward_args(args, forward_spec, py)
      else args <- lapply(args, to_py)
      withCallingHandlers(
        from_py(do.call(tb_py_call, c(list(py), args))),
        error = function(e) rethrow_python(e, one_based = TRUE)
      )
    }
  }
  assign("forward", forward, envir = self)
  if (length(forward_spec)) assign(".forward_spec", forward_spec, envir = self)
  new_module_instance(self, class, forward)
}

# Forward arguments that are 1-based indices or class targets are shifted, as for
# functions (see surface.tsv: `module(input:index)`).
convert_forward_args <- function(args, spec, py = NULL) {
  nms <- names(args) %||% rep("", length(args))
  env <- new.env(parent = emptyenv())
  # A loss module's negative ignore_index (no class) is what its class targets keep.
  if (!is.null(py) && reticulate::py_has_attr(py, "ignore_index")) {
    ign <- reticulate::py_to_r(py$ignore_index)
    if (is.numeric(ign) && ign < 0) env$ignore_index <- ign
  }
  out <- vector("list", length(args))
  for (k in seq_along(args)) {
    a <- if (nzchar(nms[[k]])) Find(function(s) s$name == nms[[k]], spec) else
      if (k <= length(spec)) spec[[k]] else NULL
    out[[k]] <- if (is.null(a) || is.null(args[[k]])) to_py(args[[k]]) else
      convert_arg(a, args[[k]], env, NULL)
  }
  names(out) <- nms
  out
}

#' Define a module class
#'
#' `nn_module()` returns a generator: calling it runs `initialize` with `self` bound to the
#' new instance, and the instance runs `forward` when called. Assigning a module, an
#' [nn_parameter()] or an [nn_buffer()] to `self$name` registers it under `name`. Methods
#' see `self`, `private`, `super` (with `inherit`) and then the environment where
#' `nn_module()` was called.
#'
#' @param classname The class name, shown when printing.
#' @param ... Methods: `initialize`, `forward` and any others. Inside them `self` is
#'   the instance.
#' @param private A named list of fields and methods that only the methods see, as
#'   `private$name` (one set per instance; an inheriting class adds to its parent's).
#' @param active A named list of functions read as fields: `self$name` calls
#'   `name()`, and `self$name <- v` calls `name(v)`, as R6 active bindings do.
#' @param inherit A generator to inherit methods from; `super$method()` calls the
#'   inherited one.
#' @param parent_env The environment the methods see beyond `self` and `super`.
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
#'   Wider <- nn_module("Wider", inherit = Net,
#'     forward = function(x) 2 * super$forward(x))
#'   Wider(3)(torch_ones(1, 3))
#' }
#' @export
nn_module <- function(classname = NULL, ..., private = NULL, active = NULL, inherit = NULL,
                      parent_env = parent.frame()) {
  force(parent_env)
  methods <- list(...)
  named <- function(l) !length(l) || !is.null(names(l)) && all(nzchar(names(l)))
  if (!named(methods)) {
    tracebridge_abort("nn_module(): methods in `...` must be named.", "value_error")
  }
  if (!is.null(private) && (!is.list(private) || !named(private))) {
    tracebridge_abort("nn_module(): `private` must be a named list.", "value_error")
  }
  if (!is.null(active) && (!is.list(active) || !named(active) ||
                           !all(vapply(active, is.function, logical(1))))) {
    tracebridge_abort("nn_module(): `active` must be a named list of functions.",
                      "value_error")
  }
  if (!is.null(inherit) && !inherits(inherit, "nn_module_generator")) {
    tracebridge_abort("nn_module(): `inherit` must be a generator made by nn_module().",
                      "type_error")
  }
  classname <- classname %||% "nn_module"
  level <- list(classname = classname, methods = methods, parent_env = parent_env,
                inherit = inherit, private = private, active = active)
  generator <- function(...) new_r_module(level, list(...))
  structure(generator, classname = classname, level = level, class = "nn_module_generator")
}

#' @export
print.nn_module_generator <- function(x, ...) {
  cat("<nn_module_generator> ", attr(x, "classname"), "\n", sep = "")
  invisible(x)
}

# Bind the methods of one class level (and, through `super`, its ancestors) to `self`;
# its private fields go to the instance's `private`, its active fields onto `self`.
bind_level <- function(level, self, private) {
  super <- NULL
  if (!is.null(level$inherit)) super <- bind_level(attr(level$inherit, "level"), self, private)
  env <- new.env(parent = level$parent_env)
  assign("self", self, envir = env)
  assign("private", private, envir = env)
  if (!is.null(super)) assign("super", super, envir = env)
  for (nm in names(level$private)) {
    f <- level$private[[nm]]
    if (is.function(f)) environment(f) <- env
    assign(nm, f, envir = private)
  }
  for (nm in names(level$active)) {
    f <- level$active[[nm]]
    environment(f) <- env
    if (exists(nm, envir = self, inherits = FALSE)) rm(list = nm, envir = self)
    makeActiveBinding(nm, f, self)
  }
  bound <- if (is.null(super)) new.env(parent = emptyenv()) else {
    b <- new.env(parent = emptyenv())
    for (nm in ls(super, all.names = TRUE)) assign(nm, get(nm, envir = super), envir = b)
    b
  }
  for (nm in names(level$methods)) {
    f <- level$methods[[nm]]
    if (is.function(f)) environment(f) <- env
    assign(nm, f, envir = bound)
  }
  bound
}

class_chain <- function(level) {
  c(level$classname, if (!is.null(level$inherit)) class_chain(attr(level$inherit, "level")))
}

new_r_module <- function(level, args) {
  self <- new.env(parent = emptyenv())
  methods <- bind_level(level, self, new.env(parent = emptyenv()))
  fwd <- get0("forward", envir = methods, inherits = FALSE)
  key <- next_key()
  py <- .tb$rmod$new_r_module(level$classname, as.list(simple_arg_names(fwd)), key,
                              dispatcher())
  assign(".py", py, envir = self)
  for (nm in ls(methods, all.names = TRUE)) assign(nm, get(nm, envir = methods), envir = self)
  call <- function(...) get("forward", envir = self)(...)
  inst <- new_module_instance(self, unique(class_chain(level)), call, key)
  init <- get0("initialize", envir = self, inherits = FALSE)
  if (is.function(init)) do.call(init, args)
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
  # A traced (or loaded) module is a submodule too: its parameters are the outer
  # module's, so an optimizer over `$parameters` trains them.
  if (inherits(value, c("nn_module", "script_module"))) {
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
    training = {
      out <- .Call(tb_attr_r, py, "training") # src/fields.c; reticulate where C does not apply
      if (is.symbol(out)) reticulate::py_to_r(py$training) else out
    },
    parameters = module_tensors(py, "named_parameters"),
    buffers = module_tensors(py, "named_buffers"),
    children = lapply(named_py_list(py$named_children()), wrap_py_module),
    modules = lapply(unname(named_py_list(py$named_modules())), wrap_py_module),
    named_parameters = function() module_tensors(py, "named_parameters"),
    named_buffers = function() module_tensors(py, "named_buffers"),
    train = function(mode = TRUE) {
      module_call(py, "train", list(isTRUE(mode)))
      invisible(inst)
    },
    eval = function() {
      module_call(py, "eval", list())
      invisible(inst)
    },
    to = function(dtype = NULL, device = NULL, ...) {
      kw <- list()
      if (!is.null(dtype)) kw$dtype <- dtype_py(dtype)
      if (!is.null(device)) kw$device <- device_py(device)
      do.call(py$to, kw)
      invisible(inst)
    },
    cpu = function() {
      py$cpu()
      invisible(inst)
    },
    cuda = function(device = NULL) {
      withCallingHandlers(py$cuda(), error = function(e) rethrow_python(e))
      invisible(inst)
    },
    apply = function(fn) {
      for (m in rev(`$.nn_module`(x, "modules"))) fn(m)
      invisible(inst)
    },
    state_dict = function() module_tensors(py, "state_dict"),
    load_state_dict = function(state_dict, strict = TRUE) {
      # A named list of tensors through src/state.c and src/surface.c; else reticulate.
      named <- is.list(state_dict) && length(state_dict) && !is.null(names(state_dict)) &&
        all(nzchar(names(state_dict)))
      sd <- if (named && all(vapply(state_dict, inherits, logical(1), "torch_tensor"))) {
        .Call(tb_state_to_py, state_dict)
      }
      if (is.environment(sd)) {
        module_call(py, "load_state_dict", list(sd, strict = isTRUE(strict)))
        return(invisible(inst))
      }
      sd <- reticulate::py_dict(names(state_dict), unname(lapply(state_dict, tensor_py)),
                                convert = FALSE)
      withCallingHandlers(py$load_state_dict(sd, strict = isTRUE(strict)),
                          error = function(e) rethrow_python(e))
      invisible(inst)
    },
    # mlverse zeroes gradients in place; PyTorch's default would drop them (NULL).
    zero_grad = function(set_to_none = FALSE) {
      module_call(py, "zero_grad", list(set_to_none = isTRUE(set_to_none)))
      invisible(inst)
    },
    register_parameter = function(name, param) {
      `$<-.nn_module`(x, name, nn_parameter(param))
      invisible(inst)
    },
    register_buffer = function(name, tensor, persistent = TRUE) {
      `$<-.nn_module`(x, name, nn_buffer(tensor, persistent))
      invisible(inst)
    },
    register_module = ,
    add_module = function(name, module) {
      `$<-.nn_module`(x, name, module)
      invisible(inst)
    },
    py = py,
    # mlverse's R6 clone(): an R module here is an R environment bound to a Python module,
    # which no copy of either one alone keeps together. Say how to copy the weights.
    clone = function(deep = FALSE, ...) {
      tracebridge_abort(paste(
        "m$clone() is not supported for tracebridge modules. To keep a copy of the",
        "weights: `state <- lapply(m$state_dict(), function(t) t$clone())`, and later",
        "`m$load_state_dict(state)` (or into a new module made by the same generator)."),
        "not_implemented_error")
    },
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
    if (is.null(kids)) {
      tracebridge_abort("Only nn_sequential() and nn_module_list() index by number.",
                        "index_error")
    }
    if (i < 1 || i > length(kids)) {
      tracebridge_abort(sprintf("Index %d is out of bounds: the module has %d children.",
                                as.integer(i), length(kids)), "index_error")
    }
    return(kids[[i]])
  }
  `$.nn_module`(x, i)
}

#' @export
length.nn_module <- function(x) {
  kids <- get0(".children", envir = module_env(x), inherits = FALSE)
  if (is.null(kids)) 1L else length(kids)
}

#' @export
names.nn_module <- function(x) {
  names(named_py_list(module_py(x)$named_children()))
}

named_tensors <- function(pairs) {
  nv <- py_rb()$named_tensors(pairs)
  keys <- reticulate::py_to_r(reticulate::py_get_item(nv, 0L))
  values <- reticulate::iterate(reticulate::py_get_item(nv, 1L), wrap_tensor, simplify = FALSE)
  # The class vectors of their wrappers (torch.nn.Parameter's), for src/fields.c.
  for (v in values) .Call(tb_remember_class, .subset2(v, ".py"))
  names(values) <- unlist(keys)
  values
}

# `py$method(...)` of a Python module for its effect (train(), eval(), zero_grad()), through
# src/surface.c (tb_call_method); reticulate where C does not apply.
module_call <- function(py, method, args) {
  out <- .Call(tb_call_method, py, method, args)
  if (is.symbol(out) && identical(c_answer(out, FALSE), quote(.tb_fallback))) {
    do.call(reticulate::py_call, c(list(reticulate::py_get_attr(py, method)), args))
  }
  invisible()
}

# `py$named_parameters()` or `py$named_buffers()` as named_tensors() gives them: through
# src/fields.c where it applies (`nn_utils_clip_grad_norm_(model$parameters, 1)` in a
# training step read them through reticulate, ~300 us for a small MLP).
module_tensors <- function(py, method) {
  out <- .Call(tb_named_tensors, py, method)
  if (!is.symbol(out)) return(out)
  pairs <- switch(method, named_parameters = py$named_parameters(),
                  named_buffers = py$named_buffers(), state_dict = py$state_dict()$items())
  named_tensors(pairs)
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
  n <- module_summary_call(py_rb(), "count_parameters", py)
  cat("An `nn_module` containing ", format(n, big.mark = ","), " parameters.\n", sep = "")
  kids <- named_py_list(py$named_children())
  if (length(kids)) {
    cat("\n-- Modules --\n")
    for (nm in names(kids)) {
      k <- kids[[nm]]
      cat("* ", nm, ": <", module_summary_call(k, "_get_name"), "> #",
          format(module_summary_call(py_rb(), "count_parameters", k), big.mark = ","),
          " parameters\n", sep = "")
    }
  }
  invisible(x)
}

# `self.method(...)` as an R value, through src/surface.c; reticulate where C does not
# apply (a module's count or name, for print()).
module_summary_call <- function(self, method, ...) {
  out <- .Call(tb_call_method_r, self, method, list(...))
  if (!is.symbol(out) && !is.environment(out)) return(out)
  reticulate::py_to_r(do.call(reticulate::py_call,
                              c(list(reticulate::py_get_attr(self, method)), list(...))))
}

#' Containers of modules
#'
#' `nn_sequential()` calls its modules in order. `nn_module_list()` and
#' `nn_module_dict()` hold modules (registered, so their parameters are the parent's) and
#' are indexed like R lists (double brackets; 1 is the first). `model[i]` of an
#' `nn_sequential()` is a new `nn_sequential()` of the selected (shared) modules.
#' A module list grows with `$append(module)`, `$extend(modules)` and
#' `$insert(index, module)` (the module becomes element `index`, 1-based).
#'
#' @param ... For `nn_sequential()`, the modules in order.
#' @param modules A list of modules; named for `nn_module_dict()`.
#' @return An `nn_module`.
#' @name nn_containers
#' @examples
#' if (torch_is_installed()) {
#'   model <- nn_sequential(nn_linear(4, 8), nn_relu(), nn_linear(8, 2))
#'   dim(model(torch_randn(3, 4)))
#'   dim(model[1:2](torch_randn(3, 4)))
#'   layers <- nn_module_list(list(nn_linear(2, 2), nn_relu()))
#'   layers$insert(1, nn_identity())
#'   length(layers)
#' }
NULL

check_modules <- function(mods, what) {
  if (!all(vapply(mods, inherits, logical(1), c("nn_module", "script_module")))) {
    tracebridge_abort(sprintf("%s: every element must be an nn_module (or a traced module).",
                              what), "type_error")
  }
}

#' @rdname nn_containers
#' @export
nn_sequential <- function(...) {
  mods <- list(...)
  check_modules(mods, "nn_sequential()")
  py <- do.call(py_torch()$nn$Sequential, unname(lapply(mods, module_py)))
  inst <- py_backed_module(py, "nn_sequential")
  self <- module_env(inst)
  assign(".children", unname(mods), envir = self)
  for (k in seq_along(mods)) assign(as.character(k - 1L), mods[[k]], envir = self)
  inst
}

#' @rdname nn_containers
#' @param x An `nn_sequential()`.
#' @param i Positions (1-based) of the modules to keep.
#' @export
`[.nn_sequential` <- function(x, i) {
  mods <- get(".children", envir = module_env(x))
  # Like R lists (a negative position leaves a module out): the selected modules, in a
  # new nn_sequential() that shares them.
  idx <- seq_along(mods)[i]
  if (anyNA(idx)) {
    tracebridge_abort(sprintf("nn_sequential has %d modules; positions are 1 to %d.",
                              length(mods), length(mods)), "index_error")
  }
  do.call(nn_sequential, unname(mods[idx]))
}

#' @rdname nn_containers
#' @export
nn_module_list <- function(modules = list()) {
  check_modules(modules, "nn_module_list()")
  py <- py_torch()$nn$ModuleList(unname(lapply(modules, module_py)))
  forward <- function(...) {
    tracebridge_abort("nn_module_list() has no forward(); call its elements.")
  }
  inst <- py_backed_module(py, "nn_module_list", forward = forward)
  self <- module_env(inst)
  assign(".children", unname(modules), envir = self)
  assign("append", function(module) {
    check_modules(list(module), "append()")
    py$append(module_py(module))
    assign(".children", c(get(".children", envir = self), list(module)), envir = self)
    invisible(inst)
  }, envir = self)
  assign("extend", function(modules) {
    for (m in modules) get("append", envir = self)(m)
    invisible(inst)
  }, envir = self)
  # insert(index, module): `module` becomes element `index` (1-based), as in mlverse.
  assign("insert", function(index, module) {
    check_modules(list(module), "insert()")
    children <- get(".children", envir = self)
    check_whole(index, "index")
    if (length(index) != 1 || index < 1 || index > length(children) + 1) {
      tracebridge_abort(sprintf(
        "insert(): `index` must be 1 to %d (1-based: the new module's position).",
        length(children) + 1L), "index_error")
    }
    py$insert(as.integer(index) - 1L, module_py(module))
    assign(".children", append(children, list(module), after = index - 1), envir = self)
    invisible(inst)
  }, envir = self)
  inst
}

#' @rdname nn_containers
#' @export
nn_module_dict <- function(modules) {
  if (!length(modules) || is.null(names(modules)) || any(!nzchar(names(modules)))) {
    tracebridge_abort("nn_module_dict(): `modules` must be a named list of modules.",
                      "value_error")
  }
  check_modules(modules, "nn_module_dict()")
  py <- py_torch()$nn$ModuleDict(
    reticulate::py_dict(names(modules), unname(lapply(modules, module_py)), convert = FALSE))
  forward <- function(...) {
    tracebridge_abort("nn_module_dict() has no forward(); call its elements.")
  }
  inst <- py_backed_module(py, "nn_module_dict", forward = forward)
  self <- module_env(inst)
  for (nm in names(modules)) assign(nm, modules[[nm]], envir = self)
  inst
}
