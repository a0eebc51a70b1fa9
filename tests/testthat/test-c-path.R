# The C call paths (src/) against R's own paths (reticulate), for every row of the surface
# table and for operators, `[`, `[<-`, `$item()`, as_array(), with_no_grad() and module
# calls: the same results, wrapper classes and errors; no references left behind; safe
# under gctorture().

with_c <- function(on, code) {
  tracebridge:::set_c_call(on)
  on.exit(tracebridge:::set_c_call(TRUE))
  force(code)
}

op_calls <- function() .Call(tracebridge:::tb_op_calls)

# What a call gave, in a form that identical() compares: tensors by wrapper class, dtype,
# shape and values; errors by class and message; modules by class and parameter shapes.
canon <- function(v) {
  if (inherits(v, "error")) return(list("error", class(v), conditionMessage(v)))
  if (inherits(v, "torch_tensor")) {
    return(list("tensor", class(.subset2(v, ".py")), as.character(v$dtype), dim(v),
                as_array(v)))
  }
  if (inherits(v, "nn_module")) {
    return(list("module", class(v), lapply(v$parameters, function(p) as_array(p))))
  }
  if (inherits(v, c("torch_optimizer", "lr_scheduler"))) return(list("object", class(v)))
  if (is.list(v)) return(lapply(v, canon))
  v
}

# A sample value for each argument kind (made afresh for every call: in-place ops change
# their inputs).
sample_arg <- function(kind, name) {
  switch(kind,
    tensor = if (name %in% c("mask", "condition")) torch_rand(3, 4) > 0.5 else
      torch_rand(3, 4) + 0.5,
    scalar = 2,
    dim = 1, dims = c(2, 1), index1 = 1, int = 2, ints = 2, double = 0.5, doubles = 0.5,
    bool = TRUE,
    string = if (name == "equation") "ij->ji" else "mean",
    dtype = torch_float(), device = "cpu",
    size = c(2, 3),
    tensors = list(torch_rand(3, 4), torch_rand(3, 4)),
    tensors_splat = torch_rand(3, 4),
    index = c(1, 2), index_list = list(c(1, 2)), class_index = c(1L, 2L, 1L),
    index_tensor = torch_tensor(c(1L, 2L)), class_index_tensor = torch_tensor(c(1L, 2L, 1L)),
    long = c(1L, 2L),
    fn = function(epoch) 0.5,
    params = list(torch_randn(2, requires_grad = TRUE)),
    optimizer = optim_sgd(list(torch_zeros(2, requires_grad = TRUE)), lr = 0.1),
    module = nn_transformer_encoder_layer(4, 2),
    any = 1,
    stop("no sample for kind ", kind)
  )
}

# The calls made for a row: its required arguments; then also the optional ones that are
# dimensions, numbers or dtypes (so that the shifts and conversions of those are held to
# R's too); then negative dimensions.
row_cases <- function(op) {
  required <- Filter(function(a) !a$has_default, op$args)
  optional <- Filter(function(a) a$has_default && a$kind %in%
                       c("dim", "dims", "int", "double", "dtype", "bool", "index1"),
                     op$args)
  cases <- list(required)
  if (length(optional)) cases[[2]] <- c(required, optional)
  if (any(vapply(op$args, function(a) a$kind == "dim", logical(1)))) {
    cases[[length(cases) + 1L]] <- lapply(c(required, optional), function(a) {
      if (a$kind == "dim") a$negative <- TRUE
      a
    })
  }
  # Index tensors (an R vector becomes a tensor in R first).
  if (any(vapply(op$args, function(a) a$kind %in% c("index", "class_index"), logical(1)))) {
    cases[[length(cases) + 1L]] <- lapply(c(required, optional), function(a) {
      if (a$kind %in% c("index", "class_index")) a$kind <- paste0(a$kind, "_tensor")
      a
    })
  }
  cases
}

# The inputs are made and the results read with the C paths on; only the call itself is
# made with them on or off (`c_on`).
run_case <- function(op, args, seed, c_on) {
  torch_manual_seed(seed)
  vals <- lapply(args, function(a) {
    if (isTRUE(a$negative)) return(-1)
    sample_arg(a$kind, a$name)
  })
  nms <- vapply(args, function(a) if (a$dots || a$positional) "" else a$name, character(1))
  splat <- vapply(args, function(a) a$kind %in% c("size", "tensors_splat") && a$dots,
                  logical(1))
  flat <- list()
  for (k in seq_along(vals)) {
    if (splat[[k]]) {
      more <- if (args[[k]]$kind == "size") as.list(vals[[k]]) else list(vals[[k]], vals[[k]])
      flat <- c(flat, more)
    } else {
      flat[[length(flat) + 1L]] <- vals[[k]]
      names(flat)[length(flat)] <- nms[[k]]
    }
  }
  if (!is.null(names(flat))) names(flat)[is.na(names(flat))] <- ""
  tracebridge:::set_c_call(c_on)
  on.exit(tracebridge:::set_c_call(TRUE))
  out <- tryCatch({
    if (op$r_name != "-") {
      do.call(getExportedValue("tracebridge", op$r_name), flat)
    } else if (op$method == "-") {
      # A row behind an R function with mlverse's arguments (linalg_pinv()).
      do.call(tracebridge:::surface_row(op$py), flat)
    } else {
      self <- flat[[1]]
      do.call(`$`(self, op$method), flat[-1])
    }
  }, error = identity)
  tracebridge:::set_c_call(TRUE)
  canon(out)
}

c_kinds <- c("tensor", "scalar", "dim", "dims", "index1", "int", "ints", "double", "doubles",
             "bool", "string", "dtype", "device", "size", "tensors", "any", "index_tensor",
             "class_index_tensor")

