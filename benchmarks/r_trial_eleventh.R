# The eleventh round of everyday snippets, as an R user of mlverse torch writes them: none
# of them in benchmarks/r_trial.R, r_trace_trial.R or r_trace_trial_user.R. Each snippet
# states the value mlverse torch documents (1-based dims and indices, negative indices
# counting from the end, R argument names), checked against base R or the same computation
# done by Python torch (through `$py`, 0-based, as Python writes it). Each ends as one of:
#   works          it ran and gave the expected value;
#   clear error    it raised an error it should raise (bad input), whose message says what
#                  went wrong in R terms (matches the snippet's pattern);
#   unclear error  it raised an error it should raise, but the message does not say it in
#                  R terms (0-based dims, Python names, a raw Python error);
#   fails          it raised where mlverse torch works (a gap to fix);
#   SILENTLY WRONG it ran and gave another value (must never happen), or ran where it
#                  must raise.
#
#   R_LIBS=.Rlib Rscript benchmarks/r_trial_eleventh.R [--verbose]
#
# Exits with status 1 if a snippet is silently wrong.

suppressPackageStartupMessages(library(tracebridge))
verbose <- "--verbose" %in% commandArgs(trailingOnly = TRUE)
torch_manual_seed(11)

results <- list()
near <- function(a, b, tol = 1e-5) {
  isTRUE(all.equal(as.numeric(a), as.numeric(b), tolerance = tol)) &&
    identical(length(a), length(b))
}
# `check` gets the value; `error`: the snippet must raise an error matching it.
snippet <- function(name, code, check = NULL, error = NULL) {
  code <- substitute(code)
  value <- tryCatch(list(ok = TRUE, v = eval(code, new.env(parent = globalenv()))),
                    error = function(e) list(ok = FALSE, msg = conditionMessage(e)))
  outcome <- if (!is.null(error)) {
    if (value$ok) "SILENTLY WRONG" else if (grepl(error, value$msg)) "clear error" else {
      "unclear error"
    }
  } else if (!value$ok) {
    "fails"
  } else if (isTRUE(tryCatch(check(value$v), error = function(e) FALSE))) {
    "works"
  } else {
    "SILENTLY WRONG"
  }
  if (is.null(results[[name]]) == FALSE) stop("two snippets named ", name)
  results[[name]] <<- list(outcome = outcome, msg = if (!value$ok) value$msg else "")
  if (verbose || outcome %in% c("fails", "SILENTLY WRONG", "unclear error")) {
    cat(sprintf("[%s] %s%s\n", outcome, name,
                if (!value$ok) paste0("\n    ", gsub("\n", " ", substr(value$msg, 1, 400))) else ""))
  }
}
arr <- function(x) as_array(x)
f32 <- function(...) torch_tensor(c(...), dtype = torch_float())
# The traced object and the eager code agree at the example and at `other`, and so does
# the copy saved with jit_save() and read back with jit_load().
traced_agrees <- function(f, example, other, tol = 1e-5) {
  tr <- do.call(jit_trace, c(list(f), example))
  path <- tempfile(fileext = ".pt")
  jit_save(tr, path)
  ld <- jit_load(path)
  ok <- TRUE
  for (inputs in list(example, other)) {
    want <- do.call(f, inputs)
    for (g in list(tr, ld)) {
      got <- do.call(g, inputs)
      ok <- ok && identical(dim(got), dim(want)) && near(arr(got), arr(want), tol) &&
        identical(as.character(got$dtype), as.character(want$dtype))
    }
  }
  ok
}

# ---- creation and dtypes -------------------------------------------------------------------
snippet("a length-1 R vector is a 1-d tensor", dim(torch_tensor(3)), function(v) identical(v, 1L))
snippet("torch_tensor(dtype = torch_float64()) of integers", {
  x <- torch_tensor(1:3, dtype = torch_float64())
  list(as.character(x$dtype), arr(x))
}, function(v) v[[1]] == "float64" && identical(v[[2]], c(1, 2, 3)))
snippet("torch_tensor of a 3-d array: element [2, 3, 4]", {
  a <- array(1:24, c(2, 3, 4))
  torch_tensor(a)[2, 3, 4]$item()
}, function(v) v == 24)
snippet("torch_tensor(matrix of logicals) keeps the layout", {
  m <- matrix(c(TRUE, FALSE, TRUE, TRUE), 2)
  arr(torch_tensor(m))
}, function(v) identical(v, matrix(c(TRUE, FALSE, TRUE, TRUE), 2)))
snippet("torch_zeros(2, 3, dtype = torch_int())", as.character(torch_zeros(2, 3, dtype = torch_int())$dtype),
        function(v) v == "int32")
snippet("torch_ones_like(x, dtype = torch_long())", {
  y <- torch_ones_like(torch_randn(2, 2), dtype = torch_long())
  list(as.character(y$dtype), arr(y))
}, function(v) v[[1]] == "int64" && identical(v[[2]], matrix(1L, 2, 2)))
# mlverse: with no dtype, torch_full() makes the default dtype (float32), whatever the fill.
snippet("torch_full(c(2, 2), TRUE) is the default float32 (mlverse)", as.character(torch_full(c(2, 2), TRUE)$dtype),
        function(v) v == "float32")
snippet("torch_full(c(2), 7L, dtype = torch_long())", {
  x <- torch_full(c(2), 7L, dtype = torch_long())
  list(as.character(x$dtype), arr(x))
}, function(v) v[[1]] == "int64" && identical(v[[2]], c(7L, 7L)))
snippet("torch_arange(1, 10, step = 3) includes the end", arr(torch_arange(1, 10, step = 3)),
        function(v) near(v, c(1, 4, 7, 10)))
snippet("torch_arange(10, 1, step = -3)", arr(torch_arange(10, 1, step = -3)),
        function(v) near(v, c(10, 7, 4, 1)))
snippet("torch_randn(c(2, 3)) size as a vector", torch_randn(c(2, 3))$shape,
        function(v) identical(v, c(2L, 3L)))
snippet("torch_empty(2, 3)$shape", torch_empty(2, 3)$shape, function(v) identical(v, c(2L, 3L)))
snippet("torch_tensor(c(1.7, -1.7), dtype = torch_long()) truncates",
        arr(torch_tensor(c(1.7, -1.7), dtype = torch_long())), function(v) identical(v, c(1L, -1L)))
snippet("x$to(torch_float64()) dtype positional", as.character(torch_tensor(1:2)$to(torch_float64())$dtype),
        function(v) v == "float64")
snippet("torch_logspace(0, 2, 3)", arr(torch_logspace(0, 2, 3)), function(v) near(v, c(1, 10, 100)))
snippet("torch_linspace dtype float32", as.character(torch_linspace(1, 2, 3)$dtype),
        function(v) v == "float32")
snippet("torch_randint(0, 5, c(3, 3)) int64 in [0, 5)", {
  x <- torch_randint(0, 5, c(3, 3))
  list(as.character(x$dtype), range(arr(x)))
}, function(v) v[[1]] == "int64" && v[[2]][1] >= 0 && v[[2]][2] <= 4)
snippet("torch_rand values in [0, 1)", range(arr(torch_rand(100))), function(v) v[1] >= 0 && v[2] < 1)
snippet("x$element_size() of float32 and float64", c(torch_ones(1)$element_size(),
        torch_ones(1, dtype = torch_float64())$element_size()), function(v) near(v, c(4, 8)))
snippet("torch_tensor(1:3, requires_grad = TRUE) on integers is refused clearly",
        torch_tensor(1:3, requires_grad = TRUE), error = "floating|float")
snippet("torch_tensor(c(1, 2), requires_grad = TRUE)", torch_tensor(c(1, 2), requires_grad = TRUE)$requires_grad,
        isTRUE)
snippet("torch_tensor('a') is refused clearly", torch_tensor("a"), error = "character|string")
snippet("torch_tensor(list(1, 2, 3)) is a tensor of 3", arr(torch_tensor(list(1, 2, 3))),
        function(v) near(v, c(1, 2, 3)))
snippet("torch_zeros(-1) is refused clearly", torch_zeros(-1), error = "negative|size")
snippet("torch_eye(3, dtype = torch_long())", arr(torch_eye(3, dtype = torch_long())),
        function(v) identical(v, matrix(as.integer(diag(3)), 3)))
snippet("torch_scalar_tensor(3) is 0-d", {
  x <- torch_scalar_tensor(3)
  list(length(dim(x)), x$item())
}, function(v) v[[1]] == 0 && v[[2]] == 3)
snippet("torch_get_default_dtype() is float32", as.character(torch_get_default_dtype()),
        function(v) v == "float32")
snippet("torch_finfo(torch_float32())$eps", torch_finfo(torch_float32())$eps,
        function(v) near(v, .Machine$double.eps * 2^29, 1e-6))
snippet("torch_iinfo(torch_int32())$max", torch_iinfo(torch_int32())$max,
        function(v) v == .Machine$integer.max)
snippet("is_torch_tensor()", c(is_torch_tensor(torch_ones(1)), is_torch_tensor(1)),
        function(v) identical(v, c(TRUE, FALSE)))
snippet("torch_clone(x) is a copy", {
  x <- torch_ones(2)
  y <- torch_clone(x)
  y[1] <- 5
  arr(x)
}, function(v) near(v, c(1, 1)))

# ---- indexing ------------------------------------------------------------------------------
m34 <- function() torch_tensor(matrix(1:12, 3, 4), dtype = torch_float())
snippet("x[2, -1] last column of row 2", arr(m34()[2, -1]), function(v) near(v, 11))
snippet("x[-2, ] second-to-last row", arr(m34()[-2, ]), function(v) near(v, matrix(1:12, 3)[2, ]))
snippet("x[, 2:3][1, ] chained", arr(m34()[, 2:3][1, ]), function(v) near(v, c(4, 7)))
snippet("x[1, 2, drop = FALSE] keeps 1 x 1", dim(m34()[1, 2, drop = FALSE]),
        function(v) identical(v, c(1L, 1L)))
snippet("3-d x[1, , drop = FALSE]", dim(torch_zeros(2, 3, 4)[1, , drop = FALSE]),
        function(v) identical(v, c(1L, 3L, 4L)))
snippet("3-d x[, , -1] last of dim 3", {
  a <- array(1:24, c(2, 3, 4))
  arr(torch_tensor(a)[, , -1])
}, function(v) identical(v, array(1:24, c(2, 3, 4))[, , 4]))
snippet("3-d x[.., -1]", {
  a <- array(1:24, c(2, 3, 4))
  arr(torch_tensor(a)[.., -1])
}, function(v) identical(v, array(1:24, c(2, 3, 4))[, , 4]))
snippet("3-d x[2, .., drop = FALSE]", dim(torch_zeros(2, 3, 4)[2, .., drop = FALSE]),
        function(v) identical(v, c(1L, 3L, 4L)))
snippet("x[c(TRUE, FALSE, TRUE)] on a 1-d tensor", arr(f32(5, 6, 7)[c(TRUE, FALSE, TRUE)]),
        function(v) near(v, c(5, 7)))
snippet("x[logical tensor] on a 1-d tensor", arr(f32(5, 6, 7)[torch_tensor(c(FALSE, TRUE, TRUE))]),
        function(v) near(v, c(6, 7)))
snippet("x[x$argmax()] is the max", arr(f32(1, 9, 3)[f32(1, 9, 3)$argmax()]),
        function(v) near(v, 9))
snippet("x[c(2L, 2L)] repeats", arr(f32(5, 6, 7)[c(2L, 2L)]), function(v) near(v, c(6, 6)))
snippet("x[seq(1, 6, by = 2)]", arr(torch_tensor(1:6)[seq(1, 6, by = 2)]),
        function(v) identical(v, c(1L, 3L, 5L)))
snippet("x[c(3, 1, 2)] a permutation", arr(f32(5, 6, 7)[c(3, 1, 2)]), function(v) near(v, c(7, 5, 6)))
snippet("x[1, 1]$item()", m34()[1, 1]$item(), function(v) v == 1)
snippet("x[x > 2 & x < 6]", arr(torch_tensor(1:8)[torch_tensor(1:8) > 2 & torch_tensor(1:8) < 6]),
        function(v) identical(v, 3:5))
snippet("x[torch_tensor(2L)] one position", arr(f32(5, 6, 7)[torch_tensor(2L)]),
        function(v) near(v, 6))
snippet("x[, c(-1, -2)] last two columns (mlverse)", arr(m34()[, c(-1, -2)]),
        function(v) near(v, matrix(1:12, 3)[, c(4, 3)]))
snippet("x[2:3, c(1, 4)] rows and columns", arr(m34()[2:3, c(1, 4)]),
        function(v) near(v, matrix(1:12, 3)[2:3, c(1, 4)]))
snippet("x[c(1, 3), c(2, 4)] vectors in both dims (outer, as R)", arr(m34()[c(1, 3), c(2, 4)]),
        function(v) near(v, matrix(1:12, 3)[c(1, 3), c(2, 4)]))
snippet("x[N - 1] second to last", arr(torch_tensor(1:5)[N - 1]), function(v) identical(v, 4L))
snippet("x[5] on a length-4 tensor is refused clearly", torch_tensor(1:4)[5],
        error = "out of (range|bounds).*\\b4\\b|size 4|4 element")
snippet("x[, 5] out of range names dimension 2", m34()[, 6],
        error = "dim(ension)? 2|second")
snippet("x[1, 1, 1] on a matrix: too many indices", m34()[1, 1, 1], error = "too many|2 dim")
snippet("x['a'] is refused clearly", m34()["a", ], error = "character|name|string")
snippet("x[NA] is refused clearly", f32(1, 2)[NA], error = "NA|missing")
snippet("x[2] <- 10", {
  x <- f32(1, 2, 3)
  x[2] <- 10
  arr(x)
}, function(v) near(v, c(1, 10, 3)))
snippet("x[1:2, ] <- 0 a scalar over rows", {
  x <- m34()
  x[1:2, ] <- 0
  arr(x)
}, function(v) { m <- matrix(1:12, 3); m[1:2, ] <- 0; near(v, m) })
snippet("x[, 1] <- torch_tensor", {
  x <- m34()
  x[, 1] <- f32(9, 8, 7)
  arr(x[, 1])
}, function(v) near(v, c(9, 8, 7)))
snippet("x[c(TRUE, FALSE, TRUE)] <- 0 R logical assignment", {
  x <- f32(1, 2, 3)
  x[c(TRUE, FALSE, TRUE)] <- 0
  arr(x)
}, function(v) near(v, c(0, 2, 0)))
snippet("x[2, 2] <- 5L on a float tensor", {
  x <- m34()
  x[2, 2] <- 5L
  list(as.character(x$dtype), x[2, 2]$item())
}, function(v) v[[1]] == "float32" && v[[2]] == 5)
snippet("int tensor x[1] <- 2.7 truncates (as torch)", {
  x <- torch_tensor(1:3)
  x[1] <- 2.7
  arr(x)
}, function(v) identical(v, c(2L, 2L, 3L)))
snippet("x[1] <- x[3] a tensor element", {
  x <- f32(1, 2, 3)
  x[1] <- x[3]
  arr(x)
}, function(v) near(v, c(3, 2, 3)))
snippet("x[c(1, 3)] <- c(7, 8)", {
  x <- f32(1, 2, 3)
  x[c(1, 3)] <- c(7, 8)
  arr(x)
}, function(v) near(v, c(7, 2, 8)))
snippet("3-d x[, 1, ] <- matrix", {
  x <- torch_zeros(2, 3, 4)
  x[, 1, ] <- matrix(1:8, 2)
  arr(x[, 1, ])
}, function(v) near(v, matrix(1:8, 2)))
snippet("x[1:3] <- c(1, 2) wrong length is refused clearly", {
  x <- torch_zeros(3)
  x[1:3] <- c(1, 2)
  x
}, error = "size|shape|length")
snippet("x[5] <- 1 out of range is refused clearly", {
  x <- torch_zeros(3)
  x[5] <- 1
  x
}, error = "out of (range|bounds)|size 3")
snippet("y <- x; x[1] <- 5 changes y (tensors are references)", {
  x <- f32(1, 2)
  y <- x
  x[1] <- 5
  arr(y)
}, function(v) near(v, c(5, 2)))
snippet("a row x[1, ] is a view: writing it writes x", {
  x <- m34()
  r <- x[1, ]
  r$fill_(0)
  arr(x[1, ])
}, function(v) near(v, c(0, 0, 0, 0)))
snippet("x[x$size(1)] outside a trace", arr(f32(4, 5, 6)[f32(4, 5, 6)$size(1)]), function(v) near(v, 6))
snippet("x[.., 2] <- NaN then isnan count", {
  x <- torch_zeros(2, 3)
  x[.., 2] <- NaN
  x$isnan()$sum()$item()
}, function(v) v == 2)

