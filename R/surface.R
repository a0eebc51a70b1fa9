# The R surface as data. inst/surface.tsv has one row per R function or tensor method:
# which Python callable it makes and, for each argument and for the result, its kind
# (a 1-based dimension, an index tensor, a size, ...). When the package loads, one
# generic function is built per row; every call goes through surface_call(), so the
# 1-based rule is applied by the same few lines everywhere.
#
# Note: why .onLoad and not install time. The exported `torch_*`, `nnf_*`, `nn_*` and
# `optim_*` functions are assigned into the namespace by .onLoad (before R seals it and
# resolves exports), from the table installed with the package. Adding a function is
# adding a row, plus its name in NAMESPACE and man/surface.Rd, which a test checks.

#' The R surface table
#'
#' One row per R function or tensor method, as read from the installed
#' `surface.tsv`: the R name, the `$` method name, the Python callable, the arguments
#' with their kinds and the kind of result.
#'
#' @return A data frame with columns `r_name`, `method`, `py`, `args`, `result`.
#' @examples
#' head(surface_table())
#' @export
surface_table <- function() {
  path <- system.file("surface.tsv", package = "tracebridge")
  if (!nzchar(path)) path <- file.path("inst", "surface.tsv")
  utils::read.delim(path, quote = "", comment.char = "#", colClasses = "character",
                    na.strings = character(), strip.white = TRUE)
}

parse_args <- function(spec) {
  if (!nzchar(spec)) return(list())
  lapply(strsplit(spec, ";", fixed = TRUE)[[1]], parse_arg)
}

# "*name>pyname:kind=default"
parse_arg <- function(s) {
  s <- trimws(s)
  positional <- startsWith(s, "*")
  if (positional) s <- substring(s, 2)
  eq <- regexpr("=", s, fixed = TRUE)
  default <- NULL
  has_default <- eq > 0
  if (has_default) {
    default <- str2lang(substring(s, eq + 1))
    s <- substring(s, 1, eq - 1)
  }
  parts <- strsplit(s, ":", fixed = TRUE)[[1]]
  names <- strsplit(parts[[1]], ">", fixed = TRUE)[[1]]
  kind <- parts[[2]]
  dots <- endsWith(kind, "...")
  list(name = names[[1]], py = names[[length(names)]], kind = sub("...", "", kind, fixed = TRUE),
       positional = positional, has_default = has_default, default = default, dots = dots)
}

parse_result <- function(spec) {
  m <- regmatches(spec, regexec("^(\\w+)(?:\\((.*)\\))?$", spec, perl = TRUE))[[1]]
  list(kind = m[[2]], forward = if (nzchar(m[[3]])) parse_args(m[[3]]) else NULL)
}

load_surface <- function(ns) {
  tab <- surface_table()
  .tb$ops <- vector("list", nrow(tab))
  .tb$compiled <- logical(nrow(tab)) # rows tried for src/surface.c (compile_op())
  .tb$methods <- new.env(parent = emptyenv())
  .tb$bound <- new.env(parent = emptyenv())
  .tb$unnamed <- list()
  .Call(tb_method_init, .tb$bound) # `x$name` (src/surface.c, tb_method())
  for (i in seq_len(nrow(tab))) {
    row <- tab[i, ]
    res <- parse_result(row$result)
    op <- list(r_name = row$r_name, method = row$method, py = row$py,
               args = parse_args(row$args), result = res$kind, forward = res$forward,
               fn = NULL)
    .tb$ops[[i]] <- op
    # The row's function and method find their row number here.
    row_env <- new.env(parent = ns, size = 1L)
    row_env$.row <- i
    fn <- .Call(tb_closure, as.pairlist(row_formals(op$args)), surface_template, row_env)
    if (row$r_name != "-") assign(row$r_name, fn, envir = ns)
    else if (row$method == "-") .tb$unnamed[[row$py]] <- fn # for an R function (surface_row())
    if (res$kind %in% c("optimizer", "scheduler")) register_dollar(row$r_name, res$kind, ns)
    if (row$method != "-") {
      assign(row$method, fn, envir = .tb$methods)
      method <- .Call(tb_closure, as.pairlist(row_formals(op$args[-1])), method_template,
                      row_env)
      assign(row$method, method, envir = .tb$bound)
    }
  }
  invisible(tab)
}

