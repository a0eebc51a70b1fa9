# A trial as an R user of mlverse torch: everyday snippets (none of them copied from
# tests/testthat), each with the value base R (or mlverse's documented behaviour) says it
# must give. Each snippet ends as one of:
#   works          it ran and gave the expected value;
#   clear error    it raised an error it should raise (bad input), whose message matches
#                  what the snippet expects (what went wrong, in R terms);
#   fails          it raised where mlverse torch works (a gap to fix);
#   SILENTLY WRONG it ran and gave another value (must never happen).
#
#   R_LIBS=.Rlib Rscript benchmarks/r_trial.R [--verbose]
#
# Exits with status 1 if a snippet is silently wrong.

library(tracebridge)
verbose <- "--verbose" %in% commandArgs(trailingOnly = TRUE)
torch_manual_seed(42)

results <- list()
near <- function(a, b, tol = 1e-5) {
  isTRUE(all.equal(as.numeric(a), as.numeric(b), tolerance = tol)) &&
    identical(length(a), length(b))
}
# `check` gets the value; `error`: the snippet must raise an error matching it.
snippet <- function(name, code, check = NULL, error = NULL) {
  value <- tryCatch(list(ok = TRUE, v = eval(code, new.env(parent = globalenv()))),
                    error = function(e) list(ok = FALSE, msg = conditionMessage(e)))
  outcome <- if (!is.null(error)) {
    if (!value$ok && grepl(error, value$msg)) "clear error" else if (value$ok) {
      "SILENTLY WRONG"
    } else "fails"
  } else if (!value$ok) {
    "fails"
  } else if (isTRUE(tryCatch(check(value$v), error = function(e) FALSE))) {
    "works"
  } else {
    "SILENTLY WRONG"
  }
  results[[name]] <<- list(outcome = outcome, msg = if (!value$ok) value$msg else "")
  if (verbose || outcome %in% c("fails", "SILENTLY WRONG")) {
    cat(sprintf("[%s] %s%s\n", outcome, name,
                if (!value$ok) paste0("\n    ", substr(value$msg, 1, 300)) else ""))
  }
}

# ---- tensors ----------------------------------------------------------------------------
snippet("integer vector is int64", quote(torch_tensor(1:3)$dtype),
        function(v) as.character(v) == "int64")
snippet("double vector is float32", quote(torch_tensor(c(1.5, 2))$dtype),
        function(v) as.character(v) == "float32")
snippet("logical vector is bool", quote(as_array(torch_tensor(c(TRUE, FALSE)))),
        function(v) identical(v, c(TRUE, FALSE)))
snippet("matrix keeps its layout", quote(as_array(torch_tensor(matrix(1:6, 2)))),
        function(v) identical(dim(v), c(2L, 3L)) && v[2, 3] == 6)
snippet("3-d array round trip", quote({
  a <- array(1:24, c(2, 3, 4))
  identical(as_array(torch_tensor(a)), a)
}), isTRUE)
snippet("dim() and length()", quote({
  x <- torch_zeros(3, 4)
  c(dim(x), length(x))
}), function(v) identical(as.integer(v), c(3L, 4L, 12L)))
snippet("x$shape", quote(torch_randn(2, 5)$shape), function(v) identical(v, c(2L, 5L)))
snippet("arithmetic with R numbers", quote(as_array(2 * torch_tensor(c(1, 2)) + 1)),
        function(v) near(v, c(3, 5)))
snippet("R number minus tensor", quote(as_array(10 - torch_tensor(c(1, 2)))),
        function(v) near(v, c(9, 8)))
snippet("integer division %/%", quote(as_array(torch_tensor(c(7L, 8L)) %/% 3L)),
        function(v) near(v, c(2, 2)))
snippet("modulo %%", quote(as_array(torch_tensor(c(7, -1)) %% 3)),
        function(v) near(v, c(1, 2)))
snippet("power ^", quote(as_array(torch_tensor(c(2, 3))^2)), function(v) near(v, c(4, 9)))
snippet("comparison gives bool", quote(as_array(torch_tensor(c(1, 5)) > 2)),
        function(v) identical(v, c(FALSE, TRUE)))