# ---- arithmetic and broadcasting ---------------------------------------------------------
snippet("column 3x1 + row 1x4 broadcasts to 3x4", {
  a <- torch_tensor(matrix(1:3, 3, 1), dtype = torch_float())
  b <- torch_tensor(matrix(1:4, 1, 4), dtype = torch_float())
  arr(a + b)
}, function(v) near(v, outer(1:3, 1:4, `+`)))
snippet("matrix 2x3 + R vector of length 3 (last dim)", arr(torch_zeros(2, 3) + c(1, 2, 3)),
        function(v) near(v, matrix(c(1, 2, 3), 2, 3, byrow = TRUE)))
snippet("int tensor * 2.5 is float", {
  y <- torch_tensor(1:2) * 2.5
  list(as.character(y$dtype), arr(y))
}, function(v) v[[1]] == "float32" && near(v[[2]], c(2.5, 5)))
snippet("1L + int tensor stays int64", as.character((1L + torch_tensor(1:2))$dtype),
        function(v) v == "int64")
snippet("int32 + int64 is int64", as.character((torch_tensor(1:2, dtype = torch_int()) + torch_tensor(1:2))$dtype),
        function(v) v == "int64")
snippet("x / 0 is Inf", arr(f32(1, -1) / 0), function(v) identical(v, c(Inf, -Inf)))
snippet("x %% -3 has R's sign (divisor)", arr(f32(7, -7) %% -3), function(v) near(v, c(7, -7) %% -3))
snippet("x %/% -3 floors as R", arr(f32(7, -7) %/% -3), function(v) near(v, c(7, -7) %/% -3))
snippet("int64 %/% 2L stays int64", {
  y <- torch_tensor(c(5L, -5L)) %/% 2L
  list(as.character(y$dtype), arr(y))
}, function(v) v[[1]] == "int64" && identical(v[[2]], c(5L, -5L) %/% 2L))
snippet("x != y elementwise", arr(f32(1, 2) != f32(1, 3)), function(v) identical(v, c(FALSE, TRUE)))
snippet("!bool tensor", arr(!torch_tensor(c(TRUE, FALSE))), function(v) identical(v, c(FALSE, TRUE)))
snippet("x^0.5", arr(f32(4, 9)^0.5), function(v) near(v, c(2, 3)))
snippet("shape 3 + shape 4 is refused clearly", f32(1, 2, 3) + f32(1, 2, 3, 4),
        error = "size|shape|broadcast")
snippet("x$add(y, alpha = 2)", arr(f32(1, 1)$add(f32(1, 2), alpha = 2)), function(v) near(v, c(3, 5)))
snippet("x$sub(1)$mul(2)$div(4) chain", arr(f32(3, 5)$sub(1)$mul(2)$div(4)), function(v) near(v, c(1, 2)))
snippet("torch_div(rounding_mode = 'floor')", arr(torch_div(f32(7, -7), 2, rounding_mode = "floor")),
        function(v) near(v, c(3, -4)))
snippet("torch_div(rounding_mode = 'trunc')", arr(torch_div(f32(7, -7), 2, rounding_mode = "trunc")),
        function(v) near(v, c(3, -3)))
snippet("x$pow(2) == x * x", arr(f32(1.5, 2)$pow(2)), function(v) near(v, c(2.25, 4)))
snippet("torch_maximum(x, y)", arr(torch_maximum(f32(1, 5), f32(3, 2))), function(v) near(v, c(3, 5)))
snippet("torch_atan2(y, x)", arr(torch_atan2(f32(1), f32(1))), function(v) near(v, pi / 4))
snippet("x$sign() and x$abs()", list(arr(f32(-2, 0, 3)$sign()), arr(f32(-2, 3)$abs())),
        function(v) near(v[[1]], c(-1, 0, 1)) && near(v[[2]], c(2, 3)))

# ---- reductions ------------------------------------------------------------------------
m23 <- function() torch_tensor(matrix(c(1, 4, 2, 5, 3, 6), 2)) # rows 1 2 3 / 4 5 6
snippet("x$sum(dim = 1, keepdim = TRUE) is 1 x 3", {
  y <- m23()$sum(dim = 1, keepdim = TRUE)
  list(dim(y), arr(y))
}, function(v) identical(v[[1]], c(1L, 3L)) && near(v[[2]], c(5, 7, 9)))
snippet("torch_mean(x, dim = c(1, 2)) on 3-d", {
  a <- array(as.numeric(1:24), c(2, 3, 4))
  arr(torch_mean(torch_tensor(a), dim = c(1, 2)))
}, function(v) near(v, apply(array(as.numeric(1:24), c(2, 3, 4)), 3, mean)))
snippet("x$prod(dim = 2)", arr(m23()$prod(dim = 2)), function(v) near(v, c(6, 120)))
snippet("x$max(dim = 1, keepdim = TRUE) indices 1-based, 1 x 3", {
  r <- m23()$max(dim = 1, keepdim = TRUE)
  list(dim(r[[2]]), arr(r[[2]]))
}, function(v) identical(v[[1]], c(1L, 3L)) && near(v[[2]], c(2, 2, 2)))
snippet("torch_min(x, dim = -1) over the last dim", {
  r <- torch_min(m23(), dim = -1)
  list(arr(r[[1]]), arr(r[[2]]))
}, function(v) near(v[[1]], c(1, 4)) && near(v[[2]], c(1, 1)))
snippet("torch_amax(x, dim = c(1, 2)) on 3-d", {
  a <- array(as.numeric(1:24), c(2, 3, 4))
  arr(torch_amax(torch_tensor(a), dim = c(1, 2)))
}, function(v) near(v, c(6, 12, 18, 24)))
snippet("x$argmin(dim = 2, keepdim = TRUE)", {
  y <- torch_tensor(matrix(c(3, 1, 1, 5, 2, 0), 2))$argmin(dim = 2, keepdim = TRUE)
  list(dim(y), arr(y))
}, function(v) identical(v[[1]], c(2L, 1L)) && near(v[[2]], c(2, 3)))
snippet("torch_std(x, dim = 2, unbiased = FALSE)", arr(torch_std(m23(), dim = 2, unbiased = FALSE)),
        function(v) near(v, c(sqrt(2 / 3), sqrt(2 / 3))))
snippet("torch_var_mean(x, dim = 1)", {
  r <- torch_var_mean(m23(), dim = 1)
  list(arr(r[[1]]), arr(r[[2]]))
}, function(v) near(v[[1]], c(4.5, 4.5, 4.5)) && near(v[[2]], c(2.5, 3.5, 4.5)))
snippet("torch_median of an even length is the lower middle", torch_median(f32(4, 1, 3, 2))$item(),
        function(v) v == 2)
snippet("torch_median(x, dim = 2) indices 1-based", {
  r <- torch_median(torch_tensor(matrix(c(3, 9, 1, 8, 2, 7), 2)), dim = 2)
  list(arr(r[[1]]), arr(r[[2]]))
}, function(v) near(v[[1]], c(2, 8)) && near(v[[2]], c(3, 2)))
snippet("torch_mode(x, dim = 1)", {
  r <- torch_mode(torch_tensor(matrix(c(1, 1, 2, 5, 5, 5), 3)), dim = 1)
  arr(r[[1]])
}, function(v) near(v, c(1, 5)))
snippet("torch_kthvalue(x, 2) value and 1-based index", {
  r <- torch_kthvalue(f32(5, 1, 3), 2)
  c(r[[1]]$item(), r[[2]]$item())
}, function(v) near(v, c(3, 3)))
snippet("torch_logsumexp(x, dim = 1)", arr(torch_logsumexp(m23(), dim = 1)),
        function(v) near(v, log(exp(c(1, 2, 3)) + exp(c(4, 5, 6)))))
snippet("torch_count_nonzero(x, dim = 2)", arr(torch_count_nonzero(torch_tensor(matrix(c(0, 1, 2, 0, 3, 4), 2)), dim = 2)),
        function(v) near(v, c(2, 2)))
snippet("x$all(dim = 2) / x$any(dim = 1)", {
  b <- torch_tensor(matrix(c(TRUE, TRUE, FALSE, TRUE), 2))
  list(arr(b$all(dim = 2)), arr(b$any(dim = 1)))
}, function(v) identical(v[[1]], c(FALSE, TRUE)) && identical(v[[2]], c(TRUE, TRUE)))
snippet("torch_cumsum(x, dim = 2) per row", arr(torch_cumsum(m23(), dim = 2)),
        function(v) near(v, t(apply(matrix(c(1, 4, 2, 5, 3, 6), 2), 1, cumsum))))
snippet("torch_cummin(x, dim = 1) indices 1-based", {
  r <- torch_cummin(f32(3, 1, 2), dim = 1)
  list(arr(r[[1]]), arr(r[[2]]))
}, function(v) near(v[[1]], c(3, 1, 1)) && near(v[[2]], c(1, 2, 2)))
snippet("torch_norm(x, p = 2, dim = 2)", arr(torch_norm(m23(), p = 2, dim = 2)),
        function(v) near(v, c(sqrt(14), sqrt(77))))
snippet("x$sum(dim = 3) on a matrix is refused in R terms", m23()$sum(dim = 3),
        error = "dim.*3.*(1|2)|range.*\\[1, 2\\]|-2, 2")
snippet("torch_nansum ignores NaN", torch_nansum(f32(1, NaN, 2))$item(), function(v) v == 3)
snippet("torch_quantile(x, 0.5)", torch_quantile(f32(1, 2, 3, 4), 0.5)$item(),
        function(v) near(v, 2.5))

# ---- torch_* with R argument names --------------------------------------------------------
a3 <- function() torch_tensor(array(as.numeric(1:24), c(2, 3, 4)))
snippet("torch_squeeze(x, dim = 2)", dim(torch_squeeze(torch_zeros(3, 1, 2), dim = 2)),
        function(v) identical(v, c(3L, 2L)))
snippet("torch_transpose(x, dim0 = 1, dim1 = 3)", dim(torch_transpose(a3(), dim0 = 1, dim1 = 3)),
        function(v) identical(v, c(4L, 3L, 2L)))
snippet("torch_flatten(x, start_dim = 2, end_dim = 3)", dim(torch_flatten(torch_zeros(2, 3, 4, 5), start_dim = 2, end_dim = 3)),
        function(v) identical(v, c(2L, 12L, 5L)))
snippet("torch_narrow(x, dim = 2, start = 2, length = 2)", arr(torch_narrow(m34(), dim = 2, start = 2, length = 2)),
        function(v) near(v, matrix(1:12, 3)[, 2:3]))
snippet("torch_index_select(x, dim = 2, index = )", arr(torch_index_select(m34(), dim = 2, index = torch_tensor(c(4L, 1L)))),
        function(v) near(v, matrix(1:12, 3)[, c(4, 1)]))
snippet("torch_gather(x, dim = 2, index = )", {
  idx <- torch_tensor(matrix(c(2L, 1L, 3L, 3L), 2))
  arr(torch_gather(m23(), dim = 2, index = idx))
}, function(v) near(v, matrix(c(2, 4, 3, 6), 2)))
snippet("torch_roll(x, shifts = 1, dims = 1)", arr(torch_roll(f32(1, 2, 3), shifts = 1, dims = 1)),
        function(v) near(v, c(3, 1, 2)))
snippet("torch_flip(x, dims = 2)", arr(torch_flip(m23(), dims = 2)),
        function(v) near(v, matrix(c(1, 4, 2, 5, 3, 6), 2)[, 3:1]))
snippet("torch_diagonal(x, offset = 1)", arr(torch_diagonal(m34(), offset = 1)),
        function(v) near(v, c(4, 8, 12)))
snippet("torch_diagonal(dim1 = 2, dim2 = 3) on 3-d", dim(torch_diagonal(torch_zeros(5, 3, 3), dim1 = 2, dim2 = 3)),
        function(v) identical(v, c(5L, 3L)))
snippet("torch_diag(x, diagonal = 1) of a vector", dim(torch_diag(f32(1, 2), diagonal = 1)),
        function(v) identical(v, c(3L, 3L)))
snippet("torch_tril(x, diagonal = 1)", arr(torch_tril(torch_ones(3, 3), diagonal = 1)),
        function(v) near(v, (col(diag(3)) <= row(diag(3)) + 1) * 1))
snippet("torch_movedim(x, source = 1, destination = 3)", dim(torch_movedim(a3(), source = 1, destination = 3)),
        function(v) identical(v, c(3L, 4L, 2L)))
snippet("torch_permute(x, dims = c(3, 1, 2))", dim(torch_permute(a3(), dims = c(3, 1, 2))),
        function(v) identical(v, c(4L, 2L, 3L)))
snippet("torch_unsqueeze(x, dim = -1) appends", dim(torch_unsqueeze(torch_zeros(2, 3), dim = -1)),
        function(v) identical(v, c(2L, 3L, 1L)))
snippet("torch_repeat_interleave(x, repeats = 2L, dim = 2)", arr(torch_repeat_interleave(m23(), repeats = 2L, dim = 2)),
        function(v) near(v, matrix(c(1, 4, 2, 5, 3, 6), 2)[, c(1, 1, 2, 2, 3, 3)]))
snippet("torch_repeat_interleave with a tensor of repeats", arr(torch_repeat_interleave(f32(1, 2), torch_tensor(c(1L, 3L)))),
        function(v) near(v, c(1, 2, 2, 2)))
snippet("torch_chunk(x, chunks = 2, dim = 2)", lapply(torch_chunk(m34(), chunks = 2, dim = 2), dim),
        function(v) length(v) == 2 && identical(v[[1]], c(3L, 2L)))
snippet("torch_split(x, split_size = 3, dim = 2)", lapply(torch_split(m34(), split_size = 3, dim = 2), dim),
        function(v) identical(v, list(c(3L, 3L), c(3L, 1L))))
snippet("torch_unbind(x, dim = 2) columns", arr(torch_unbind(m23(), dim = 2)[[3]]),
        function(v) near(v, c(3, 6)))