# `$` of an optimizer (or scheduler) class, e.g. `$.optim_adam`: the method of
# "torch_optimizer" (or "lr_scheduler") under the object's first class, so that R's
# dispatch finds it at the first class it tries: `opt$step()` and `opt$zero_grad()` run
# every training step, and each failed lookup of a method (`$.optim_adam`, through the
# calling frames, the methods table and the search path) cost ~1,700 instructions.
register_dollar <- function(class, kind, ns) {
  base <- if (kind == "optimizer") "torch_optimizer" else "lr_scheduler"
  registerS3method("$", class, get(paste0("$.", base), envir = ns), envir = ns)
}

# The function of a row with neither an R name nor a method, by its Python callable: an R
# function with mlverse's arguments calls it (linalg_matrix_rank(), linalg_pinv()).
surface_row <- function(py) .tb$unnamed[[py]]

row_formals <- function(args) {
  fmls <- list()
  for (a in args) {
    if (a$dots) fmls[["..."]] <- quote(expr = )
    else fmls[a$name] <- list(if (a$has_default) a$default else quote(expr = ))
  }
  fmls
}

# The body of every row's function (see the note in src/surface.c: one body, compiled
# when the package is installed, for all rows; `.row` is in the function's environment).
# It calls src/surface.c itself; what C does not finish goes to surface_after().
surface_template <- function() {
  .out <- .External2(tb_op_here, .row) # this frame's arguments (src/call.c)
  if (is.null(.out)) { # a `none` result (what surface_after() gives it)
    invisible(NULL)
  } else if (is.symbol(.out) || is.environment(.out)) {
    surface_after(.row, environment(), .out)
  } else .out
}

# The body of a row's tensor method, `x$name(...)`: `$` gives a closure whose environment
# holds `self`, the tensor (tb_method()), so a method call is one R call, like a
# function's.
method_template <- function() {
  .out <- .External2(tb_op_self_here, .row, self) # this frame's arguments
  if (is.null(.out)) {
    invisible(NULL)
  } else if (is.symbol(.out) || is.environment(.out)) {
    surface_after(.row, environment(), .out, self)
  } else .out
}

# Resolve "torch.argmax", "F.relu", "Tensor.view", "nn.Linear", "optim.SGD", "lr.StepLR",
# "rb.take_along_positions" (tracebridge.frontends.rbridge: torch ops with R's checks).
resolve_py <- function(path) {
  if (is.null(.tb$python_ready)) python_ready()  # R/startup.R: a clear error without Python
  parts <- strsplit(path, ".", fixed = TRUE)[[1]]
  torch <- py_torch()
  root <- switch(parts[[1]],
    torch = torch,
    F = torch$nn$functional,
    Tensor = torch$Tensor,
    nn = torch$nn,
    optim = torch$optim,
    lr = torch$optim$lr_scheduler,
    init = torch$nn$init,
    rb = py_rb(),
    tracebridge_abort(sprintf("surface.tsv: unknown Python root in `%s`.", path))
  )
  for (p in parts[-1]) root <- reticulate::py_get_attr(root, p)
  root
}

# Argument and result kinds the C path converts (src/convert.h lists them in this order);
# a row's other kinds go through R (convert_arg(), convert_result()).
c_arg_kinds <- c("tensor", "scalar", "dim", "dims", "index1", "int", "ints", "double",
                 "doubles", "bool", "string", "dtype", "device", "size", "tensors", "any",
                 "index", "class_index", "optimizer", "long", "params")
c_result_kinds <- c("tensor", "index", "values_indices", "maybe_values_indices", "tensors",
                    "r", "sizes", "none")

