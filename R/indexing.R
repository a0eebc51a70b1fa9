# `[` and `[<-` on tensors with mlverse's meaning: 1-based; a negative number counts from
# the end (-1 is the last, not "all but the first" as in base R); `a:b` is inclusive and
# `a:b:s` takes every s-th; `N` is the size of the dimension; `..` stands for all
# dimensions not named; `NULL`/`newaxis` adds a dimension; vectors index each dimension
# on its own (like R, unlike NumPy); logical vectors and tensors are masks.
#
# Note: the index expressions are read unevaluated (as mlverse does), because `1:10:2`
# evaluated by R is `(1:10):2`, and `N` only means something per dimension.

#' Indexing helpers
#'
#' `N` (inside `[`) is the size of the indexed dimension, `..` stands for the remaining
#' dimensions, `newaxis` adds a dimension, and `slc()` makes a slice from values.
#'
#' @param start,end First and last (included) position, 1-based; negative counts from
#'   the end.
#' @param step Take every `step`-th element.
#' @return `slc()`: a slice object for `[`.
#' @name indexing
#' @examples
#' if (torch_is_installed()) {
#'   x <- torch_tensor(1:10)
#'   x[1:10:2]
#'   x[-1]
#'   x[5:N]
#'   x[slc(2, 6, 2)]
#' }
NULL

#' @rdname indexing
#' @export
slc <- function(start, end, step = 1) {
  structure(list(start = start, end = end, step = step), class = "torch_slice")
}

#' @rdname indexing
#' @export
newaxis <- structure(list(), class = "torch_newaxis")


py_slice <- function(start = NULL, stop = NULL, step = NULL) {
  .tb$builtins$slice(start, stop, step)
}

# One index expression -> list(kind, value). Kinds: all, int, slice, vector, mask, none,
# ellipsis.
parse_index <- function(expr, env, size_of) {
  if (identical(expr, quote(expr = ))) return(list(kind = "all"))
  if (identical(expr, quote(..))) return(list(kind = "ellipsis"))
  if (is.call(expr) && identical(expr[[1]], as.name(":"))) {
    lhs <- expr[[2]]
    if (is.call(lhs) && identical(lhs[[1]], as.name(":"))) {
      return(range_index(eval_index(lhs[[2]], env, size_of), eval_index(lhs[[3]], env, size_of),
                         eval_index(expr[[3]], env, size_of)))
    }
    return(range_index(eval_index(lhs, env, size_of), eval_index(expr[[3]], env, size_of), 1))
  }
  value_index(eval_index(expr, env, size_of))
}

# Evaluate with `N` bound to the size of the dimension (asked for only when used).
eval_index <- function(expr, env, size_of) {
  if (!("N" %in% all.names(expr))) return(eval(expr, env))
  scope <- new.env(parent = env)
  delayedAssign("N", size_of(), assign.env = scope)
  eval(expr, scope)
}

range_index <- function(start, end, step) {
  # While tracing, `N` is a traced size: the slice stays symbolic.
  if (inherits(start, "torch_sym_int") || inherits(end, "torch_sym_int")) {
    first <- if (inherits(start, "torch_sym_int")) .subset2(start - 1L, ".py") else
      if (start > 0) as.integer(start - 1) else as.integer(start)
    stop <- if (inherits(end, "torch_sym_int")) .subset2(end, ".py") else
      if (end > 0) as.integer(end) else if (end == -1) NULL else as.integer(end + 1)
    return(list(kind = "slice", value = py_slice(first, stop, as.integer(step))))
  }
  for (v in list(start, end, step)) {
    if (!is.numeric(v) || length(v) != 1 || v != round(v)) {
      tracebridge_abort("Slice bounds and steps must be single whole numbers.", "index_error")
    }
  }
  if (start == 0 || end == 0) {
    tracebridge_abort("Indices are 1-based in R: 0 is not a valid slice bound.", "index_error")
  }
  if (step < 1) tracebridge_abort("Slice steps must be positive.", "index_error")
  first <- if (start > 0) start - 1 else start
  # `end` is included; -1 (the last) means "to the end".
  stop <- if (end > 0) end else if (end == -1) NULL else end + 1
  list(kind = "slice", value = py_slice(as.integer(first),
                                        if (is.null(stop)) NULL else as.integer(stop),
                                        as.integer(step)))
}