snippet("torch_meshgrid(list(a, b), indexing = 'ij')", {
  g <- torch_meshgrid(list(f32(1, 2), f32(10, 20, 30)), indexing = "ij")
  list(dim(g[[1]]), arr(g[[2]])[2, ])
}, function(v) identical(v[[1]], c(2L, 3L)) && near(v[[2]], c(10, 20, 30)))
snippet("torch_rot90(x, k = 1, dims = c(1, 2))", arr(torch_rot90(m23(), k = 1, dims = c(1, 2))),
        function(v) near(v, matrix(c(3, 2, 1, 6, 5, 4), 3)))
snippet("torch_masked_fill(x, mask, value = 0)", arr(torch_masked_fill(f32(1, -1, 2), f32(1, -1, 2) < 0, value = 0)),
        function(v) near(v, c(1, 0, 2)))
snippet("torch_cross(a, b, dim = 2)", arr(torch_cross(torch_tensor(matrix(c(1, 0, 0), 1)), torch_tensor(matrix(c(0, 1, 0), 1)), dim = 2)),
        function(v) near(v, c(0, 0, 1)))
snippet("torch_addmm(input, mat1, mat2, beta = 0.5, alpha = 2)", {
  i <- torch_ones(2, 2)
  a <- torch_eye(2)
  arr(torch_addmm(i, a, a, beta = 0.5, alpha = 2))
}, function(v) near(v, matrix(c(2.5, 0.5, 0.5, 2.5), 2)))
snippet("torch_sort(x, dim = 1, descending = TRUE) on a matrix", {
  r <- torch_sort(m23(), dim = 1, descending = TRUE)
  arr(r[[2]])
}, function(v) near(v, matrix(c(2, 1, 2, 1, 2, 1), 2)))
snippet("torch_argsort(x, dim = 2)", arr(torch_argsort(torch_tensor(matrix(c(3, 1, 1, 5, 2, 0), 2)), dim = 2)),
        function(v) near(v, matrix(c(2, 3, 3, 1, 1, 2), 2)))
snippet("torch_topk(x, k = 1, dim = 1) indices", arr(torch_topk(m23(), k = 1, dim = 1)[[2]]),
        function(v) near(v, c(2, 2, 2)))
snippet("torch_where(cond) positions are 1-based", arr(torch_where(f32(0, 5, 0, 7) > 0)[[1]]),
        function(v) near(v, c(2, 4)))
snippet("torch_nonzero(x, as_list = TRUE)", arr(torch_nonzero(f32(0, 5, 7), as_list = TRUE)[[1]]),
        function(v) near(v, c(2, 3)))
snippet("torch_unique_consecutive(return_counts = TRUE)", {
  r <- torch_unique_consecutive(f32(1, 1, 2, 2, 2, 1), return_counts = TRUE)
  list(arr(r[[1]]), arr(r[[length(r)]]))
}, function(v) near(v[[1]], c(1, 2, 1)) && near(v[[2]], c(2, 3, 1)))
snippet("torch_clamp(x, min = 0)", arr(torch_clamp(f32(-1, 2), min = 0)), function(v) near(v, c(0, 2)))
snippet("torch_tile(x, dims = c(2, 1))", dim(torch_tile(torch_zeros(2, 3), dims = c(2, 1))),
        function(v) identical(v, c(4L, 3L)))
snippet("torch_kron", arr(torch_kron(torch_eye(2), torch_ones(2, 2))),
        function(v) near(v, kronecker(diag(2), matrix(1, 2, 2))))
snippet("torch_tensordot(a, b, dims = 1)", arr(torch_tensordot(m23(), torch_ones(3, 2), dims = 1)),
        function(v) near(v, matrix(c(1, 4, 2, 5, 3, 6), 2) %*% matrix(1, 3, 2)))
snippet("torch_cartesian_prod", dim(torch_cartesian_prod(list(f32(1, 2), f32(3, 4, 5)))),
        function(v) identical(v, c(6L, 2L)))
snippet("torch_histc(x, bins = 4, min = 0, max = 4)", arr(torch_histc(f32(0.5, 1.5, 1.7, 3.2), bins = 4, min = 0, max = 4)),
        function(v) near(v, c(1, 2, 0, 1)))
snippet("torch_trapz(y)", torch_trapz(f32(1, 2, 3))$item(), function(v) near(v, 4))
snippet("torch_logit(x)", arr(torch_logit(f32(0.5))), function(v) near(v, 0))
snippet("torch_clip(x, -1, 1)", arr(torch_clip(f32(-3, 0, 3), -1, 1)), function(v) near(v, c(-1, 0, 1)))
snippet("torch_isclose", arr(torch_isclose(f32(1, 2), f32(1 + 1e-9, 3))), function(v) identical(v, c(TRUE, FALSE)))
snippet("x$expand_as(y)", dim(torch_zeros(1, 3)$expand_as(torch_zeros(4, 3))),
        function(v) identical(v, c(4L, 3L)))
snippet("x$view_as(y)", dim(torch_zeros(6)$view_as(torch_zeros(2, 3))), function(v) identical(v, c(2L, 3L)))
snippet("x$reshape_as(y)", dim(torch_zeros(6)$reshape_as(torch_zeros(3, 2))), function(v) identical(v, c(3L, 2L)))
snippet("x$copy_(y)", {
  x <- torch_zeros(2)
  x$copy_(f32(3, 4))
  arr(x)
}, function(v) near(v, c(3, 4)))
snippet("x$squeeze_() in place", dim(torch_zeros(1, 3)$squeeze_()), function(v) identical(v, 3L))
snippet("x$unsqueeze_(1) in place", dim(torch_zeros(3)$unsqueeze_(1)), function(v) identical(v, c(1L, 3L)))
snippet("x$index_copy(1, idx, src)", arr(torch_zeros(3)$index_copy(1, torch_tensor(c(3L, 1L)), f32(5, 6))),
        function(v) near(v, c(6, 0, 5)))
snippet("x$log_softmax(dim = 1) on a matrix", arr(m23()$log_softmax(dim = 1)$exp()$sum(dim = 1)),
        function(v) near(v, c(1, 1, 1)))
snippet("x$t_() swaps in place", dim(torch_zeros(2, 3)$t_()), function(v) identical(v, c(3L, 2L)))

# ---- linalg ------------------------------------------------------------------------------
spd <- function() torch_tensor(matrix(c(4, 1, 1, 3), 2))
snippet("linalg_norm(ord = 'fro')", linalg_norm(m23(), ord = "fro")$item(), function(v) near(v, sqrt(91)))
snippet("linalg_norm(x, dim = 2) per row", arr(linalg_norm(m23(), dim = 2)), function(v) near(v, c(sqrt(14), sqrt(77))))
snippet("linalg_vector_norm(keepdim = TRUE, dim = 1)", dim(linalg_vector_norm(m23(), dim = 1, keepdim = TRUE)),
        function(v) identical(v, c(1L, 3L)))
snippet("linalg_solve batched A (2 x 2 x 2)", {
  A <- torch_stack(list(spd(), torch_eye(2)))
  b <- torch_ones(2, 2, 1)
  arr(linalg_solve(A, b))[1, , 1]
}, function(v) near(v, solve(matrix(c(4, 1, 1, 3), 2), c(1, 1)), 1e-5))
snippet("linalg_matrix_rank of a rank-1 matrix", linalg_matrix_rank(torch_ones(3, 3))$item(), function(v) v == 1)
snippet("linalg_cond of the identity", linalg_cond(torch_eye(3))$item(), function(v) near(v, 1))
snippet("linalg_lstsq solution", {
  A <- torch_tensor(cbind(1, c(1, 2, 3, 4)))
  b <- torch_tensor(matrix(c(3, 5, 7, 9), 4))
  arr(linalg_lstsq(A, b)$solution)
}, function(v) near(v, c(1, 2), 1e-4))
snippet("linalg_matrix_exp of zeros is the identity", arr(linalg_matrix_exp(torch_zeros(2, 2))),
        function(v) near(v, diag(2)))
snippet("linalg_solve_triangular(upper = TRUE)", {
  U <- torch_tensor(matrix(c(2, 0, 1, 4), 2))
  arr(linalg_solve_triangular(U, torch_tensor(matrix(c(3, 4), 2)), upper = TRUE))
}, function(v) near(v, backsolve(matrix(c(2, 0, 1, 4), 2), c(3, 4))))
snippet("linalg_slogdet of a negative determinant", {
  r <- linalg_slogdet(torch_tensor(matrix(c(0, 1, 1, 0), 2)))
  c(r[[1]]$item(), r[[2]]$item())
}, function(v) near(v, c(-1, 0)))
snippet("linalg_inv of a singular matrix is refused clearly", linalg_inv(torch_ones(2, 2)),
        error = "singular|invertible")
snippet("linalg_cholesky of a non-positive-definite matrix is refused clearly",
        linalg_cholesky(torch_tensor(matrix(c(1, 2, 2, 1), 2))), error = "positive")
snippet("linalg_svd(full_matrices = FALSE) shapes", {
  r <- linalg_svd(torch_randn(5, 3), full_matrices = FALSE)
  lapply(r, dim)
}, function(v) identical(v[[1]], c(5L, 3L)) && identical(v[[2]], 3L) && identical(v[[3]], c(3L, 3L)))
snippet("linalg_eigvalsh ascending", arr(linalg_eigvalsh(torch_tensor(matrix(c(2, 1, 1, 2), 2)))),
        function(v) near(v, c(1, 3)))
snippet("linalg_cross with the default dim (last)", arr(linalg_cross(f32(1, 0, 0), f32(0, 1, 0))),
        function(v) near(v, c(0, 0, 1)))
snippet("linalg_qr(mode = 'r')", dim(linalg_qr(torch_randn(4, 3), mode = "r")[[2]]),
        function(v) identical(v, c(3L, 3L)))
snippet("linalg_det batched", arr(linalg_det(torch_stack(list(spd(), 2 * torch_eye(2))))),
        function(v) near(v, c(11, 4)))

# ---- nnf_* -------------------------------------------------------------------------------
snippet("nnf_softmax(x, dim = 1) columns sum to 1", arr(nnf_softmax(m23(), dim = 1)$sum(dim = 1)),
        function(v) near(v, c(1, 1, 1)))
snippet("nnf_nll_loss with weight (1-based targets)", {
  lp <- nnf_log_softmax(torch_tensor(matrix(c(1, 0, 0, 1), 2)), dim = 2)
  w <- f32(1, 3)
  nnf_nll_loss(lp, torch_tensor(c(1L, 2L)), weight = w)$item()
}, function(v) near(v, -log(exp(1) / (exp(1) + 1))))
snippet("nnf_cross_entropy with a class beyond the number of classes is refused in R terms",
        nnf_cross_entropy(torch_randn(2, 3), torch_tensor(c(1L, 4L))),
        error = "4 is out of bounds.*1-based")
snippet("nnf_cross_entropy(reduction = 'none')", {
  x <- torch_tensor(matrix(c(2, 0, 0, 2), 2))
  arr(nnf_cross_entropy(x, torch_tensor(c(1L, 2L)), reduction = "none"))
}, function(v) near(v, rep(log(1 + exp(-2)), 2)))
snippet("nnf_cross_entropy with class probabilities (float target)", {
  x <- torch_zeros(1, 2)
  nnf_cross_entropy(x, torch_tensor(matrix(c(0.5, 0.5), 1)))$item()
}, function(v) near(v, log(2)))
snippet("nnf_binary_cross_entropy(weight = )", nnf_binary_cross_entropy(f32(0.5, 0.5), f32(1, 0), weight = f32(2, 0))$item(),
        function(v) near(v, log(2)))
snippet("nnf_l1_loss(reduction = 'none')", arr(nnf_l1_loss(f32(1, 2), f32(3, 1), reduction = "none")),
        function(v) near(v, c(2, 1)))
snippet("nnf_smooth_l1_loss(beta = 2)", nnf_smooth_l1_loss(f32(0), f32(1), beta = 2)$item(),
        function(v) near(v, 0.25))
snippet("nnf_huber_loss(delta = 0.5)", nnf_huber_loss(f32(0), f32(2), delta = 0.5)$item(),
        function(v) near(v, 0.5 * (2 - 0.25)))
snippet("nnf_cosine_embedding_loss", nnf_cosine_embedding_loss(torch_ones(1, 2), torch_ones(1, 2), torch_tensor(1))$item(),
        function(v) near(v, 0, 1e-6) || abs(v) < 1e-6)
snippet("nnf_poisson_nll_loss(log_input = TRUE)", nnf_poisson_nll_loss(f32(0), f32(1), log_input = TRUE)$item(),
        function(v) near(v, 1))
snippet("nnf_conv2d(stride = 2, padding = 1) shape", dim(nnf_conv2d(torch_ones(1, 2, 8, 8), torch_ones(4, 2, 3, 3), stride = 2, padding = 1)),
        function(v) identical(v, c(1L, 4L, 4L, 4L)))
snippet("nnf_conv1d(groups = 2)", dim(nnf_conv1d(torch_ones(1, 4, 5), torch_ones(6, 2, 3), groups = 2)),
        function(v) identical(v, c(1L, 6L, 3L)))
snippet("nnf_conv_transpose2d(stride = 2) shape", dim(nnf_conv_transpose2d(torch_ones(1, 3, 4, 4), torch_ones(3, 2, 2, 2), stride = 2)),
        function(v) identical(v, c(1L, 2L, 8L, 8L)))
snippet("nnf_avg_pool1d(kernel_size = 2)", arr(nnf_avg_pool1d(torch_tensor(array(c(1, 3, 5, 7), c(1, 1, 4))), kernel_size = 2)),
        function(v) near(v, c(2, 6)))
snippet("nnf_pad(mode = 'reflect')", arr(nnf_pad(torch_tensor(array(c(1, 2, 3), c(1, 1, 3))), c(1, 1), mode = "reflect")),
        function(v) near(v, c(2, 1, 2, 3, 2)))
snippet("nnf_pad(value = 9)", arr(nnf_pad(f32(1, 2), c(1, 0), value = 9)), function(v) near(v, c(9, 1, 2)))
snippet("nnf_interpolate(mode = 'bilinear', align_corners = TRUE)", {
  x <- torch_tensor(array(c(0, 2, 0, 2), c(1, 1, 2, 2)))
  arr(nnf_interpolate(x, size = c(3, 3), mode = "bilinear", align_corners = TRUE))[1, 1, , 2]
}, function(v) near(v, c(0, 1, 2)))
snippet("nnf_embedding_bag(mode = 'sum')", {
  w <- torch_tensor(matrix(1:6, 3), dtype = torch_float())
  arr(nnf_embedding_bag(torch_tensor(matrix(c(1L, 2L, 3L, 3L), 2)), w, mode = "sum"))
}, function(v) near(v, rbind(c(4, 10), c(5, 11))))
snippet("nnf_hardshrink(lambd = 0.5)", arr(nnf_hardshrink(f32(-1, 0.2, 1), lambd = 0.5)),
        function(v) near(v, c(-1, 0, 1)))
snippet("nnf_softshrink / nnf_tanhshrink / nnf_softsign", c(arr(nnf_softshrink(f32(2), 0.5)), arr(nnf_tanhshrink(f32(0))), arr(nnf_softsign(f32(1)))),
        function(v) near(v, c(1.5, 0, 0.5)))