# Compile row `i` for src/surface.c (which keeps it); FALSE where C never applies.
compile_op <- function(i) {
  .tb$compiled[[i]] <- TRUE
  op <- .tb$ops[[i]]
  kinds <- vapply(op$args, function(a) a$kind, character(1))
  if ("tensors_splat" %in% kinds) return(FALSE)
  # Optimizers are made once: their `params` (and parameter groups) stay R's to convert;
  # C converts those of the calls a training step makes (nn_utils_clip_grad_norm_()).
  if (op$result == "optimizer") kinds[kinds == "params"] <- "params_r"
  fn <- op$fn
  if (is.null(fn)) {
    fn <- resolve_py(op$py)
    .tb$ops[[i]]$fn <- fn
  }
  .Call(tb_op_compile, i, fn,
        vapply(op$args, function(a) if (a$dots) "..." else a$name, character(1)),
        vapply(op$args, function(a) a$py, character(1)),
        match(kinds, c_arg_kinds, nomatch = 0L),
        vapply(op$args, function(a) a$positional, logical(1)),
        vapply(op$args, function(a) a$dots, logical(1)),
        match(op$result, c_result_kinds, nomatch = 0L),
        !(op$result %in% c("module", "optimizer", "scheduler")))
}

# Note: the two paths of a row. src/surface.c does the whole call (arguments, call,
# result) where it can do it exactly as surface_call_r() would; otherwise it answers
# `.tb_fallback` before calling Python, and R does it. A result C can not finish comes
# back unconverted (an environment) and convert_result() finishes it.
surface_call <- function(i, env) {
  surface_after(i, env, .Call(tb_op_call, i, env))
}

# What a row's function does with C's answer `out` (see the note above); `self`: the
# tensor of a method call, which R's path finds in `env` under the first argument's name.
surface_after <- function(i, env, out, self) {
  if (!missing(self)) assign(.tb$ops[[i]]$args[[1]]$name, self, envir = env)
  # The row's first call: compile it, then call it through C.
  if (is.symbol(out) && !.tb$compiled[[i]] && !identical(out, quote(.tb_error)) &&
      isTRUE(c_started()) && isTRUE(compile_op(i))) {
    out <- .Call(tb_op_call, i, env)
  }
  if (is.null(out)) return(invisible(out))
  if (is.environment(out)) return(convert_result(.tb$ops[[i]], c_other(out), env))
  if (!is.symbol(out)) return(out)
  if (identical(out, quote(.tb_error))) c_error()
  if (is.null(.tb$c_call)) c_started()
  surface_call_r(i, env)
}

surface_call_r <- function(i, env) {
  op <- .tb$ops[[i]]
  fn <- op$fn
  if (is.null(fn)) {
    fn <- resolve_py(op$py)
    .tb$ops[[i]]$fn <- fn
  }
  pos <- list()
  kw <- list()
  # The first argument goes by position (Python's names for it differ: input, self,
  # tensors); class constructors take keywords only.
  first <- !(op$result %in% c("module", "optimizer", "scheduler"))
  no_dim <- FALSE
  for (a in op$args) {
    # Python refuses `keepdim` without `dim`; NULL dim means "all elements".
    if (no_dim && a$name == "keepdim") next
    v <- if (a$dots) eval(quote(list(...)), env) else get(a$name, envir = env, inherits = FALSE)
    if (a$kind == "tensors_splat") {
      # By position, without the list's names (which Python would read as keywords); a
      # tensor that c(a_list, tensor) spliced in is its Python object (R/tensor-lists.R).
      pos <- c(pos, unname(lapply(v, function(t) {
        if (inherits(t, "torch.Tensor")) t else tensor_py(t)
      })))
      first <- FALSE
      next
    }
    if (a$kind == "dim" && inherits(v, "torch_tensor") &&
        any(vapply(op$args, function(b) b$name == "other", logical(1)))) {
      # torch_max(x, y): mlverse's elementwise form; the tensor is `other`, not a dim.
      if (is.null(get0("other", envir = env, inherits = FALSE))) assign("other", v, envir = env)
      v <- NULL
    }
    if (is.null(v)) {
      if (a$name == "dim") no_dim <- TRUE
      first <- FALSE
      next
    }
    pv <- convert_arg(a, v, env, op)
    if (first || a$positional) pos[[length(pos) + 1L]] <- pv else kw[[a$py]] <- pv
    first <- FALSE
  }
  out <- withCallingHandlers(
    do.call(tb_py_call, c(list(fn), pos, kw)),
    error = function(e) rethrow_python(e, one_based = TRUE)
  )
  convert_result(op, out, env)
}