# `x[c(1, n), ]` while tracing, `n` a traced size: c() makes a list of numbers and traced
# integers, which become an index tensor whose traced entries are recorded (each made
# 0-based by sym_position()), as Python's `x[[0, n - 1]]` is.
sym_vector_index <- function(v) {
  parts <- lapply(v, function(e) {
    if (inherits(e, "torch_sym_int")) return(sym_position(e, "index"))
    if (!is.numeric(e) || length(e) != 1 || is.na(e) || e != round(e) || e < 1) {
      tracebridge_abort(paste(
        "An index that mixes traced sizes with numbers takes positive whole numbers only",
        "(1 is the first); count from the end with the size instead: `N - 1`."), "index_error")
    }
    as.integer(e - 1)
  })
  list(kind = "vector", value = py_rb()$positions(parts))
}

value_index <- function(v) {
  if (is.null(v) || inherits(v, "torch_newaxis")) return(list(kind = "none"))
  if (inherits(v, "torch_ellipsis")) return(list(kind = "ellipsis"))
  if (inherits(v, "torch_slice")) return(range_index(v$start, v$end, v$step))
  if (inherits(v, "torch_tensor")) {
    py <- .subset2(v, ".py")
    if (identical(reticulate::py_str(py$dtype), "torch.bool")) {
      return(list(kind = "mask", value = py))
    }
    if (reticulate::py_to_r(py$dtype$is_floating_point)) {
      tracebridge_abort("Index tensors must hold integers or logicals.", "index_error")
    }
    # Positions shifted by rbridge.r_positions(): -1 stays the last, 0 fails.
    if (reticulate::py_to_r(py$dim()) == 0L) {
      return(list(kind = "tensor_int", value = tb_py_call(py_rb()$r_positions, py),
                  from_tensor = TRUE))
    }
    # A tensor of positions with several dimensions reads as torch does: the indexed
    # dimension becomes the index's dimensions (`x[i]` has the shape of `i`).
    nested <- reticulate::py_to_r(py$dim()) > 1L
    return(list(kind = "vector", value = tb_py_call(py_rb()$r_positions, py),
                shape = if (nested) py$shape, from_tensor = TRUE))
  }
  if (inherits(v, "torch_sym_int") && !isTRUE(.tb$tracing)) v <- sym_settled(v)
  if (inherits(v, "torch_sym_int")) return(list(kind = "int", value = sym_position(v, "index")))
  if (is.list(v) && length(v) && any(vapply(v, inherits, logical(1), "torch_sym_int"))) {
    return(sym_vector_index(v))
  }
  if (is.logical(v)) {
    if (anyNA(v)) tracebridge_abort("Logical indices can not be NA.", "index_error")
    return(list(kind = "logical", value = v))
  }
  if (!is.numeric(v)) {
    tracebridge_abort(sprintf("Can not index a tensor with %s.", describe_value(v)),
                      "index_error")
  }
  if (anyNA(v) || any(v != round(v))) {
    tracebridge_abort("Indices must be whole numbers.", "index_error")
  }
  if (any(v == 0)) {
    tracebridge_abort("Indices are 1-based in R: 0 is not a valid index.", "index_error")
  }
  if (length(v) == 1) {
    return(list(kind = "int", value = as.integer(if (v > 0) v - 1 else v)))
  }
  list(kind = "vector_r", value = as.integer(v))
}