snippet("nnf_glu(dim = 1)", arr(nnf_glu(f32(1, 0), dim = 1)), function(v) near(v, 0.5))
snippet("nnf_prelu(x, weight)", arr(nnf_prelu(f32(-2, 3), f32(0.25))), function(v) near(v, c(-0.5, 3)))
snippet("nnf_dropout(p = 0, training = TRUE) is the identity", arr(nnf_dropout(f32(1, 2), p = 0, training = TRUE)),
        function(v) near(v, c(1, 2)))
snippet("nnf_alpha_dropout(training = FALSE)", arr(nnf_alpha_dropout(f32(1, 2), p = 0.5, training = FALSE)),
        function(v) near(v, c(1, 2)))
snippet("nnf_multilabel_soft_margin_loss", nnf_multilabel_soft_margin_loss(torch_zeros(1, 2), torch_tensor(matrix(c(1, 0), 1)))$item(),
        function(v) near(v, log(2)))
snippet("nnf_local_response_norm shape", dim(nnf_local_response_norm(torch_ones(1, 4, 3, 3), size = 2)),
        function(v) identical(v, c(1L, 4L, 3L, 3L)))
snippet("nnf_pdist", arr(nnf_pdist(torch_tensor(rbind(c(0, 0), c(3, 4), c(0, 1))))),
        function(v) near(v, c(5, 1, sqrt(18))))
snippet("nnf_affine_grid + nnf_grid_sample identity", {
  x <- torch_randn(1, 1, 3, 3)
  theta <- torch_tensor(array(c(1, 0, 0, 1, 0, 0), c(1, 2, 3)))
  g <- nnf_affine_grid(theta, c(1, 1, 3, 3), align_corners = TRUE)
  as.numeric((nnf_grid_sample(x, g, align_corners = TRUE) - x)$abs()$max()$item())
}, function(v) v < 1e-5)
# The max, 5, is at row 2, column 1: flat (row-major, as torch counts) position 3, 1-based.
snippet("nnf_max_pool2d(return_indices = TRUE) on 1x1x2x2 gives a 1-based flat index", {
  x <- torch_tensor(array(c(1, 5, 2, 3), c(1, 1, 2, 2)))
  r <- nnf_max_pool2d(x, 2, return_indices = TRUE)
  r[[2]]$item()
}, function(v) v == 3)

# ---- nn_module ---------------------------------------------------------------------------
snippet("nn_module with initialize arguments and a default", {
  Net <- nn_module(initialize = function(d_in, d_out = 2) self$fc <- nn_linear(d_in, d_out),
                   forward = function(x) self$fc(x))
  dim(Net(5)(torch_ones(3, 5)))
}, function(v) identical(v, c(3L, 2L)))
snippet("names of parameters in an nn_module_list", {
  Net <- nn_module(initialize = function() {
    self$layers <- nn_module_list(list(nn_linear(2, 2), nn_linear(2, 1)))
  }, forward = function(x) x)
  names(Net()$parameters)
}, function(v) identical(v, c("layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias")))
# mlverse's nn_sequential() names its modules 0, 1, 2, ... whatever names they are given.
snippet("nn_sequential with named arguments names them by position (mlverse)", {
  s <- nn_sequential(fc1 = nn_linear(2, 3), act = nn_relu(), fc2 = nn_linear(3, 1))
  names(s$parameters)
}, function(v) identical(v, c("0.weight", "0.bias", "2.weight", "2.bias")))
snippet("seq[[2]] and length(seq)", {
  s <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  list(length(s), class(s[[2]])[1])
}, function(v) v[[1]] == 3 && grepl("relu", v[[2]], ignore.case = TRUE))
snippet("seq[1:2] is a sequential of the first two", {
  s <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  dim(s[1:2](torch_ones(4, 2)))
}, function(v) identical(v, c(4L, 3L)))
snippet("m$fc$weight$shape is out x in", {
  m <- nn_linear(5, 2)
  m$weight$shape
}, function(v) identical(v, c(2L, 5L)))
snippet("fill a weight under with_no_grad()", {
  m <- nn_linear(2, 1)
  with_no_grad({
    m$weight$fill_(1)
    m$bias$zero_()
  })
  arr(m(torch_tensor(matrix(c(1, 2), 1))))
}, function(v) near(v, 3))
snippet("load_state_dict with a wrong shape is refused clearly", {
  m <- nn_linear(2, 1)
  sd <- m$state_dict()
  sd$weight <- torch_zeros(3, 3)
  m$load_state_dict(sd)
}, error = "size|shape")
snippet("state_dict() names in order", names(nn_batch_norm1d(3)$state_dict()),
        function(v) identical(v, c("weight", "bias", "running_mean", "running_var", "num_batches_tracked")))
snippet("forward with two named inputs called by name", {
  Net <- nn_module(initialize = function() NULL, forward = function(x, y) x - y)
  arr(Net()(y = f32(1), x = f32(5)))
}, function(v) near(v, 4))
snippet("parameters require grad; freeze one", {
  m <- nn_sequential(nn_linear(2, 2), nn_linear(2, 1))
  m[[1]]$weight$requires_grad_(FALSE)
  sum(vapply(m$parameters, function(p) p$requires_grad, logical(1)))
}, function(v) v == 3)
snippet("nn_module_list$extend() and $insert()", {
  l <- nn_module_list(list(nn_linear(1, 1)))
  l$extend(list(nn_relu(), nn_tanh()))
  l$insert(1, nn_identity())
  c(length(l), grepl("identity", class(l[[1]])[1], ignore.case = TRUE))
}, function(v) v[1] == 4 && v[2] == 1)
snippet("m$named_modules() / m$modules count", {
  m <- nn_sequential(nn_linear(2, 2), nn_relu())
  length(m$modules)
}, function(v) v == 3)
snippet("nn_buffer(persistent = FALSE) is left out of state_dict", {
  Net <- nn_module(initialize = function() {
    self$a <- nn_buffer(torch_ones(1))
    self$b <- nn_buffer(torch_ones(1), persistent = FALSE)
  })
  names(Net()$state_dict())
}, function(v) identical(v, "a"))
snippet("m$train() / m$eval() sets training on children", {
  m <- nn_sequential(nn_dropout(0.5))
  m$eval()
  c(m$training, m[[1]]$training)
}, function(v) identical(v, c(FALSE, FALSE)))
snippet("nn_linear('a', 2) is refused clearly", nn_linear("a", 2), error = "in_features|number|integer")
snippet("module in a list keeps parameters as references", {
  m <- nn_linear(1, 1)
  ms <- list(m)
  with_no_grad(ms[[1]]$weight$fill_(7))
  m$weight$item()
}, function(v) v == 7)
snippet("nn_init_orthogonal_ gives orthonormal rows", {
  w <- torch_empty(3, 3)
  nn_init_orthogonal_(w)
  arr(torch_mm(w, w$t()))
}, function(v) near(v, diag(3), 1e-4))
snippet("nn_init_trunc_normal_ stays within [a, b]", {
  w <- torch_empty(1000)
  nn_init_trunc_normal_(w, a = -1, b = 1)
  range(arr(w))
}, function(v) v[1] >= -1 && v[2] <= 1)
snippet("nn_init_calculate_gain('relu')", nn_init_calculate_gain("relu"), function(v) near(v, sqrt(2)))

# ---- optimizers and schedulers ------------------------------------------------------------
snippet("optim_sgd(weight_decay = 0.1): one step by hand", {
  w <- torch_tensor(c(1), requires_grad = TRUE)
  opt <- optim_sgd(list(w), lr = 0.5, weight_decay = 0.1)
  (w * 2)$sum()$backward()
  opt$step()
  w$item()
}, function(v) near(v, 1 - 0.5 * (2 + 0.1 * 1)))
snippet("optim_adamw decoupled weight decay with zero gradient", {
  w <- torch_tensor(c(1), requires_grad = TRUE)
  opt <- optim_adamw(list(w), lr = 0.1, weight_decay = 0.5)
  (w * 0)$sum()$backward()
  opt$step()
  w$item()
}, function(v) near(v, 1 - 0.1 * 0.5))
snippet("optim_rmsprop lowers a quadratic", {
  w <- torch_tensor(c(3), requires_grad = TRUE)
  opt <- optim_rmsprop(list(w), lr = 0.1)
  for (i in 1:20) {
    opt$zero_grad()
    (w^2)$sum()$backward()
    opt$step()
  }
  abs(w$item())
}, function(v) v < 3)
snippet("optim_adagrad lowers a quadratic", {
  w <- torch_tensor(c(3), requires_grad = TRUE)
  opt <- optim_adagrad(list(w), lr = 0.5)
  for (i in 1:20) {
    opt$zero_grad()
    (w^2)$sum()$backward()
    opt$step()
  }
  abs(w$item())
}, function(v) v < 3)
snippet("optim_sgd(momentum = 0.9, nesterov = TRUE) two steps by hand", {
  w <- torch_tensor(c(0), requires_grad = TRUE)
  opt <- optim_sgd(list(w), lr = 1, momentum = 0.9, nesterov = TRUE)
  for (i in 1:2) {
    opt$zero_grad()
    w$sum()$backward() # gradient 1
    opt$step()
  }
  w$item()
}, function(v) near(v, -(1 + 0.9) - (1 + 0.9 * 1.9)))
snippet("lr_lambda sets lr = base * lambda(epoch)", {
  opt <- optim_sgd(list(torch_ones(1, requires_grad = TRUE)), lr = 1)
  s <- lr_lambda(opt, lr_lambda = function(epoch) 0.5^epoch)
  for (i in 1:3) {
    opt$step()
    s$step()
  }
  opt$param_groups[[1]]$lr
}, function(v) near(v, 0.125))
snippet("lr_multiplicative multiplies each step", {
  opt <- optim_sgd(list(torch_ones(1, requires_grad = TRUE)), lr = 1)
  s <- lr_multiplicative(opt, lr_lambda = function(epoch) 0.9)
  for (i in 1:2) {
    opt$step()
    s$step()
  }
  opt$param_groups[[1]]$lr
}, function(v) near(v, 0.81))
snippet("lr_cosine_annealing reaches eta_min at T_max", {
  opt <- optim_sgd(list(torch_ones(1, requires_grad = TRUE)), lr = 1)
  s <- lr_cosine_annealing(opt, T_max = 4, eta_min = 0.1)
  for (i in 1:4) {
    opt$step()
    s$step()
  }
  opt$param_groups[[1]]$lr
}, function(v) near(v, 0.1))
snippet("optim_sgd() without lr is refused clearly", optim_sgd(list(torch_ones(1, requires_grad = TRUE))),
        error = "lr")
snippet("opt$state_dict() / load_state_dict() round trip", {
  w <- torch_tensor(c(1), requires_grad = TRUE)
  opt <- optim_adam(list(w), lr = 0.1)
  w$sum()$backward()
  opt$step()
  sd <- opt$state_dict()
  opt2 <- optim_adam(list(w), lr = 0.5)
  opt2$load_state_dict(sd)
  opt2$param_groups[[1]]$lr
}, function(v) near(v, 0.1))
snippet("optimizer over m$parameters trains an nn_linear", {
  torch_manual_seed(3)
  m <- nn_linear(1, 1)
  x <- torch_tensor(matrix(c(1, 2, 3, 4), 4))
  y <- 2 * x + 1
  opt <- optim_sgd(m$parameters, lr = 0.05)
  for (i in 1:400) {
    opt$zero_grad()
    nnf_mse_loss(m(x), y)$backward()
    opt$step()
  }
  c(m$weight$item(), m$bias$item())
}, function(v) near(v, c(2, 1), 1e-2))

# ---- datasets and dataloaders --------------------------------------------------------------
ds_gen <- dataset("squares",
  initialize = function(n) self$n <- n,
  .getitem = function(i) list(x = torch_tensor(i), y = torch_tensor(i^2)),
  .length = function() self$n)
snippet("dataset with initialize(n): length and ds[3]", {
  d <- ds_gen(5)
  list(length(d), d[3]$y$item())
}, function(v) v[[1]] == 5 && v[[2]] == 9)
snippet("dataloader collates named items into tensors", {
  b <- dataloader_next(dataloader_make_iter(dataloader(ds_gen(5), batch_size = 2)))
  list(names(b), dim(b$x), arr(b$y))
}, function(v) identical(v[[1]], c("x", "y")) && identical(v[[2]], c(2L, 1L)) && near(v[[3]], c(1, 4)))
snippet("enumerate(dl) counts the batches", {
  n <- 0
  for (b in enumerate(dataloader(ds_gen(7), batch_size = 3))) n <- n + 1
  n
}, function(v) v == 3)
snippet("iterator until dataloader_next gives NULL", {
  it <- dataloader_make_iter(dataloader(ds_gen(4), batch_size = 3))
  sizes <- c()
  while (!is.null(b <- dataloader_next(it))) sizes <- c(sizes, b$x$size(1))
  sizes
}, function(v) identical(as.integer(v), c(3L, 1L)))
snippet("batch_size = 1 keeps a batch dim", dim(dataloader_next(dataloader_make_iter(dataloader(ds_gen(3), batch_size = 1)))$x),
        function(v) identical(v, c(1L, 1L)))
snippet("ds$.getitem(2) called directly", ds_gen(3)$.getitem(2)$y$item(), function(v) v == 4)
snippet("tensor_dataset(x, y)[2] is a list of two rows", {
  td <- tensor_dataset(torch_tensor(matrix(1:6, 3)), torch_tensor(c(7, 8, 9)))
  r <- td[2]
  list(length(r), arr(r[[1]]), r[[2]]$item())
}, function(v) v[[1]] == 2 && identical(v[[2]], c(2L, 5L)) && v[[3]] == 8)
snippet("dataloader over tensor_dataset: the last batch is smaller", {
  td <- tensor_dataset(torch_randn(10, 2))
  sizes <- c()
  for (b in enumerate(dataloader(td, batch_size = 4))) sizes <- c(sizes, b[[1]]$size(1))
  sizes
}, function(v) identical(as.integer(v), c(4L, 4L, 2L)))
snippet("dataloader(num_workers = 0) is accepted", length(dataloader(ds_gen(4), batch_size = 2, num_workers = 0)),
        function(v) v == 2)
snippet("dataset returning plain R numbers collates to a tensor", {
  d <- dataset(initialize = function() NULL, .getitem = function(i) list(v = i * 1.5),
               .length = function() 4)()
  b <- dataloader_next(dataloader_make_iter(dataloader(d, batch_size = 4)))
  arr(b$v)
}, function(v) near(v, c(1.5, 3, 4.5, 6)))
snippet("dataset_subset(ds, indices)", {
  s <- dataset_subset(ds_gen(10), c(2, 5))
  list(length(s), s[2]$y$item())
}, function(v) v[[1]] == 2 && v[[2]] == 25)
snippet("dataloader(batch_size = 0) is refused clearly", dataloader(ds_gen(3), batch_size = 0),
        error = "batch_size")
snippet("a training loop over enumerate(dl)", {
  torch_manual_seed(1)
  x <- torch_randn(32, 2)
  y <- x$sum(dim = 2, keepdim = TRUE)
  dl <- dataloader(tensor_dataset(x, y), batch_size = 8, shuffle = TRUE)
  m <- nn_linear(2, 1)
  opt <- optim_adam(m$parameters, lr = 0.1)
  for (epoch in 1:30) for (b in enumerate(dl)) {
    opt$zero_grad()
    loss <- nnf_mse_loss(m(b[[1]]), b[[2]])
    loss$backward()
    opt$step()
  }
  nnf_mse_loss(m(x), y)$item()
}, function(v) v < 0.05)