# ---- arguments ---------------------------------------------------------------------

convert_arg <- function(a, v, env, op) {
  switch(a$kind,
    tensor = tensor_arg(v),
    scalar = scalar_py(v),
    tensors = reticulate::r_to_py(lapply(unname(v), function(t) tensor_py(as_tensor(t))),
                                  convert = FALSE),
    dim = dim_arg(v, a$name),
    dims = dims_arg(v, a$name),
    index = index_tensor_arg(v, a$name),
    index1 = if (a$name == "ignore_index" && takes_class_index(op)) ignore_index_arg(v, a$name) else
      index1_arg(v, a$name),
    class_index = class_index_arg(v, env, shift_ignore = !is.null(op)),
    index_list = reticulate::r_to_py(lapply(unname(v), index_tensor_arg, name = a$name),
                                     convert = FALSE),
    long = long_arg(v, a$name),
    fn = fn_arg(v, a$name),
    size = size_arg(v, dots = a$dots),
    int = int_arg(v, a$name),
    ints = ints_arg(v, a$name),
    double = as_py_double(v),
    doubles = if (length(v) == 1) as_py_double(v) else
      reticulate::tuple(as.list(as.double(v)), convert = FALSE),
    bool = reticulate::r_to_py(isTRUE(as.logical(v))),
    string = reticulate::r_to_py(as.character(v)),
    dtype = dtype_py(v),
    device = device_py(v),
    params = params_arg(v),
    optimizer = optimizer_py(v),
    module = if (inherits(v, "nn_module")) module_py(v) else
      tracebridge_abort(sprintf("`%s` must be an nn_module.", a$name), "type_error"),
    any = arg_py(v),
    tracebridge_abort(sprintf("surface.tsv: unknown argument kind `%s`.", a$kind))
  )
}

takes_class_index <- function(op) {
  !is.null(op) && any(vapply(op$args, function(a) a$kind == "class_index", logical(1)))
}

as_py_double <- function(v) {
  if (inherits(v, "torch_tensor")) return(.subset2(v, ".py"))
  # A traced size is an integer: as a double argument it is a traced float (times 1.0),
  # as an R integer is a double there, or torch_full() would make int64 (prober17)
  if (inherits(v, "torch_sym_int") && isTRUE(.tb$tracing)) {
    return(py_rb()$binary("*", .subset2(v, ".py"), 1.0))
  }
  reticulate::r_to_py(as.double(sym_settled(v)))
}

tensor_arg <- function(v) {
  if (inherits(v, "torch_tensor")) return(.subset2(v, ".py"))
  tensor_py(torch_tensor(v))
}

check_whole <- function(v, name) {
  if (!is.numeric(v) || anyNA(v) || any(v != round(v))) {
    tracebridge_abort(sprintf("`%s` must be a whole number, not %s.", name,
                              paste(format(v), collapse = ", ")), "value_error")
  }
}

int_arg <- function(v, name) {
  v <- sym_settled(v) # a traced size kept after its trace: its number
  if (inherits(v, c("torch_sym_int", "torch_tensor"))) return(.subset2(v, ".py"))
  check_whole(v, name)
  reticulate::r_to_py(as.integer(v))
}

ints_arg <- function(v, name) {
  if (inherits(v, "torch_sym_int")) return(.subset2(v, ".py"))
  # padding = "same" / "valid" of convolutions.
  if (is.character(v) && length(v) == 1) return(reticulate::r_to_py(v))
  if (is.list(v)) return(reticulate::tuple(lapply(v, int_arg, name = name), convert = FALSE))
  check_whole(v, name)
  if (length(v) == 1) return(reticulate::r_to_py(as.integer(v)))
  reticulate::tuple(as.list(as.integer(v)), convert = FALSE)
}