test_that("every row of the surface table gives the same through C as through R", {
  skip_if_no_torch()
  ops <- tracebridge:::.tb$ops
  rows <- 0L
  in_c <- 0L
  expected_c <- 0L
  missed <- character()
  for (i in seq_along(ops)) {
    op <- ops[[i]]
    label <- if (op$r_name != "-") op$r_name else if (op$method != "-") paste0("$", op$method) else
      op$py
    cases <- row_cases(op)
    for (k in seq_along(cases)) {
      args <- cases[[k]]
      slow <- run_case(op, args, seed = i, c_on = FALSE)
      before <- op_calls()
      fast <- run_case(op, args, seed = i, c_on = TRUE)
      used_c <- op_calls() > before
      # torch_empty*() give whatever memory held: their values are not compared. Nor are
      # linalg_lstsq()'s: PyTorch's CPU lstsq (LAPACK gelsy) with rcond = 0.5 gives results
      # that differ in the third digit between two calls on the same tensors in one process
      # (seen 1 call in 20 from Python's own torch.linalg.lstsq), so only their shapes and
      # classes are held to R's.
      if (startsWith(op$r_name, "torch_empty")) {
        fast[[5]] <- NULL
        slow[[5]] <- NULL
      }
      if (op$r_name == "linalg_lstsq" && identical(fast[[1]][[1]], "tensor")) {
        fast <- lapply(fast, function(t) t[-5])
        slow <- lapply(slow, function(t) t[-5])
      }
      expect_identical(fast, slow, label = sprintf("%s (case %d) through C", label, k))
      # Rows whose arguments C converts must have been called from C (the device sample
      # is a string, which R turns into a device).
      kinds <- vapply(args, function(a) a$kind, character(1))
      if (all(kinds %in% setdiff(c_kinds, "device")) && op$r_name != "torch_broadcast_tensors") {
        expected_c <- expected_c + 1L
        if (!used_c) missed <- c(missed, sprintf("%s (case %d)", label, k))
      }
      rows <- rows + 1L
      in_c <- in_c + used_c
    }
  }
  expect_identical(missed, character())
  expect_gt(expected_c, 300)
  expect_gt(rows, 600)
})

test_that("operators, indexing, $item(), as_array and modules agree between C and R", {
  skip_if_no_torch()
  cases <- list(
    add = function(x, y) x + y, sub_scalar = function(x, y) x - 2L, rdiv = function(x, y) 2 / x,
    pow = function(x, y) x^2, neg = function(x, y) -x, not = function(x, y) !(x > 0.5),
    math = function(x, y) list(abs(x - 0.5), sqrt(x), exp(x), log(x), floor(x * 3),
                               ceiling(x * 3), sign(x - 0.5), cumsum(x), round(x, 1)), cmp = function(x, y) x > y, eq_scalar = function(x, y) x == 1,
    int_div = function(x, y) x %/% y, mod = function(x, y) x %% 2, and = function(x, y) (x > 0) & (y > 0),
    mm = function(x, y) torch_mm(x, y$t()), sum = function(x, y) x$sum(),
    sum_dim = function(x, y) x$sum(dim = 2, keepdim = TRUE), mean_neg = function(x, y) x$mean(-1),
    row = function(x, y) x[1, ], col = function(x, y) x[, 2], elem = function(x, y) x[2, 3],
    last = function(x, y) x[-1, ], range = function(x, y) x[2:3, 1:2],
    neg_range = function(x, y) x[-2:-1, ], var = function(x, y) { i <- 2; x[i, i] },
    # indices computed in the call (pure expressions: src/index.c evaluates them)
    expr_row = function(x, y) { k <- 1; x[k + 1, ] },
    expr_range = function(x, y) { s <- c(1, 3); x[s[[1]]:s[[2]], 2] },
    expr_len = function(x, y) { v <- 1:2; x[length(v), nrow(x) - 1] },
    expr_neg = function(x, y) { i <- 1; x[-i, ] },
    expr_paren = function(x, y) { i <- 2; x[(i - 1):(i + 1), max(i, 3)] },
    expr_n = function(x, y) x[2:N, N - 1],
    expr_assign = function(x, y) { k <- 1; x[k + 1, k:(k + 1)] <- 0; x },
    expr_effect = function(x, y) {
      calls <- 0
      f <- function() { calls <<- calls + 1; 2 }
      list(x[f(), ], calls)
    },
    err_expr_zero = function(x, y) { k <- 1; x[k - 1, 1] },
    err_expr_frac = function(x, y) { k <- 1; x[k / 2, 1] },
    item = function(x, y) x[1, 1]$item(), item_int = function(x, y) x$long()[2, 2]$item(),
    as_array = function(x, y) as_array(x), as_array_int = function(x, y) as_array(x$long()),
    as_array_bool = function(x, y) as_array(x > 0.5), as_array_3d = function(x, y)
      as_array(x$reshape(c(2, 3, 2))), as_array_t = function(x, y) as_array(x$t()),
    as_array_0d = function(x, y) as_array(x$sum()), as_array_i32 = function(x, y)
      as_array(x$int()), as_array_f64 = function(x, y) as_array(x$double()),
    as_array_empty = function(x, y) as_array(x[1:0]),
    rows_t = function(x, y) { i <- torch_tensor(c(3L, 1L)); x[i, ] },
    rows_t32 = function(x, y) {
      i <- torch_tensor(c(3L, 1L), dtype = torch_int32())
      list(x[i, ], torch_index_select(x, 2, i), i$dtype)
    },
    cols_t = function(x, y) { i <- torch_tensor(c(4L, 1L, 4L)); x[2:3, i] },
    int_then_t = function(x, y) { i <- torch_tensor(c(2L, 1L)); x[1, i] },
    two_t = function(x, y) { i <- torch_tensor(c(2L, 1L)); x[i, i] },
    float_t = function(x, y) { i <- torch_tensor(c(2, 1)); x[i, ] },
    mask_t = function(x, y) { i <- torch_tensor(c(TRUE, FALSE, TRUE)); x[i, ] },
    vector_r = function(x, y) { i <- c(3, 1); x[i, ] },
    assign_t_idx = function(x, y) { i <- torch_tensor(c(3L, 1L)); x[i, ] <- 0; x },
    err_t_range = function(x, y) { i <- torch_tensor(c(9L)); x[i, ] },
    assign = function(x, y) { x[1, 2] <- 5; x }, assign_t = function(x, y) { x[2, ] <- y[1, ]; x },
    assign_range = function(x, y) { x[1:2, ] <- 0L; x },
    dims = function(x, y) list(dim(x), dim(x$sum()), dim(x[1, ]), length(x)),
    seed = function(x, y) {
      torch_manual_seed(9)
      torch_randn(2)
    },
    no_grad = function(x, y) with_no_grad(x * 2), linear = function(x, y) {
      torch_manual_seed(3)
      nn_linear(4, 2)(x)
    },
    # Python errors: the same classes and messages (1-based where R shows positions).
    err_mm = function(x, y) torch_mm(x, y), err_index = function(x, y) x[5, 1],
    err_dim = function(x, y) x$sum(dim = 3), err_binary = function(x, y) x + torch_ones(5),
    err_view = function(x, y) x$view(c(5, 5)), err_assign = function(x, y) { x[1, ] <- torch_ones(7); x },
    # R's own errors (C leaves these to R).
    err_zero = function(x, y) x[0, 1], err_dim0 = function(x, y) x$sum(dim = 0),
    err_many = function(x, y) x[1, 1, 1]
  )
  for (nm in names(cases)) {
    run <- function() {
      torch_manual_seed(11)
      x <- torch_rand(3, 4)
      y <- torch_rand(3, 4)
      canon(tryCatch(cases[[nm]](x, y), error = identity))
    }
    slow <- with_c(FALSE, run())
    fast <- run()
    expect_identical(fast, slow, label = nm)
  }
  # computed indices go through C: R's reading of indices is not called
  calls <- 0L
  ns <- asNamespace("tracebridge")
  suppressMessages(trace("index_plan", function() calls <<- calls + 1L, print = FALSE,
                         where = ns))
  on.exit(suppressMessages(untrace("index_plan", where = ns)))
  x <- torch_rand(3, 4)
  starts <- c(1L, 3L)
  k <- 1
  x[starts[[k]]:starts[[k + 1]], ]
  x[k + 1, length(starts)]
  x[(k + 1):3, ] <- 0
  expect_equal(calls, 0L)
  x[N, ]
  expect_equal(calls, 1L)
})