# ---- autograd ------------------------------------------------------------------------------
snippet("d/dx sum(x^3) is 3 x^2", {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  (x^3)$sum()$backward()
  arr(x$grad)
}, function(v) near(v, c(3, 12)))
snippet("autograd_grad(grad_outputs = )", {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  y <- x * 3
  arr(autograd_grad(list(y), list(x), grad_outputs = list(f32(1, 10)))[[1]])
}, function(v) near(v, c(3, 30)))
snippet("autograd_grad(allow_unused = TRUE) for an unused input", {
  x <- torch_tensor(1, requires_grad = TRUE)
  z <- torch_tensor(1, requires_grad = TRUE)
  g <- autograd_grad(list(x * 2), list(x, z), allow_unused = TRUE)
  list(arr(g[[1]]), is.null(g[[2]]) || !g[[2]]$is_defined())
}, function(v) near(v[[1]], 2) && isTRUE(v[[2]]))
snippet("with_no_grad({ w$sub_() }) keeps w a leaf that requires grad", {
  w <- torch_tensor(c(1), requires_grad = TRUE)
  (w * 2)$sum()$backward()
  with_no_grad(w$sub_(0.1 * w$grad))
  list(w$requires_grad, w$is_leaf, w$item())
}, function(v) isTRUE(v[[1]]) && isTRUE(v[[2]]) && near(v[[3]], 0.8))
snippet("with_no_grad returns the value of its expression", with_no_grad(f32(1, 2) * 2)$requires_grad,
        function(v) identical(v, FALSE))
snippet("x$requires_grad_(TRUE) on an int tensor is refused clearly", torch_tensor(1:2)$requires_grad_(TRUE),
        error = "floating|float")
snippet("x$grad is NULL before backward", is.null(torch_tensor(1, requires_grad = TRUE)$grad),
        isTRUE)
snippet("grad of a mean over a matrix is 1/n", {
  x <- torch_ones(2, 3, requires_grad = TRUE)
  x$mean()$backward()
  arr(x$grad)
}, function(v) near(v, matrix(1 / 6, 2, 3)))
snippet("nn_linear grads have the parameters' shapes", {
  m <- nn_linear(3, 2)
  m(torch_ones(4, 3))$sum()$backward()
  list(dim(m$weight$grad), arr(m$bias$grad))
}, function(v) identical(v[[1]], c(2L, 3L)) && near(v[[2]], c(4, 4)))
snippet("autograd_backward(list(y), grad_tensors = )", {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  autograd_backward(list(x * 2), grad_tensors = list(f32(1, 5)))
  arr(x$grad)
}, function(v) near(v, c(2, 10)))
snippet("y$backward() twice without retain_graph is refused clearly", {
  x <- torch_tensor(2, requires_grad = TRUE)
  y <- (x * x)$sum()
  y$backward()
  y$backward()
}, error = "retain_graph|second time")
snippet("x$detach_() stops gradients", {
  x <- torch_tensor(2, requires_grad = TRUE)
  y <- x * 3
  y$detach_()
  y$requires_grad
}, function(v) identical(v, FALSE))
snippet("gradient through indexing x[2]", {
  x <- torch_tensor(c(1, 2, 3), requires_grad = TRUE)
  (x[2] * 5)$backward()
  arr(x$grad)
}, function(v) near(v, c(0, 5, 0)))
snippet("second derivative via autograd_grad(create_graph = TRUE) of x^3", {
  x <- torch_tensor(2, requires_grad = TRUE)
  g <- autograd_grad(list((x^3)$sum()), list(x), create_graph = TRUE)[[1]]
  autograd_grad(list(g$sum()), list(x))[[1]]$item()
}, function(v) near(v, 12))

# ---- jit_trace and sizes inside traces ------------------------------------------------------
snippet("traced function of two inputs, other shapes", traced_agrees(function(x, y) torch_matmul(x, y$t()) + 1,
        list(torch_randn(2, 3), torch_randn(4, 3)), list(torch_randn(5, 3), torch_randn(6, 3))), isTRUE)
snippet("traced x$view(c(-1, x$shape[2] * 2))", traced_agrees(function(x) x$view(c(-1, x$shape[2] * 2)),
        list(torch_randn(4, 3)), list(torch_randn(6, 5))), isTRUE)
snippet("traced torch_arange(1, dim(x)[1]) weights", traced_agrees(function(x) x * torch_arange(1, dim(x)[1])$unsqueeze(2),
        list(torch_randn(3, 2)), list(torch_randn(5, 2))), isTRUE)
snippet("traced nnf_softmax(dim = x$dim())", traced_agrees(function(x) nnf_softmax(x, dim = x$dim()),
        list(torch_randn(2, 3)), list(torch_randn(4, 6))), isTRUE)
snippet("traced x[, x$size(2)] last column", traced_agrees(function(x) x[, x$size(2)],
        list(torch_randn(3, 4)), list(torch_randn(5, 6))), isTRUE)
snippet("traced x$narrow(2, 1, x$size(2) - 1)", traced_agrees(function(x) x$narrow(2, 1, x$size(2) - 1),
        list(torch_randn(3, 4)), list(torch_randn(2, 7))), isTRUE)
snippet("traced x$unsqueeze(x$dim() + 1)", traced_agrees(function(x) x$unsqueeze(x$dim() + 1),
        list(torch_randn(3, 4)), list(torch_randn(2, 7))), isTRUE)
snippet("traced x$transpose(x$dim(), x$dim() - 1)", traced_agrees(function(x) x$transpose(x$dim(), x$dim() - 1),
        list(torch_randn(2, 3, 4)), list(torch_randn(3, 5, 2))), isTRUE)
snippet("traced torch_cat with torch_zeros(x$size(1), 1)", traced_agrees(function(x) torch_cat(list(x, torch_zeros(x$size(1), 1)), dim = 2),
        list(torch_randn(3, 2)), list(torch_randn(6, 4))), isTRUE)
snippet("traced x$sum(dim = x$dim())", traced_agrees(function(x) x$sum(dim = x$dim()),
        list(torch_randn(3, 2)), list(torch_randn(6, 4))), isTRUE)
snippet("traced x[.., x$size(-1)]", traced_agrees(function(x) x[.., x$size(-1)],
        list(torch_randn(3, 2, 4)), list(torch_randn(2, 5, 3))), isTRUE)
snippet("traced x[x$size(1) %/% 2 + 1, ] middle row", traced_agrees(function(x) x[x$size(1) %/% 2 + 1, ],
        list(torch_randn(4, 2)), list(torch_randn(7, 2))), isTRUE)
snippet("traced x$view(c(dim(x)[1], -1))", traced_agrees(function(x) x$view(c(dim(x)[1], -1)),
        list(torch_randn(2, 3, 4)), list(torch_randn(5, 2, 2))), isTRUE)
snippet("traced x$expand(c(x$size(1), 3, x$size(3)))", traced_agrees(function(x) x$expand(c(x$size(1), 3, x$size(3))),
        list(torch_randn(2, 1, 4)), list(torch_randn(5, 1, 2))), isTRUE)
snippet("traced x[-x$size(1)] (negative traced position, first element)", traced_agrees(function(x) x[-x$size(1)],
        list(torch_randn(4)), list(torch_randn(7))), isTRUE)
snippet("traced torch_index_select(x, 1, i) with an int input", traced_agrees(function(x, i) torch_index_select(x, 1, i),
        list(torch_randn(5, 2), torch_tensor(c(5L, 1L))), list(torch_randn(8, 3), torch_tensor(c(2L, 8L, 3L)))), isTRUE)
snippet("traced x$topk(2, dim = 1)[[2]] indices", traced_agrees(function(x) x$topk(2, dim = 1)[[2]],
        list(torch_randn(5, 2)), list(torch_randn(8, 3))), isTRUE)
snippet("traced x$max(dim = 2)[[2]] used to gather", traced_agrees(function(x) x$gather(2, x$argmax(dim = 2, keepdim = TRUE)),
        list(torch_randn(3, 4)), list(torch_randn(6, 2))), isTRUE)
snippet("traced y[, x$size(2)] <- 0 assignment at a traced position", traced_agrees(function(x) {
  y <- x$clone()
  y[, x$size(2)] <- 0
  y
}, list(torch_randn(3, 4)), list(torch_randn(5, 2))), isTRUE)
snippet("traced module, saved, loaded and called at another batch", {
  Net <- nn_module(initialize = function() {
    self$fc <- nn_linear(4, 3)
    self$bn <- nn_batch_norm1d(3)
  }, forward = function(x) torch_relu(self$bn(self$fc(x))))
  m <- Net()
  m$eval()
  tr <- jit_trace(m, torch_randn(2, 4))
  p <- tempfile(fileext = ".pt")
  jit_save(tr, p)
  ld <- jit_load(p)
  x <- torch_randn(9, 4)
  near(arr(ld(x)), arr(m(x)))
}, isTRUE)
snippet("traced module's parameters are named as the module's", {
  m <- nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  tr <- jit_trace(m, torch_randn(2, 2))
  sort(names(tr$parameters))
}, function(v) identical(v, sort(c("0.weight", "0.bias", "2.weight", "2.bias"))))
snippet("traced function returning a named list", {
  f <- function(x) list(mu = x$mean(dim = 1), sd = x$std(dim = 1))
  tr <- jit_trace(f, torch_randn(4, 2), strict = FALSE)
  r <- tr(torch_randn(6, 3))
  list(names(r), dim(r$sd))
}, function(v) identical(v[[1]], c("mu", "sd")) && identical(v[[2]], 3L))
snippet("jit_trace(f, 1:3) (an R vector example) is refused clearly", jit_trace(function(x) x * 2, 1:3),
        error = "tensor")
snippet("a traced function called with a list where a tensor was traced is refused clearly", {
  tr <- jit_trace(function(x) x * 2, torch_randn(2))
  tr(list(torch_randn(2)))
}, error = "tensor|list")
snippet("a traced function called with an R vector is refused clearly", {
  tr <- jit_trace(function(x) x * 2, torch_randn(2))
  tr(c(1, 2))
}, error = "tensor")
snippet("traced x$mean(dim = 2, keepdim = TRUE) centring", traced_agrees(function(x) x - x$mean(dim = 2, keepdim = TRUE),
        list(torch_randn(3, 4)), list(torch_randn(5, 2))), isTRUE)
snippet("traced x[2:N, ] - x[1:(N - 1), ] differences", traced_agrees(function(x) x[2:N, ] - x[1:(N - 1), ],
        list(torch_randn(4, 2)), list(torch_randn(7, 3))), isTRUE)

# ---- errors in R terms -----------------------------------------------------------------------
snippet("torch_cat(dim = 3) of matrices names dim 3 and the 1-based range", torch_cat(list(torch_ones(2, 2), torch_ones(2, 2)), dim = 3),
        error = "dim.*3|\\[1, 2\\]|-2, 2")
snippet("x$transpose(1, 3) on a matrix says dim 3 in R terms", torch_ones(2, 2)$transpose(1, 3),
        error = "dim.*3.*(range|1)|\\[1, 2\\]|-2, 2")
snippet("x$unsqueeze(4) on a matrix says the 1-based range", torch_ones(2, 2)$unsqueeze(4),
        error = "\\[1, 3\\]|-3, 3|dim.*4")
snippet("x$view(c(5, 5)) of 4 elements is refused clearly", torch_ones(2, 2)$view(c(5, 5)),
        error = "shape|size|4")
snippet("torch_matmul shape mismatch is refused clearly", torch_matmul(torch_ones(2, 3), torch_ones(4, 5)),
        error = "shape|size|cannot be multiplied")
snippet("torch_gather index beyond the size is refused in 1-based terms", torch_gather(f32(1, 2, 3), 1, torch_tensor(4L)),
        error = "4.*(out of|bounds|range)")
snippet("torch_index_select(x, 1, 0) says positions are 1-based", torch_index_select(f32(1, 2), 1, torch_tensor(0L)),
        error = "1-based|0")
snippet("nnf_embedding index beyond the table is refused in 1-based terms", nnf_embedding(torch_tensor(5L), torch_randn(4, 2)),
        error = "5.*(out of|range|4)|index")
snippet("x$permute(c(1, 1)) repeated dims is refused clearly", torch_ones(2, 2)$permute(c(1, 1)),
        error = "repeat|dim|twice|duplicate")
snippet("torch_reshape(x, c(-1, -1)) is refused clearly", torch_reshape(torch_ones(4), c(-1, -1)),
        error = "-1|one|infer")
snippet("tensor + 'a' is refused clearly", torch_ones(2) + "a", error = "character|string|non-numeric")
snippet("x$squeeze(3) on a matrix says dim 3 out of range in R terms", torch_ones(2, 1)$squeeze(3),
        error = "dim.*3|\\[1, 2\\]|-2, 2")
snippet("torch_stack of different shapes names entries 1-based", torch_stack(list(torch_ones(2), torch_ones(3))),
        error = "entry 1|entry 2|1-based|size")
snippet("nnf_softmax(x, dim = 3) on a matrix is refused in R terms", nnf_softmax(torch_ones(2, 2), dim = 3),
        error = "dim.*3|\\[1, 2\\]|-2, 2")
snippet("x$size(3) on a matrix is refused in R terms", torch_ones(2, 2)$size(3),
        error = "dim.*3|\\[1, 2\\]|-2, 2")

# ---- conversions of views, strides and odd layouts ---------------------------------------
snippet("as_array of x$t() (a transposed view)", arr(m23()$t()),
        function(v) near(v, t(matrix(c(1, 4, 2, 5, 3, 6), 2))) && identical(dim(v), c(3L, 2L)))
snippet("as_array of a 3-d permute", {
  a <- array(as.numeric(1:24), c(2, 3, 4))
  arr(torch_tensor(a)$permute(c(3, 1, 2)))
}, function(v) identical(v, aperm(array(as.numeric(1:24), c(2, 3, 4)), c(3, 1, 2))))
snippet("as_array of an expanded (stride 0) tensor", arr(f32(1, 2, 3)$unsqueeze(1)$expand(c(2, 3))),
        function(v) near(v, matrix(c(1, 2, 3), 2, 3, byrow = TRUE)))
snippet("as_array of a column slice x[, 2:3]", arr(m34()[, 2:3]), function(v) near(v, matrix(1:12, 3)[, 2:3]))
snippet("as_array of a stepped slice x[1:N:2]", arr(torch_tensor(1:7)[1:N:2]), function(v) identical(v, c(1L, 3L, 5L, 7L)))
snippet("as_array of an int64 transposed view", arr(torch_tensor(matrix(1:6, 2))$t()),
        function(v) identical(v, t(matrix(1:6, 2))))
snippet("as_array of a bool permuted 3-d", {
  a <- array(c(TRUE, FALSE, FALSE), c(2, 3, 2))
  arr(torch_tensor(a)$permute(c(2, 3, 1)))
}, function(v) identical(v, aperm(array(c(TRUE, FALSE, FALSE), c(2, 3, 2)), c(2, 3, 1))))
snippet("as_array of a float64 diagonal view", arr(torch_tensor(matrix(as.numeric(1:9), 3), dtype = torch_float64())$diagonal()),
        function(v) identical(v, c(1, 5, 9)))