# A 1-based R dimension (negative: from the end) to Python's 0-based one.
dim_one <- function(d, name) {
  if (inherits(d, "torch_sym_int")) return(sym_position(d, sprintf("`%s`", name)))
  check_whole(d, name)
  if (d == 0) {
    tracebridge_abort(sprintf(
      "`%s = 0`: dimensions are 1-based in R (1 is the first, -1 the last).", name),
      "index_error")
  }
  reticulate::r_to_py(if (d > 0) as.integer(d) - 1L else as.integer(d))
}

dim_arg <- function(v, name) {
  if (is.list(v) || length(v) > 1) return(dims_arg(v, name))
  dim_one(v, name)
}

dims_arg <- function(v, name) {
  items <- if (is.list(v)) v else as.list(v)
  reticulate::tuple(lapply(items, dim_one, name = name), convert = FALSE)
}

# A single 1-based position (select's index, narrow's start, padding_idx).
index1_arg <- function(v, name) {
  if (inherits(v, "torch_sym_int")) return(sym_position(v, sprintf("`%s`", name)))
  check_whole(v, name)
  if (v == 0) {
    tracebridge_abort(sprintf("`%s = 0`: indices are 1-based in R.", name), "index_error")
  }
  reticulate::r_to_py(if (v > 0) as.integer(v) - 1L else as.integer(v))
}

# A tensor (or R vector) of 1-based indices. The shift is a torch op, so it is part of a
# traced graph and runs again on every call.
index_tensor_arg <- function(v, name = "index") {
  if (inherits(v, "torch_tensor")) {
    py <- .subset2(v, ".py")
    if (reticulate::py_to_r(py$dtype$is_floating_point) ||
        identical(reticulate::py_str(py$dtype), "torch.bool")) {
      if (identical(reticulate::py_str(py$dtype), "torch.bool")) return(py)
      tracebridge_abort(sprintf("`%s` must hold integer indices, not %s values.", name,
                                reticulate::py_str(py$dtype)), "type_error")
    }
    return(tb_py_call(py_rb()$r_positions, py)) # negatives from the end, 0 fails
  }
  if (is.logical(v)) return(tensor_py(torch_tensor(v)))
  check_whole(v, name)
  if (any(v == 0)) {
    tracebridge_abort(sprintf("`%s` contains 0: indices are 1-based in R.", name), "index_error")
  }
  tensor_py(torch_tensor(as.integer(v) - 1L, dtype = torch_long()))
}

# Whole numbers that are not positions (lengths, CTC labels, embedding-bag offsets): an
# integer tensor, passed without a shift.
long_arg <- function(v, name) {
  if (inherits(v, "torch_tensor")) {
    py <- .subset2(v, ".py")
    if (reticulate::py_to_r(py$dtype$is_floating_point)) {
      tracebridge_abort(sprintf("`%s` must hold whole numbers (an integer tensor), not %s values.",
                                name, reticulate::py_str(py$dtype)), "type_error")
    }
    return(py)
  }
  check_whole(v, name)
  storage.mode(v) <- "integer"
  tensor_py(torch_tensor(v, dtype = torch_long()))
}

# An R function (or a list of them, one per parameter group) that Python calls with an
# integer and that returns a number, e.g. the factor of lr_lambda(). An R error inside it
# is kept and re-raised as it was (see rethrow_python()).
fn_arg <- function(v, name) {
  one <- function(f) {
    if (!is.function(f)) {
      tracebridge_abort(sprintf("`%s` must be a function or a list of functions, not %s.",
                                name, describe_value(f)), "type_error")
    }
    # A Python `def` (as_function()): torch's LambdaLR state_dict() copies `__dict__` of
    # any other callable, and the one C makes (src/callback.c) is a builtin without one.
    py_rb()$as_function(r_function_py(function(x) {
      out <- f(x)
      if (!is.numeric(out) || length(out) != 1 || is.na(out)) {
        callback_abort(sprintf("`%s` must return one number, not %s.", name,
                               describe_value(out)), "type_error")
      }
      as.double(out)
    }, sprintf("`%s`", name)))
  }
  if (is.function(v)) return(one(v))
  if (!is.list(v)) one(v)
  reticulate::r_to_py(lapply(unname(v), one), convert = FALSE)
}