test_that("module forwards with 1-based indices or class targets agree between C and R", {
  skip_if_no_torch()
  # Modules whose forward arguments have kinds (surface.tsv: `module(input:index)`,
  # `module(input:tensor;target:class_index)`): src/surface.c (tb_call_forward) converts
  # them as convert_forward_args() does, or leaves the call to it.
  cases <- list(
    emb = function(m, x, t) m$emb(t$idx),
    emb_named = function(m, x, t) m$emb(input = t$idx),
    emb_matrix = function(m, x, t) m$emb(t$idx2),
    emb_r_vector = function(m, x, t) m$emb(c(1, 3)),
    ce = function(m, x, t) m$ce(x, t$y),
    ce_named = function(m, x, t) m$ce(target = t$y, input = x),
    ce_probs = function(m, x, t) m$ce(x, nnf_softmax(x * 2, 2)),
    ce_r_vector = function(m, x, t) m$ce(x, c(1L, 3L, 2L, 1L)),
    ce_ignored = function(m, x, t) m$ce_ign(x, torch_tensor(c(1L, -7L, 3L, -7L))),
    ce_sum = function(m, x, t) m$ce_sum(x, t$y),
    emb_int32 = function(m, x, t) m$emb(t$idx$to(dtype = torch_int32())),
    err_ce_int32 = function(m, x, t) m$ce(x, t$y$to(dtype = torch_int32())),
    nll = function(m, x, t) m$nll(nnf_log_softmax(x, 2), t$y),
    bag = function(m, x, t) m$bag(t$idx, torch_tensor(c(0L, 2L))),
    # errors: Python's (an index past the end, class 0), R's (float indices)
    err_emb_range = function(m, x, t) m$emb(torch_tensor(c(1L, 11L))),
    err_emb_zero = function(m, x, t) m$emb(torch_tensor(c(0L, 1L))),
    err_emb_float = function(m, x, t) m$emb(torch_tensor(c(1, 2))),
    err_ce_zero = function(m, x, t) m$ce(x, torch_tensor(c(0L, 1L, 2L, 1L))),
    err_ce_shape = function(m, x, t) m$ce(x, torch_tensor(c(1L, 2L))),
    err_ce_null = function(m, x, t) m$ce(x, NULL)
  )
  run <- function(nm) {
    torch_manual_seed(5)
    m <- list(emb = nn_embedding(10, 3), ce = nn_cross_entropy_loss(),
              ce_ign = nn_cross_entropy_loss(ignore_index = -7),
              ce_sum = nn_cross_entropy_loss(reduction = "sum"), nll = nn_nll_loss(),
              bag = nn_embedding_bag(10, 2, mode = "sum"))
    x <- torch_randn(4, 3)
    t <- list(idx = torch_tensor(c(2L, 1L, 10L)), idx2 = torch_tensor(matrix(c(1L, 2L, 3L, 4L), 2)),
              y = torch_tensor(c(1L, 3L, 2L, 1L)))
    canon(tryCatch(cases[[nm]](m, x, t), error = identity))
  }
  for (nm in names(cases)) {
    slow <- with_c(FALSE, run(nm))
    fast <- run(nm)
    expect_identical(fast, slow, label = nm)
  }
  # the C path does convert them: R's conversion is not called
  m <- nn_cross_entropy_loss()
  emb <- nn_embedding(10, 3)
  x <- torch_randn(4, 3)
  y <- torch_tensor(c(1L, 3L, 2L, 1L))
  calls <- 0L
  suppressMessages(trace(tracebridge:::convert_forward_args, function() calls <<- calls + 1L,
                         print = FALSE, where = asNamespace("tracebridge")))
  on.exit(suppressMessages(untrace(tracebridge:::convert_forward_args,
                                   where = asNamespace("tracebridge"))))
  m(x, y)
  emb(input = torch_tensor(c(1L, 2L)))
  expect_equal(calls, 0L)
  with_c(FALSE, m(x, y))
  expect_equal(calls, 1L)
})

test_that("device strings, optimizer arguments and torch_tensor() options agree between C and R", {
  skip_if_no_torch()
  cases <- list(
    to_device = function(x, opt) x$to(device = "cpu"),
    to_device_obj = function(x, opt) x$to(device = torch_device("cpu")),
    zeros_device = function(x, opt) torch_zeros(2, 3, device = "cpu"),
    to_dtype_device = function(x, opt) x$to(dtype = torch_float64(), device = "cpu"),
    tensor_device = function(x, opt) torch_tensor(c(1, 2), device = "cpu"),
    tensor_grad = function(x, opt) {
      t <- torch_tensor(matrix(1:4 / 2, 2), requires_grad = TRUE)
      list(t, t$requires_grad)
    },
    tensor_of_tensor = function(x, opt) {
      t <- torch_tensor(x, dtype = torch_float64(), device = "cpu", requires_grad = TRUE)
      list(t, t$requires_grad, x$requires_grad)
    },
    tensor_dtype_string = function(x, opt) torch_tensor(x, dtype = "int32"),
    scheduler = function(x, opt) {
      s <- lr_step(opt, step_size = 1, gamma = 0.5)
      opt$step()
      s$step()
      list(s, opt$param_groups[[1]]$lr)
    },
    err_device_string = function(x, opt) x$to(device = "no_such_device"),
    err_device_type = function(x, opt) torch_zeros(2, device = 5),
    err_tensor_device = function(x, opt) torch_tensor(c(1, 2), device = "no_such_device"),
    err_grad_long = function(x, opt) torch_tensor(1:3, requires_grad = TRUE),
    err_optimizer = function(x, opt) lr_step(list(1), step_size = 1)
  )
  run <- function(nm) {
    torch_manual_seed(2)
    x <- torch_randn(2, 3)
    opt <- optim_sgd(nn_linear(2, 1)$parameters, lr = 1)
    canon(tryCatch(cases[[nm]](x, opt), error = identity))
  }
  for (nm in names(cases)) {
    slow <- with_c(FALSE, run(nm))
    fast <- run(nm)
    expect_identical(fast, slow, label = nm)
  }
  # the C path does convert them: R's conversions are not called
  calls <- 0L
  ns <- asNamespace("tracebridge")
  for (f in c("device_py", "optimizer_py")) {
    suppressMessages(trace(f, function() calls <<- calls + 1L, print = FALSE, where = ns))
  }
  on.exit(for (f in c("device_py", "optimizer_py")) suppressMessages(untrace(f, where = ns)))
  x <- torch_randn(2, 2)
  x$to(device = "cpu")
  torch_ones(2, device = "cpu")
  torch_tensor(c(1, 2), device = "cpu")
  lr_step(optim_sgd(nn_linear(2, 1)$parameters, lr = 1), step_size = 1)
  expect_equal(calls, 0L)
  with_c(FALSE, x$to(device = "cpu"))
  expect_equal(calls, 1L)
})