# R dispatches `%*%` to a tensor method from R 4.3 on only (see tensor_matmul()).
if (getRversion() >= "4.3.0") {
  snippet("matrix product %*%", quote({
    a <- matrix(1:6, 2)
    b <- matrix(1:6, 3)
    as_array(torch_tensor(a) %*% torch_tensor(b))
  }), function(v) near(v, matrix(1:6, 2) %*% matrix(1:6, 3)))
} else {
  snippet("matrix product with torch_matmul (R < 4.3: no `%*%` dispatch)", quote({
    a <- matrix(1:6, 2)
    b <- matrix(1:6, 3)
    as_array(torch_matmul(torch_tensor(a), torch_tensor(b)))
  }), function(v) near(v, matrix(1:6, 2) %*% matrix(1:6, 3)))
}
snippet("sum over dim 1 (rows collapse)", quote({
  m <- matrix(1:6, 2)
  as_array(torch_sum(torch_tensor(m, dtype = torch_float()), dim = 1))
}), function(v) near(v, colSums(matrix(1:6, 2))))
snippet("mean over dim 2 keepdim", quote({
  m <- matrix(c(1, 2, 3, 4), 2)
  x <- torch_tensor(m)$mean(dim = 2, keepdim = TRUE)
  list(dim(x), as_array(x))
}), function(v) identical(v[[1]], c(2L, 1L)) && near(v[[2]], rowMeans(matrix(1:4, 2))))
snippet("max with dim gives values and 1-based indices", quote({
  m <- matrix(c(3, 1, 2, 9), 2)
  r <- torch_max(torch_tensor(m), dim = 2)
  list(as_array(r[[1]]), as_array(r[[2]]))
}), function(v) near(v[[1]], c(3, 9)) && near(v[[2]], c(1, 2)))
snippet("argmax is 1-based", quote(as_array(torch_argmax(torch_tensor(c(1, 7, 3))))),
        function(v) v == 2)
snippet("sort returns 1-based indices", quote({
  r <- torch_sort(torch_tensor(c(3, 1, 2)))
  as_array(r[[2]])
}), function(v) near(v, c(2, 3, 1)))
snippet("topk", quote({
  r <- torch_topk(torch_tensor(c(5, 1, 9, 3)), 2)
  list(as_array(r[[1]]), as_array(r[[2]]))
}), function(v) near(v[[1]], c(9, 5)) && near(v[[2]], c(3, 1)))
snippet("cat along dim 2", quote(dim(torch_cat(list(torch_ones(2, 3), torch_zeros(2, 1)), dim = 2))),
        function(v) identical(v, c(2L, 4L)))
snippet("stack makes a new dim 1", quote(dim(torch_stack(list(torch_ones(3), torch_ones(3))))),
        function(v) identical(v, c(2L, 3L)))
snippet("view with -1", quote(dim(torch_arange(1, 12)$view(c(3, -1)))),
        function(v) identical(v, c(3L, 4L)))
snippet("arange includes the end (mlverse)", quote(as_array(torch_arange(1, 5))),
        function(v) near(v, 1:5))
snippet("permute is 1-based", quote(dim(torch_zeros(2, 3, 4)$permute(c(3, 1, 2)))),
        function(v) identical(v, c(4L, 2L, 3L)))
snippet("transpose(1, 2)", quote(dim(torch_zeros(2, 5)$transpose(1, 2))),
        function(v) identical(v, c(5L, 2L)))
snippet("unsqueeze(1) then squeeze()", quote({
  x <- torch_zeros(3)$unsqueeze(1)
  list(dim(x), dim(x$squeeze()))
}), function(v) identical(v[[1]], c(1L, 3L)) && identical(v[[2]], 3L))
snippet("to float64", quote(as.character(torch_ones(2)$to(dtype = torch_float64())$dtype)),
        function(v) v == "float64")
snippet("clamp", quote(as_array(torch_clamp(torch_tensor(c(-2, 0.5, 3)), min = 0, max = 1))),
        function(v) near(v, c(0, 0.5, 1)))