# The parsed indices, the tensor's rank, and for each index the dimension it applies to.
index_plan <- function(x, exprs, env, drop) {
  py <- .subset2(x, ".py")
  ndim <- reticulate::py_to_r(py$dim())
  # `N` is resolved lazily per dimension, counted from the end after `..`.
  parsed <- vector("list", length(exprs))
  ell_at <- which(vapply(exprs, identical, logical(1), quote(..)))
  for (k in seq_along(exprs)) {
    dim_k <- if (!length(ell_at) || k < ell_at[[1]]) k else ndim - (length(exprs) - k)
    size_of <- local({
      d <- dim_k
      function() from_py(py$size(as.integer(d - 1L)))
    })
    parsed[[k]] <- parse_index(exprs[[k]], env, size_of)
    parsed[[k]]$dim <- dim_k
  }
  # newaxis entries do not consume a dimension: recount positions.
  pos <- 0L
  after_ell <- FALSE
  for (k in seq_along(parsed)) {
    kind <- parsed[[k]]$kind
    if (kind == "ellipsis") {
      after_ell <- TRUE
      next
    }
    if (kind == "none") next
    pos <- pos + 1L
    if (!after_ell) parsed[[k]]$dim <- pos
  }
  n_consume <- sum(vapply(parsed, function(p) !(p$kind %in% c("none", "ellipsis")), logical(1)))
  if (n_consume > ndim && !any(vapply(parsed, function(p) p$kind == "mask", logical(1)))) {
    tracebridge_abort(sprintf("Too many indices (%d) for a tensor with %d dimensions.",
                              n_consume, ndim), "index_error")
  }
  if (!drop) {
    parsed <- lapply(parsed, function(p) {
      if (p$kind == "int") {
        stop <- if (!is.numeric(p$value)) sym_stop(p$value) else
          if (p$value == -1L) NULL else p$value + 1L
        p <- list(kind = "slice", value = py_slice(p$value, stop, NULL), dim = p$dim)
      }
      p
    })
  }
  parsed
}

# The end of the one-element slice at a traced 0-based position `v` (`x[N, , drop =
# FALSE]`): `v + 1`, or to the end for -1 (its sign is already a guard: sym_position()).
sym_stop <- function(v) {
  if (isTRUE(reticulate::py_to_r(py_rb()$binary(">=", v, 0L)))) {
    return(py_rb()$binary("+", v, 1L))
  }
  if (isTRUE(reticulate::py_to_r(py_rb()$binary("==", v, -1L)))) return(NULL)
  py_rb()$binary("+", v, 1L)
}

# The size of dimension `d` (1-based) as an R integer. Inside jit_trace() the size is a
# traced integer, which R cannot compare with a vector: its value is read through the
# tracer, which records a guard (a call with another size stops with a guard error).
dim_size <- function(py, d) {
  size <- reticulate::py_to_r(py$size(as.integer(d - 1L)))
  if (is.numeric(size)) size else reticulate::py_to_r(py_rb()$to_int(size))
}

# R vector / logical indices to a 0-based index tensor for the given dimension.
vector_tensor <- function(py, p) {
  if (p$kind == "vector") return(p$value)
  if (p$kind != "logical" && isTRUE(.tb$tracing) && length(p$value) && all(p$value > 0)) {
    # Positive positions need no size: the trace stays general in this dimension, and a
    # position past the end fails in the index op, as it does in PyTorch.
    return(py_rb()$positions(as.list(as.integer(p$value - 1L))))
  }
  if (p$kind != "logical" && isTRUE(.tb$tracing) && length(p$value) && all(p$value < 0)) {
    # Negative positions count from the end: the traced size plus each, recorded, so the
    # trace stays general too; one past the start fails in the index op.
    size <- py$size(as.integer(p$dim - 1L))
    return(py_rb()$positions(lapply(as.integer(p$value), function(v) {
      py_rb()$binary("+", size, v)
    })))
  }
  size <- dim_size(py, p$dim)
  v <- if (p$kind == "logical") {
    if (length(p$value) == 0 || size %% length(p$value) != 0) {
      tracebridge_abort(sprintf(
        "A logical index for dimension %d has length %d, which does not divide its size %d.",
        p$dim, length(p$value), size), "index_error")
    }
    which(rep_len(p$value, size))
  } else p$value
  bad <- v[abs(v) > size]
  if (length(bad)) {
    tracebridge_abort(sprintf("Index %d is out of bounds for dimension %d with size %d.",
                              bad[[1]], p$dim, size), "index_error")
  }
  zero <- ifelse(v > 0, v - 1L, size + v)
  tensor_py(torch_tensor(as.integer(zero), dtype = torch_long()))
}