test_that("data loader passes agree between C and R, and make no reticulate call", {
  skip_if_no_torch()
  Squares <- dataset("Squares",
    initialize = function(n) self$n <- n,
    .getitem = function(i) list(x = torch_tensor(c(i, -i)), y = torch_tensor(i^2)),
    .length = function() self$n
  )
  torch_manual_seed(4)
  ds <- tensor_dataset(x = torch_randn(23, 3), y = torch_arange(1, 23))
  shuffled <- dataloader(ds, batch_size = 5, shuffle = TRUE)
  squares <- dataloader(Squares(7), batch_size = 3)
  passes <- function() {
    torch_manual_seed(4)
    it <- shuffled$.iter()
    by_iter <- list()
    while (it$.has_next()) by_iter[[length(by_iter) + 1L]] <- it$.next()
    list(enumerate(shuffled), by_iter, enumerate(squares),
         tryCatch(it$.next(), error = identity))
  }
  slow <- with_c(FALSE, canon(passes()))
  fast <- canon(passes())
  expect_identical(fast, slow)
  expect_equal(length(fast[[1]]), 5L) # 23 items, batches of 5
  calls <- 0L
  ret <- asNamespace("reticulate")
  suppressMessages(trace("py_call_impl", function() calls <<- calls + 1L, print = FALSE,
                         where = ret))
  on.exit(suppressMessages(untrace("py_call_impl", where = ret)))
  passes()
  expect_equal(calls, 0L)
})

test_that("with_no_grad() turns recording off and restores it after an error", {
  skip_if_no_torch()
  x <- torch_ones(2, requires_grad = TRUE)
  expect_false(with_no_grad((x * 2)$requires_grad))
  expect_error(with_no_grad(stop("inside")), "inside")
  expect_true((x * 2)$requires_grad)
  expect_true(with_no_grad(with_enable_grad((x * 2)$requires_grad)))
  expect_false(with_no_grad({
    with_enable_grad(x * 1)
    (x * 2)$requires_grad
  }))
})

test_that("the C paths leave no Python objects or references behind", {
  skip_if_no_torch()
  x <- torch_rand(8, 8)
  y <- torch_rand(8, 8)
  m <- nn_linear(8, 8)
  emb <- nn_embedding(10, 3)
  ce <- nn_cross_entropy_loss(ignore_index = -1)
  idx <- torch_tensor(c(1L, 10L, 3L))
  y_cls <- torch_tensor(rep(c(1L, 8L, -1L, 2L), 2))
  sys <- reticulate::import("sys", convert = FALSE)
  torch <- reticulate::import("torch", convert = FALSE)
  refs <- function() {
    vapply(list(.subset2(x, ".py"), torch$float32, torch$sum, torch$Tensor),
           function(o) reticulate::py_to_r(sys$getrefcount(o)), numeric(1))
  }
  step <- function() {
    x + y
    x * 2
    torch_mm(x, y)
    x$sum(dim = 1, dtype = torch_float())
    torch_max(x, dim = 2)
    x[1, ]
    x[2:3, -1]
    x[1, 1]$item()
    x$size()
    as_array(x)
    y[1, 1] <- 0.5
    with_no_grad(m(x))
    torch_tensor(matrix(1:6, 2))
    emb(idx)
    ce(x, y_cls)
    x$to(device = "cpu")
    torch_tensor(c(1, 2), device = "cpu", requires_grad = TRUE)
    list(x$shape, x$dtype, x$device, x$grad, x$requires_grad) # src/fields.c
    nn_utils_clip_grad_norm_(m$parameters, 1)
  }
  fail <- function() tryCatch(torch_mm(x, y[1:3, 1:3]), error = identity)
  step()
  fail()
  gc()
  live <- py_live_count("Tensor")
  before <- refs()
  for (i in 1:1000) step() # 23,000 calls
  for (i in 1:200) fail()
  gc()
  expect_lte(py_live_count("Tensor") - live, 20)
  # A reference kept per call would show as 1,000 more.
  expect_lte(max(abs(refs() - before)), 20)
})

test_that("the C paths are safe under gctorture()", {
  skip_if_no_torch()
  x <- torch_rand(3, 4)
  y <- torch_rand(3, 4)
  m <- nn_linear(4, 2)
  expected <- as_array(x) + as_array(y)
  opt <- optim_adam(m$parameters, betas = c(0.8, 0.9))
  invisible(opt$param_groups) # the first goes through R (the parameters' class vector)
  gctorture(TRUE)
  on.exit(gctorture(FALSE))
  idx <- torch_tensor(c(3L, 1L))
  emb <- nn_embedding(4, 2)
  ce <- nn_cross_entropy_loss()
  out <- list(x + y, torch_sum(x, dim = 1), x[2:3, -1], torch_max(x, dim = 2),
              as_array(x), torch_cat(list(x, y), dim = 2), m(x),
              x$sum(dim = 2), x[2, 3]$item(), x[idx, ],
              torch_tensor(array(seq_len(24) / 2, c(2, 3, 4))), emb(idx),
              ce(x, torch_tensor(c(4L, 1L, 2L))), x[idx[[1]]$item() - 1, 2:(length(idx) + 1)],
              list(x$shape, x$dtype, x$device, x$requires_grad, x$grad, torch_zeros(2)$dtype),
              opt$param_groups, m$parameters, m$training)
  y[1, ] <- 0
  x$requires_grad <- TRUE
  gctorture(FALSE)
  expect_equal(as_array(out[[8]]), rowSums(as_array(x)), tolerance = 1e-6)
  expect_equal(out[[9]], as_array(x)[2, 3], tolerance = 1e-6)
  expect_equal(as_array(out[[10]]), as_array(x)[c(3, 1), ], tolerance = 1e-6)
  expect_equal(as_array(out[[11]]), array(seq_len(24) / 2, c(2, 3, 4)))
  expect_equal(as_array(out[[1]]), expected, tolerance = 1e-6)
  expect_equal(dim(out[[6]]), c(3L, 8L))
  expect_equal(as_array(out[[4]][[2]]), apply(as_array(x), 1, which.max))
  expect_equal(as_array(y[1, ]), rep(0, 4))
  expect_equal(as_array(out[[12]]), as_array(emb$weight)[c(3, 1), ], tolerance = 1e-6)
  logp <- as_array(nnf_log_softmax(x, 2))
  expect_equal(as_array(out[[13]]), -mean(logp[cbind(1:3, c(4, 1, 2))]), tolerance = 1e-6)
  expect_equal(as_array(out[[14]]), as_array(x)[2, 2:3], tolerance = 1e-6)
  expect_identical(out[[15]][c(1, 4, 5)], list(c(3L, 4L), FALSE, NULL))
  expect_identical(as.character(out[[15]][[2]]), "float32")
  expect_identical(as.character(out[[15]][[3]]), "cpu")
  expect_identical(out[[16]][[1]]$betas, list(0.8, 0.9))
  expect_equal(as_array(out[[16]][[1]]$params[[1]]), as_array(m$weight))
  expect_true(x$requires_grad)
  expect_identical(names(out[[17]]), c("weight", "bias"))
  expect_equal(as_array(out[[17]]$bias), as_array(m$bias))
  expect_true(out[[18]])
})