snippet("where", quote({
  x <- torch_tensor(c(-1, 2, -3))
  as_array(torch_where(x > 0, x, torch_zeros_like(x)))
}), function(v) near(v, c(0, 2, 0)))
snippet("cumsum over dim 1", quote(as_array(torch_cumsum(torch_tensor(c(1, 2, 3)), dim = 1))),
        function(v) near(v, c(1, 3, 6)))
snippet("item() of a sum", quote(torch_tensor(c(1.5, 2.5))$sum()$item()),
        function(v) near(v, 4))
snippet("as.numeric of a tensor", quote(as.numeric(torch_tensor(c(1, 2)))),
        function(v) near(v, c(1, 2)))
snippet("std is unbiased", quote(torch_tensor(c(1, 2, 3, 4))$std()$item()),
        function(v) near(v, sd(1:4)))
snippet("linspace", quote(as_array(torch_linspace(0, 1, 5))),
        function(v) near(v, seq(0, 1, length.out = 5)))
snippet("eye and diag", quote(as_array(torch_diag(torch_eye(3) * 2))),
        function(v) near(v, c(2, 2, 2)))
snippet("chunk into 2", quote(length(torch_chunk(torch_arange(1, 6), 2))), function(v) v == 2)
snippet("split by size", quote(vapply(torch_split(torch_arange(1, 5), 2), length, 1L)),
        function(v) identical(as.integer(v), c(2L, 2L, 1L)))
snippet("linalg_inv", quote({
  m <- matrix(c(2, 1, 1, 3), 2)
  as_array(linalg_inv(torch_tensor(m)))
}), function(v) near(v, solve(matrix(c(2, 1, 1, 3), 2))))
snippet("linalg_det", quote(linalg_det(torch_tensor(matrix(c(2, 1, 1, 3), 2)))$item()),
        function(v) near(v, 5))
snippet("torch_tensor of a bad type says so", quote(torch_tensor(list(a = "x"))),
        error = "")
snippet("reshape to a wrong size says so", quote(torch_ones(2, 3)$view(c(4, 2))),
        error = "shape|size")

# ---- indexing ---------------------------------------------------------------------------
m <- matrix(1:12, 3, 4)
tm <- torch_tensor(m)
snippet("x[2, 3]", quote(as_array(tm[2, 3])), function(v) v == m[2, 3])
snippet("row x[1, ]", quote(as_array(tm[1, ])), function(v) near(v, m[1, ]))
snippet("column x[, 2]", quote(as_array(tm[, 2])), function(v) near(v, m[, 2]))
snippet("range x[2:3, 1:2]", quote(as_array(tm[2:3, 1:2])), function(v) near(v, m[2:3, 1:2]))
snippet("drop = FALSE", quote(dim(tm[1, , drop = FALSE])), function(v) identical(v, c(1L, 4L)))
snippet("negative index is from the end (mlverse)", quote(as_array(tm[-1, 1])),
        function(v) v == m[3, 1])
snippet("boolean mask", quote(as_array(tm[tm > 6])), function(v) near(sort(v), 7:12))
snippet("vector of positions", quote(as_array(tm[c(1, 3), 1])), function(v) near(v, m[c(1, 3), 1]))
snippet("index with a long tensor", quote(as_array(tm[torch_tensor(c(3L, 1L)), 4])),
        function(v) near(v, m[c(3, 1), 4]))
snippet("assign a row", quote({
  x <- torch_zeros(2, 3)
  x[1, ] <- 5
  as_array(x)
}), function(v) near(v, rbind(c(5, 5, 5), 0)))
snippet("assign through a mask", quote({
  x <- torch_tensor(c(-1, 2, -3))
  x[x < 0] <- 0
  as_array(x)
}), function(v) near(v, c(0, 2, 0)))
snippet("index 0 says positions are 1-based", quote(tm[0, 1]), error = "1-based")
snippet("out of range says so", quote(tm[5, 1]), error = "out of bounds|out of range")
snippet("last row with x$size(1)", quote(as_array(tm[tm$size(1), ])), function(v) near(v, m[3, ]))
snippet("newaxis", quote(dim(torch_ones(3)[newaxis, ])), function(v) identical(v, c(1L, 3L)))