snippet("as_array of x$unfold(1, 2, 1) windows", arr(f32(1, 2, 3, 4)$unfold(1, 2, 1)),
        function(v) near(v, rbind(c(1, 2), c(2, 3), c(3, 4))))
snippet("torch_tensor of an array with unit dims c(3, 1, 1)", dim(torch_tensor(array(1:3, c(3, 1, 1)))),
        function(v) identical(v, c(3L, 1L, 1L)))
snippet("as.numeric of a transposed matrix follows R's column order", as.numeric(m23()$t()),
        function(v) near(v, as.numeric(t(matrix(c(1, 4, 2, 5, 3, 6), 2)))))
snippet("float64 item() keeps its precision", torch_tensor(1 / 3, dtype = torch_float64())$item(),
        function(v) identical(v, 1 / 3))
snippet("a write through a view x$t() shows in x", {
  x <- torch_zeros(2, 3)
  y <- x$t()
  y[3, 1] <- 7
  arr(x)[1, 3]
}, function(v) v == 7)
snippet("x$add_(1) on a slice writes the base", {
  x <- torch_zeros(2, 3)
  x[1, ]$add_(1)
  arr(x)
}, function(v) near(v, rbind(c(1, 1, 1), c(0, 0, 0))))

# ---- more indexing --------------------------------------------------------------------------
snippet("x[c(-1, 2)] mixed: the last then the second (mlverse)", arr(f32(5, 6, 7, 8)[c(-1, 2)]),
        function(v) near(v, c(8, 6)))
# mlverse reads `a:b` inside `[` as a slice from a to b: with a > b it is empty (not R's
# reversed c(b, a)); c(2, 1) is the reversed positions.
snippet("x[2:1] is an empty slice, as in mlverse", dim(f32(5, 6, 7)[2:1]), function(v) identical(v, 0L))
snippet("x[c(2, 1)] reversed positions", arr(f32(5, 6, 7)[c(2, 1)]), function(v) near(v, c(6, 5)))
snippet("x[c(1, 2), -1] vector rows, last column", arr(m34()[c(1, 2), -1]), function(v) near(v, c(10, 11)))
snippet("x[m] with a logical matrix mask gives R's column order? (torch: row-major)", {
  x <- torch_tensor(matrix(1:4, 2))
  arr(x[x > 1])
}, function(v) identical(sort(v), 2:4))
snippet("x[, 2] <- x[, 2] * 10 in a 3-d tensor's middle dim", {
  x <- torch_ones(2, 3, 2)
  x[, 2, ] <- x[, 2, ] * 10
  arr(x$sum(dim = c(1, 3)))
}, function(v) near(v, c(4, 40, 4)))
snippet("x[i] <- v with an index tensor of repeats keeps one write", {
  x <- torch_zeros(3)
  x[torch_tensor(c(2L, 2L))] <- f32(5, 5)
  arr(x)
}, function(v) near(v, c(0, 5, 0)))
snippet("x$index_put_(list(i, j), v) 1-based pairs", {
  x <- torch_zeros(2, 2)
  x$index_put_(list(torch_tensor(c(1L, 2L)), torch_tensor(c(2L, 1L))), f32(5, 6))
  arr(x)
}, function(v) near(v, rbind(c(0, 5), c(6, 0))))
snippet("x$scatter_(1, idx, src) along dim 1", {
  x <- torch_zeros(3, 2)
  x$scatter_(1, torch_tensor(matrix(c(3L, 1L), 1)), torch_tensor(matrix(c(7, 8), 1)))
  arr(x)
}, function(v) near(v, rbind(c(0, 8), c(0, 0), c(7, 0))))
snippet("torch_take_along_dim(x, idx, dim = 2)", {
  arr(torch_take_along_dim(m23(), torch_tensor(matrix(c(3L, 1L), 2)), dim = 2))
}, function(v) near(v, c(3, 4)))
# mlverse's view() takes one size vector: x$view(c(-1, 2)).
snippet("x$view(-1, 2) with sizes as separate arguments is refused (mlverse: one size vector)", dim(torch_zeros(2, 3, 2)$view(-1, 2)),
        error = "unused argument")
snippet("x$split(c(1, 2), dim = 2) with a vector of sizes", lapply(torch_zeros(2, 3)$split(c(1, 2), dim = 2), dim),
        function(v) identical(v, list(c(2L, 1L), c(2L, 2L))))
snippet("x$flatten(start_dim = -2)", dim(torch_zeros(2, 3, 4)$flatten(start_dim = -2)),
        function(v) identical(v, c(2L, 12L)))
snippet("x$std(dim = c(1, 2))", torch_tensor(array(as.numeric(1:8), c(2, 2, 2)))$std(dim = c(1, 2))$shape,
        function(v) identical(v, 2L))
snippet("torch_diag_embed(offset = 1) shape", dim(torch_diag_embed(torch_ones(2, 3), offset = 1)),
        function(v) identical(v, c(2L, 4L, 4L)))
snippet("torch_renorm(x, p = 2, dim = 1, maxnorm = 1)", {
  x <- torch_tensor(rbind(c(3, 4), c(0.3, 0.4)))
  arr(torch_renorm(x, p = 2, dim = 1, maxnorm = 1))
}, function(v) near(v, rbind(c(0.6, 0.8), c(0.3, 0.4)), 1e-4))
snippet("torch_block_diag", dim(torch_block_diag(list(torch_ones(2, 2), torch_ones(1, 3)))),
        function(v) identical(v, c(3L, 5L)))
snippet("torch_cummax(x, dim = 2) indices on a matrix", arr(torch_cummax(torch_tensor(rbind(c(1, 3, 2), c(5, 4, 6))), dim = 2)[[2]]),
        function(v) near(v, rbind(c(1, 2, 2), c(1, 1, 3))))
snippet("x$index_fill(2, idx, -1) on a matrix", arr(m23()$index_fill(2, torch_tensor(3L), -1)),
        function(v) near(v, cbind(c(1, 4), c(2, 5), c(-1, -1))))
snippet("torch_where(cond, x, y) broadcasting a column", {
  arr(torch_where(m23() > 3, m23(), torch_tensor(matrix(c(0, 9), 2))))
}, function(v) near(v, rbind(c(0, 0, 0), c(4, 5, 6))))
snippet("x$masked_scatter_(mask, src)", {
  x <- torch_zeros(4)
  x$masked_scatter_(torch_tensor(c(TRUE, FALSE, TRUE, FALSE)), f32(1, 2, 3, 4))
  arr(x)
}, function(v) near(v, c(1, 0, 2, 0)))
snippet("nnf_pad(x, c(1, 0, 0, 2)) pads the last dim then the one before", dim(nnf_pad(torch_zeros(2, 3), c(1, 0, 0, 2))),
        function(v) identical(v, c(4L, 4L)))
snippet("nnf_conv2d(padding = 'same')", dim(nnf_conv2d(torch_ones(1, 1, 5, 5), torch_ones(2, 1, 3, 3), padding = "same")),
        function(v) identical(v, c(1L, 2L, 5L, 5L)))
snippet("nnf_softmax of an int tensor is refused clearly", nnf_softmax(torch_tensor(1:3), dim = 1),
        error = "float|dtype|Long|integer")
snippet("nnf_interpolate(size = 4, mode = 'nearest') on 1-d", arr(nnf_interpolate(torch_tensor(array(c(1, 2), c(1, 1, 2))), size = 4, mode = "nearest")),
        function(v) near(v, c(1, 1, 2, 2)))
snippet("x$to(dtype = torch_bool())", arr(f32(0, 2, -1)$to(dtype = torch_bool())), function(v) identical(v, c(FALSE, TRUE, TRUE)))

# ---- more modules -------------------------------------------------------------------------
snippet("parameter order: own parameters, then children's (as mlverse)", {
  Net <- nn_module(initialize = function() {
    self$fc <- nn_linear(1, 1)
    self$scale <- nn_parameter(torch_ones(1))
  }, forward = function(x) x)
  names(Net()$parameters)
}, function(v) identical(v, c("scale", "fc.weight", "fc.bias")))
# tracebridge has no module clone(): it says so and how to copy the weights (counted as a
# clear error; the copy it names is the next snippet).
snippet("m$clone(deep = TRUE) says how to copy the weights instead", {
  m <- nn_linear(1, 1)
  m$clone(deep = TRUE)
}, error = "state_dict")
snippet("a copy of the weights by state_dict() and t$clone() is independent", {
  m <- nn_linear(1, 1)
  best <- lapply(m$state_dict(), function(t) t$clone())
  with_no_grad(m$weight$fill_(5))
  m$load_state_dict(best)
  m$weight$item() != 5
}, isTRUE)
snippet("nn_unflatten(2, c(2, 3))", dim(nn_unflatten(2, c(2, 3))(torch_zeros(4, 6))), function(v) identical(v, c(4L, 2L, 3L)))
snippet("nn_flatten(start_dim = 1, end_dim = -1) flattens all", dim(nn_flatten(start_dim = 1, end_dim = -1)(torch_zeros(2, 3))),
        function(v) identical(v, 6L))
snippet("nn_softmax(dim = 1) on a matrix", arr(nn_softmax(dim = 1)(m23())$sum(dim = 1)), function(v) near(v, c(1, 1, 1)))
snippet("nn_embedding on a 2-d index matrix", dim(nn_embedding(10, 3)(torch_tensor(matrix(1:6, 2)))),
        function(v) identical(v, c(2L, 3L, 3L)))
snippet("nn_batch_norm1d on (N, C, L)", dim(nn_batch_norm1d(3)(torch_randn(4, 3, 5))), function(v) identical(v, c(4L, 3L, 5L)))
snippet("nn_conv2d weight shape out x in x kh x kw", nn_conv2d(3, 8, c(3, 5))$weight$shape,
        function(v) identical(v, c(8L, 3L, 3L, 5L)))
snippet("nn_upsample(scale_factor = 2, mode = 'nearest')", dim(nn_upsample(scale_factor = 2, mode = "nearest")(torch_zeros(1, 1, 2, 3))),
        function(v) identical(v, c(1L, 1L, 4L, 6L)))
snippet("m$to(device = 'cpu') returns the module", class(nn_linear(1, 1)$to(device = "cpu"))[[1]],
        function(v) grepl("linear", v, ignore.case = TRUE))
snippet("replacing a weight with nn_parameter() registers it", {
  m <- nn_linear(2, 1)
  m$weight <- nn_parameter(torch_ones(1, 2))
  list(length(m$parameters), arr(m(torch_ones(1, 2)) - m$bias))
}, function(v) v[[1]] == 2 && near(v[[2]], 2))
snippet("a module forward called with the wrong number of inputs is refused clearly", {
  Net <- nn_module(initialize = function() NULL, forward = function(x) x)
  Net()(torch_ones(1), torch_ones(1))
}, error = "unused argument|argument")
snippet("nn_max_pool1d(return_indices = TRUE) 1-based", arr(nn_max_pool1d(2, return_indices = TRUE)(torch_tensor(array(c(1, 5, 7, 2), c(1, 1, 4))))[[2]]),
        function(v) near(v, c(2, 3)))

# ---- more autograd ------------------------------------------------------------------------
snippet("x$requires_grad <- TRUE then backward", {
  x <- f32(1, 2)
  x$requires_grad <- TRUE
  (x * x)$sum()$backward()
  arr(x$grad)
}, function(v) near(v, c(2, 4)))
snippet("gradient of x[c(1, 1)] accumulates at 1", {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  x[c(1, 1)]$sum()$backward()
  arr(x$grad)
}, function(v) near(v, c(2, 0)))
snippet("gradient through torch_index_select with repeats", {
  x <- torch_tensor(c(1, 2, 3), requires_grad = TRUE)
  torch_index_select(x, 1, torch_tensor(c(3L, 3L, 1L)))$sum()$backward()
  arr(x$grad)
}, function(v) near(v, c(1, 0, 2)))
snippet("gradient through x$max(dim = 1)[[1]]", {
  x <- torch_tensor(matrix(c(1, 5, 3, 2), 2), requires_grad = TRUE)
  x$max(dim = 1)[[1]]$sum()$backward()
  arr(x$grad)
}, function(v) near(v, matrix(c(0, 1, 1, 0), 2)))
snippet("with_no_grad inside a function's return value", {
  f <- function(x) with_no_grad(return(x * 2))
  f(torch_tensor(1, requires_grad = TRUE))$requires_grad
}, function(v) identical(v, FALSE))
snippet("x$grad$data can be zeroed", {
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  x$sum()$backward()
  x$grad$data$zero_()
  arr(x$grad)
}, function(v) near(v, c(0, 0)))

# ---- more traces ---------------------------------------------------------------------------
snippet("traced x$view(c(x$size(1), -1))", traced_agrees(function(x) x$view(c(x$size(1), -1)),
        list(torch_randn(2, 3, 4)), list(torch_randn(5, 2, 2))), isTRUE)
snippet("traced x$new_zeros(x$shape) + 1", traced_agrees(function(x) x$new_zeros(x$shape) + 1,
        list(torch_randn(2, 3)), list(torch_randn(4, 5))), isTRUE)
snippet("traced torch_ones_like(x)$cumsum(1) positions", traced_agrees(function(x) x * torch_ones_like(x)$cumsum(1),
        list(torch_randn(3, 2)), list(torch_randn(6, 2))), isTRUE)
snippet("traced x$numel() / x$size(1)", traced_agrees(function(x) x$sum() / (x$numel() / x$size(1)),
        list(torch_randn(3, 2)), list(torch_randn(6, 4))), isTRUE)
snippet("traced nnf_one_hot(i, num_classes = x$size(2))", traced_agrees(function(x, i) nnf_one_hot(i, num_classes = x$size(2))$to(dtype = torch_float()) * x,
        list(torch_randn(2, 4), torch_tensor(c(1L, 4L))), list(torch_randn(3, 5), torch_tensor(c(5L, 2L, 1L)))), isTRUE)
snippet("traced x[, -1] last column", traced_agrees(function(x) x[, -1], list(torch_randn(3, 4)), list(torch_randn(2, 6))), isTRUE)
snippet("traced x[-1, ] is the last row (mlverse)", traced_agrees(function(x) x[-1, ], list(torch_randn(3, 4)), list(torch_randn(5, 4))), isTRUE)
snippet("traced x$flip(1)[1, ] equals x[N, ]", {
  tr <- jit_trace(function(x) x$flip(1)[1, ] - x[N, ], torch_randn(3, 2))
  arr(tr(torch_randn(5, 2)))
}, function(v) near(v, c(0, 0)))
snippet("traced integer input x + 1L stays int64", traced_agrees(function(x) x + 1L,
        list(torch_tensor(1:3)), list(torch_tensor(1:5))), isTRUE)
snippet("traced x$max(dim = 1)[[2]] indices are 1-based at other shapes", {
  tr <- jit_trace(function(x) x$max(dim = 1)[[2]], torch_randn(3, 2))
  arr(tr(torch_tensor(rbind(c(0, 9), c(5, 0), c(1, 1), c(7, 2)))))
}, function(v) near(v, c(4, 1)))
snippet("traced torch_argmax at another shape is 1-based", {
  tr <- jit_trace(function(x) torch_argmax(x), torch_randn(3))
  tr(f32(1, 2, 3, 9, 0))$item()
}, function(v) v == 4)
snippet("traced torch_sort(descending = TRUE) indices", traced_agrees(function(x) torch_sort(x, descending = TRUE)[[2]],
        list(torch_randn(4)), list(torch_randn(7))), isTRUE)