test_that("methods from $ and indices read from `...` keep R's meaning", {
  skip_if_no_torch()
  x <- torch_tensor(matrix(1:12, 3, 4))
  y <- torch_tensor(matrix(101:112, 3, 4))
  # Each `$` binds its own tensor: a method taken before another is still its tensor's.
  fx <- x$sum
  fy <- y$sum
  expect_equal(as_array(fx()), 78)
  expect_equal(as_array(fy()), sum(101:112))
  expect_equal(as_array(fx(dim = 1)), colSums(matrix(1:12, 3, 4)))
  expect_identical(names(formals(x$sum)), c("dim", "keepdim", "dtype"))
  expect_error(x$no_such_method(), class = "tracebridge_no_method_error")
  expect_identical(x$shape, c(3L, 4L))
  # Compiled functions (byte code: the JIT leaves small closures alone) and direct,
  # do.call() and named calls of `[` give what the plain call gives.
  i <- 2L
  plain <- as_array(x[i, 2:3])
  get_row <- compiler::cmpfun(function(t, k) t[k, 2:3])
  expect_equal(as_array(get_row(x, i)), plain)
  expect_equal(as_array(do.call(`[`, list(x, 2, 2:3))), plain)
  expect_equal(as_array(`[.torch_tensor`(x, i, 2:3)), plain)
  expect_equal(as_array(x[i, 2:3, drop = TRUE]), plain)
  expect_equal(dim(x[i, 2:3, drop = FALSE]), c(1L, 2L))
  z <- torch_zeros(3, 4)
  set_cell <- compiler::cmpfun(function(t, k) {
    t[k, 1] <- 7
    t
  })
  expect_equal(as_array(set_cell(z, i))[2, 1], 7)
  v <- 5
  z[1, i] <- v
  expect_equal(as_array(z)[1, 2], 5)
})

test_that("ignored class targets (a negative ignore_index) agree on both paths and in modules", {
  skip_if_no_torch()
  torch_manual_seed(1)
  x <- torch_randn(5, 3)
  F <- reticulate::import("torch", convert = FALSE)$nn$functional
  py_loss <- function(target, ...) {
    reticulate::py_to_r(F$cross_entropy(x$py, torch_tensor(target)$py, ...)$item())
  }
  # R's classes 1, 2, 3 are Python's 0, 1, 2; a target equal to the (negative)
  # ignore_index is left out on every path, as in Python.
  for (ign in c(-100, -7)) {
    targets <- torch_tensor(c(1L, as.integer(ign), 3L, 2L, as.integer(ign)))
    expected <- py_loss(c(0L, as.integer(ign), 2L, 1L, as.integer(ign)),
                        ignore_index = as.integer(ign))
    fast <- as_array(nnf_cross_entropy(x, targets, ignore_index = ign))
    slow <- with_c(FALSE, as_array(nnf_cross_entropy(x, targets, ignore_index = ign)))
    module <- as_array(nn_cross_entropy_loss(ignore_index = ign)(x, targets))
    expect_equal(fast, expected, tolerance = 1e-6)
    expect_equal(slow, expected, tolerance = 1e-6)
    expect_equal(module, expected, tolerance = 1e-6)
    nll <- function() as_array(nnf_nll_loss(nnf_log_softmax(x, 2), targets, ignore_index = ign,
                                            reduction = "sum"))
    expect_equal(nll(), with_c(FALSE, nll()), tolerance = 1e-6)
  }
})

test_that("torch_tensor() from R data gives the same tensors through C as through NumPy", {
  skip_if_no_torch()
  describe <- function(t) {
    py <- t$py
    list(class = class(t), dtype = as.character(t$dtype), shape = dim(t),
         values = as_array(t), contiguous = reticulate::py_to_r(py$is_contiguous()),
         stride = unlist(reticulate::py_to_r(py$stride())), grad = t$requires_grad)
  }
  cases <- list(
    list(c(1.5, -2, 3)), list(1:5), list(c(TRUE, FALSE, TRUE)),
    list(matrix(1:6, 2)), list(matrix(c(0.5, 1, 2, 4), 2), dtype = torch_float64()),
    list(array(seq_len(24) / 2, c(2, 3, 4))), list(array(1:6, c(1, 2, 3)), dtype = torch_int32()),
    list(matrix(c(TRUE, FALSE, FALSE, TRUE), 2)), list(c(1, NaN, Inf)),
    list(1:3, dtype = torch_float()), list(c(0, 1, 2), dtype = torch_bool()),
    list(c(1.7, -1.7), dtype = torch_long()), list(7L), list(matrix(1:6, 2), dtype = "float64"),
    list(c(2, 3), requires_grad = TRUE), list(c(1L, NA), dtype = torch_float()),
    list(structure(1:4, dim = c(2L, 2L), dimnames = list(c("a", "b"), NULL)))
  )
  before <- op_calls()
  for (args in cases) {
    fast <- do.call(torch_tensor, args)
    slow <- with_c(FALSE, do.call(torch_tensor, args))
    expect_equal(describe(fast), describe(slow), info = paste(deparse(args), collapse = ""))
  }
  expect_error(torch_tensor("a"), "Cannot make a tensor")
  expect_error(with_c(FALSE, torch_tensor("a")), "Cannot make a tensor")
  # Integer and logical NA: refused on both paths (R/tensor.R, before either).
  expect_error(torch_tensor(c(1L, NA)), "NA at position 2")
  expect_error(with_c(FALSE, torch_tensor(c(TRUE, NA))), "NA at position 2")
})