# ---- modules ----------------------------------------------------------------------------
snippet("nn_linear forward shape", quote(dim(nn_linear(4, 2)(torch_randn(5, 4)))),
        function(v) identical(v, c(5L, 2L)))
snippet("nn_linear is x W^T + b", quote({
  l <- nn_linear(3, 2)
  x <- torch_randn(4, 3)
  want <- as_array(x) %*% t(as_array(l$weight)) +
    matrix(as_array(l$bias), 4, 2, byrow = TRUE)
  near(as_array(l(x)), want)
}), isTRUE)
snippet("nn_conv2d output shape", quote(dim(nn_conv2d(3, 8, 3, padding = 1)(torch_randn(2, 3, 16, 16)))),
        function(v) identical(v, c(2L, 8L, 16L, 16L)))
snippet("nn_max_pool2d halves", quote(dim(nn_max_pool2d(2)(torch_randn(1, 1, 8, 8)))),
        function(v) identical(v, c(1L, 1L, 4L, 4L)))
snippet("dropout is identity in eval", quote({
  d <- nn_dropout(0.5)
  d$eval()
  x <- torch_ones(10)
  as_array(d(x))
}), function(v) near(v, rep(1, 10)))
snippet("batch norm trains its running mean", quote({
  bn <- nn_batch_norm1d(2)
  bn(torch_tensor(matrix(c(1, 3, 2, 6), 2)))
  as_array(bn$running_mean)
}), function(v) near(v, c(0.2, 0.4)))
snippet("embedding takes 1-based indices", quote({
  e <- nn_embedding(5, 2)
  near(as_array(e(torch_tensor(c(1L, 5L)))), as_array(e$weight)[c(1, 5), ])
}), isTRUE)
snippet("nn_sequential parameters count", quote({
  net <- nn_sequential(nn_linear(3, 4), nn_relu(), nn_linear(4, 1))
  sum(vapply(net$parameters, function(p) length(p), 1L))
}), function(v) v == 3 * 4 + 4 + 4 + 1)
snippet("custom module with a parameter", quote({
  Affine <- nn_module("Affine",
    initialize = function(n) {
      self$w <- nn_parameter(torch_ones(n))
    },
    forward = function(x) x * self$w + 1)
  as_array(Affine(2)(torch_tensor(c(2, 3))))
}), function(v) near(v, c(3, 4)))
snippet("module train()/eval() flag", quote({
  net <- nn_linear(2, 2)
  net$eval()
  a <- net$training
  net$train()
  c(a, net$training)
}), function(v) identical(v, c(FALSE, TRUE)))
snippet("lstm returns output and states", quote({
  l <- nn_lstm(3, 5, batch_first = TRUE)
  out <- l(torch_randn(2, 7, 3))
  list(dim(out[[1]]), length(out[[2]]))
}), function(v) identical(v[[1]], c(2L, 7L, 5L)) && v[[2]] == 2)
snippet("softmax over dim 2 sums to 1", quote({
  p <- nnf_softmax(torch_randn(3, 4), dim = 2)
  as_array(p$sum(dim = 2))
}), function(v) near(v, rep(1, 3)))
snippet("cross entropy with 1-based classes", quote({
  logits <- torch_tensor(matrix(c(2, 0, 0, 2), 2))
  nnf_cross_entropy(logits, torch_tensor(c(1L, 2L)))$item()
}), function(v) near(v, -log(exp(2) / (exp(2) + 1))))
snippet("mse loss", quote(nnf_mse_loss(torch_tensor(c(1, 2)), torch_tensor(c(2, 4)))$item()),
        function(v) near(v, 2.5))
snippet("bce with logits", quote(nn_bce_with_logits_loss()(torch_tensor(0), torch_tensor(1))$item()),
        function(v) near(v, log(2)))
snippet("one_hot of 1-based classes", quote(as_array(nnf_one_hot(torch_tensor(c(1L, 3L)), 3))),
        function(v) near(v, rbind(c(1, 0, 0), c(0, 0, 1))))