snippet("traced torch_nonzero positions", {
  tr <- jit_trace(function(x) torch_nonzero(x > 0), f32(1, -1, 1))
  arr(tr(f32(-1, -1, 2, 3, -1)))
}, function(v) near(v, c(3, 4)))
snippet("traced x[i] with an index tensor input", traced_agrees(function(x, i) x[i],
        list(torch_randn(5), torch_tensor(c(5L, 1L))), list(torch_randn(9), torch_tensor(c(9L, 2L, 3L)))), isTRUE)

# ---- dtypes of results, losses in their mlverse form ------------------------------------
# mlverse adds a small epsilon to `end` (to include it), so integer bounds give float32 too.
snippet("torch_arange(1, 5) and torch_arange(1L, 5L) are float32 (mlverse)", c(as.character(torch_arange(1, 5)$dtype),
        as.character(torch_arange(1L, 5L)$dtype)), function(v) identical(v, c("float32", "float32")))
snippet("sum of an int32 tensor is int64", as.character(torch_tensor(1:3, dtype = torch_int())$sum()$dtype),
        function(v) v == "int64")
snippet("sum of a bool tensor counts (int64)", {
  s <- torch_tensor(c(TRUE, TRUE, FALSE))$sum()
  list(as.character(s$dtype), s$item())
}, function(v) v[[1]] == "int64" && v[[2]] == 2)
snippet("x$max() of everything is 0-d", length(dim(m23()$max())), function(v) v == 0)
snippet("torch_sort of a matrix sorts each row (dim = -1 default)", arr(torch_sort(torch_tensor(rbind(c(3, 1, 2), c(0, 9, 5))))[[2]]),
        function(v) near(v, rbind(c(2, 3, 1), c(1, 3, 2))))
snippet("torch_cat of int64 and float32 promotes to float32", as.character(torch_cat(list(torch_tensor(1:2), f32(0.5)))$dtype),
        function(v) v == "float32")
snippet("torch_where(cond) of a matrix: row and column positions, 1-based", {
  r <- torch_where(torch_tensor(rbind(c(0, 1), c(1, 0))) > 0)
  list(arr(r[[1]]), arr(r[[2]]))
}, function(v) near(v[[1]], c(1, 2)) && near(v[[2]], c(2, 1)))
snippet("x$nonzero() of a matrix is n x 2, 1-based", arr(torch_tensor(rbind(c(0, 1), c(1, 0)))$nonzero()),
        function(v) near(v, rbind(c(1, 2), c(2, 1))))
snippet("torch_searchsorted(right = TRUE)", arr(torch_searchsorted(f32(1, 2, 2, 3), f32(2), right = TRUE)),
        function(v) near(v, 4))
snippet("torch_bucketize(right = TRUE)", arr(torch_bucketize(f32(2), f32(1, 2, 3), right = TRUE)),
        function(v) near(v, 3))
snippet("x$squeeze(1) on a dim that is not 1 leaves it", dim(torch_zeros(2, 1)$squeeze(1)), function(v) identical(v, c(2L, 1L)))
snippet("torch_chunk(x, 3) of 7 gives sizes 3, 3, 1", vapply(torch_chunk(torch_zeros(7), 3), function(t) t$size(1), 0),
        function(v) identical(as.integer(v), c(3L, 3L, 1L)))
snippet("nnf_cross_entropy(label_smoothing = 0.1) equals Python's", {
  x <- torch_tensor(rbind(c(2, 0, -1), c(0, 1, 0)))
  got <- nnf_cross_entropy(x, torch_tensor(c(1L, 3L)), label_smoothing = 0.1)$item()
  pt <- reticulate::import("torch", convert = FALSE)
  want <- as.numeric(reticulate::py_str(pt$nn$functional$cross_entropy(
    x$py, pt$tensor(list(0L, 2L)), label_smoothing = 0.1)$item()))
  c(got, want)
}, function(v) near(v[1], v[2], 1e-5))
snippet("nnf_cross_entropy on (N, C, d) with 1-based (N, d) targets", {
  x <- torch_randn(2, 3, 4)
  y <- torch_tensor(matrix(c(1L, 3L, 2L, 2L, 3L, 1L, 1L, 2L), 2))
  got <- nnf_cross_entropy(x, y)$item()
  lp <- as_array(nnf_log_softmax(x, dim = 2))
  ya <- as_array(y)
  want <- -mean(vapply(seq_len(8), function(k) {
    i <- (k - 1) %% 2 + 1
    j <- (k - 1) %/% 2 + 1
    lp[i, ya[i, j], j]
  }, 0))
  c(got, want)
}, function(v) near(v[1], v[2], 1e-5))
snippet("nnf_binary_cross_entropy_with_logits(pos_weight = )", nnf_binary_cross_entropy_with_logits(f32(0), f32(1), pos_weight = f32(3))$item(),
        function(v) near(v, 3 * log(2)))
snippet("nnf_kl_div(reduction = 'batchmean')", nnf_kl_div(torch_log(torch_tensor(rbind(c(0.5, 0.5)))), torch_tensor(rbind(c(0.5, 0.5))), reduction = "batchmean")$item(),
        function(v) abs(v) < 1e-7)
snippet("nnf_layer_norm over the last two dims", {
  y <- nnf_layer_norm(torch_randn(2, 3, 4), normalized_shape = c(3, 4))
  arr(y$mean(dim = c(2, 3)))
}, function(v) all(abs(v) < 1e-5))
snippet("nnf_batch_norm(training = TRUE) updates the running mean", {
  rm <- torch_zeros(2)
  rv <- torch_ones(2)
  nnf_batch_norm(torch_tensor(rbind(c(1, 2), c(3, 4))), rm, rv, training = TRUE, momentum = 0.5)
  arr(rm)
}, function(v) near(v, c(1, 1.5)))
snippet("nnf_dropout(p = 1, training = TRUE) gives zeros", arr(nnf_dropout(f32(1, 2), p = 1, training = TRUE)),
        function(v) near(v, c(0, 0)))
snippet("nnf_max_pool2d(ceil_mode = TRUE)", dim(nnf_max_pool2d(torch_ones(1, 1, 5, 5), 2, ceil_mode = TRUE)),
        function(v) identical(v, c(1L, 1L, 3L, 3L)))
snippet("nnf_one_hot of a 2-d index", dim(nnf_one_hot(torch_tensor(matrix(c(1L, 2L, 3L, 1L), 2)), 3)),
        function(v) identical(v, c(2L, 2L, 3L)))
snippet("nnf_embedding(padding_idx = 2) row stays as given", {
  w <- torch_tensor(rbind(c(1, 1), c(2, 2), c(3, 3)))
  arr(nnf_embedding(torch_tensor(c(2L, 3L)), w, padding_idx = 2))
}, function(v) near(v, rbind(c(2, 2), c(3, 3))))
snippet("nn_cross_entropy_loss(ignore_index = -100) with 1-based targets", {
  loss <- nn_cross_entropy_loss()
  loss(torch_tensor(rbind(c(10, 0), c(0, 10))), torch_tensor(c(1L, 2L)))$item()
}, function(v) v < 1e-3)
snippet("nn_nll_loss(weight = ) module", {
  loss <- nn_nll_loss(weight = f32(1, 0))
  loss(torch_log(torch_tensor(rbind(c(0.5, 0.5), c(0.25, 0.75)))), torch_tensor(c(1L, 2L)))$item()
}, function(v) near(v, log(2)))
snippet("a traced loss with 1-based targets at another batch", traced_agrees(function(x, y) nnf_cross_entropy(x, y, reduction = "none"),
        list(torch_randn(2, 3), torch_tensor(c(3L, 1L))), list(torch_randn(4, 3), torch_tensor(c(2L, 3L, 1L, 3L)))), isTRUE)
snippet("a traced nn_embedding module at another length", {
  m <- nn_embedding(5, 2)
  traced_agrees(m, list(torch_tensor(c(1L, 5L))), list(torch_tensor(c(2L, 3L, 4L, 5L, 1L))))
}, isTRUE)

# ---- tensors and base R's list and vector functions ----------------------------------------
snippet("c(t1, t2) is a list of two tensors (as in mlverse)", {
  r <- c(torch_ones(1), torch_zeros(2))
  list(length(r), vapply(r, function(t) class(t)[[1]], ""))
}, function(v) v[[1]] == 2 && all(v[[2]] == "torch_tensor"))
snippet("preds <- c(preds, t) in a loop, then torch_cat(preds)", {
  preds <- list()
  for (i in 1:3) preds <- c(preds, torch_tensor(c(i, i)))
  arr(torch_cat(preds))
}, function(v) identical(v, c(1L, 1L, 2L, 2L, 3L, 3L)))
snippet("losses <- c(losses, loss) then torch_stack()$sum()$backward()", {
  w <- torch_tensor(2, requires_grad = TRUE)
  losses <- NULL
  for (k in 3:4) losses <- c(losses, w * k)
  torch_stack(losses)$sum()$backward()
  arr(w$grad)
}, function(v) near(v, 7))
snippet("unique(x) keeps R's order of first appearance", arr(unique(f32(3, 1, 3))), function(v) near(v, c(3, 1)))
snippet("rev(x) of a matrix is R's reversed vector", arr(rev(torch_tensor(matrix(1:4, 2)))), function(v) identical(v, 4:1))
snippet("max(t1, t2) of two tensors is the overall max", max(f32(1, 5), f32(3))$item(), function(v) v == 5)
snippet("ifelse(x > 2, 1, 0) gives an R vector", ifelse(f32(3, 1, 3) > 2, 1, 0), function(v) identical(v, c(1, 0, 1)))
snippet("outer(x, x) of a tensor as R numbers", outer(f32(1, 2), f32(1, 2)), function(v) near(v, outer(1:2, 1:2)))
snippet("x %in% c(1, 3) on a tensor", f32(3, 1, 2) %in% c(1, 3), function(v) identical(v, c(TRUE, TRUE, FALSE)))
snippet("head(x, 2) of a tensor", arr(head(f32(3, 1, 2), 2)), function(v) near(v, c(3, 1)))
snippet("sapply over positions with $item()", sapply(1:3, function(i) f32(3, 1, 2)[i]$item()), function(v) near(v, c(3, 1, 2)))
snippet("vapply(list of tensors, dim)", vapply(list(torch_zeros(2, 3), torch_zeros(4, 3)), function(t) t$size(1), 0),
        function(v) near(v, c(2, 4)))

# ---- dims and positions against Python torch called with 0-based arguments ----------------
pt <- reticulate::import("torch", convert = FALSE)
pyF <- pt$nn$functional
from_py <- function(p) arr(tracebridge:::wrap_tensor(p))
a4 <- torch_tensor(array(as.numeric(1:60), c(3, 4, 5)))
same_as_py <- function(got, want) {
  near(arr(got), from_py(want)) && identical(dim(got), dim(tracebridge:::wrap_tensor(want)))
}
snippet("torch_narrow(x, 1, -2, 2): start counts from the end", same_as_py(torch_narrow(a4, 1, -2, 2), a4$py$narrow(0L, -2L, 2L)), isTRUE)
snippet("torch_select(x, 1, -1) is the last", same_as_py(torch_select(a4, 1, -1), a4$py$select(0L, -1L)), isTRUE)
snippet("x$select(2, -2)", same_as_py(a4$select(2, -2), a4$py$select(1L, -2L)), isTRUE)
snippet("torch_diagonal(dim1 = -2, dim2 = -1)", same_as_py(torch_diagonal(a4, dim1 = -2, dim2 = -1), a4$py$diagonal(0L, -2L, -1L)), isTRUE)
snippet("torch_movedim(x, -1, 1)", same_as_py(torch_movedim(a4, -1, 1), a4$py$movedim(-1L, 0L)), isTRUE)
snippet("x$unsqueeze(-2)", same_as_py(a4$unsqueeze(-2), a4$py$unsqueeze(-2L)), isTRUE)
snippet("torch_flatten(start_dim = 2, end_dim = -1)", same_as_py(torch_flatten(a4, start_dim = 2, end_dim = -1), a4$py$flatten(1L, -1L)), isTRUE)
snippet("torch_cumsum(x, dim = -1)", same_as_py(torch_cumsum(a4, dim = -1), a4$py$cumsum(-1L)), isTRUE)
snippet("torch_split(x, 2, dim = -1) last piece", same_as_py(torch_split(a4, 2, dim = -1)[[3]], a4$py$split(2L, dim = -1L)[2]), isTRUE)
snippet("torch_roll(shifts = c(1, 2), dims = c(1, 3))", same_as_py(torch_roll(a4, shifts = c(1, 2), dims = c(1, 3)), a4$py$roll(list(1L, 2L), list(0L, 2L))), isTRUE)
snippet("torch_flip(dims = c(1, 3))", same_as_py(torch_flip(a4, dims = c(1, 3)), a4$py$flip(list(0L, 2L))), isTRUE)
snippet("torch_rot90(k = 1, dims = c(2, 3))", same_as_py(torch_rot90(a4, 1, c(2, 3)), a4$py$rot90(1L, list(1L, 2L))), isTRUE)
snippet("torch_scatter(x, -1, idx, src)", {
  idx <- torch_tensor(matrix(c(2L, 1L), 2, 1))
  src <- torch_tensor(matrix(c(7, 8), 2, 1))
  x <- torch_zeros(2, 3)
  same_as_py(torch_scatter(x, -1, idx, src), x$py$scatter(-1L, pt$tensor(list(list(1L), list(0L))), src$py))
}, isTRUE)
snippet("torch_argmax(x, dim = -1)", near(arr(torch_argmax(a4, dim = -1)), from_py(a4$py$argmax(-1L)) + 1), isTRUE)
snippet("torch_kthvalue(x, 2, dim = 1) values and 1-based indices", {
  r <- torch_kthvalue(torch_tensor(rbind(c(5, 1), c(2, 9), c(7, 3))), 2, dim = 1)
  list(arr(r[[1]]), arr(r[[2]]))
}, function(v) near(v[[1]], c(5, 3)) && near(v[[2]], c(1, 3)))
snippet("torch_topk(x, 2, dim = -1, largest = FALSE) indices", {
  x <- torch_tensor(rbind(c(5, 1, 3), c(2, 9, 0)))
  arr(torch_topk(x, 2, dim = -1, largest = FALSE)[[2]])
}, function(v) near(v, rbind(c(2, 3), c(3, 1))))
snippet("torch_unique_consecutive(dim = 1) of rows", dim(torch_unique_consecutive(torch_tensor(rbind(c(1, 2), c(1, 2), c(3, 4))), dim = 1)),
        function(v) identical(v, c(2L, 2L)))
snippet("torch_repeat_interleave(x, tensor repeats, dim = 1) on a matrix", dim(torch_repeat_interleave(torch_zeros(2, 3), torch_tensor(c(1L, 3L)), dim = 1)),
        function(v) identical(v, c(4L, 3L)))