test_that("torch_arange(), whole-number arguments, computed indices and scheduler steps agree between C and R", {
  skip_if_no_torch()
  bag_input <- c(1, 2, 4, 5, 4, 3, 2, 9)
  cases <- list(
    arange_int = function(x) torch_arange(1L, 5L),
    arange_double = function(x) torch_arange(0, 1, 0.25),
    arange_down = function(x) torch_arange(5, 1, -1),
    arange_dtype = function(x) torch_arange(1, 4, dtype = torch_float64()),
    arange_long_fraction = function(x) torch_arange(0, 3.5, dtype = torch_long()),
    arange_device = function(x) torch_arange(1, 3, device = "cpu"),
    arange_grad = function(x) {
      t <- torch_arange(0, 1, 0.5, requires_grad = TRUE)
      list(t, t$requires_grad)
    },
    err_arange_step = function(x) torch_arange(1, 5, 0),
    err_arange_grad_long = function(x) torch_arange(1L, 3L, requires_grad = TRUE),
    # `long` arguments (offsets, lengths, CTC labels): whole numbers, not shifted.
    bag = function(x) nnf_embedding_bag(bag_input, x$weight, offsets = c(0, 4)),
    bag_tensor = function(x) {
      nnf_embedding_bag(torch_tensor(c(1L, 2L, 4L)), x$weight, offsets = torch_tensor(c(0L, 1L)))
    },
    bag_module = function(x) x$bag(bag_input, offsets = c(0, 4)),
    bag_module_tensor = function(x) x$bag(torch_tensor(c(1L, 2L, 4L, 5L)), c(0L, 2L)),
    ctc = function(x) {
      torch_manual_seed(3)
      log_probs <- torch_randn(6, 2, 4)$log_softmax(3)
      nnf_ctc_loss(log_probs, rbind(c(1, 2, 2), c(3, 1, 0)), input_lengths = c(6, 6),
                   target_lengths = c(3, 2))
    },
    err_bag_float = function(x) nnf_embedding_bag(c(1, 2), x$weight, offsets = torch_tensor(c(0, 1))),
    err_bag_fraction = function(x) nnf_embedding_bag(c(1, 2), x$weight, offsets = c(0, 0.5)),
    err_bag_na = function(x) nnf_embedding_bag(c(1, 2), x$weight, offsets = c(0L, NA)),
    err_bag_first = function(x) nnf_embedding_bag(c(1, 2), x$weight, offsets = c(1, 2)),
    # Indices computed by calls: evaluated once, whichever path reads them.
    idx_call = function(x) { f <- function(i) i + 1; x$m[f(1), ] },
    idx_call_tensor = function(x) { f <- function() torch_tensor(c(3L, 1L)); x$m[f(), ] },
    idx_call_counted = function(x) {
      calls <- 0
      f <- function() { calls <<- calls + 1; c(3, 1) } # a vector: R's path, with the value
      list(x$m[f(), 2], x$m[2, f()], calls)
    },
    idx_order = function(x) x$m[order(c(3, 1, 2))[1], ],
    idx_call_null = function(x) { f <- function() NULL; dim(x$m[f(), 1]) },
    idx_call_slc = function(x) x$m[slc(1, 3, 2), 1],
    idx_call_n = function(x) { f <- function(n) n - 1; x$m[f(N), ] },
    idx_call_assign = function(x) {
      calls <- 0
      f <- function(v) { calls <<- calls + 1; v }
      m <- x$m$clone()
      m[f(2), ] <- 0
      m[f(c(1, 3)), 1] <- -1
      m[f(torch_tensor(c(3L))), f(2)] <- 7
      list(m, calls)
    },
    err_idx_call = function(x) { f <- function() stop("no index here"); x$m[f(), ] },
    err_idx_call_zero = function(x) { f <- function() 0; x$m[f(), ] },
    err_idx_call_range = function(x) { f <- function() 9; x$m[f(), ] },
    # Schedulers: `$step()` made once, through C.
    sched = function(x) {
      s <- lr_step(x$opt, step_size = 1, gamma = 0.5)
      for (i in 1:3) {
        x$opt$step()
        s$step()
      }
      list(s$get_last_lr(), s$last_epoch, x$opt$param_groups[[1]]$lr, identical(s$step, s$step))
    },
    sched_lambda = function(x) {
      s <- lr_lambda(x$opt, lr_lambda = function(epoch) 0.5^epoch)
      x$opt$step()
      s$step()
      s$get_last_lr()
    },
    sched_plateau = function(x) {
      s <- lr_reduce_on_plateau(x$opt, patience = 0)
      s$step(1)
      s$step(2)
      x$opt$param_groups[[1]]$lr
    },
    err_sched_lambda = function(x) {
      s <- lr_lambda(x$opt, lr_lambda = function(epoch) if (epoch > 0) stop("no factor") else 1)
      s$step()
    }
  )
  run <- function(nm) {
    torch_manual_seed(7)
    x <- list(weight = torch_randn(10, 3), bag = nn_embedding_bag(10, 3, mode = "sum"),
              m = torch_tensor(matrix(as.numeric(1:12), 3, 4)),
              opt = optim_sgd(list(torch_zeros(2, requires_grad = TRUE)), lr = 1))
    canon(tryCatch(cases[[nm]](x), error = identity))
  }
  for (nm in names(cases)) {
    slow <- with_c(FALSE, run(nm))
    fast <- run(nm)
    expect_identical(fast, slow, label = nm)
  }
  expect_equal(run("idx_call_counted")[[3]], 2)
  expect_equal(run("idx_call_assign")[[2]], 4)
  expect_equal(run("idx_call")[[5]], c(2, 5, 8, 11))
  # The C path does these calls: no reticulate call is made.
  torch_manual_seed(7)
  w <- torch_randn(10, 3)
  m <- torch_tensor(matrix(as.numeric(1:12), 3, 4))
  opt <- optim_sgd(list(torch_zeros(2, requires_grad = TRUE)), lr = 1)
  sched <- lr_step(opt, step_size = 1)
  pick <- function() torch_tensor(c(3L, 1L))
  calls <- 0L
  ret <- asNamespace("reticulate")
  suppressMessages(trace("py_call_impl", function() calls <<- calls + 1L, print = FALSE,
                         where = ret))
  on.exit(suppressMessages(untrace("py_call_impl", where = ret)))
  torch_arange(1, 10, 2)
  nnf_embedding_bag(torch_tensor(c(1L, 2L, 4L)), w, offsets = c(0, 1))
  m[pick(), ]
  m[nrow(m) - 1, ]
  opt$step()
  sched$step()
  expect_equal(calls, 0L)
})