snippet("init ones_", quote({
  l <- nn_linear(2, 2)
  nn_init_ones_(l$weight)
  as_array(l$weight)
}), function(v) near(v, matrix(1, 2, 2)))
snippet("wrong input width says so", quote(nn_linear(3, 2)(torch_randn(2, 4))),
        error = "shapes|size|mat1")

# ---- optimizers and training -----------------------------------------------------------
snippet("sgd step moves against the gradient", quote({
  w <- torch_tensor(c(1, 2), requires_grad = TRUE)
  opt <- optim_sgd(list(w), lr = 0.1)
  (w^2)$sum()$backward()
  opt$step()
  as_array(w)
}), function(v) near(v, c(0.8, 1.6)))
snippet("adam fits a line", quote({
  torch_manual_seed(1)
  x <- torch_randn(50, 1)
  y <- 3 * x + 1
  model <- nn_linear(1, 1)
  opt <- optim_adam(model$parameters, lr = 0.1)
  for (i in 1:300) {
    opt$zero_grad()
    loss <- nnf_mse_loss(model(x), y)
    loss$backward()
    opt$step()
  }
  c(model$weight$item(), model$bias$item())
}), function(v) near(v, c(3, 1), tol = 1e-2))
snippet("zero_grad keeps zeros", quote({
  w <- torch_ones(2, requires_grad = TRUE)
  opt <- optim_sgd(list(w), lr = 0.1)
  w$sum()$backward()
  opt$zero_grad()
  as_array(w$grad)
}), function(v) near(v, c(0, 0)))
snippet("param group lr can be changed", quote({
  opt <- optim_sgd(list(torch_ones(1, requires_grad = TRUE)), lr = 0.1)
  opt$param_groups[[1]]$lr <- 0.01
  opt$param_groups[[1]]$lr
}), function(v) near(v, 0.01))
snippet("lr_step halves", quote({
  opt <- optim_sgd(list(torch_ones(1, requires_grad = TRUE)), lr = 1)
  s <- lr_step(opt, step_size = 1, gamma = 0.5)
  opt$step()
  s$step()
  opt$param_groups[[1]]$lr
}), function(v) near(v, 0.5))
snippet("clip grad norm", quote({
  w <- torch_ones(4, requires_grad = TRUE)
  (w * 10)$sum()$backward()
  nn_utils_clip_grad_norm_(list(w), 1)
  sqrt(sum(as_array(w$grad)^2))
}), function(v) near(v, 1, tol = 1e-4))

# ---- data -------------------------------------------------------------------------------
ds_gen <- dataset("ds",
  initialize = function(n) self$n <- n,
  .getitem = function(i) list(x = torch_tensor(c(i, i)), y = torch_tensor(i)),
  .length = function() self$n)
snippet("dataset length and item", quote({
  d <- ds_gen(5)
  list(length(d), as_array(d[3]$x))
}), function(v) v[[1]] == 5 && near(v[[2]], c(3, 3)))
snippet("dataloader batches", quote({
  dl <- dataloader(ds_gen(5), batch_size = 2)
  sizes <- c()
  for (b in enumerate(dl)) sizes <- c(sizes, dim(b$x)[1])
  sizes
}), function(v) identical(as.integer(v), c(2L, 2L, 1L)))
snippet("length of a dataloader", quote(length(dataloader(ds_gen(5), batch_size = 2))),
        function(v) v == 3)
snippet("dataloader_make_iter and next", quote({
  it <- dataloader_make_iter(dataloader(ds_gen(3), batch_size = 3))
  as_array(dataloader_next(it)$y)
}), function(v) near(v, 1:3))
snippet("tensor_dataset", quote({
  d <- tensor_dataset(torch_randn(6, 2), torch_arange(1, 6))
  b <- dataloader_next(dataloader_make_iter(dataloader(d, batch_size = 4)))
  dim(b[[1]])
}), function(v) identical(v, c(4L, 2L)))
snippet("shuffle keeps all items", quote({
  dl <- dataloader(ds_gen(6), batch_size = 6, shuffle = TRUE)
  sort(as_array(dataloader_next(dataloader_make_iter(dl))$y))
}), function(v) near(v, 1:6))