# Class targets of cross entropy / NLL: 1-based when integer; probabilities are left as
# they are. `ignore_index` is a class in the same numbering (shifted like the targets,
# see surface.tsv); a negative one (the default -100) names no class, so targets equal
# to it must stay ignored. Where the call takes `ignore_index` too (nnf_cross_entropy(),
# `shift_ignore`), a negative one is shifted with the targets (ignore_index_arg()): one
# op a call, as in src/surface.c. A loss module's forward can not change the module's
# own ignore_index: there, targets equal to it are kept as they are (torch.where()).
class_index_arg <- function(v, env, shift_ignore = FALSE) {
  t <- if (inherits(v, "torch_tensor")) .subset2(v, ".py") else
    tensor_py(torch_tensor(v, dtype = torch_long()))
  if (reticulate::py_to_r(t$dtype$is_floating_point)) return(t)
  shifted <- tb_py_call(t$sub, 1L)
  ign <- get0("ignore_index", envir = env, inherits = FALSE)
  if (shift_ignore || is.null(ign) || ign >= 1) return(shifted)
  tb_py_call(py_torch()$where, tb_py_call(t$eq, as.integer(ign)), t, shifted)
}

# `ignore_index` of a call that also takes class targets: a negative one (no class) is
# shifted as the targets are, so that the targets equal to it still equal it.
ignore_index_arg <- function(v, name) {
  if (is.numeric(v) && length(v) == 1 && !is.na(v) && v < 0 && v == round(v)) {
    return(reticulate::r_to_py(as.integer(v) - 1L))
  }
  index1_arg(v, name)
}

size_arg <- function(v, dots = FALSE) {
  # One traced size is one size (`normalized_shape = x$size(-1)`), not a container.
  if (inherits(v, "torch_sym_int")) v <- list(v)
  if (dots && length(v) == 1 && !inherits(v[[1]], "torch_sym_int") &&
      (is.list(v[[1]]) || length(v[[1]]) != 1)) v <- v[[1]]
  if (!is.list(v)) v <- as.list(v)
  reticulate::tuple(lapply(v, int_arg, name = "size"), convert = FALSE)
}

params_arg <- function(v) {
  if (inherits(v, "torch_tensor")) v <- list(v)
  if (inherits(v, "nn_module")) {
    tracebridge_abort(
      "`params` must be a list of tensors: pass `model$parameters`, not the module.",
      "type_error")
  }
  items <- lapply(unname(v), function(p) {
    if (inherits(p, "torch_tensor")) return(.subset2(p, ".py"))
    if (is.list(p) && !is.null(p$params)) {
      group <- p
      group$params <- reticulate::r_to_py(lapply(unname(p$params), tensor_py), convert = FALSE)
      return(reticulate::py_dict(names(group), lapply(group, arg_py), convert = FALSE))
    }
    tracebridge_abort("`params` must be a list of tensors (e.g. `model$parameters`).",
                      "type_error")
  })
  reticulate::r_to_py(items, convert = FALSE)
}

# ---- results -----------------------------------------------------------------------

plus_one <- function(py) wrap_tensor(tb_py_call(py$add, 1L))