is_vector_kind <- function(k) k %in% c("vector", "vector_r", "logical")

#' @export
`[.torch_tensor` <- function(x, ..., drop = TRUE) {
  # Positions, `a:b` and empty indices go through src/index.c (which reads them from
  # `...`, or else from the call); the rest through R.
  # A result returns before any other test: each R call here costs as much as the op
  # (identical() alone is ~3,000 instructions), and this runs several times a training step.
  # .External2() hands C this frame, whose `...` holds the indices (src/call.c).
  out <- .External2(tb_index_here, x, drop, NULL)
  if (!is.symbol(out)) return(out)
  # An index C evaluated (`x[f(i), ]`) is read as its value from here on: not run twice.
  call <- forced_index_call(sys.call(), environment(), "drop")
  if (identical(out, quote(.tb_fallback))) {
    out <- .Call(tb_index, x, call, parent.frame(), drop, NULL)
  }
  if (!is.symbol(out)) return(out)
  if (identical(out, quote(.tb_error))) c_error()
  c_started()
  exprs <- as.list(call)[-(1:2)]
  exprs <- exprs[(names(exprs) %||% rep("", length(exprs))) != "drop"]
  names(exprs) <- NULL
  parsed <- index_plan(x, exprs, parent.frame(), drop)
  py <- .subset2(x, ".py")
  # A lone mask (any rank) selects like torch.
  if (length(parsed) == 1 && parsed[[1]]$kind == "mask") {
    return(wrap_tensor(index_call(py, reticulate::tuple(list(parsed[[1]]$value),
                                                         convert = FALSE))))
  }
  # Basic indexing first (vectors become full slices), then each vector on its own
  # dimension with index_select, which gives R's (orthogonal) meaning.
  key <- lapply(parsed, py_key_part)
  out <- index_call(py, reticulate::tuple(key, convert = FALSE))
  # Where each parsed index's dimension ended up after basic indexing.
  after <- 0L
  dims_after <- integer(length(parsed))
  ndim <- reticulate::py_to_r(py$dim())
  for (k in seq_along(parsed)) {
    p <- parsed[[k]]
    if (p$kind == "ellipsis") {
      after <- after + (ndim - p_consumed(parsed[-k]))
      next
    }
    if (p$kind == "int") next
    after <- after + 1L
    dims_after[[k]] <- after
  }
  # From the last index to the first: what one does to its dimension (drop it, or
  # unflatten it into a nested index's shape) leaves the earlier dimensions where they were.
  for (k in rev(seq_along(parsed))) {
    p <- parsed[[k]]
    if (is_vector_kind(p$kind) || p$kind == "tensor_int") {
      d0 <- as.integer(dims_after[[k]] - 1L)
      idx <- if (p$kind == "tensor_int" || !is.null(p$shape)) tb_py_call(p$value$reshape, -1L) else
        vector_tensor(py, p)
      # Positions from a tensor may be negative (-1 the last, as when writing):
      # select_positions() counts those from the end; R vectors are already 0-based.
      out <- withCallingHandlers(
        if (isTRUE(p$from_tensor)) tb_py_call(py_rb()$select_positions, out, d0, idx) else
          tb_py_call(out$index_select, d0, idx),
        error = function(e) rethrow_python(e, one_based = TRUE)
      )
      if (p$kind == "tensor_int" && drop) out <- tb_py_call(out$squeeze, d0)
      if (!is.null(p$shape)) out <- tb_py_call(out$unflatten, d0, p$shape)
    }
  }
  wrap_tensor(out)
}