# ---- autograd ---------------------------------------------------------------------------
snippet("gradient of x^2", quote({
  x <- torch_tensor(3, requires_grad = TRUE)
  (x^2)$backward()
  x$grad$item()
}), function(v) near(v, 6))
snippet("autograd_grad", quote({
  x <- torch_tensor(c(1, 2), requires_grad = TRUE)
  y <- (x^3)$sum()
  as_array(autograd_grad(y, x)[[1]])
}), function(v) near(v, c(3, 12)))
snippet("no_grad results do not require grad", quote({
  x <- torch_ones(2, requires_grad = TRUE)
  with_no_grad(x * 2)$requires_grad
}), isFALSE)
snippet("detach", quote(torch_ones(2, requires_grad = TRUE)$detach()$requires_grad), isFALSE)
snippet("grad accumulates over two backward calls", quote({
  x <- torch_tensor(1, requires_grad = TRUE)
  (2 * x)$backward()
  (2 * x)$backward()
  x$grad$item()
}), function(v) near(v, 4))
snippet("backward of a non-scalar says so", quote({
  x <- torch_ones(2, requires_grad = TRUE)
  (x * 2)$backward()
}), error = "scalar")

# ---- tracing ----------------------------------------------------------------------------
snippet("traced function, another batch size", quote({
  f <- function(x) x$view(c(x$size(1), -1))$sum(dim = 2)
  tf <- jit_trace(f, torch_ones(2, 3, 2))
  dim(tf(torch_ones(5, 3, 2)))
}), function(v) identical(v, 5L))
snippet("traced mean by the traced size", quote({
  f <- function(x) x$sum(dim = 1) / x$size(1)
  tf <- jit_trace(f, torch_ones(2, 3))
  as_array(tf(torch_tensor(matrix(1:8, 4, 2), dtype = torch_float())))
}), function(v) near(v, colMeans(matrix(1:8, 4, 2))))
snippet("traced last row by x$size(1)", quote({
  f <- function(x) x[x$size(1), ]
  tf <- jit_trace(f, torch_randn(3, 2))
  y <- torch_tensor(matrix(1:10, 5, 2), dtype = torch_float())
  as_array(tf(y))
}), function(v) near(v, c(5, 10)))
snippet("traced zeros sized by the input", quote({
  f <- function(x) torch_cat(list(x, torch_zeros(x$size(1), 1)), dim = 2)
  tf <- jit_trace(f, torch_ones(2, 2))
  dim(tf(torch_ones(4, 2)))
}), function(v) identical(v, c(4L, 3L)))
snippet("traced module equals eager", quote({
  net <- nn_sequential(nn_linear(3, 4), nn_relu(), nn_linear(4, 2))
  tm <- jit_trace(net, torch_randn(1, 3))
  x <- torch_randn(6, 3)
  near(as_array(tm(x)), as_array(net(x)))
}), isTRUE)
snippet("traced branch on a size takes the other path when it must", quote({
  f <- function(x) if (x$size(1) > 2) x * 2 else x
  tf <- jit_trace(f, torch_ones(3))
  c(as_array(tf(torch_ones(1))), as_array(tf(torch_ones(4))))
}), function(v) near(v, c(1, 2, 2, 2, 2)))
snippet("traced seq_len loop", quote({
  f <- function(x) {
    out <- x[1]
    for (i in seq_len(x$size(1))) out <- out + x[i]
    out
  }
  tf <- jit_trace(f, torch_tensor(c(1, 2, 3)))
  tf(torch_tensor(c(1, 2, 3)))$item()
}), function(v) near(v, 7))