convert_result <- function(op, out, env) {
  switch(op$result,
    tensor = if (inherits(out, "torch.Tensor")) wrap_tensor(out) else from_py(out),
    index = plus_one(out),
    values_indices = values_indices(out),
    maybe_values_indices = if (inherits(out, "torch.Tensor")) wrap_tensor(out) else
      values_indices(out),
    tensors = reticulate::iterate(out, from_py, simplify = FALSE),
    named_tensors = named_results(out, op$forward),
    where = if (inherits(out, "torch.Tensor")) {
      if (op$py == "torch.nonzero") plus_one(out) else wrap_tensor(out)
    } else {
      reticulate::iterate(out, plus_one, simplify = FALSE)
    },
    unique = unique_result(out, env),
    # x$numel() while tracing is a traced integer, as x$size(1) is (from_py()).
    r = if (inherits(out, "python.builtin.int")) from_py(out) else reticulate::py_to_r(out),
    sizes = simplify_sizes(from_py(out)),
    none = invisible(NULL),
    module = if (returns_indices(out)) {
      py_backed_module(out, op$r_name, forward = values_indices_forward(out))
    } else {
      py_backed_module(out, op$r_name, forward_spec = op$forward)
    },
    optimizer = new_optimizer(out, op$r_name),
    scheduler = new_scheduler(out, op$r_name),
    tracebridge_abort(sprintf("surface.tsv: unknown result kind `%s`.", op$result))
  )
}

values_indices <- function(out) {
  list(wrap_tensor(reticulate::py_get_item(out, 0L)),
       plus_one(reticulate::py_get_item(out, 1L)))
}

# A max-pooling module made with `return_indices = TRUE` returns list(values, indices),
# the indices 1-based as everywhere in R (mlverse's nn_max_pool2d() does the same).
returns_indices <- function(py) {
  reticulate::py_has_attr(py, "return_indices") &&
    isTRUE(reticulate::py_to_r(reticulate::py_get_attr(py, "return_indices")))
}

values_indices_forward <- function(py) {
  force(py)
  function(...) {
    args <- lapply(list(...), to_py)
    out <- withCallingHandlers(do.call(tb_py_call, c(list(py), args)),
                               error = function(e) rethrow_python(e, one_based = TRUE))
    values_indices(out)
  }
}

unique_result <- function(out, env) {
  if (inherits(out, "torch.Tensor")) return(wrap_tensor(out))
  items <- reticulate::iterate(out, identity, simplify = FALSE)
  res <- list(wrap_tensor(items[[1]]))
  k <- 2L
  if (isTRUE(get0("return_inverse", envir = env, inherits = FALSE))) {
    res[[k]] <- plus_one(items[[k]])
    k <- k + 1L
  }
  if (k <= length(items)) res[[k]] <- wrap_tensor(items[[k]])
  res
}