snippet("torch_triu(x, diagonal = -1)", same_as_py(torch_triu(torch_ones(3, 3), diagonal = -1), pt$triu(pt$ones(3L, 3L), diagonal = -1L)), isTRUE)
snippet("x$index_add_(2, idx, src)", {
  x <- torch_zeros(2, 3)
  x$index_add_(2, torch_tensor(c(3L, 3L)), torch_ones(2, 2))
  arr(x)
}, function(v) near(v, cbind(0, 0, c(2, 2))))
snippet("x$scatter_add(1, idx, src)", {
  arr(torch_zeros(3)$scatter_add(1, torch_tensor(c(1L, 1L, 3L)), f32(1, 2, 3)))
}, function(v) near(v, c(3, 0, 3)))
snippet("x$index_copy_(1, idx, src) in place", {
  x <- torch_zeros(3, 2)
  x$index_copy_(1, torch_tensor(c(3L)), torch_ones(1, 2))
  arr(x)
}, function(v) near(v, rbind(c(0, 0), c(0, 0), c(1, 1))))
snippet("x$put_(idx, values) flat 1-based positions", {
  x <- torch_zeros(2, 2)
  x$put_(torch_tensor(c(2L)), f32(5))
  arr(x)
}, function(v) near(v, rbind(c(0, 5), c(0, 0))))
snippet("linalg_vector_norm(dim = c(2, 3)) on 3-d", same_as_py(linalg_vector_norm(a4, dim = c(2, 3)), pt$linalg$vector_norm(a4$py, dim = list(1L, 2L))), isTRUE)
snippet("linalg_matrix_norm(dim = c(1, 3))", same_as_py(linalg_matrix_norm(a4, dim = c(1, 3)), pt$linalg$matrix_norm(a4$py, dim = list(0L, 2L))), isTRUE)
snippet("linalg_norm(ord = 1, dim = c(2, 1))", same_as_py(linalg_norm(a4, ord = 1, dim = c(2, 1)), pt$linalg$norm(a4$py, ord = 1L, dim = list(1L, 0L))), isTRUE)
snippet("linalg_cross(dim = 1)", {
  a <- torch_randn(3, 4)
  b <- torch_randn(3, 4)
  same_as_py(linalg_cross(a, b, dim = 1), pt$linalg$cross(a$py, b$py, dim = 0L))
}, isTRUE)
snippet("nnf_normalize(dim = -1)", same_as_py(nnf_normalize(a4, dim = -1), pyF$normalize(a4$py, dim = -1L)), isTRUE)
snippet("nnf_cosine_similarity(dim = 1)", same_as_py(nnf_cosine_similarity(a4, a4$flip(1), dim = 1), pyF$cosine_similarity(a4$py, a4$py$flip(0L), dim = 0L)), isTRUE)
snippet("nnf_glu(dim = 2) on 3-d", same_as_py(nnf_glu(a4$narrow(2, 1, 4) / 60, dim = 2), pyF$glu(a4$py$narrow(1L, 0L, 4L)$div(60), dim = 1L)), isTRUE)
snippet("nnf_softmin(dim = 1)", same_as_py(nnf_softmin(a4 / 60, dim = 1), pyF$softmin(a4$py$div(60), dim = 0L)), isTRUE)
snippet("nn_softmax2d on (N, C, H, W)", {
  x <- torch_randn(2, 3, 2, 2)
  same_as_py(nn_softmax2d()(x), pyF$softmax(x$py, dim = -3L))
}, isTRUE)
snippet("torch_logsumexp(dim = c(1, 3))", same_as_py(torch_logsumexp(a4 / 60, dim = c(1, 3)), pt$logsumexp(a4$py$div(60), dim = list(0L, 2L))), isTRUE)
snippet("torch_std(dim = c(2, 3), keepdim = TRUE)", same_as_py(torch_std(a4, dim = c(2, 3), keepdim = TRUE), a4$py$std(dim = list(1L, 2L), keepdim = TRUE)), isTRUE)
snippet("torch_amin(dim = -1)", same_as_py(torch_amin(a4, dim = -1), pt$amin(a4$py, dim = -1L)), isTRUE)
snippet("torch_squeeze(x, dim = -1)", dim(torch_squeeze(torch_zeros(2, 3, 1), dim = -1)), function(v) identical(v, c(2L, 3L)))
snippet("x$expand(c(-1, 4)) keeps the first size", dim(torch_zeros(3, 1)$expand(c(-1, 4))), function(v) identical(v, c(3L, 4L)))
snippet("torch_broadcast_tensors", lapply(torch_broadcast_tensors(list(torch_zeros(3, 1), torch_zeros(1, 4))), dim),
        function(v) identical(v, list(c(3L, 4L), c(3L, 4L))))

# ---- sizes in traces, saving, optimizer details ---------------------------------------------
snippet("traced x$view(c(x$shape[1], prod(x$shape[2:3])))", traced_agrees(function(x) x$view(c(x$shape[1], prod(x$shape[2:3]))),
        list(torch_randn(2, 3, 4)), list(torch_randn(5, 2, 6))), isTRUE)
snippet("traced torch_arange(0, x$size(1) - 1) / x$size(1)", traced_agrees(function(x) x + torch_arange(0, x$size(1) - 1) / x$size(1),
        list(torch_randn(4)), list(torch_randn(9))), isTRUE)
snippet("traced x[, x$size(2):1] reversed columns", traced_agrees(function(x) x[, x$size(2):1],
        list(torch_randn(2, 3)), list(torch_randn(4, 5))), isTRUE)
snippet("traced x$size(1) * 2L as a size", traced_agrees(function(x) torch_zeros(x$size(1) * 2L, 1) + 1,
        list(torch_randn(2, 3)), list(torch_randn(4, 5))), isTRUE)
snippet("traced x$shape[2:3] used whole as a size", traced_agrees(function(x) torch_ones(x$shape[2:3]) * x$mean(),
        list(torch_randn(2, 3, 4)), list(torch_randn(4, 5, 2))), isTRUE)
snippet("traced x$reshape(c(-1, x$size(-1)))", traced_agrees(function(x) x$reshape(c(-1, x$size(-1))),
        list(torch_randn(2, 3, 4)), list(torch_randn(4, 5, 2))), isTRUE)
snippet("traced x$narrow(1, x$size(1), 1) last row", traced_agrees(function(x) x$narrow(1, x$size(1), 1),
        list(torch_randn(3, 2)), list(torch_randn(6, 2))), isTRUE)
snippet("traced nnf_pad(x, c(0, x$size(1)))", traced_agrees(function(x) nnf_pad(x, c(0, x$size(1))),
        list(torch_randn(3, 2)), list(torch_randn(5, 4))), isTRUE)
snippet("traced torch_tile(x, c(1, 2))", traced_agrees(function(x) torch_tile(x, c(1, 2)),
        list(torch_randn(3, 2)), list(torch_randn(5, 4))), isTRUE)
snippet("traced torch_take_along_dim(x, argmax, dim = 2)", traced_agrees(function(x) torch_take_along_dim(x, x$argmax(dim = 2, keepdim = TRUE), dim = 2),
        list(torch_randn(3, 4)), list(torch_randn(5, 2))), isTRUE)
snippet("traced torch_quantile(x, 0.5, dim = 2)", traced_agrees(function(x) torch_quantile(x, 0.5, dim = 2),
        list(torch_randn(3, 4)), list(torch_randn(5, 7))), isTRUE)
snippet("traced x$unfold(2, 2, 1)", traced_agrees(function(x) x$unfold(2, 2, 1)$sum(dim = 3),
        list(torch_randn(3, 4)), list(torch_randn(5, 7))), isTRUE)
# tracebridge documents (man/torch_save.Rd) that a module is saved as its state, never as
# code: torch_load() gives the state for load_state_dict() of a module built again.
snippet("torch_save(model), torch_load() into a module built again (documented)", {
  make <- function() nn_sequential(nn_linear(2, 3), nn_relu(), nn_linear(3, 1))
  m <- make()
  p <- tempfile(fileext = ".pt")
  torch_save(m, p)
  m2 <- make()
  m2$load_state_dict(torch_load(p))
  x <- torch_randn(4, 2)
  near(arr(m2(x)), arr(m(x)))
}, isTRUE)
snippet("torch_save / torch_load of an int64 and a bool tensor in a named list", {
  p <- tempfile(fileext = ".pt")
  torch_save(list(i = torch_tensor(1:3), b = torch_tensor(c(TRUE, FALSE))), p)
  l <- torch_load(p)
  list(arr(l$i), arr(l$b))
}, function(v) identical(v[[1]], 1:3) && identical(v[[2]], c(TRUE, FALSE)))
snippet("jit_save / jit_load of a module with batch norm keeps running stats", {
  m <- nn_sequential(nn_linear(2, 2), nn_batch_norm1d(2))
  m(torch_randn(8, 2))
  m$eval()
  tr <- jit_trace(m, torch_randn(3, 2))
  p <- tempfile(fileext = ".pt")
  jit_save(tr, p)
  ld <- jit_load(p)
  x <- torch_randn(5, 2)
  near(arr(ld(x)), arr(m(x)), 1e-5)
}, isTRUE)
snippet("optim_adam(amsgrad = TRUE) steps", {
  w <- torch_tensor(c(1), requires_grad = TRUE)
  opt <- optim_adam(list(w), lr = 0.1, amsgrad = TRUE)
  (w^2)$sum()$backward()
  opt$step()
  w$item()
}, function(v) near(v, 0.9, 1e-4))
snippet("length(opt$param_groups[[1]]$params)", {
  m <- nn_linear(2, 2)
  opt <- optim_sgd(m$parameters, lr = 0.1)
  length(opt$param_groups[[1]]$params)
}, function(v) v == 2)
snippet("lr_step(step_size = 1, gamma = 0.5) three steps", {
  opt <- optim_sgd(list(torch_ones(1, requires_grad = TRUE)), lr = 1)
  s <- lr_step(opt, step_size = 1, gamma = 0.5)
  for (i in 1:3) {
    opt$step()
    s$step()
  }
  opt$param_groups[[1]]$lr
}, function(v) near(v, 0.125))
snippet("nn_utils_clip_grad_norm_ returns the total norm", {
  w <- torch_tensor(c(3, 4), requires_grad = TRUE)
  (w * w / 2)$sum()$backward()
  n <- nn_utils_clip_grad_norm_(list(w), max_norm = 1)
  list(as.numeric(n$item()), arr(w$grad))
}, function(v) near(v[[1]], 5) && near(v[[2]], c(0.6, 0.8), 1e-4))
snippet("dataloader collates logical and integer items to bool and int64", {
  d <- dataset(initialize = function() NULL, .getitem = function(i) list(f = i %% 2 == 0, n = as.integer(i)),
               .length = function() 4)()
  b <- dataloader_next(dataloader_make_iter(dataloader(d, batch_size = 4)))
  list(as.character(b$f$dtype), arr(b$f), as.character(b$n$dtype))
}, function(v) v[[1]] == "bool" && identical(v[[2]], c(FALSE, TRUE, FALSE, TRUE)) && v[[3]] == "int64")
snippet("dataloader collates nested named lists", {
  d <- dataset(initialize = function() NULL,
               .getitem = function(i) list(x = list(a = torch_tensor(i), b = torch_ones(2)), y = torch_tensor(i)),
               .length = function() 3)()
  b <- dataloader_next(dataloader_make_iter(dataloader(d, batch_size = 3)))
  list(dim(b$x$a), dim(b$x$b), dim(b$y))
}, function(v) identical(v, list(c(3L, 1L), c(3L, 2L), c(3L, 1L))))

# ---- more errors an R user meets ---------------------------------------------------------
snippet("torch_tensor(NULL) is refused clearly", torch_tensor(NULL), error = "NULL")
snippet("x$to(device = 'cuda') without CUDA is refused clearly", if (cuda_is_available()) stop("CUDA here") else torch_ones(1)$to(device = "cuda"),
        error = "CUDA|cuda")
snippet("torch_randn(2, 'a') is refused clearly", torch_randn(2, "a"), error = "size|whole|number|character")
snippet("optim_adam(model) instead of model$parameters is refused clearly", optim_adam(nn_linear(1, 1)), error = "parameters")
snippet("dataloader(list()) of a non-dataset is refused clearly", dataloader(list(1, 2), batch_size = 1), error = "dataset")
snippet("x$view(c(2, NA)) is refused clearly", torch_ones(4)$view(c(2, NA)), error = "NA|whole|missing")
snippet("torch_zeros(2.5) is refused clearly", torch_zeros(2.5), error = "whole|integer")
snippet("torch_randint(5, 1, 3) (low > high) is refused clearly", torch_randint(5, 1, 3), error = "low|high|range|from")
snippet("nn_linear(2, 1)() without input is refused clearly", nn_linear(2, 1)(), error = "input|argument|missing")
snippet("a dataset without .getitem says what to define", {
  d <- dataset(initialize = function() NULL, .length = function() 2)()
  d[1]
}, error = "getitem")
snippet("torch_cat of a tensor (not a list) is refused clearly", torch_cat(torch_ones(2)), error = "list of tensors")
snippet("nnf_mse_loss of different shapes warns or says so", nnf_mse_loss(torch_ones(2, 1), torch_ones(2)),
        function(v) inherits(v, "torch_tensor"))

# ---- the new functions and c() inside traces ------------------------------------------------
snippet("traced torch_cat(c(x, y)) (c() of tensors is a list)", traced_agrees(function(x, y) torch_cat(c(x, y), dim = 1),
        list(torch_randn(2, 3), torch_randn(1, 3)), list(torch_randn(4, 3), torch_randn(2, 3))), isTRUE)
snippet("traced a list grown with c() in a loop over a fixed range", traced_agrees(function(x) {
  parts <- list()
  for (k in 1:3) parts <- c(parts, x * k)
  torch_stack(parts)$sum(dim = 1)
}, list(torch_randn(2, 3)), list(torch_randn(5, 3))), isTRUE)
snippet("traced torch_kron(x, eye)", traced_agrees(function(x) torch_kron(x, torch_eye(2)),
        list(torch_randn(2, 3)), list(torch_randn(3, 1))), isTRUE)
snippet("traced torch_tensordot(x, w, dims = 1)", {
  w <- torch_randn(3, 2)
  traced_agrees(function(x) torch_tensordot(x, w, dims = 1), list(torch_randn(4, 3)), list(torch_randn(6, 3)))
}, isTRUE)
snippet("traced torch_clip / torch_logit", traced_agrees(function(x) torch_logit(torch_clip(torch_sigmoid(x), 0.1, 0.9)),
        list(torch_randn(4)), list(torch_randn(7))), isTRUE)
snippet("traced nn_max_pool2d(return_indices = TRUE) indices", {
  m <- nn_max_pool2d(2, return_indices = TRUE)
  f <- function(x) m(x)[[2]]
  traced_agrees(f, list(torch_randn(1, 1, 4, 4)), list(torch_randn(2, 1, 6, 6)))
}, isTRUE)
# put() is not in the op set (shared_ir/opset.md): the trace refuses it and says so.
snippet("traced x$put(idx, v) is refused clearly (not in the op set)", traced_agrees(function(x, i) x$put(i, torch_ones(i$size(1))),
        list(torch_zeros(2, 2), torch_tensor(c(4L))), list(torch_zeros(3, 3), torch_tensor(c(9L, 1L)))),
        error = "not in tracebridge's op set")

# ---- summary ----------------------------------------------------------------------------
levels <- c("works", "clear error", "unclear error", "fails", "SILENTLY WRONG")
outcomes <- vapply(results, `[[`, "", "outcome")
counts <- table(factor(outcomes, levels))
cat(sprintf("\n%d snippets: %s\n", length(outcomes),
            paste(sprintf("%s %d", names(counts), as.integer(counts)), collapse = ", ")))
if (counts[["SILENTLY WRONG"]] > 0) quit(status = 1)