# ---- saving and loading -----------------------------------------------------------------
snippet("jit_save / jit_load", quote({
  net <- nn_linear(2, 2)
  tm <- jit_trace(net, torch_ones(1, 2))
  path <- tempfile(fileext = ".tb")
  jit_save(tm, path)
  loaded <- jit_load(path)
  x <- torch_randn(3, 2)
  near(as_array(loaded(x)), as_array(net(x)))
}), isTRUE)
snippet("torch_save / torch_load a tensor", quote({
  path <- tempfile()
  torch_save(torch_tensor(c(1, 2, 3)), path)
  as_array(torch_load(path))
}), function(v) near(v, 1:3))
snippet("save and load a state_dict", quote({
  a <- nn_linear(3, 1)
  b <- nn_linear(3, 1)
  path <- tempfile()
  torch_save(a$state_dict(), path)
  b$load_state_dict(torch_load(path))
  near(as_array(b$weight), as_array(a$weight))
}), isTRUE)
snippet("save a list of tensors", quote({
  path <- tempfile()
  torch_save(list(w = torch_ones(2), n = torch_zeros(1)), path)
  names(torch_load(path))
}), function(v) identical(v, c("w", "n")))
snippet("load a file that is not there says so", quote(jit_load(tempfile())),
        error = "no file at")

# ---- more everyday calls ---------------------------------------------------------------
snippet("float(), long() and clone()", quote({
  x <- torch_tensor(c(1.7, 2.2))
  y <- x$clone()
  y$add_(1)
  list(as.character(x$long()$dtype), as_array(x$long()), as_array(x))
}), function(v) v[[1]] == "int64" && near(v[[2]], c(1, 2)) && near(v[[3]], c(1.7, 2.2)))
snippet("randint stays in [low, high)", quote({
  r <- as_array(torch_randint(1, 4, size = c(200)))
  c(min(r), max(r))
}), function(v) v[[1]] >= 1 && v[[2]] <= 3)
snippet("einsum", quote({
  a <- matrix(1:4, 2)
  as_array(torch_einsum("ij,jk->ik", list(torch_tensor(a, dtype = torch_float()),
                                          torch_tensor(a, dtype = torch_float()))))
}), function(v) near(v, matrix(1:4, 2) %*% matrix(1:4, 2)))
snippet("bmm shape", quote(dim(torch_bmm(torch_ones(4, 2, 3), torch_ones(4, 3, 5)))),
        function(v) identical(v, c(4L, 2L, 5L)))
snippet("gather with 1-based indices", quote({
  x <- torch_tensor(matrix(1:6, 2), dtype = torch_float())
  as_array(torch_gather(x, 2, torch_tensor(matrix(c(3L, 1L), 2))))
}), function(v) near(v, c(5, 2)))
snippet("index_select with 1-based indices", quote({
  x <- torch_tensor(matrix(1:6, 2))
  as_array(x$index_select(2, torch_tensor(c(3L, 1L))))
}), function(v) near(v, matrix(1:6, 2)[, c(3, 1)]))
snippet("masked_fill", quote({
  x <- torch_tensor(c(1, -2, 3))
  as_array(x$masked_fill(x < 0, 0))
}), function(v) near(v, c(1, 0, 3)))
snippet("expand", quote(dim(torch_ones(1, 3)$expand(c(4, -1)))),
        function(v) identical(v, c(4L, 3L)))
snippet("flatten from dim 2 (nn_flatten)", quote(dim(nn_flatten()(torch_ones(2, 3, 4)))),
        function(v) identical(v, c(2L, 12L)))
snippet("conv1d shape", quote(dim(nn_conv1d(4, 6, kernel_size = 3)(torch_ones(2, 4, 10)))),
        function(v) identical(v, c(2L, 6L, 8L)))
snippet("pad the last dim", quote(dim(nnf_pad(torch_ones(2, 3), c(1, 2)))),
        function(v) identical(v, c(2L, 6L)))
snippet("interpolate doubles", quote(dim(nnf_interpolate(torch_ones(1, 1, 4, 4), scale_factor = 2))),
        function(v) identical(v, c(1L, 1L, 8L, 8L)))