# Write man/surface.Rd from the table: one alias per generated function and a list of
# each one's signature and Python call. Run after adding rows:
#   Rscript -e 'tracebridge:::write_surface_rd("man/surface.Rd")'
write_surface_rd <- function(path, tab = surface_table()) {
  esc <- function(s) gsub("([%{}\\\\])", "\\\\\\1", s)
  sig <- function(args, drop_self = FALSE) {
    parts <- vapply(parse_args(args), function(a) {
      if (a$dots) return("...")
      if (a$has_default) paste0(a$name, " = ", paste(deparse(a$default), collapse = ""))
      else a$name
    }, character(1))
    if (drop_self) parts <- parts[-1]
    paste(parts, collapse = ", ")
  }
  conv <- function(args, result) {
    kinds <- vapply(parse_args(args), function(a) {
      switch(a$kind, dim = paste0(a$name, ": 1-based dim"),
             dims = paste0(a$name, ": 1-based dims"),
             index = paste0(a$name, ": 1-based indices"),
             index1 = paste0(a$name, ": 1-based position"),
             class_index = paste0(a$name, ": 1-based classes"),
             index_list = paste0(a$name, ": 1-based indices"),
             long = paste0(a$name, ": whole numbers, not shifted"),
             fn = paste0(a$name, ": an R function"), "")
    }, character(1))
    res <- switch(sub("\\(.*", "", result),
                  index = "returns 1-based indices",
                  values_indices = "returns list(values, 1-based indices)",
                  maybe_values_indices = if (grepl("return_indices", args, fixed = TRUE)) {
                    "with return_indices = TRUE: list(values, 1-based indices)"
                  } else "with dim: list(values, 1-based indices)",
                  where = "index results 1-based", unique = "inverse 1-based",
                  tensors = "returns a list",
                  named_tensors = "returns a named list", "")
    paste(c(kinds[nzchar(kinds)], if (nzchar(res)) res), collapse = "; ")
  }
  fns <- tab[tab$r_name != "-", ]
  mets <- tab[tab$method != "-", ]
  item <- function(name, args, py, result, drop_self = FALSE) {
    note <- conv(args, result)
    sprintf("\\item{\\code{%s(%s)}}{\\code{%s}%s}", esc(name), esc(sig(args, drop_self)),
            esc(py), if (nzchar(note)) paste0(" (", esc(note), ")") else "")
  }
  lines <- c(
    "% Generated by write_surface_rd() from inst/surface.tsv: do not edit by hand.",
    "\\name{surface}",
    "\\alias{surface}",
    paste0("\\alias{", esc(sort(fns$r_name)), "}"),
    "\\title{Functions and tensor methods made from the surface table}",
    "\\description{",
    "Each function below (and each tensor method, \\code{x$name(...)}) is made from one row",
    "of \\code{inst/surface.tsv} (see \\code{\\link{surface_table}}): it converts its",
    "arguments, calls the named Python callable, and converts the result. As in mlverse",
    "torch, dimensions and indices are 1-based: a \\code{dim} of 1 is the first dimension",
    "and -1 the last; index tensors hold 1-based positions; functions that return",
    "positions (\\code{torch_argmax()}, the indices of \\code{torch_max(dim = )},",
    "\\code{torch_sort()}, \\code{torch_topk()}, \\code{torch_nonzero()}, ...) return",
    "1-based ones. \\code{nn_*()} constructors return modules, \\code{optim_*()}",
    "optimizers and \\code{lr_*()} schedulers (see \\code{\\link{optim}}).",
    "",
    "Two exceptions follow mlverse torch: the \\code{offsets} of",
    "\\code{nn_embedding_bag()} and \\code{nnf_embedding_bag()} are where each bag starts",
    "in \\code{input}, counted from 0 (the indices in \\code{input} are 1-based); and",
    "\\code{nn_ctc_loss()} and \\code{nnf_ctc_loss()} take class labels as they are,",
    "with \\code{blank = 0}, the first class, so labels are 1 to C - 1.",
    "}",
    "\\section{Functions}{",
    "\\describe{",
    unlist(Map(item, fns$r_name, fns$args, fns$py, fns$result)),
    "}",
    "}",
    "\\section{Tensor methods}{",
    "\\describe{",
    unlist(Map(function(m, a, p, r) item(paste0("x$", m), a, p, r, TRUE),
               mets$method, mets$args, mets$py, mets$result)),
    "}",
    "}",
    "\\value{A tensor, a list of tensors, an R value, a module, an optimizer or a",
    "scheduler, as the row's result kind says.}",
    "\\examples{",
    "if (torch_is_installed()) {",
    "  x <- torch_tensor(c(1, 9, 3))",
    "  torch_argmax(x)",
    "  x$max(dim = 1)",
    "  torch_zeros(2, 3)",
    "  nnf_relu(torch_tensor(c(-1, 1)))",
    "  bags <- nn_embedding_bag(10, 3, mode = \"sum\")",
    "  bags(c(1, 2, 4, 5, 4, 3, 2, 9), offsets = c(0, 4))",
    "  nnf_embedding_bag(c(1, 2, 4), bags$weight, offsets = c(0, 1))",
    "  log_probs <- torch_randn(6, 2, 4)$log_softmax(3)",
    "  targets <- rbind(c(1, 2, 2), c(3, 1, 0))",
    "  nnf_ctc_loss(log_probs, targets, input_lengths = c(6, 6), target_lengths = c(3, 2))",
    "  nn_ctc_loss(reduction = \"sum\")(log_probs, targets, c(6, 6), c(3, 2))",
    "  opt <- optim_lbfgs(bags$parameters)",
    "  lr_lambda(opt, function(epoch) 0.9^epoch)",
    "  lr_multiplicative(opt, function(epoch) 0.9)",
    "  lr_reduce_on_plateau(opt, patience = 2)",
    "}",
    "}"
  )
  writeLines(lines, path)
  invisible(path)
}