test_that("torch_arange(), long arguments, computed indices and cached shifts are safe under gctorture()", {
  skip_if_no_torch()
  w <- torch_randn(10, 3)
  m <- torch_tensor(matrix(as.numeric(1:12), 3, 4))
  pick <- function() torch_tensor(c(3L, 1L))
  rows <- function() c(3, 1)
  idx <- torch_tensor(c(2L, 3L))
  y <- torch_tensor(101:110)
  calls <- function() {
    list(as_array(torch_arange(1, 3)), as_array(m[pick(), ]), as_array(m[rows(), 2]),
         as_array(nnf_embedding_bag(torch_tensor(c(1L, 2L, 4L)), w, offsets = c(0, 1))),
         as_array(y[idx]), as_array(y[idx]))
  }
  expected <- calls()
  gctorture(TRUE)
  got <- calls()
  gctorture(FALSE)
  expect_identical(got, expected)
})

test_that("tensor fields, plateau steps, get_last_lr(), last_epoch and param_groups agree between C and R", {
  skip_if_no_torch()
  fields <- c("shape", "dtype", "device", "requires_grad", "is_leaf", "is_cuda", "ndim", "grad")
  make <- function() {
    torch_manual_seed(11)
    p <- torch_randn(2, 3, requires_grad = TRUE)
    (p * 2)$sum()$backward()
    list(float = torch_randn(2, 3), int = torch_tensor(1:4), bool = torch_tensor(c(TRUE, FALSE)),
         double = torch_zeros(2, dtype = torch_float64()), scalar = torch_tensor(3)$squeeze(),
         empty = torch_zeros(0, 2), param = p, nonleaf = p * 1)
  }
  read <- function() {
    xs <- make()
    lapply(xs, function(x) {
      # (not `$grad` of a non-leaf: torch warns that it is never filled)
      read_fields <- if (isTRUE(x$is_leaf)) fields else setdiff(fields, "grad")
      out <- lapply(read_fields, function(f) {
        v <- x[[f]]
        if (inherits(v, "torch_dtype")) return(list(class(v), as.character(v), v == x$dtype))
        if (inherits(v, "torch_device")) {
          return(list(class(v), as.character(v), v$type, v$index, v == "cpu"))
        }
        v
      })
      names(out) <- read_fields
      out
    })
  }
  slow <- with_c(FALSE, canon(read()))
  fast <- canon(read())
  expect_identical(fast, slow)
  expect_identical(fast$float$shape, c(2L, 3L))
  expect_identical(fast$scalar$shape, integer(0))
  expect_null(fast$float$grad)
  expect_equal(fast$param$grad[[5]], matrix(2, 2, 3))

  # dtypes and devices C answers from what R made: the same values; a changed copy does
  # not change the next answer.
  x <- torch_randn(2)
  d <- x$dtype
  attr(d, "name") <- "changed"
  expect_identical(as.character(x$dtype), "float32")
  expect_identical(as.character(torch_tensor(1:2)$dtype), "int64")

  # A plateau scheduler's metric stays a Python float (a whole number included), so the
  # best value it keeps is one; learning rates and counters agree on both paths.
  plateau <- function() {
    opt <- optim_sgd(list(torch_zeros(2, requires_grad = TRUE)), lr = 1)
    s <- lr_reduce_on_plateau(opt, patience = 0, factor = 0.5)
    lrs <- numeric()
    for (m in list(3, 2, 2, 5, torch_tensor(1.5))) {
      s$step(m)
      lrs <- c(lrs, opt$param_groups[[1]]$lr)
    }
    best <- reticulate::py_to_r(reticulate::py_get_attr(s$py, "best"))
    step <- lr_step(opt, step_size = 1, gamma = 0.1)
    opt$step()
    step$step()
    list(lrs, best, typeof(best), step$get_last_lr(), step$last_epoch,
         tryCatch(s$step("high"), error = identity))
  }
  slow <- with_c(FALSE, canon(plateau()))
  fast <- canon(plateau())
  expect_identical(fast, slow)
  expect_identical(fast[[3]], "double")
  expect_equal(fast[[1]], c(1, 1, 0.5, 0.25, 0.25))
  expect_equal(fast[[4]], 0.025)
  expect_identical(fast[[5]], 1L)

  # An optimizer's param_groups: tensors and nn parameters (torch.nn.Parameter, whose
  # wrapper's class vector C keeps from R's first answer), settings such as betas.
  groups <- function() {
    torch_manual_seed(12)
    m <- nn_linear(3, 2)
    adam <- optim_adam(m$parameters, lr = 0.01, betas = c(0.8, 0.9))
    sgd <- optim_sgd(list(torch_zeros(2, requires_grad = TRUE)), lr = 1, momentum = 0.5)
    sgd$add_param_group(list(params = list(torch_ones(1, requires_grad = TRUE)), lr = 0.5))
    list(adam$param_groups, adam$param_groups, sgd$param_groups)
  }
  slow <- with_c(FALSE, canon(groups()))
  fast <- canon(groups())
  expect_identical(fast, slow)
  expect_identical(fast[[2]][[1]]$betas, list(0.8, 0.9))
  expect_identical(fast[[3]][[2]]$lr, 0.5)

  # Through C: no reticulate call or attribute lookup.
  x <- torch_randn(2, 3)
  opt <- optim_sgd(list(torch_zeros(2, requires_grad = TRUE)), lr = 1)
  s <- lr_reduce_on_plateau(opt, patience = 0)
  st <- lr_step(opt, step_size = 1)
  adam <- optim_adam(nn_linear(2, 1)$parameters)
  invisible(list(x$dtype, x$device, adam$param_groups)) # the first of each goes through R
  calls <- 0L
  ret <- asNamespace("reticulate")
  count <- function() calls <<- calls + 1L
  suppressMessages({
    trace("py_call_impl", count, print = FALSE, where = ret)
    trace("py_get_attr_impl", count, print = FALSE, where = ret)
  })
  on.exit(suppressMessages({
    untrace("py_call_impl", where = ret)
    untrace("py_get_attr_impl", where = ret)
  }))
  for (f in fields) x[[f]]
  s$step(1)
  st$get_last_lr()
  st$last_epoch
  adam$param_groups[[1]]$lr
  expect_equal(calls, 0L)
})