# The call of `[` (or `[<-`) as R's path reads it: an index whose promise src/index.c
# forced (an expression that may have effects, such as `f(i)`) is replaced by its value,
# so that it is not evaluated a second time. `skip`: the method's own named argument.
forced_index_call <- function(call, rho, skip) {
  forced <- .Call(tb_dots_forced, rho)
  if (!any(forced[[1]])) return(call)
  nms <- names(call) %||% rep("", length(call))
  # The tensor is `x = ` or else the first unnamed argument; `...` are the others.
  at <- seq_along(call)[-1L]
  tensor_at <- if ("x" %in% nms[at]) at[nms[at] == "x"][[1]] else at[!nzchar(nms[at])][1L]
  at <- at[at != tensor_at & nms[at] != skip]
  if (length(at) != length(forced[[1]])) return(call)
  for (k in which(forced[[1]])) call[at[[k]]] <- list(forced[[2]][[k]])
  call
}

p_consumed <- function(parsed) {
  sum(vapply(parsed, function(q) !(q$kind %in% c("none", "ellipsis")), logical(1)))
}

index_call <- function(py, key) {
  withCallingHandlers(
    tb_py_call(py_torch()$Tensor$`__getitem__`, py, key),
    error = function(e) rethrow_python(e, one_based = TRUE)
  )
}

#' @export
`[<-.torch_tensor` <- function(x, ..., value) {
  out <- .External2(tb_index_here, x, TRUE, list(value))
  if (!is.symbol(out)) return(x)
  call <- forced_index_call(sys.call(), environment(), "value")
  if (identical(out, quote(.tb_fallback))) {
    out <- .Call(tb_index, x, call, parent.frame(), TRUE, list(value))
  }
  if (!is.symbol(out)) return(x)
  if (identical(out, quote(.tb_error))) c_error()
  c_started()
  exprs <- as.list(call)[-(1:2)]
  exprs <- exprs[(names(exprs) %||% rep("", length(exprs))) != "value"]
  names(exprs) <- NULL
  parsed <- index_plan(x, exprs, parent.frame(), TRUE)
  py <- .subset2(x, ".py")
  # Vector indices on several dimensions select their outer product (as in R): each
  # gets its own broadcast axis.
  vec <- which(vapply(parsed, function(p) is_vector_kind(p$kind) || p$kind == "tensor_int",
                      logical(1)))
  key <- lapply(seq_along(parsed), function(k) {
    py_key_part(parsed[[k]], function(p) {
      idx <- if (p$kind == "tensor_int") p$value else vector_tensor(py, p)
      if (length(vec) > 1) {
        shape <- rep(1L, length(vec))
        shape[[match(k, vec)]] <- -1L
        idx <- idx$reshape(reticulate::tuple(as.list(shape), convert = FALSE))
      }
      idx
    })
  })
  # A traced size as the value is recorded as it is (`y[1] <- x$size(1)`).
  val <- if (inherits(value, c("torch_tensor", "torch_sym_int"))) .subset2(value, ".py") else
    if (length(value) == 1) reticulate::r_to_py(value) else tensor_py(torch_tensor(value))
  withCallingHandlers(
    tb_py_call(py_torch()$Tensor$`__setitem__`, py,
               reticulate::tuple(key, convert = FALSE), val),
    error = function(e) rethrow_python(e, one_based = TRUE)
  )
  x
}

# The Python index for one parsed R index: slices, `..`, `newaxis`, single positions and
# masks are the same for reading and assignment; `vector` makes the index of a vector (or
# integer tensor) index, which reading takes as a full slice (then index_select) and
# assignment as a broadcast index tensor.
py_key_part <- function(p, vector = function(p) py_slice()) {
  switch(p$kind,
    all = py_slice(),
    ellipsis = reticulate::py_ellipsis(),
    none = reticulate::py_none(),
    int = p$value,
    slice = p$value,
    mask = p$value,
    vector(p)
  )
}