snippet("embedding padding_idx is 1-based", quote({
  e <- nn_embedding(4, 2, padding_idx = 1)
  as_array(e(torch_tensor(1L)))
}), function(v) near(v, c(0, 0)))
snippet("nn_module_list in a loop", quote({
  Stack <- nn_module("Stack",
    initialize = function() {
      self$layers <- nn_module_list(list(nn_linear(2, 2), nn_linear(2, 2)))
    },
    forward = function(x) {
      for (i in seq_along(self$layers)) x <- self$layers[[i]](x)
      x
    })
  s <- Stack()
  list(length(s$parameters), dim(s(torch_ones(3, 2))))
}), function(v) v[[1]] == 4 && identical(v[[2]], c(3L, 2L)))
snippet("named parameters of a custom module", quote({
  Net <- nn_module("Net",
    initialize = function() {
      self$fc1 <- nn_linear(2, 3)
      self$out <- nn_linear(3, 1)
    },
    forward = function(x) self$out(self$fc1(x)))
  names(Net()$parameters)
}), function(v) identical(v, c("fc1.weight", "fc1.bias", "out.weight", "out.bias")))
snippet("manual seed reproduces", quote({
  torch_manual_seed(7)
  a <- as_array(torch_randn(3))
  torch_manual_seed(7)
  identical(a, as_array(torch_randn(3)))
}), isTRUE)
snippet("is_leaf and grad_fn", quote({
  x <- torch_ones(2, requires_grad = TRUE)
  y <- x * 2
  list(x$is_leaf, y$is_leaf, is.null(x$grad_fn), is.null(y$grad_fn))
}), function(v) identical(v, list(TRUE, FALSE, TRUE, FALSE)))
snippet("with_enable_grad inside no_grad", quote({
  x <- torch_ones(2, requires_grad = TRUE)
  with_no_grad(with_enable_grad(x * 2))$requires_grad
}), isTRUE)
snippet("grad zero_ in place", quote({
  x <- torch_ones(2, requires_grad = TRUE)
  x$sum()$backward()
  x$grad$zero_()
  as_array(x$grad)
}), function(v) near(v, c(0, 0)))
snippet("mean of everything", quote(torch_mean(torch_tensor(matrix(1:4, 2), dtype = torch_float()))$item()),
        function(v) near(v, 2.5))
snippet("var over dim 1", quote(as_array(torch_var(torch_tensor(matrix(c(1, 3, 2, 6), 2)), dim = 1))),
        function(v) near(v, c(var(c(1, 3)), var(c(2, 6)))))
snippet("as.array keeps dims", quote(dim(as.array(torch_ones(2, 3, 2)))),
        function(v) identical(v, c(2L, 3L, 2L)))
snippet("unbind along dim 2", quote(length(torch_unbind(torch_ones(2, 5), 2))), function(v) v == 5)
snippet("nonzero is 1-based", quote(as_array(torch_nonzero(torch_tensor(c(0, 3, 0, 1))))),
        function(v) near(v, c(2, 4)))
snippet("scheduler one_cycle runs", quote({
  opt <- optim_sgd(list(torch_ones(1, requires_grad = TRUE)), lr = 0.1)
  s <- lr_one_cycle(opt, max_lr = 1, total_steps = 10)
  for (i in 1:5) {
    opt$step()
    s$step()
  }
  opt$param_groups[[1]]$lr > 0.1
}), isTRUE)
snippet("dataset with .getbatch", quote({
  bd <- dataset("bd",
    initialize = function() self$x <- torch_randn(10, 3),
    .getbatch = function(i) list(x = self$x[i, ]),
    .length = function() 10)
  b <- dataloader_next(dataloader_make_iter(dataloader(bd(), batch_size = 4)))
  dim(b$x)
}), function(v) identical(v, c(4L, 3L)))

# ---- summary ----------------------------------------------------------------------------
outcomes <- vapply(results, `[[`, "", "outcome")
counts <- table(factor(outcomes, c("works", "clear error", "fails", "SILENTLY WRONG")))
cat(sprintf("\n%d snippets: %s\n", length(outcomes),
            paste(sprintf("%s %d", names(counts), as.integer(counts)), collapse = ", ")))
if (counts[["SILENTLY WRONG"]] > 0) quit(status = 1)