test_that("base R generics on tensors (length, mean, sum, max, t, is.na, ...) agree between C and R", {
  skip_if_no_torch()
  cases <- list(
    length = function(x) list(length(x$f), length(x$s), length(x$e)),
    mean = function(x) list(mean(x$f), mean(x$s)),
    err_mean_int = function(x) mean(x$i),
    sums = function(x) list(sum(x$f), sum(x$i), sum(x$b), prod(x$i), sum(x$e)),
    extremes = function(x) list(max(x$f), min(x$f), max(x$i), min(x$s)),
    logic = function(x) list(all(x$b), any(x$b), all(x$f > -10), any(x$e > 0)),
    several = function(x) list(max(x$f, x$i), sum(x$f, 1, 2)),
    na_rm = function(x) list(sum(x$n, na.rm = TRUE), max(x$n, na.rm = TRUE), sum(x$n)),
    range = function(x) range(x$f),
    err_max_empty = function(x) max(x$e),
    t = function(x) list(t(x$f), t(x$i[1:3])),
    err_t_3d = function(x) t(torch_zeros(2, 2, 2)),
    is_na = function(x) list(is.na(x$n), is.na(x$i))
  )
  run <- function(nm) {
    torch_manual_seed(13)
    x <- list(f = torch_randn(3, 4), i = torch_tensor(1:6), b = torch_tensor(c(TRUE, FALSE)),
              s = torch_tensor(2.5)$squeeze(), e = torch_zeros(0),
              n = torch_tensor(c(1, NaN, 3)))
    canon(tryCatch(cases[[nm]](x), error = identity))
  }
  for (nm in names(cases)) {
    slow <- with_c(FALSE, run(nm))
    fast <- run(nm)
    expect_identical(fast, slow, label = nm)
  }
  expect_identical(run("length"), list(12L, 1L, 0L))
  expect_equal(run("na_rm")[[1]][[5]], 4)
  expect_identical(run("err_mean_int")[[1]], "error")
  expect_match(run("err_t_3d")[[3]], "at most 2 dimensions")
  # Through C: no reticulate call.
  x <- torch_randn(3, 4)
  calls <- 0L
  ret <- asNamespace("reticulate")
  suppressMessages(trace("py_call_impl", function() calls <<- calls + 1L, print = FALSE,
                         where = ret))
  on.exit(suppressMessages(untrace("py_call_impl", where = ret)))
  invisible(list(length(x), mean(x), sum(x), prod(x), max(x), min(x), all(x > 0), any(x > 0),
                 t(x), is.na(x)))
  expect_equal(calls, 0L)
})

test_that("x$requires_grad <- and x$grad <- agree between C and R", {
  skip_if_no_torch()
  cases <- list(
    on_off = function() {
      x <- torch_zeros(2)
      x$requires_grad <- TRUE
      a <- x$requires_grad
      x$requires_grad <- FALSE
      list(a, x$requires_grad, x$is_leaf)
    },
    non_leaf = function() { # the setter refuses a non-leaf; requires_grad_() takes TRUE
      x <- torch_ones(2, requires_grad = TRUE) * 2
      x$requires_grad <- TRUE
      x$requires_grad
    },
    err_non_leaf_off = function() {
      x <- torch_ones(2, requires_grad = TRUE) * 2
      x$requires_grad <- FALSE
    },
    err_int = function() {
      x <- torch_tensor(1:2)
      x$requires_grad <- TRUE
    },
    grad = function() {
      p <- torch_zeros(2, requires_grad = TRUE)
      p$grad <- torch_tensor(c(1, 2))
      g <- p$grad
      p$grad <- NULL
      list(g, p$grad)
    },
    err_grad_shape = function() {
      p <- torch_zeros(2, requires_grad = TRUE)
      p$grad <- torch_zeros(3)
    }
  )
  for (nm in names(cases)) {
    slow <- with_c(FALSE, canon(tryCatch(cases[[nm]](), error = identity)))
    fast <- canon(tryCatch(cases[[nm]](), error = identity))
    expect_identical(fast, slow, label = nm)
  }
  expect_identical(canon(cases$on_off()), list(TRUE, FALSE, TRUE))
  expect_identical(cases$non_leaf(), TRUE)
  expect_equal(as_array(cases$grad()[[1]]), c(1, 2))
  expect_null(cases$grad()[[2]])
  expect_s3_class(tryCatch(cases$err_int(), error = identity), "error")
})

test_that("module parameters, buffers, training, train(), eval(), zero_grad() and gradient clipping agree between C and R", {
  skip_if_no_torch()
  Net <- nn_module("Net",
    initialize = function() {
      self$fc <- nn_linear(3, 2)
      self$bn <- nn_batch_norm1d(2)
      self$scale <- nn_parameter(torch_ones(1))
    },
    forward = function(x) self$bn(self$fc(x)) * self$scale
  )
  run <- function() {
    torch_manual_seed(14)
    net <- Net()
    net(torch_randn(5, 3))$sum()$backward()
    before <- lapply(net$parameters, function(p) p$grad)
    norm <- nn_utils_clip_grad_norm_(net$parameters, 0.1)
    nn_utils_clip_grad_value_(net$fc$parameters, 0.01)
    clipped <- lapply(net$parameters, function(p) p$grad)
    net$zero_grad()
    zeroed <- lapply(net$parameters, function(p) p$grad)
    net$zero_grad(set_to_none = TRUE)
    dropped <- lapply(net$parameters, function(p) p$grad)
    net$eval()
    evaluating <- c(net$training, net$bn$training)
    net$train()
    net$train(FALSE)
    list(names(net$parameters), net$parameters, net$buffers, net$named_parameters(),
         net$named_buffers(), nn_relu()$parameters, before, norm,
         clipped, net$training,
         nn_utils_clip_grad_norm_(net$parameters[[1]], 1),
         tryCatch(nn_utils_clip_grad_norm_(net, 1), error = identity),
         zeroed, dropped, evaluating)
  }
  slow <- with_c(FALSE, canon(run()))
  fast <- canon(run())
  expect_identical(fast, slow)
  expect_identical(fast[[1]], c("scale", "fc.weight", "fc.bias", "bn.weight", "bn.bias"))
  expect_identical(names(fast[[3]]), c("bn.running_mean", "bn.running_var",
                                       "bn.num_batches_tracked"))
  expect_identical(fast[[6]], list())
  expect_false(fast[[10]])
  expect_identical(fast[[12]][[1]], "error")
  expect_equal(fast[[13]]$fc.weight[[5]], matrix(0, 2, 3))
  expect_identical(unique(lapply(fast[[14]], is.null)), list(TRUE))
  expect_identical(fast[[15]], c(FALSE, FALSE))
  # Through C: no reticulate call or attribute lookup once the parameters' class is known.
  net <- Net()
  invisible(net$parameters)
  calls <- 0L
  ret <- asNamespace("reticulate")
  count <- function() calls <<- calls + 1L
  suppressMessages({
    trace("py_call_impl", count, print = FALSE, where = ret)
    trace("py_get_attr_impl", count, print = FALSE, where = ret)
  })
  on.exit(suppressMessages({
    untrace("py_call_impl", where = ret)
    untrace("py_get_attr_impl", where = ret)
  }))
  net$training
  nn_utils_clip_grad_norm_(net$parameters, 1)
  net$buffers
  net$zero_grad()
  net$eval()
  net$train()
  expect_equal(calls, 0L)
})
